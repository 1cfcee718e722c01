//! Where a session runs an RPC: on its own task (inline) or on a blocking thread.
//!
//! Most RPCs are answered in tens of microseconds; handing each one to a blocking thread
//! (`block_in_place`) costs more than the work itself (a thread hand-off and several context
//! switches). An RPC run inline holds a runtime worker, though, which the other sessions and
//! the engine share, so two rules decide:
//!
//! - **Only operations that wait for no other task** may run inline: the ones in
//!   [`INLINE_OPS`], which touch the datastores and NACM only, and a `<get>`
//!   ([`SELECTIVE_OPS`]) whose filter selects nothing of the engine's state. Reads of that
//!   state and `<get-data>` ask the engine's task, and the agent's own RPCs call into the
//!   engine; blocking
//!   a worker on an answer from a task that may need that very worker deadlocks when every
//!   worker does it at once. A datastore busy with a commit also sends the RPC to a blocking
//!   thread (the session checks `Datastores::busy` first), so an inline read does not hold a
//!   worker for the length of a commit.
//!   The scan that finds the operation's name before parsing is only a hint: after the
//!   parse, `rpc::handle_on` sends any operation outside the list to a blocking thread.
//! - **Only cheap kinds**: the session keeps a running estimate of what each kind of RPC
//!   costs — the operation's name and whether it carries a filter, which is what separates a
//!   small read from a whole-tree one. A kind never seen before, a large message, or a kind
//!   whose estimate is above [`INLINE_BUDGET`] goes to a blocking thread; one slow inline run
//!   moves its kind to the blocking path at once, and the estimate decays back when the kind
//!   becomes cheap again (it is measured on either path).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The base operations that may run inline: they read or lock the datastores and consult
/// NACM, and never wait for another task.
pub const INLINE_OPS: &[&str] = &["get-config", "lock", "unlock", "discard-changes", "get-schema", "close-session"];

/// Base operations that may run inline when their selection waits for no other task:
/// `<get>` whose filter selects nothing of `/cats-sma:cats-sma` (the engine's state is
/// the only state that is asked of the engine's task; every other provider reads shared
/// state under a lock). `rpc::handle_on` checks the parsed filter.
pub const SELECTIVE_OPS: &[&str] = &["get"];

/// An RPC kind whose estimated cost is at most this runs inline.
pub const INLINE_BUDGET: Duration = Duration::from_micros(500);
/// Messages larger than this always go to a blocking thread (parsing alone may be slow).
pub const INLINE_MAX_MESSAGE: usize = 16 * 1024;
/// How many kinds are tracked; further kinds (arbitrary names from peers) are not tracked
/// and go to a blocking thread.
const MAX_KINDS: usize = 256;

/// An RPC kind: the operation's local name and whether the message mentions a filter.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct Kind {
    op: Box<str>,
    filtered: bool,
}

impl Kind {
    /// The kind of one message, or None when the operation cannot be found cheaply (the
    /// message goes to the blocking path, where the parser reports what is wrong with it).
    pub fn of(src: &str) -> Option<Kind> {
        let op = op_name(src)?;
        Some(Kind { op: op.into(), filtered: src.contains("filter") })
    }
}

/// The cost estimates of every RPC kind, shared by all sessions.
#[derive(Default)]
pub struct Costs {
    kinds: Mutex<HashMap<Kind, Duration>>,
}

impl Costs {
    /// The process-wide estimates.
    pub fn global() -> &'static Costs {
        static COSTS: OnceLock<Costs> = OnceLock::new();
        COSTS.get_or_init(Costs::default)
    }

    /// Whether a message of this kind and length may run inline.
    pub fn inline(&self, kind: Option<&Kind>, len: usize) -> bool {
        let Some(kind) = kind else { return false };
        if len > INLINE_MAX_MESSAGE || !(INLINE_OPS.contains(&&*kind.op) || SELECTIVE_OPS.contains(&&*kind.op)) {
            return false;
        }
        let kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds.get(kind).is_some_and(|c| *c <= INLINE_BUDGET)
    }

    /// Records what one run of the kind cost. The estimate is a moving average (weight 1/8),
    /// except that a run over the budget raises it to that run's cost at once.
    pub fn record(&self, kind: Option<Kind>, took: Duration) {
        let Some(kind) = kind else { return };
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = kinds.get_mut(&kind) {
            *c = if took > INLINE_BUDGET { took.max(*c) } else { (*c * 7 + took) / 8 };
        } else if kinds.len() < MAX_KINDS {
            kinds.insert(kind, took);
        }
    }
}

