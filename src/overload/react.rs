//! The reacting node (RFC 8581 sections 5.1.1, 5.2.3 and 5.2.5): per adjacent peer, the
//! capability it answered with, the peer report in force (the overload control state) and
//! the loss algorithm that abates what is sent to it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::wire::{Olr, Supported, OLR_DEFAULT_ALGO, PEER_REPORT};
use super::Settings;

/// What the peer answered our announcement with (RFC 8581 section 5.1.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// The algorithm the peer selected (OC-Peer-Algo in its answer).
    pub algorithm: u64,
    pub peer_report: bool,
    pub at: DateTime<Utc>,
}

/// A peer report in force (RFC 8581 section 5.2.1, the reacting node's OCS).
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub sequence: u64,
    pub algorithm: u64,
    /// As the peer asked.
    pub requested: u8,
    /// What is applied: `requested` capped at `max-reduction-percentage`.
    pub reduction: u8,
    /// Seconds, as received or the default.
    pub validity: u32,
    pub received_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub expires: Instant,
}

/// What a received report did (each counted; the first three change the state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// No report was in force: overload starts.
    Started,
    /// A newer report replaced the one in force.
    Replaced,
    /// The report in force was ended (validity 0, reduction 0 or under the minimum).
    Ended,
    /// An end, or a report under the minimum, with no report in force: nothing changes.
    Nothing,
    /// Not newer than the report in force (RFC 7683 section 5.5.2).
    Stale,
    /// Its SourceID is not the adjacent peer (RFC 8581 section 5.2.3).
    SourceMismatch,
    /// Not a peer report (host and realm reports are Diameter endpoints' business).
    NotPeerReport,
    /// The peer never answered our announcement with the peer-report feature, or selected
    /// an algorithm we did not offer.
    NotNegotiated,
    /// Overload control is disabled, or this node does not take the reacting role.
    Disabled,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Started => "started",
            Outcome::Replaced => "replaced",
            Outcome::Ended => "ended",
            Outcome::Nothing => "nothing",
            Outcome::Stale => "stale-sequence",
            Outcome::SourceMismatch => "source-id-mismatch",
            Outcome::NotPeerReport => "not-peer-report",
            Outcome::NotNegotiated => "not-negotiated",
            Outcome::Disabled => "disabled",
        }
    }

    /// Whether overload towards the peer started or ended (a notification).
    pub fn transition(self) -> bool {
        matches!(self, Outcome::Started | Outcome::Ended)
    }
}

/// Counters of one peer, reacting side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub received: u64,
    pub ignored_stale: u64,
    pub ignored_source: u64,
    pub ignored_type: u64,
    pub ignored_not_negotiated: u64,
    pub malformed: u64,
    pub expired: u64,
    /// Updates that could have been abated, while a report was in force.
    pub offered: u64,
    pub diverted: u64,
    pub throttled: u64,
}

/// One adjacent peer, as a reacting node sees it.
#[derive(Clone, Debug, Default)]
pub struct PeerOverload {
    pub negotiated: Option<Negotiated>,
    pub report: Option<Report>,
    pub counters: Counters,
    /// The loss algorithm's spread: `reduction` is added per abatable update, and one is
    /// abated each time it passes 100, so exactly `reduction` of every 100 are, evenly.
    spread: u32,
}

impl PeerOverload {
    /// Takes the peer's answer to our announcement (RFC 8581 section 5.1.1): believed only
    /// when its SourceID is the adjacent peer's authenticated identity.
    /// `Ok(Some(report))` when the answer withdrew the peer report: the report that was in
    /// force ends with it (a later end could not be taken from a peer that no longer
    /// negotiates it).
    pub fn answered(
        &mut self,
        s: &Supported,
        expected_source: &str,
        cfg: &Settings,
    ) -> Result<Option<Report>, Outcome> {
        if s.source_id != expected_source {
            self.counters.ignored_source += 1;
            return Err(Outcome::SourceMismatch);
        }
        let algorithm = s.peer_algo & cfg.algorithms;
        // The answer names one algorithm among those we offered.
        let ok = s.peer_report() && algorithm.count_ones() == 1;
        let n = Negotiated { algorithm, peer_report: ok, at: Utc::now() };
        if self.negotiated.as_ref().map(|o| (o.algorithm, o.peer_report)) != Some((n.algorithm, n.peer_report)) {
            self.negotiated = Some(n);
        }
        Ok(if ok { None } else { self.report.take() })
    }

