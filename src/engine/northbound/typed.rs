//! The engine's state rendered from typed data (DESIGN decision 2): `metric-cache`,
//! `services` and `statistics` written straight from a snapshot of the selected rows into
//! XML or JSON (see `datastore::render`), with the selection and the reader's NACM rules
//! applied per node. A read of one entry copies one entry out of the engine.

use super::state::{snapshot_part, EngineState, EntryRow, ServiceRow, Snapshot, Want};
use crate::datastore::render::{TypedState, Value, Writer};
use crate::datastore::select::Sel;
use crate::error::RpcError;
use crate::nacm::ReadAccess;

const M: &str = "cats-sma";
const NS: &str = "urn:cats-sma:yang:cats-sma";
const MP: &str = "cats-sma-policy";
const NS_POLICY: &str = "urn:cats-sma:yang:cats-sma-policy";
const MT: &str = "cats-sma-types";
const NS_TYPES: &str = "urn:cats-sma:yang:cats-sma-types";

const TOP: (&str, &str) = (M, "cats-sma");
const SUBTREES: &[&[(&str, &str)]] = &[&[TOP, (M, "metric-cache")], &[TOP, (M, "services")], &[TOP, (M, "statistics")]];

/// The leaves of a metric-cache entry after its key, in the order they are written.
const ENTRY_LEAVES: &[&str] = &[
    "cs-id",
    "gas",
    "computing-time",
    "health",
    "cost",
    "reputation",
    "security-label",
    "timestamp",
    "sequence-number",
    "authentication",
    "learned-from",
    "discovered-by",
    "discovery-proof",
    "discovered-at",
    "ttl-remaining",
    "state",
    "flags",
    "last-state-change",
];

/// The leaves of a service after its key: (module, name).
const SERVICE_LEAVES: &[(&str, &str)] = &[
    (M, "site-gas"),
    (M, "computing-time"),
    (M, "computing-time-function"),
    (M, "health"),
    (M, "sci-count"),
    (M, "healthy-sci-count"),
    (M, "cost"),
    (M, "reputation"),
    (M, "security-label"),
    (MP, "reported-gas"),
    (MP, "reported-computing-time"),
    (MP, "reported-cost"),
    (MP, "reported-reputation"),
    (MP, "reported-security-label"),
];

const STAT_LEAVES: &[&str] = &["discontinuity-time", "reports-received", "reports-accepted", "sequence-restarts"];
const REJECTION_LEAVES: &[&str] = &["count", "last-occurrence"];

/// NACM decisions for the nodes this renderer writes, taken once per read.
struct Allowed {
    path: Vec<bool>,
    entry: Vec<bool>,
    service: Vec<bool>,
    stats: Vec<bool>,
    rejection: Vec<bool>,
}

fn allowed(access: &ReadAccess<'_>) -> Allowed {
    let base = "/cats-sma:cats-sma";
    let a = |module: &str, p: &str| access.allows(module, p);
    let module_prefix = |m: &str| if m == M { String::new() } else { format!("{m}:") };
    Allowed {
        path: vec![
            a(M, base),
            a(M, &format!("{base}/metric-cache")),
            a(M, &format!("{base}/metric-cache/entry")),
            a(M, &format!("{base}/metric-cache/entry/csci-id")),
            a(M, &format!("{base}/services")),
            a(M, &format!("{base}/services/service")),
            a(M, &format!("{base}/services/service/cs-id")),
            a(M, &format!("{base}/statistics")),
            a(M, &format!("{base}/statistics/rejection")),
            a(M, &format!("{base}/statistics/rejection/reason")),
        ],
        entry: ENTRY_LEAVES.iter().map(|l| a(M, &format!("{base}/metric-cache/entry/{l}"))).collect(),
        service: SERVICE_LEAVES
            .iter()
            .map(|(m, l)| a(m, &format!("{base}/services/service/{}{l}", module_prefix(m))))
            .collect(),
        stats: STAT_LEAVES.iter().map(|l| a(M, &format!("{base}/statistics/{l}"))).collect(),
        rejection: REJECTION_LEAVES.iter().map(|l| a(M, &format!("{base}/statistics/rejection/{l}"))).collect(),
    }
}

/// Whether leaf `name` (of `module`) is selected below `sel`, and allowed.
fn picked(sel: &Sel<'_>, module: &str, name: &str, allowed: bool) -> bool {
    allowed && (sel.is_all() || sel.child(module, name).is_some())
}

