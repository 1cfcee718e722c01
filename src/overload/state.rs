//! State out: `overload-control/state/peer` for each C-PS (reacting node), rendered when the
//! operational datastore is read.

use std::sync::Arc;

use yang2::data::DataTree;

use super::config::OVERLOAD;
use super::react::algorithm_names;
use super::report::ReportingNode;
use super::Direction;
use crate::cps::session::{lock, Registry};
use crate::datastore::tree::{quote, set, yang_time};
use crate::datastore::StateProvider;
use crate::error::RpcError;

pub struct OverloadState {
    pub registry: Arc<Registry>,
    pub reporting: Arc<ReportingNode>,
}

fn algorithm(v: u64) -> Option<String> {
    algorithm_names(v).first().map(|n| format!("cats-sma-overload:{n}"))
}

impl StateProvider for OverloadState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(xpath) {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let divert = self.registry.divert_target(now).is_some();
        for peer in self.registry.peers() {
            let o = lock(&peer.overload).clone();
            let base = format!(
                "{OVERLOAD}/state/peer[direction='{}'][name={}]",
                Direction::FromCps.yang(),
                quote(&peer.settings.name)
            );
            set(tree, &format!("{base}/source-id"), Some(&peer.settings.source_id()))?;
            if let Some(n) = &o.negotiated {
                set(
                    tree,
                    &format!("{base}/capability/peer-report"),
                    Some(if n.peer_report { "true" } else { "false" }),
                )?;
                if let Some(a) = algorithm(n.algorithm) {
                    set(tree, &format!("{base}/capability/algorithm"), Some(&a))?;
                }
                set(tree, &format!("{base}/capability/negotiated-at"), Some(&yang_time(n.at)))?;
            }
            if let Some(r) = o.report.as_ref().filter(|r| r.expires > now) {
                let b = format!("{base}/report");
                set(tree, &format!("{b}/sequence-number"), Some(&r.sequence.to_string()))?;
                if let Some(a) = algorithm(r.algorithm) {
                    set(tree, &format!("{b}/algorithm"), Some(&a))?;
                }
                set(tree, &format!("{b}/requested-reduction-percentage"), Some(&r.requested.to_string()))?;
                set(tree, &format!("{b}/reduction-percentage"), Some(&r.reduction.to_string()))?;
                set(tree, &format!("{b}/validity-duration"), Some(&r.validity.to_string()))?;
                set(tree, &format!("{b}/received-at"), Some(&yang_time(r.received_at)))?;
                set(tree, &format!("{b}/expires-at"), Some(&yang_time(r.expires_at)))?;
                let left = r.expires.saturating_duration_since(now);
                let secs = left.as_secs() + u64::from(left.subsec_nanos() > 0);
                set(tree, &format!("{b}/time-left"), Some(&secs.to_string()))?;
                let primary = peer.settings.role == crate::cps::session::Role::Primary;
                let how = if divert && primary { "divert" } else { "throttle" };
                set(tree, &format!("{b}/abatement"), Some(how))?;
            }
            let c = &o.counters;
            for (leaf, v) in [
                ("reports-received", c.received),
                ("ignored-stale-sequence", c.ignored_stale),
                ("ignored-source-id-mismatch", c.ignored_source),
                ("ignored-report-type", c.ignored_type),
                ("ignored-not-negotiated", c.ignored_not_negotiated),
                ("malformed", c.malformed),
                ("expired", c.expired),
                ("abatable-updates", c.offered),
                ("diverted", c.diverted),
                ("throttled", c.throttled),
            ] {
                set(tree, &format!("{base}/counters/{leaf}"), Some(&v.to_string()))?;
            }
        }
        self.render_reporting(tree)
    }
}

impl OverloadState {
    /// The reporting node: the report it sends, what it measured, the SCIs that announced.
    fn render_reporting(&self, tree: &mut DataTree<'static>) -> Result<(), RpcError> {
        let local = self.reporting.local();
        let b = format!("{OVERLOAD}/state/local-report");
        let current = self.reporting.current();
        set(tree, &format!("{b}/overloaded"), Some(if local.reduction > 0 { "true" } else { "false" }))?;
        set(tree, &format!("{b}/reduction-percentage"), Some(&local.reduction.to_string()))?;
        if let Some(r) = &current {
            set(tree, &format!("{b}/sequence-number"), Some(&r.sequence.to_string()))?;
            set(tree, &format!("{b}/validity-duration"), Some(&r.validity.unwrap_or(0).to_string()))?;
        }
        if let Some(t) = local.since {
            set(tree, &format!("{b}/since"), Some(&yang_time(t)))?;
        }
        let l = &local.load;
        set(tree, &format!("{b}/load/ingest-rate"), Some(&(l.rate.round() as u64).to_string()))?;
        set(tree, &format!("{b}/load/queue-occupancy"), Some(&(l.queue.round().clamp(0.0, 100.0) as u8).to_string()))?;
        set(tree, &format!("{b}/load/engine-lag"), Some(&(l.lag.as_millis() as u64).to_string()))?;
        set(tree, &format!("{b}/load/cpu"), Some(&(l.cpu.round().clamp(0.0, 100.0) as u8).to_string()))?;
        let worst = if local.worst.0.is_empty() { "none" } else { local.worst.0 };
        set(tree, &format!("{b}/load/worst-indicator"), Some(worst))?;
        set(tree, &format!("{b}/evaluations"), Some(&local.evaluations.to_string()))?;
        for (csci, p) in self.reporting.scis() {
            let base = format!("{OVERLOAD}/state/peer[direction='{}'][name={}]", Direction::ToSci.yang(), quote(&csci));
            set(tree, &format!("{base}/source-id"), Some(&csci))?;
            set(tree, &format!("{base}/transport"), Some(p.transport))?;
            set(tree, &format!("{base}/capability/peer-report"), Some("true"))?;
            if let Some(a) = algorithm(p.algorithm) {
                set(tree, &format!("{base}/capability/algorithm"), Some(&a))?;
            }
            set(tree, &format!("{base}/capability/negotiated-at"), Some(&yang_time(p.at)))?;
            set(tree, &format!("{base}/counters/reports-sent"), Some(&p.reports_sent.to_string()))?;
            if p.last_sequence > 0 {
                set(tree, &format!("{base}/counters/last-sequence-sent"), Some(&p.last_sequence.to_string()))?;
            }
        }
        Ok(())
    }
}
