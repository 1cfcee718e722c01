//! The reference C-PS as DOIC reporting node (seed 003; RFC 8581 sections 5.1.2, 5.2.2 and
//! 5.2.4): it answers a C-SMA's announcement with the peer report and the loss algorithm,
//! and while overloaded (its request rate over `overload_threshold`, or a report forced by
//! a test) puts its report in every answer to a C-SMA that announced support.

use std::time::Instant;

use super::server::{lock, CpsState};
use crate::overload::wire::{Olr, Supported, OLR_DEFAULT_ALGO, PEER_REPORT};

/// How long an end of overload is still sent after the overload ended, so every C-SMA
/// that was told of it hears the end (the longest validity it could hold).
const END_SENT_FOR_MAX: u32 = 300;

#[derive(Debug, Default)]
pub struct RefOverload {
    /// A report forced regardless of load: (reduction, validity, SourceID to claim).
    forced: Option<(u8, Option<u32>, Option<String>)>,
    /// The report being sent, and since when its content holds.
    current: Option<Olr>,
    /// The end of overload being sent, until then.
    ending: Option<(Olr, Instant)>,
    last_sequence: u64,
    /// When the report being sent was issued: it is issued again with a new sequence
    /// number every half validity (the validity counts from the first report with a given
    /// sequence number, RFC 7683 section 7.5).
    issued: Option<Instant>,
}

impl CpsState {
    /// Reports `reduction` (with `validity`, or none to let the C-SMA apply its default)
    /// whatever the load, until [`CpsState::follow_load`]; `claimed_source` puts another
    /// SourceID in the report (a relayed report, for the agent-chain test).
    pub fn force_overload(&self, reduction: u8, validity: Option<u32>, claimed_source: Option<&str>) {
        lock(&self.overload).forced = Some((reduction, validity, claimed_source.map(str::to_owned)));
    }

    /// Reports overload from the request rate again (none without `overload_threshold`).
    pub fn follow_load(&self) {
        lock(&self.overload).forced = None;
    }

    /// The SourceID of this C-PS.
    pub fn source_id(&self) -> String {
        self.config.source_id.clone().unwrap_or_else(|| self.config.listen.ip().to_string())
    }

    /// The sequence numbers of the reports sent so far (the last one).
    pub fn overload_sequence(&self) -> u64 {
        lock(&self.overload).last_sequence
    }

    /// What to answer a request with: the answer to its announcement and the report in
    /// force, if the request announced the peer report with the C-SMA's own identity as
    /// SourceID (RFC 8581 section 5.1.2: a reporting node reports only to a peer that
    /// announced support).
    pub fn overload_answer(
        &self,
        announced: Option<&Supported>,
        csma_id: Option<&str>,
    ) -> (Option<Supported>, Option<Olr>) {
        let Some(a) = announced else { return (None, None) };
        if !a.peer_report() || Some(a.source_id.as_str()) != csma_id || a.peer_algo & OLR_DEFAULT_ALGO == 0 {
            return (None, None);
        }
        let answer = Supported {
            feature_vector: OLR_DEFAULT_ALGO | crate::overload::wire::OLR_PEER_REPORT,
            peer_algo: OLR_DEFAULT_ALGO,
            source_id: self.source_id(),
        };
        (Some(answer), self.overload_report())
    }

    /// The report this C-PS sends now (RFC 8581 section 5.2.2: a new sequence number
    /// whenever its content changes; an end of overload is sent for a while after it).
    pub fn overload_report(&self) -> Option<Olr> {
        let load = self.load();
        let threshold = self.config.overload_threshold;
        let mut o = lock(&self.overload);
        let wanted: Option<(u8, Option<u32>, String)> = match &o.forced {
            Some((r, v, src)) => Some((*r, *v, src.clone().unwrap_or_else(|| self.source_id()))),
            None if threshold > 0.0 && load > threshold => {
                let r = (100.0 * (1.0 - threshold / load)).ceil().clamp(1.0, 100.0) as u8;
                Some((r, Some(self.config.overload_validity), self.source_id()))
            }
            None => None,
        };
        let now = Instant::now();
        match wanted.filter(|w| w.0 > 0) {
            Some((reduction, validity, source_id)) => {
                let same = o.current.as_ref().is_some_and(|c| {
                    (c.reduction, c.validity, c.source_id.as_str()) == (reduction, validity, source_id.as_str())
                });
                let half = std::time::Duration::from_secs(u64::from(
                    validity.unwrap_or(crate::overload::wire::DEFAULT_VALIDITY).max(2) / 2,
                ));
                let stale = o.issued.is_none_or(|t| now.saturating_duration_since(t) >= half);
                if !same || stale {
                    o.issued = Some(now);
                    let sequence = next_sequence(&mut o.last_sequence);
                    o.current = Some(Olr { sequence, report_type: PEER_REPORT, reduction, validity, source_id });
                    o.ending = None;
                }
                o.current.clone()
            }
            None => {
                if let Some(c) = o.current.take() {
                    let sequence = next_sequence(&mut o.last_sequence);
                    let end = Olr { sequence, reduction: 0, validity: Some(0), ..c.clone() };
                    let hold = c.validity.unwrap_or(crate::overload::wire::DEFAULT_VALIDITY).min(END_SENT_FOR_MAX);
                    o.ending = Some((end, now + std::time::Duration::from_secs(u64::from(hold))));
                }
                match &o.ending {
                    Some((end, until)) if *until > now => Some(end.clone()),
                    _ => {
                        o.ending = None;
                        None
                    }
                }
            }
        }
    }
}

/// Sequence numbers from the clock (milliseconds), so they increase across restarts too
/// (RFC 7683 section 5.5.2).
fn next_sequence(last: &mut u64) -> u64 {
    let now = chrono::Utc::now().timestamp_millis().max(0) as u64;
    *last = now.max(*last + 1);
    *last
}
