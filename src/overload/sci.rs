//! The SCI side of the SCI → C-SMA hop (seed 003): an SCI as DOIC reacting node. It
//! announces the peer report with its CSCI-ID as SourceID, takes the C-SMA's answer and
//! reports (HTTP answer headers, gRPC verdict fields, MQTT control topic properties — all
//! the same text), and skips reports by the loss algorithm while a report is in force. A
//! health change is never skipped. Used by the example SCI load generator
//! (`examples/doic_load.rs`) and the tests; any SCI can do the same from
//! `docs/overload.md`.

use tokio::time::Instant;

use super::react::{Outcome, PeerOverload};
use super::wire::{Olr, Supported, OLR_DEFAULT_ALGO};
use super::Settings;

pub struct SciReactor {
    csci_id: String,
    /// The C-SMA's identity (its csma-id): only reports with this SourceID are believed.
    csma_id: String,
    settings: Settings,
    pub peer: PeerOverload,
}

impl SciReactor {
    pub fn new(csci_id: &str, csma_id: &str) -> SciReactor {
        SciReactor {
            csci_id: csci_id.to_owned(),
            csma_id: csma_id.to_owned(),
            settings: Settings::default(),
            peer: PeerOverload::default(),
        }
    }

    /// The value of `x-cats-oc-supported-features` in every message.
    pub fn announcement(&self) -> String {
        Supported::announce(OLR_DEFAULT_ALGO, &self.csci_id).to_string()
    }

    /// Takes the two values of an answer (either may be absent); the outcome of the report.
    pub fn take(&mut self, supported: Option<&str>, olr: Option<&str>) -> Option<Outcome> {
        if let Some(s) = supported.and_then(|s| Supported::decode(s).ok()) {
            let _ = self.peer.answered(&s, &self.csma_id, &self.settings);
        }
        let o = Olr::decode(olr?).ok()?;
        Some(self.peer.receive(&o, &self.csma_id, &self.settings, Instant::now()))
    }

    /// Whether to send the next report: always a health change, otherwise unless the loss
    /// algorithm abates it.
    pub fn should_send(&mut self, health_change: bool) -> bool {
        let now = Instant::now();
        self.peer.expire(now);
        health_change || !self.peer.abate(now)
    }

    /// The reduction in force (0: none).
    pub fn reduction(&self) -> u8 {
        self.peer.reduction(Instant::now())
    }
}