/// The local name of the first child element of the message's root element (`<rpc>`),
/// found by scanning tags only; None when it is not where a well-formed rpc has it.
fn op_name(src: &str) -> Option<&str> {
    let mut rest = src;
    let mut depth = 0;
    loop {
        let start = rest.find('<')?;
        rest = &rest[start + 1..];
        if let Some(r) = rest.strip_prefix('?') {
            rest = &r[r.find("?>")? + 2..];
            continue;
        }
        if let Some(r) = rest.strip_prefix("!--") {
            rest = &r[r.find("-->")? + 3..];
            continue;
        }
        if rest.starts_with('!') || rest.starts_with('/') {
            return None;
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '>' || c == '/')?;
        let name = &rest[..end];
        if depth == 1 {
            return Some(name.rsplit(':').next().unwrap_or(name)).filter(|n| !n.is_empty());
        }
        // The root's start tag: skip to its end; a self-closing root holds no operation.
        let close = rest.find('>')?;
        if rest[..close].ends_with('/') {
            return None;
        }
        rest = &rest[close + 1..];
        depth = 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn op_name_is_the_first_child_of_the_root() {
        let m = r#"<?xml version="1.0"?><!-- c --><rpc message-id="1" xmlns="urn:ietf:params:xml:ns:netconf:base:1.0">
            <!-- x --><get-config><source><running/></source></get-config></rpc>"#;
        assert_eq!(op_name(m), Some("get-config"));
        assert_eq!(op_name(r#"<nc:rpc xmlns:nc="u" message-id="1"><nc:get/></nc:rpc>"#), Some("get"));
        assert_eq!(op_name(r#"<rpc message-id="1"/>"#), None);
        assert_eq!(op_name(r#"<rpc message-id="1"></rpc>"#), None);
        assert_eq!(op_name("no xml at all"), None);
        assert_eq!(op_name("<rpc"), None);
        assert_eq!(op_name("<rpc><"), None);
    }

    #[test]
    fn a_kind_runs_inline_only_once_it_was_measured_cheap() {
        let costs = Costs::default();
        let kind = Kind::of("<rpc message-id='1'><get-config/></rpc>");
        let get = Kind::of("<rpc message-id='1'><get/></rpc>");
        costs.record(get.clone(), Duration::from_micros(1));
        // <get> passes this check once cheap: after the parse, `rpc::handle_on` keeps on
        // the worker only a <get> whose filter selects nothing of the engine's state.
        assert!(costs.inline(get.as_ref(), 40));
        let app = Kind::of("<rpc message-id='1'><local-steering xmlns='urn:cats-sma:yang:cats-sma'/></rpc>");
        costs.record(app.clone(), Duration::from_micros(1));
        assert!(!costs.inline(app.as_ref(), 40), "the agent's RPCs call the engine: never inline");
        assert!(!costs.inline(kind.as_ref(), 40), "never seen: blocking thread");
        costs.record(kind.clone(), Duration::from_micros(40));
        assert!(costs.inline(kind.as_ref(), 40));
        assert!(!costs.inline(kind.as_ref(), INLINE_MAX_MESSAGE + 1), "large messages never inline");
        // One slow run moves the kind to the blocking path at once ...
        costs.record(kind.clone(), Duration::from_millis(300));
        assert!(!costs.inline(kind.as_ref(), 40));
        // ... and cheap runs bring it back.
        for _ in 0..100 {
            costs.record(kind.clone(), Duration::from_micros(40));
        }
        assert!(costs.inline(kind.as_ref(), 40));
        // A filter makes another kind.
        let filtered = Kind::of("<rpc message-id='1'><get-config><filter/></get-config></rpc>");
        assert_ne!(kind, filtered);
        assert!(!costs.inline(filtered.as_ref(), 40));
        assert!(!costs.inline(None, 40));
    }
}