fn entry_values<'a>(e: &'a EntryRow, flags: &'a Option<String>) -> [Option<Value<'a>>; 18] {
    let m = e.reported;
    [
        e.cs_id.as_deref().map(Value::Str),
        m.map(|m| Value::U32(m.gas.into())),
        m.map(|m| Value::U32(m.computing_time_ms.into())),
        m.map(|m| Value::Str(m.health.yang())),
        m.and_then(|m| m.cost).map(|c| Value::U32(c.into())),
        m.and_then(|m| m.reputation).map(|c| Value::U32(c.into())),
        m.and_then(|m| m.security_label).map(|c| Value::U32(c.into())),
        e.timestamp.map(Value::Time),
        e.sequence.map(Value::U64),
        e.authentication.map(Value::Str),
        e.learned_from.as_deref().map(Value::Str),
        e.discovered.as_ref().map(|d| Value::Str(&d.domain)),
        e.discovered.as_ref().map(|d| Value::Str(d.proof)),
        e.discovered.as_ref().map(|d| Value::Time(d.since)),
        Some(Value::U32(u64::try_from(e.ttl_remaining_ms).unwrap_or(u64::MAX))),
        Some(Value::Str(e.state.yang())),
        flags.as_deref().map(Value::Str),
        Some(Value::Time(e.last_state_change)),
    ]
}

fn write_entry(w: &mut Writer, e: &EntryRow, sel: &Sel<'_>, ok: &Allowed) {
    let flags = e.flags.yang_bits();
    let values = entry_values(e, &flags);
    let whole = sel.is_all();
    let mut chosen = [false; 18];
    let mut any = false;
    for i in 0..ENTRY_LEAVES.len() {
        chosen[i] = values[i].is_some() && ok.entry[i] && (whole || sel.child(M, ENTRY_LEAVES[i]).is_some());
        any |= chosen[i];
    }
    // The entry appears when it is selected whole, its key is, or something below it is.
    if !whole && !any && sel.child(M, "csci-id").is_none() {
        return;
    }
    w.begin_entry();
    w.leaf(M, NS, "csci-id", Value::Str(&e.csci_id), true);
    for (i, v) in values.iter().enumerate() {
        if let (true, Some(v)) = (chosen[i], v) {
            w.leaf(M, NS, ENTRY_LEAVES[i], *v, false);
        }
    }
    w.end();
}

fn service_values(s: &ServiceRow) -> [Option<Value<'_>>; 14] {
    let r = s.reported.as_ref();
    [
        Some(Value::U32(s.site_gas.into())),
        Some(Value::U32(s.computing_time.into())),
        Some(Value::Str(s.function)),
        Some(Value::Str(s.health.yang())),
        Some(Value::U32(s.sci_count.into())),
        Some(Value::U32(s.healthy as u64)),
        s.cost.map(|c| Value::U32(c.into())),
        s.reputation.map(|c| Value::U32(c.into())),
        s.security_label.map(|c| Value::U32(c.into())),
        r.map(|r| Value::U32(r.gas.into())),
        r.map(|r| Value::U32(r.computing_time_ms.into())),
        r.and_then(|r| r.cost).map(|c| Value::U32(c.into())),
        r.and_then(|r| r.reputation).map(|c| Value::U32(c.into())),
        r.and_then(|r| r.security_label).map(|c| Value::U32(c.into())),
    ]
}

fn write_service(w: &mut Writer, s: &ServiceRow, sel: &Sel<'_>, ok: &Allowed) {
    let values = service_values(s);
    let chosen: Vec<usize> = (0..SERVICE_LEAVES.len())
        .filter(|&i| values[i].is_some() && picked(sel, SERVICE_LEAVES[i].0, SERVICE_LEAVES[i].1, ok.service[i]))
        .collect();
    if !sel.is_all() && chosen.is_empty() && sel.child(M, "cs-id").is_none() {
        return;
    }
    w.begin_entry();
    w.leaf(M, NS, "cs-id", Value::Str(&s.cs_id), true);
    for i in chosen {
        let (m, name) = SERVICE_LEAVES[i];
        let ns = if m == M { NS } else { NS_POLICY };
        if let Some(v) = values[i] {
            w.leaf(m, ns, name, v, false);
        }
    }
    w.end();
}

