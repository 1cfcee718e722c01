//! Peer overload control (seed 003: draft-ietf-dime-agent-overload-11, RFC 8581, on RFC
//! 7683 DOIC) on the C-SMA's two hops, YANG `cats-sma-overload`; `docs/overload.md` maps
//! every AVP and behaviour of the draft to this code.
//!
//! - Towards the C-PSes the C-SMA is a **reacting node** (`react.rs`, driven by the C-PS
//!   sessions and their dispatcher in `cps/`): it announces the peer report in every
//!   request, keeps per C-PS the report in force, and abates routine updates by the loss
//!   algorithm — diverted to a non-overloaded fallback C-PS first, dropped when there is
//!   none.
//! - Towards the SCIs it is a **reporting node** (`report.rs`, driven by a sampler of the
//!   engine's load and by the collectors): it answers the SCIs' announcements and, while
//!   overloaded, asks them for a reduction that follows its load.
//!
//! Reports are hop by hop: a report is believed only when its SourceID is the identity the
//! session with that peer authenticated, never a field the peer merely claims.

pub mod config;
pub mod react;
pub mod report;
pub mod sci;
pub mod state;
pub mod wire;

use std::sync::{Arc, RwLock};

use self::wire::OLR_DEFAULT_ALGO;

/// The DOIC roles the C-SMA takes (YANG `role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Reacting,
    Reporting,
    Both,
}

/// `overload-control` as configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub enabled: bool,
    /// OC-Peer-Algo bits of the algorithms offered (only the loss algorithm exists).
    pub algorithms: u64,
    pub role: Role,
    /// Applied to a received report without a validity, seconds.
    pub default_validity: u32,
    pub min_reduction: u8,
    pub max_reduction: u8,
    pub divert: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            enabled: true,
            algorithms: OLR_DEFAULT_ALGO,
            role: Role::Both,
            default_validity: wire::DEFAULT_VALIDITY,
            min_reduction: 0,
            max_reduction: 100,
            divert: true,
        }
    }
}

impl Settings {
    /// Whether reports from C-PSes are announced for and acted on.
    pub fn reacting(&self) -> bool {
        self.enabled && self.role != Role::Reporting && self.algorithms != 0
    }

    /// Whether reports are sent to SCIs.
    pub fn reporting(&self) -> bool {
        self.enabled && self.role != Role::Reacting && self.algorithms != 0
    }
}

/// Which hop a peer is on, as the state and the notification name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    /// A C-PS: its reports abate what the C-SMA sends it.
    FromCps,
    /// An SCI: the C-SMA's reports ask it to send less.
    ToSci,
}

impl Direction {
    pub fn yang(self) -> &'static str {
        match self {
            Direction::FromCps => "from-c-ps",
            Direction::ToSci => "to-sci",
        }
    }
}

/// An overload condition that started or ended (the `overload-state-change` notification).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub direction: Direction,
    pub peer: String,
    pub overloaded: bool,
    /// Why it changed: `started`, `ended` (by a report) or `expired`.
    pub cause: &'static str,
    pub sequence: u64,
    pub reduction: u8,
}

pub type TransitionHook = dyn Fn(&Transition) + Send + Sync;

/// What the C-PS sessions, the dispatcher and the state share.
#[derive(Default)]
pub struct Overload {
    settings: RwLock<Settings>,
    hook: RwLock<Option<Arc<TransitionHook>>>,
}

impl Overload {
    pub fn new() -> Arc<Overload> {
        Arc::new(Overload::default())
    }

    pub fn settings(&self) -> Settings {
        self.settings.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_settings(&self, s: Settings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = s;
    }

    pub fn set_hook(&self, hook: Arc<TransitionHook>) {
        *self.hook.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    /// Tells the notification hook (and the log) of a transition.
    pub fn transition(&self, t: Transition) {
        if t.overloaded {
            tracing::warn!(peer = %t.peer, direction = t.direction.yang(), reduction = t.reduction, sequence = t.sequence,
                "peer overload report: overload {}", t.cause);
        } else {
            tracing::info!(peer = %t.peer, direction = t.direction.yang(), "peer overload report: overload {}", t.cause);
        }
        let hook = self.hook.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(h) = hook {
            h(&t);
        }
    }
}