    /// Maintains the OCS for a received report (RFC 8581 section 5.2.3; RFC 7683 section
    /// 5.5.2): the SourceID check, then only a newer sequence number replaces the report in
    /// force; an end removes it.
    pub fn receive(&mut self, olr: &Olr, expected_source: &str, cfg: &Settings, now: Instant) -> Outcome {
        self.counters.received += 1;
        if !cfg.reacting() {
            return Outcome::Disabled;
        }
        if olr.report_type != PEER_REPORT {
            self.counters.ignored_type += 1;
            return Outcome::NotPeerReport;
        }
        if olr.source_id != expected_source {
            self.counters.ignored_source += 1;
            return Outcome::SourceMismatch;
        }
        let Some(n) = self.negotiated.as_ref().filter(|n| n.peer_report) else {
            self.counters.ignored_not_negotiated += 1;
            return Outcome::NotNegotiated;
        };
        let algorithm = n.algorithm;
        self.expire(now);
        if let Some(r) = &self.report {
            if olr.sequence <= r.sequence {
                self.counters.ignored_stale += 1;
                return Outcome::Stale;
            }
        }
        let validity = olr.validity.unwrap_or(cfg.default_validity);
        if olr.ends() || validity == 0 || olr.reduction < cfg.min_reduction {
            return match self.report.take() {
                Some(_) => Outcome::Ended,
                None => Outcome::Nothing,
            };
        }
        let received_at = Utc::now();
        let report = Report {
            sequence: olr.sequence,
            algorithm,
            requested: olr.reduction,
            reduction: olr.reduction.min(cfg.max_reduction),
            validity,
            received_at,
            expires_at: received_at + chrono::Duration::seconds(i64::from(validity)),
            expires: now + Duration::from_secs(u64::from(validity)),
        };
        match self.report.replace(report) {
            Some(_) => Outcome::Replaced,
            None => Outcome::Started,
        }
    }

    /// Removes a report whose validity ran out; true if one did (overload ended).
    pub fn expire(&mut self, now: Instant) -> bool {
        if self.report.as_ref().is_some_and(|r| r.expires <= now) {
            self.report = None;
            self.counters.expired += 1;
            return true;
        }
        false
    }

    /// The reduction in force (0: none).
    pub fn reduction(&self, now: Instant) -> u8 {
        match &self.report {
            Some(r) if r.expires > now => r.reduction,
            _ => 0,
        }
    }

    /// Whether the peer is overloaded now.
    pub fn overloaded(&self, now: Instant) -> bool {
        self.reduction(now) > 0
    }

    /// The loss algorithm (RFC 7683 section 5.5.4): whether this abatable update is to be
    /// abated (diverted or dropped).
    pub fn abate(&mut self, now: Instant) -> bool {
        let r = u32::from(self.reduction(now));
        if r == 0 {
            return false;
        }
        self.counters.offered += 1;
        self.spread += r;
        if self.spread >= 100 {
            self.spread -= 100;
            return true;
        }
        false
    }

    /// Forgets what the peer negotiated (a new session negotiates again); the report in
    /// force stays until it expires or is replaced (RFC 7683 section 5.5.2: the OCS
    /// outlives a connection).
    pub fn reconnected(&mut self) {
        self.negotiated = None;
    }
}