fn write_statistics(w: &mut Writer, snap: &Snapshot, sel: &Sel<'_>, ok: &Allowed) {
    w.begin_container(M, NS, "statistics");
    let values = [
        snap.discontinuity.map(Value::Time),
        Some(Value::U64(snap.received)),
        Some(Value::U64(snap.accepted)),
        Some(Value::U64(snap.sequence_restarts)),
    ];
    for (i, v) in values.iter().enumerate() {
        if let Some(v) = v {
            if picked(sel, M, STAT_LEAVES[i], ok.stats[i]) {
                w.leaf(M, NS, STAT_LEAVES[i], *v, false);
            }
        }
    }
    if let Some(es) = sel.entry(M, "rejection", &[]).filter(|_| ok.path[8] && ok.path[9]) {
        w.begin_list(M, NS, "rejection");
        for (reason, count, last) in &snap.rejections {
            let values = [Some(Value::U64(*count)), last.map(Value::Time)];
            let chosen: Vec<usize> = (0..2)
                .filter(|&i| values[i].is_some() && picked(&es, M, REJECTION_LEAVES[i], ok.rejection[i]))
                .collect();
            if !es.is_all() && chosen.is_empty() && es.child(M, "reason").is_none() {
                continue;
            }
            w.begin_entry();
            w.leaf(M, NS, "reason", Value::Ident(MT, NS_TYPES, reason), true);
            for i in chosen {
                if let Some(v) = values[i] {
                    w.leaf(M, NS, REJECTION_LEAVES[i], v, false);
                }
            }
            w.end();
        }
        w.end();
    }
    w.end();
}

impl TypedState for EngineState {
    fn subtrees(&self) -> &'static [&'static [(&'static str, &'static str)]] {
        SUBTREES
    }

    fn render(&self, sel: &Sel<'_>, access: &ReadAccess<'_>, w: &mut Writer) -> Result<(), Option<RpcError>> {
        let Some(top) = sel.child(M, "cats-sma") else { return Ok(()) };
        let ok = allowed(access);
        // A key the reader may not read leaves a keyless entry in the libyang path.
        if (!ok.path[3] && ok.path[2]) || (!ok.path[6] && ok.path[5]) || (!ok.path[9] && ok.path[8]) {
            return Err(None);
        }
        if !ok.path[0] {
            return Ok(());
        }
        // A container the reader may read with nothing readable inside stays in the libyang
        // tree, empty, and libyang prints such a node by its own rules: leave it to libyang.
        let emptied = (ok.path[1] && !ok.path[2])
            || (ok.path[4] && !ok.path[5])
            || (ok.path[7] && !ok.path[8] && !ok.stats.iter().any(|a| *a));
        if emptied {
            return Err(None);
        }
        let cache = top.child(M, "metric-cache").filter(|_| ok.path[1] && ok.path[2]);
        let services = top.child(M, "services").filter(|_| ok.path[4] && ok.path[5]);
        let stats = top.child(M, "statistics").filter(|_| ok.path[7]);
        if stats.as_ref().is_some_and(|s| s.keyed(M, "rejection")) {
            // Identity keys are compared by libyang (prefixes resolved in the filter).
            return Err(None);
        }
        let keys = |s: &Option<Sel<'_>>, list: &str, key: &str| {
            s.as_ref().map(|c| c.wanted_keys(M, list, key).map(|k| k.into_iter().map(str::to_owned).collect()))
        };
        let want = Want {
            entries: keys(&cache, "entry", "csci-id"),
            services: keys(&services, "service", "cs-id"),
            statistics: stats.is_some(),
            quarantine: false,
        };
        let Some(snap) = self.engine.query_blocking(move |core| snapshot_part(core, &want)) else { return Ok(()) };
        w.reserve(snap.entries.len() * 420 + snap.services.len() * 500);
        w.begin_container(M, NS, "cats-sma");
        if let Some(c) = &cache {
            w.begin_container(M, NS, "metric-cache");
            w.begin_list(M, NS, "entry");
            for e in &snap.entries {
                if let Some(es) = c.entry(M, "entry", &[("csci-id", &e.csci_id)]) {
                    write_entry(w, e, &es, &ok);
                }
            }
            w.end();
            w.end();
        }
        if let Some(c) = &services {
            w.begin_container(M, NS, "services");
            w.begin_list(M, NS, "service");
            for s in &snap.services {
                if let Some(es) = c.entry(M, "service", &[("cs-id", &s.cs_id)]) {
                    write_service(w, s, &es, &ok);
                }
            }
            w.end();
            w.end();
        }
        if let Some(s) = &stats {
            write_statistics(w, &snap, s, &ok);
        }
        w.end();
        Ok(())
    }
}
