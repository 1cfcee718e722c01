//! State out: the metric cache, the per-service site aggregates, the rejection counters
//! and the quarantine, rendered from the engine's typed state into the operational
//! datastore when someone reads it (DESIGN decision 2: state is never kept in libyang).
//!
//! Rendering is two steps: inside the engine task a plain typed copy is taken (cheap, so
//! ingest stalls as little as possible); outside it the copy is written as one XML
//! document and parsed once by libyang, then moved into the operational tree. One parse is
//! an order of magnitude faster than building the tree a path at a time (`new_path`
//! resolves the whole path from the root for every leaf).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use yang2::data::{DataFormat, DataParserFlags, DataTree, DataValidationFlags};

use crate::datastore::tree::merge_moving;
use crate::datastore::StateProvider;
use crate::engine::cache::Flags;
use crate::engine::core::{Core, Quarantined};
use crate::engine::model::{Health, Metrics, SciState, SiteMetrics};
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::error::RpcError;
use crate::text::xml as esc;

const NS: &str = "urn:cats-sma:yang:cats-sma";
const NS_POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";
const NS_TYPES: &str = "urn:cats-sma:yang:cats-sma-types";

pub struct EngineState {
    pub engine: Engine,
}

/// One cache entry as shown.
pub(super) struct EntryRow {
    pub(super) csci_id: String,
    pub(super) cs_id: Option<String>,
    pub(super) reported: Option<Metrics>,
    pub(super) timestamp: Option<DateTime<Utc>>,
    pub(super) sequence: Option<u64>,
    pub(super) authentication: Option<&'static str>,
    /// The subordinate C-SMA the entry mirrors, if it is learned from one (`mirror.rs`).
    pub(super) learned_from: Option<std::sync::Arc<str>>,
    /// How it was discovered (trust domain, proof, when), if it was.
    pub(super) discovered: Option<crate::engine::discovery::Discovered>,
    pub(super) ttl_remaining_ms: u128,
    pub(super) state: SciState,
    pub(super) flags: Flags,
    pub(super) last_state_change: DateTime<Utc>,
}

/// One service as shown.
pub(super) struct ServiceRow {
    pub(super) cs_id: String,
    /// What is advertised: the site metrics after site-scope policy.
    pub(super) reported: Option<SiteMetrics>,
    pub(super) site_gas: u32,
    pub(super) computing_time: u32,
    pub(super) function: &'static str,
    pub(super) health: Health,
    pub(super) sci_count: u32,
    pub(super) healthy: usize,
    /// The lowest cost, reputation and security label of the contributing SCIs.
    pub(super) cost: Option<u32>,
    pub(super) reputation: Option<u8>,
    pub(super) security_label: Option<u8>,
}

/// A plain copy of what is shown, taken inside the engine task.
pub(super) struct Snapshot {
    pub(super) entries: Vec<EntryRow>,
    pub(super) services: Vec<ServiceRow>,
    pub(super) discontinuity: Option<DateTime<Utc>>,
    pub(super) received: u64,
    pub(super) accepted: u64,
    pub(super) sequence_restarts: u64,
    pub(super) rejections: Vec<(&'static str, u64, Option<DateTime<Utc>>)>,
    pub(super) quarantine: Vec<Quarantined>,
    /// The update controller's statistics (filled outside the engine task).
    pub(super) updates: Option<crate::engine::update::UpdateStats>,
    /// Whether the statistics were taken (the counters above are zero when not).
    pub(super) statistics: bool,
}

/// Which parts of the state a read wants: per list None for none, Some(None) for every
/// entry, Some(Some(keys)) for those entries only.
#[derive(Clone, Debug, Default)]
pub(super) struct Want {
    pub(super) entries: Option<Option<Vec<String>>>,
    pub(super) services: Option<Option<Vec<String>>>,
    pub(super) statistics: bool,
    pub(super) quarantine: bool,
}

impl Want {
    fn everything() -> Want {
        Want { entries: Some(None), services: Some(None), statistics: true, quarantine: true }
    }

