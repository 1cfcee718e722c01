//! State out: the metric cache, the per-service site aggregates, the rejection counters
//! and the quarantine, rendered from the engine's typed state into the operational
//! datastore when someone reads it (DESIGN decision 2: state is never kept in libyang).

use yang2::data::DataTree;

use super::ROOT;
use crate::datastore::tree::{quote, set as set_opt, yang_time as time};
use crate::datastore::StateProvider;
use crate::engine::core::Core;
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::error::RpcError;

pub struct EngineState {
    pub engine: Engine,
}

/// A plain copy of what is shown, taken inside the engine task.
struct Snapshot {
    entries: Vec<(String, Vec<(&'static str, String)>)>,
    services: Vec<(String, Vec<(&'static str, String)>)>,
    stats: Vec<(&'static str, String)>,
    rejections: Vec<(&'static str, u64, Option<String>)>,
    quarantine: Vec<(u64, Vec<(&'static str, String)>)>,
}

fn snapshot(core: &mut Core) -> Snapshot {
    let now = core.clock.now();
    let mut entries = Vec::with_capacity(core.cache.len());
    for e in core.cache.entries() {
        let mut l: Vec<(&'static str, String)> = Vec::with_capacity(14);
        if let Some(cs) = &e.cs_id {
            l.push(("cs-id", cs.clone()));
        }
        if let Some(m) = e.reported {
            l.push(("gas", m.gas.to_string()));
            l.push(("computing-time", m.computing_time_ms.to_string()));
            l.push(("health", m.health.yang().into()));
            if let Some(c) = m.cost {
                l.push(("cost", c.to_string()));
            }
            if let Some(r) = m.reputation {
                l.push(("reputation", r.to_string()));
            }
            if let Some(s) = m.security_label {
                l.push(("security-label", s.to_string()));
            }
        }
        if let Some(t) = e.timestamp {
            l.push(("timestamp", time(t)));
        }
        if let Some(s) = e.sequence {
            l.push(("sequence-number", s.to_string()));
        }
        l.push(("ttl-remaining", e.ttl_remaining(now).as_millis().to_string()));
        l.push(("state", e.state.yang().into()));
        let f = e.flags;
        let bits: Vec<&str> = [
            (f.anomaly_warning, "anomaly-warning"),
            (f.smoothed, "smoothed"),
            (f.pull_pending, "pull-pending"),
            (f.gas_zeroed, "gas-zeroed"),
        ]
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| *n)
        .collect();
        if !bits.is_empty() {
            l.push(("flags", bits.join(" ")));
        }
        l.push(("last-state-change", time(e.last_state_change)));
        entries.push((e.csci_id.clone(), l));
    }
    let function = core.cache.function;
    let mut services = Vec::new();
    let ids: Vec<String> = core.cache.services().cloned().collect();
    for cs in ids {
        let Some(site) = core.cache.site(&cs) else { continue };
        let healthy = core
            .cache
            .members(&cs)
            .filter(|e| e.reported.is_some_and(|m| m.health == crate::engine::model::Health::Healthy))
            .count();
        let mut leaves = Vec::new();
        if let Some((r, _)) = core.reported.get(&cs) {
            leaves.push(("cats-sma-policy:reported-gas", r.gas.to_string()));
            leaves.push(("cats-sma-policy:reported-computing-time", r.computing_time_ms.to_string()));
        }
        services.push((
            cs,
            leaves
                .into_iter()
                .chain([
                    ("site-gas", site.gas.to_string()),
                    ("computing-time", site.computing_time_ms.to_string()),
                    ("computing-time-function", function.yang().into()),
                    ("health", site.health.yang().into()),
                    ("sci-count", site.sci_count.to_string()),
                    ("healthy-sci-count", healthy.to_string()),
                ])
                .collect(),
        ));
    }
    let s = &core.stats;
    let mut stats = vec![("reports-received", s.received.to_string()), ("reports-accepted", s.accepted.to_string())];
    if let Some(d) = s.discontinuity {
        stats.insert(0, ("discontinuity-time", time(d)));
    }
    let rejections = Rejection::ALL
        .iter()
        .map(|r| (r.identity(), s.rejected[r.index()], s.last_rejection[r.index()].map(time)))
        .filter(|(_, n, _)| *n > 0)
        .collect();
    let quarantine = core
        .quarantine
        .iter()
        .map(|q| {
            (
                q.id,
                vec![
                    ("csci-id", q.report.csci_id.clone()),
                    ("cs-id", q.report.cs_id.clone()),
                    ("sequence-number", q.report.sequence.to_string()),
                    ("reason", "cats-sma-types:anomaly".into()),
                    ("received-at", time(q.received_at)),
                    ("detail", format!("{:?}", q.anomaly)),
                ],
            )
        })
        .collect();
    Snapshot { entries, services, stats, rejections, quarantine }
}

fn set(tree: &mut DataTree<'static>, path: &str, value: &str) -> Result<(), RpcError> {
    set_opt(tree, path, Some(value))
}

impl StateProvider for EngineState {
    fn render(&self, tree: &mut DataTree<'static>, xpath: Option<&str>) -> Result<(), RpcError> {
        if xpath.is_some_and(|x| !x.contains("cats-sma") && !x.starts_with("/*") && x != "/") {
            return Ok(());
        }
        let Some(snap) = self.engine.query_blocking(snapshot) else { return Ok(()) };
        for (id, leaves) in snap.entries {
            let base = format!("{ROOT}/metric-cache/entry[csci-id={}]", quote(&id));
            set_opt(tree, &base, None)?;
            for (name, v) in leaves {
                set(tree, &format!("{base}/{name}"), &v)?;
            }
        }
        for (cs, leaves) in snap.services {
            let base = format!("{ROOT}/services/service[cs-id={}]", quote(&cs));
            for (name, v) in leaves {
                set(tree, &format!("{base}/{name}"), &v)?;
            }
        }
        for (name, v) in snap.stats {
            set(tree, &format!("{ROOT}/statistics/{name}"), &v)?;
        }
        for (reason, count, last) in snap.rejections {
            let base = format!("{ROOT}/statistics/rejection[reason='cats-sma-types:{reason}']");
            set(tree, &format!("{base}/count"), &count.to_string())?;
            if let Some(t) = last {
                set(tree, &format!("{base}/last-occurrence"), &t)?;
            }
        }
        for (id, leaves) in snap.quarantine {
            let base = format!("{ROOT}/quarantine[id='{id}']");
            for (name, v) in leaves {
                set(tree, &format!("{base}/{name}"), &v)?;
            }
        }
        Ok(())
    }
}