/// The algorithm names of an OC-Peer-Algo value.
pub fn algorithm_names(v: u64) -> Vec<&'static str> {
    let mut out = Vec::new();
    if v & OLR_DEFAULT_ALGO != 0 {
        out.push("loss");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overload::wire::OLR_PEER_REPORT;

    fn olr(seq: u64, reduction: u8, validity: Option<u32>, source: &str) -> Olr {
        Olr { sequence: seq, report_type: PEER_REPORT, reduction, validity, source_id: source.into() }
    }

    fn negotiated() -> PeerOverload {
        let mut p = PeerOverload::default();
        let s = Supported { feature_vector: OLR_PEER_REPORT | 1, peer_algo: 1, source_id: "cps".into() };
        p.answered(&s, "cps", &Settings::default()).unwrap();
        p
    }

    #[test]
    fn rfc8581_5_1_1_the_answer_is_believed_only_from_the_adjacent_peer() {
        let mut p = PeerOverload::default();
        let s = Supported { feature_vector: OLR_PEER_REPORT | 1, peer_algo: 1, source_id: "relay".into() };
        assert_eq!(p.answered(&s, "cps", &Settings::default()), Err(Outcome::SourceMismatch));
        assert!(p.negotiated.is_none());
        let now = Instant::now();
        assert_eq!(p.receive(&olr(1, 10, None, "cps"), "cps", &Settings::default(), now), Outcome::NotNegotiated);
        // An answer selecting an algorithm never offered negotiates nothing.
        let s = Supported { feature_vector: OLR_PEER_REPORT | 2, peer_algo: 2, source_id: "cps".into() };
        p.answered(&s, "cps", &Settings::default()).unwrap();
        assert!(!p.negotiated.as_ref().unwrap().peer_report);
        // Withdrawing the peer report ends the report in force.
        let mut p = negotiated();
        let now = Instant::now();
        assert_eq!(p.receive(&olr(1, 10, None, "cps"), "cps", &Settings::default(), now), Outcome::Started);
        let s = Supported { feature_vector: 1, peer_algo: 1, source_id: "cps".into() };
        assert_eq!(p.answered(&s, "cps", &Settings::default()).unwrap().map(|r| r.sequence), Some(1));
        assert!(p.report.is_none());
    }

    #[test]
    fn rfc8581_5_2_3_sequence_source_id_validity_and_end() {
        let cfg = Settings::default();
        let mut p = negotiated();
        let now = Instant::now();
        assert_eq!(p.receive(&olr(5, 30, None, "cps"), "cps", &cfg, now), Outcome::Started);
        assert_eq!(p.report.as_ref().unwrap().validity, 30);
        assert_eq!(p.receive(&olr(5, 50, None, "cps"), "cps", &cfg, now), Outcome::Stale);
        assert_eq!(p.receive(&olr(4, 50, None, "cps"), "cps", &cfg, now), Outcome::Stale);
        assert_eq!(p.receive(&olr(9, 50, Some(2), "other"), "cps", &cfg, now), Outcome::SourceMismatch);
        assert_eq!(p.reduction(now), 30);
        assert_eq!(p.receive(&olr(6, 50, Some(2), "cps"), "cps", &cfg, now), Outcome::Replaced);
        assert_eq!(p.reduction(now), 50);
        assert_eq!(p.reduction(now + Duration::from_secs(2)), 0);
        assert!(p.expire(now + Duration::from_secs(2)));
        assert_eq!(p.counters.expired, 1);
        assert_eq!(p.receive(&olr(7, 20, None, "cps"), "cps", &cfg, now), Outcome::Started);
        assert_eq!(p.receive(&olr(8, 20, Some(0), "cps"), "cps", &cfg, now), Outcome::Ended);
        assert_eq!(p.receive(&olr(9, 0, None, "cps"), "cps", &cfg, now), Outcome::Nothing);
        let mut host = olr(10, 20, None, "cps");
        host.report_type = 0;
        assert_eq!(p.receive(&host, "cps", &cfg, now), Outcome::NotPeerReport);
        assert_eq!(p.counters.ignored_stale, 2);
        assert_eq!(p.counters.ignored_source, 1);
        assert_eq!(p.counters.ignored_type, 1);
    }

    #[test]
    fn rfc7683_5_5_4_loss_abates_exactly_the_reduction_and_caps_apply() {
        let cfg = Settings { max_reduction: 40, min_reduction: 5, ..Settings::default() };
        let mut p = negotiated();
        let now = Instant::now();
        assert_eq!(p.receive(&olr(1, 3, None, "cps"), "cps", &cfg, now), Outcome::Nothing);
        assert_eq!(p.receive(&olr(2, 90, None, "cps"), "cps", &cfg, now), Outcome::Started);
        assert_eq!(p.reduction(now), 40);
        let abated = (0..1000).filter(|_| p.abate(now)).count();
        assert_eq!(abated, 400);
        // Evenly: never two abated in a row at 40 %.
        let seq: Vec<bool> = (0..10).map(|_| p.abate(now)).collect();
        assert!(seq.windows(2).all(|w| !(w[0] && w[1])), "{seq:?}");
    }
}