    /// What `sel` can reach (at least).
    pub(super) fn of(sel: &crate::datastore::select::Selection) -> Want {
        use crate::datastore::select::Sel;
        let trie = sel.tree();
        let root = Sel::root(&trie);
        let Some(top) = root.child("cats-sma", "cats-sma") else { return Want::default() };
        if top.is_all() {
            return Want::everything();
        }
        let list = |container: &str, list: &str, key: &str| {
            top.child("cats-sma", container)
                .map(|c| c.wanted_keys("cats-sma", list, key).map(|k| k.into_iter().map(str::to_owned).collect()))
        };
        Want {
            entries: list("metric-cache", "entry", "csci-id"),
            services: list("services", "service", "cs-id"),
            statistics: top.child("cats-sma", "statistics").is_some(),
            quarantine: top.child("cats-sma", "quarantine").is_some(),
        }
    }
}

fn entry_row(core: &Core, e: &crate::engine::cache::Entry, now: tokio::time::Instant) -> EntryRow {
    let learned_from = if core.mirrors.is_empty() { None } else { core.mirrors.owner(&e.csci_id).cloned() };
    EntryRow {
        csci_id: e.csci_id.to_string(),
        cs_id: e.cs_id().map(str::to_owned),
        reported: e.reported,
        timestamp: e.timestamp(),
        sequence: e.sequence(),
        authentication: if learned_from.is_some() {
            Some("subordinate")
        } else {
            e.registration().map(|s| s.authentication())
        },
        learned_from,
        discovered: if core.discovery.discovered.is_empty() { None } else { core.discovery.get(&e.csci_id).cloned() },
        ttl_remaining_ms: e.ttl_remaining(now).as_millis(),
        state: e.state,
        flags: e.flags,
        last_state_change: e.last_state_change,
    }
}

fn service_row(core: &Core, cs: &str, function: &'static str) -> Option<ServiceRow> {
    let site = core.cache.site(cs)?;
    let healthy = core.cache.healthy_members(cs) as usize;
    Some(ServiceRow {
        cs_id: cs.to_owned(),
        reported: core.reported.get(cs).map(|(r, _)| r.clone()),
        site_gas: site.gas,
        computing_time: site.computing_time_ms,
        function,
        health: site.health,
        sci_count: site.sci_count,
        healthy,
        cost: site.cost,
        reputation: site.reputation,
        security_label: site.security_label,
    })
}

/// The wanted part of the state, copied inside the engine task: a lookup per named entry,
/// a pass over a list only when all of it is wanted.
pub(super) fn snapshot_part(core: &mut Core, want: &Want) -> Snapshot {
    let now = core.clock.now();
    let entries = match &want.entries {
        None => Vec::new(),
        Some(None) => {
            let mut rows = Vec::with_capacity(core.cache.len());
            rows.extend(core.cache.entries().map(|e| entry_row(core, e, now)));
            rows
        }
        Some(Some(keys)) => {
            let mut seen = std::collections::HashSet::new();
            keys.iter()
                .filter(|k| seen.insert(k.as_str()))
                .filter_map(|k| core.cache.get(k))
                .map(|e| entry_row(core, e, now))
                .collect()
        }
    };
    let function = core.cache.function.yang();
    let services = match &want.services {
        None => Vec::new(),
        Some(None) => core.cache.services().filter_map(|cs| service_row(core, cs, function)).collect(),
        Some(Some(keys)) => {
            let mut seen = std::collections::HashSet::new();
            keys.iter()
                .filter(|k| seen.insert(k.as_str()))
                .filter(|k| core.cache.services().any(|cs| cs == k.as_str()))
                .filter_map(|k| service_row(core, k, function))
                .collect()
        }
    };
    if !want.statistics {
        return Snapshot {
            entries,
            services,
            discontinuity: None,
            received: 0,
            accepted: 0,
            sequence_restarts: 0,
            rejections: Vec::new(),
            quarantine: if want.quarantine { core.quarantine.iter().cloned().collect() } else { Vec::new() },
            updates: None,
            statistics: false,
        };
    }
    let s = &core.stats;
    // Messages refused per source never reached the engine: they are added here.
    let (by_source, by_source_at) = core.rate.counters.source_refusals();
    let rejections = Rejection::ALL
        .iter()
        .map(|r| match r {
            Rejection::RateLimited => {
                (r.identity(), s.rejected[r.index()] + by_source, s.last_rejection[r.index()].max(by_source_at))
            }
            _ => (r.identity(), s.rejected[r.index()], s.last_rejection[r.index()]),
        })
        .filter(|(_, n, _)| *n > 0)
        .collect();
    Snapshot {
        entries,
        services,
        discontinuity: s.discontinuity,
        received: s.received + by_source,
        accepted: s.accepted,
        sequence_restarts: s.sequence_restarts,
        rejections,
        quarantine: if want.quarantine { core.quarantine.iter().cloned().collect() } else { Vec::new() },
        updates: None,
        statistics: true,
    }
}

/// Appends a date-and-time as `yang_time` writes it (RFC 3339, UTC, milliseconds).
pub(super) fn push_time(out: &mut String, t: DateTime<Utc>) {
    crate::datastore::render::push_time(out, t)
}

fn leaf(out: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "<{name}>{value}</{name}>");
}

fn time_leaf(out: &mut String, name: &str, t: DateTime<Utc>) {
    let _ = write!(out, "<{name}>");
    push_time(out, t);
    let _ = write!(out, "</{name}>");
}

fn flags(f: Flags) -> Option<String> {
    f.yang_bits()
}

/// The snapshot as one `cats-sma` XML document (with a terminating NUL for libyang).
fn to_xml(snap: &Snapshot) -> String {
    let mut out = String::with_capacity(512 + snap.entries.len() * 400 + snap.services.len() * 400);
    let _ = write!(out, "<cats-sma xmlns=\"{NS}\">");
    if !snap.entries.is_empty() {
        out.push_str("<metric-cache>");
        for e in &snap.entries {
            out.push_str("<entry>");
            leaf(&mut out, "csci-id", esc(&e.csci_id));
            if let Some(cs) = &e.cs_id {
                leaf(&mut out, "cs-id", esc(cs));
            }
            if let Some(m) = e.reported {
                leaf(&mut out, "gas", m.gas);
                leaf(&mut out, "computing-time", m.computing_time_ms);
                leaf(&mut out, "health", m.health.yang());
                if let Some(c) = m.cost {
                    leaf(&mut out, "cost", c);
                }
                if let Some(r) = m.reputation {
                    leaf(&mut out, "reputation", r);
                }
                if let Some(s) = m.security_label {
                    leaf(&mut out, "security-label", s);
                }
            }
            if let Some(t) = e.timestamp {
                time_leaf(&mut out, "timestamp", t);
            }
            if let Some(s) = e.sequence {
                leaf(&mut out, "sequence-number", s);
            }
            if let Some(a) = e.authentication {
                leaf(&mut out, "authentication", a);
            }
            if let Some(f) = &e.learned_from {
                leaf(&mut out, "learned-from", esc(f));
            }
            if let Some(d) = &e.discovered {
                leaf(&mut out, "discovered-by", esc(&d.domain));
                leaf(&mut out, "discovery-proof", d.proof);
                time_leaf(&mut out, "discovered-at", d.since);
            }
            leaf(&mut out, "ttl-remaining", e.ttl_remaining_ms);
            leaf(&mut out, "state", e.state.yang());
            if let Some(f) = flags(e.flags) {
                leaf(&mut out, "flags", f);
            }
            time_leaf(&mut out, "last-state-change", e.last_state_change);
            out.push_str("</entry>");
        }
        out.push_str("</metric-cache>");
    }
    if !snap.services.is_empty() {
        out.push_str("<services>");
        for s in &snap.services {
            out.push_str("<service>");
            leaf(&mut out, "cs-id", esc(&s.cs_id));
            leaf(&mut out, "site-gas", s.site_gas);
            leaf(&mut out, "computing-time", s.computing_time);
            leaf(&mut out, "computing-time-function", s.function);
            leaf(&mut out, "health", s.health.yang());
            leaf(&mut out, "sci-count", s.sci_count);
            leaf(&mut out, "healthy-sci-count", s.healthy);
            if let Some(c) = s.cost {
                leaf(&mut out, "cost", c);
            }
            if let Some(r) = s.reputation {
                leaf(&mut out, "reputation", r);
            }
            if let Some(l) = s.security_label {
                leaf(&mut out, "security-label", l);
            }
            if let Some(r) = &s.reported {
                let _ = write!(
                    out,
                    "<reported-gas xmlns=\"{NS_POLICY}\">{}</reported-gas>\
                     <reported-computing-time xmlns=\"{NS_POLICY}\">{}</reported-computing-time>",
                    r.gas, r.computing_time_ms
                );
                let optional = [
                    ("reported-cost", r.cost),
                    ("reported-reputation", r.reputation.map(u32::from)),
                    ("reported-security-label", r.security_label.map(u32::from)),
                ];
                for (name, v) in optional {
                    if let Some(v) = v {
                        let _ = write!(out, "<{name} xmlns=\"{NS_POLICY}\">{v}</{name}>");
                    }
                }
            }
            out.push_str("</service>");
        }
        out.push_str("</services>");
    }
    if snap.statistics {
        out.push_str("<statistics>");
        if let Some(d) = snap.discontinuity {
            time_leaf(&mut out, "discontinuity-time", d);
        }
        leaf(&mut out, "reports-received", snap.received);
        leaf(&mut out, "reports-accepted", snap.accepted);
        leaf(&mut out, "sequence-restarts", snap.sequence_restarts);
        for (reason, count, last) in &snap.rejections {
            let _ = write!(out, "<rejection><reason xmlns:t=\"{NS_TYPES}\">t:{reason}</reason>");
            leaf(&mut out, "count", count);
            if let Some(t) = last {
                time_leaf(&mut out, "last-occurrence", *t);
            }
            out.push_str("</rejection>");
        }
        out.push_str("</statistics>");
    }
    for q in &snap.quarantine {
        out.push_str("<quarantine>");
        leaf(&mut out, "id", q.id);
        leaf(&mut out, "csci-id", esc(&q.report.csci_id));
        leaf(&mut out, "cs-id", esc(&q.report.cs_id));
        leaf(&mut out, "sequence-number", q.report.sequence);
        let _ = write!(out, "<reason xmlns:t=\"{NS_TYPES}\">t:anomaly</reason>");
        time_leaf(&mut out, "received-at", q.received_at);
        leaf(&mut out, "detail", esc(&format!("{:?}", q.anomaly)));
        out.push_str("</quarantine>");
    }
    if let Some(u) = &snap.updates {
        super::update_status::xml(&mut out, u);
    }
    out.push_str("</cats-sma>\0");
    out
}

/// The engine's state as a data tree of its own, parsed once. Not validated, and values
/// are stored without re-checking their type restrictions (LYD_PARSE_STORE_ONLY): they are
/// written here from typed values that already satisfy them (CSCI-IDs and CS-IDs come from
/// the validated registry). The document is written in schema order (LYD_PARSE_ORDERED),
/// so libyang appends each node instead of searching for its place.
fn parse(xml: &str) -> Result<DataTree<'static>, RpcError> {
    let flags = DataParserFlags::STRICT
        | DataParserFlags::from_bits_retain(yang2::ffi::LYD_PARSE_STORE_ONLY | yang2::ffi::LYD_PARSE_ORDERED);
    DataTree::parse_string(crate::yang::context(), xml.as_bytes(), DataFormat::XML, flags, DataValidationFlags::empty())
        .map_err(|e| RpcError::from_libyang(&e))
}

impl StateProvider for EngineState {
    fn scope(&self) -> Option<&'static [(&'static str, &'static str)]> {
        Some(&[("cats-sma", "cats-sma")])
    }

    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        // The XPath covers at least what the reader selects: render only that.
        let sel = xpath.map(crate::datastore::select::Selection::from_xpath);
        self.render_selected(tree, &sel.unwrap_or_else(crate::datastore::select::Selection::all), xpath)
    }

    fn render_selected(
        &self,
        tree: &mut DataTree<'static>,
        sel: &crate::datastore::select::Selection,
        hint: Option<&str>,
    ) -> Result<(), RpcError> {
        if crate::datastore::tree::outside_cats_sma(hint) {
            return Ok(());
        }
        let want = Want::of(sel);
        let policy =
            sel.is_all()
                || sel.tree().children.iter().any(|(s, c)| {
                    s.name == "cats-sma" && (c.whole || c.children.iter().any(|(s, _)| s.name == "policy"))
                });
        let nothing = want.entries.is_none() && want.services.is_none() && !want.statistics && !want.quarantine;
        if nothing && !policy {
            return Ok(());
        }
        let Some(mut snap) = self.engine.query_blocking(move |core| snapshot_part(core, &want)) else { return Ok(()) };
        if policy {
            snap.updates = Some(self.engine.updates.stats());
        }
        let state = parse(&to_xml(&snap))?;
        merge_moving(tree, state)
    }

    fn typed(&self) -> Option<&dyn crate::datastore::render::TypedState> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::datastore::tree::yang_time as time;

    #[test]
    fn fast_time_format_matches_yang_time() {
        for s in
            ["2026-11-30T12:00:00Z", "2026-01-02T03:04:05.678Z", "1999-12-31T23:59:59.999Z", "0001-01-01T00:00:00Z"]
        {
            let t: DateTime<Utc> = s.parse().unwrap();
            let mut out = String::new();
            push_time(&mut out, t);
            assert_eq!(out, time(t), "{s}");
        }
        let t = Utc::now();
        let mut out = String::new();
        push_time(&mut out, t);
        assert_eq!(out, time(t));
    }
}
