//! Configuration in: a commit that adds an SCI, changes a threshold or the cache takes
//! effect in the engine at once. SCI registry changes are applied per entry from the
//! commit's typed changes (no rescan of 100 000 entries); the small containers
//! (validation, cache, aggregation) are re-read whole when anything in them changed.

use std::time::Duration;

use yang2::data::{Data, DataTree};

use super::{leaf, leaf_u64, ROOT};
use crate::datastore::{ChangeOp, ConfigConsumer, Transaction};
use crate::engine::aggregate::ComputingTimeFunction;
use crate::engine::core::{CacheConfig, SciConfig};
use crate::engine::policy::{
    BoundsConfig, MaintenanceWindow, Metric, Policy, PolicyConfig, RuleConfig, Schedule, Suppress, TimeOfDay, Weekdays,
};
use crate::engine::validate::{AnomalyAction, ValidationConfig};
use crate::engine::Engine;

const SCI: &str = "/cats-sma:cats-sma/scis/sci";
/// The schema path prefix of an SCI entry's children.
const SCI_CHILD: &str = "/cats-sma:cats-sma/scis/sci/";
const POLICY: &str = "/cats-sma:cats-sma/cats-sma-policy:policy";

/// Feeds commits to the engine.
pub struct EngineConfig {
    pub engine: Engine,
    /// The HTTP collector's settings; None when the command line fixed the address.
    pub http: tokio::sync::watch::Sender<crate::engine::collect::http::HttpSettings>,
    pub http_override: Option<std::net::SocketAddr>,
    /// `--sci-plain-http` / `sci_plain_http`: plain HTTP whatever collection/http/tls says.
    pub http_plain: bool,
    /// The gRPC collector's settings.
    pub grpc: tokio::sync::watch::Sender<crate::engine::collect::grpc::GrpcSettings>,
    /// The pull targets.
    pub pull: tokio::sync::watch::Sender<crate::engine::collect::pull::PullSettings>,
    /// The MQTT collector's settings.
    pub mqtt: tokio::sync::watch::Sender<crate::engine::collect::mqtt::MqttSettings>,
    /// The policy compiled in prepare, installed in apply.
    pub pending_policy: std::sync::Mutex<Option<Policy>>,
    /// Replay (`crate::record::replay`): a recorded configuration was the agent's running
    /// one, so nothing is refused again, and no collector starts, so their files (TLS
    /// certificates and keys, perhaps on another host) are not read. A policy that does not
    /// compile is run without, as at start.
    pub replay: bool,
}

/// The policy configuration (rules in list order, transforms, maintenance windows).
pub fn policy_config(t: &DataTree<'static>) -> Result<PolicyConfig, String> {
    let mut cfg = PolicyConfig::default();
    if let Ok(rules) = t.find_xpath(&format!("{POLICY}/rule")) {
        for r in rules {
            let mut rule = RuleConfig::new("", 0, "", "");
            for c in r.children() {
                let v = c.value_canonical().unwrap_or_default();
                match c.schema().name() {
                    "name" => rule.name = v,
                    "priority" => rule.priority = v.parse().unwrap_or(0),
                    "condition" => rule.condition = v,
                    "action" => rule.action = v,
                    "enabled" => rule.enabled = v != "false",
                    _ => {}
                }
            }
            cfg.rules.push(rule);
        }
    }
    let tr = format!("{POLICY}/transforms");
    if let Some(f) = leaf(t, &format!("{tr}/gas-safety-factor")).and_then(|v| v.parse().ok()) {
        cfg.transforms.gas_safety_factor = f;
    }
    cfg.transforms.ema.enabled = leaf(t, &format!("{tr}/ema/enabled")).as_deref() == Some("true");
    if let Some(a) = leaf(t, &format!("{tr}/ema/alpha")).and_then(|v| v.parse().ok()) {
        cfg.transforms.ema.alpha = a;
    }
    if let Ok(bounds) = t.find_xpath(&format!("{tr}/bounds")) {
        for b in bounds {
            let mut metric = None;
            let (mut min, mut max) = (None, None);
            for c in b.children() {
                let v = c.value_canonical().unwrap_or_default();
                match c.schema().name() {
                    "metric" => metric = Metric::from_yang(&v),
                    "min" => min = v.parse().ok(),
                    "max" => max = v.parse().ok(),
                    _ => {}
                }
            }
            let metric = metric.ok_or("bounds: unknown metric")?;
            cfg.transforms.bounds.push(BoundsConfig { metric, min, max });
        }
    }
    if let Ok(windows) = t.find_xpath(&format!("{POLICY}/update-control/maintenance-window")) {
        for w in windows {
            let mut f = std::collections::HashMap::new();
            for c in w.children() {
                f.insert(c.schema().name().to_owned(), c.value_canonical().unwrap_or_default());
            }
            let name = f.get("name").cloned().unwrap_or_default();
            let schedule = if let (Some(s), Some(e)) = (f.get("start"), f.get("end")) {
                let p =
                    |x: &str| x.parse::<chrono::DateTime<chrono::FixedOffset>>().map(|d| d.with_timezone(&chrono::Utc));
                Schedule::Absolute {
                    start: p(s).map_err(|e| format!("maintenance-window {name}: start: {e}"))?,
                    end: p(e).map_err(|e| format!("maintenance-window {name}: end: {e}"))?,
                }
            } else {
                let days =
                    f.get("days").and_then(|d| Weekdays::parse(d)).ok_or(format!("maintenance-window {name}: days"))?;
                let start = f
                    .get("start-time")
                    .and_then(|s| TimeOfDay::parse(s))
                    .ok_or(format!("maintenance-window {name}: start-time"))?;
                let duration_minutes = f
                    .get("duration")
                    .and_then(|d| d.parse().ok())
                    .ok_or(format!("maintenance-window {name}: duration"))?;
                Schedule::Recurring { days, start, duration_minutes }
            };
            let suppress = if f.get("suppress").map(String::as_str) == Some("all") {
                Suppress::All
            } else {
                Suppress::NonCritical
            };
            cfg.maintenance_windows.push(MaintenanceWindow { name, schedule, suppress });
        }
    }
    Ok(cfg)
}

/// The update-control settings (YANG policy/update-control) for the update controller.
pub fn update_config(t: &DataTree<'static>) -> crate::engine::update::UpdateConfig {
    use crate::engine::update::{AdaptiveHeartbeat, LoadShedding, TokenBucketConfig, UpdateConfig};
    let d = UpdateConfig::default();
    let uc = format!("{POLICY}/update-control");
    let v = |p: &str| leaf_u64(t, &format!("{uc}/{p}"));
    let rate_milli = leaf(t, &format!("{uc}/token-bucket/rate")).and_then(|r| {
        let (i, f) = r.split_once('.').unwrap_or((&r, "0"));
        let frac: String = f.chars().chain("000".chars()).take(3).collect();
        Some(i.parse::<u32>().ok()? * 1000 + frac.parse::<u32>().ok()?)
    });
    let token_bucket = match (rate_milli, v("token-bucket/burst")) {
        (Some(rate_milli), Some(burst)) => Some(TokenBucketConfig { rate_milli, burst: burst as u32 }),
        _ => d.token_bucket,
    };
    let adaptive_heartbeat = t.find_path(&format!("{uc}/adaptive-heartbeat")).is_ok().then(|| {
        let a = AdaptiveHeartbeat::DEFAULT;
        AdaptiveHeartbeat {
            min: v("adaptive-heartbeat/min-interval").map(Duration::from_secs).unwrap_or(a.min),
            max: v("adaptive-heartbeat/max-interval").map(Duration::from_secs).unwrap_or(a.max),
        }
    });
    let load_shedding = v("load-shedding/report-rate-threshold").map(|threshold| LoadShedding {
        threshold: u32::try_from(threshold).unwrap_or(u32::MAX),
        clear_percent: v("load-shedding/clear-percent").map_or(80, |c| u8::try_from(c).unwrap_or(100)),
    });
    UpdateConfig {
        adaptive_heartbeat,
        load_shedding,
        gas_delta_percent: v("gas-delta-percent").map(|x| x as u16).unwrap_or(d.gas_delta_percent),
        gas_delta_absolute: v("gas-delta-absolute").map(|x| x as u32).unwrap_or(d.gas_delta_absolute),
        computing_time_delta_percent: v("computing-time-delta-percent")
            .map(|x| x as u16)
            .unwrap_or(d.computing_time_delta_percent),
        heartbeat_interval: v("heartbeat-interval").map(Duration::from_secs).unwrap_or(d.heartbeat_interval),
        min_interval: v("min-interval").map(Duration::from_secs).unwrap_or(d.min_interval),
        token_bucket,
        ..d
    }
}

/// The compiled policy of a configuration tree; the error names the rule, the field and
/// the column (seed 004: rules are checked when configured).
pub fn compile_policy(t: &DataTree<'static>) -> Result<Policy, String> {
    Policy::compile(&policy_config(t)?).map_err(|e| e.to_string())
}

/// The validation settings in a configuration tree.
pub fn validation(t: &DataTree<'static>) -> ValidationConfig {
    let d = ValidationConfig::default();
    let v = |p: &str| leaf_u64(t, &format!("{ROOT}/validation/{p}"));
    let ms = |p: &str, def: Duration| v(p).map(Duration::from_millis).unwrap_or(def);
    ValidationConfig {
        gas_max: v("ranges/gas-max").map(|x| x as u32).unwrap_or(d.gas_max),
        computing_time_max: v("ranges/computing-time-max").map(|x| x as u32).unwrap_or(d.computing_time_max),
        cost_max: v("ranges/cost-max").map(|x| x as u32).unwrap_or(d.cost_max),
        reputation_max: v("ranges/reputation-max").map(|x| x as u8).unwrap_or(d.reputation_max),
        security_label_max: v("ranges/security-label-max").map(|x| x as u8).unwrap_or(d.security_label_max),
        gas_change_percent: v("anomaly/gas-change-percent").map(|x| x as u32).unwrap_or(d.gas_change_percent),
        gas_change_window: ms("anomaly/gas-change-window", d.gas_change_window),
        computing_time_change_percent: v("anomaly/computing-time-change-percent")
            .map(|x| x as u32)
            .unwrap_or(d.computing_time_change_percent),
        computing_time_change_window: ms("anomaly/computing-time-change-window", d.computing_time_change_window),
        health_flap_transitions: v("anomaly/health-flap-transitions")
            .map(|x| x as u32)
            .unwrap_or(d.health_flap_transitions),
        health_flap_window: ms("anomaly/health-flap-window", d.health_flap_window),
        action: match leaf(t, &format!("{ROOT}/validation/anomaly/action")).as_deref() {
            Some("reject") => AnomalyAction::Reject,
            Some("accept-with-warning") => AnomalyAction::AcceptWithWarning,
            Some("quarantine") => AnomalyAction::Quarantine,
            _ => d.action,
        },
        timestamp_window: v("timestamp-window").map(Duration::from_secs).unwrap_or(d.timestamp_window),
    }
}

/// The cache settings in a configuration tree.
pub fn cache(t: &DataTree<'static>) -> CacheConfig {
    let d = CacheConfig::default();
    let v = |p: &str| leaf_u64(t, &format!("{ROOT}/cache/{p}"));
    CacheConfig {
        max_entries: v("max-entries").map(|x| x as usize).unwrap_or(d.max_entries),
        ttl_multiplier: v("ttl-multiplier").map(|x| x as u32).unwrap_or(d.ttl_multiplier),
        ttl: v("ttl").map(Duration::from_millis),
        grace_period: v("grace-period").map(Duration::from_millis).unwrap_or(d.grace_period),
    }
}

pub fn function(t: &DataTree<'static>) -> ComputingTimeFunction {
    leaf(t, &format!("{ROOT}/aggregation/computing-time-function"))
        .and_then(|f| ComputingTimeFunction::parse(&f))
        .unwrap_or_default()
}

/// One registry entry, read at its data path.
pub fn sci(t: &DataTree<'static>, entry_path: &str) -> Option<SciConfig> {
    t.find_path(entry_path).ok().map(|n| sci_of(&n))
}

/// One registry entry, read from its list entry node.
fn sci_of(node: &yang2::data::DataNodeRef<'_, 'static>) -> SciConfig {
    let mut s = sci_defaults();
    for c in node.children() {
        sci_field(&mut s, c.schema().name(), c.value_canonical());
    }
    s
}

/// An entry before its children are read: what the schema's defaults give (the tests check
/// them against the YANG module).
fn sci_defaults() -> SciConfig {
    SciConfig {
        cs_ids: Vec::new(),
        credential_ref: None,
        unauthenticated: false,
        expected_interval: Duration::from_millis(5000),
    }
}

/// One child of an SCI entry into its registry entry.
fn sci_field(s: &mut SciConfig, name: &str, v: Option<String>) {
    match name {
        "cs-id" => s.cs_ids.extend(v),
        "credential-ref" => s.credential_ref = v,
        "authentication" => s.unauthenticated = v.as_deref() == Some("none"),
        "expected-interval" => {
            if let Some(ms) = v.and_then(|x| x.parse().ok()) {
                s.expected_interval = Duration::from_millis(ms);
            }
        }
        _ => {}
    }
}

/// Above this many changed SCI entries in one commit, their configuration is read in one
/// walk over the `scis` list instead of one path lookup per entry.
const WALK_ABOVE: usize = 256;

/// Up to this many SCI entries changed in one commit, each deregistration is logged; above,
/// one line counts them (a bulk delete of 100 000 SCIs is not 100 000 log lines).
const LOG_EACH_UP_TO: usize = 64;

/// The new configuration of every SCI entry a commit touched (None: removed), in CSCI-ID
/// order. A few entries are looked up by path; a bulk change (100 000 entries created in
/// one edit) reads the list once, so the cost follows the list, not entries × lookup.
fn sci_updates(tx: &Transaction<'_>) -> Vec<(String, Option<SciConfig>)> {
    /// What the changes say about one entry.
    enum Seen<'c> {
        /// Created whole in this commit (its own changes only, all creates): its registry
        /// entry is built from them, the schema's defaults filling the rest.
        Created(SciConfig),
        /// Deleted whole (its own changes only, all deletes).
        Deleted,
        /// Anything else (a leaf changed, touched twice): read from the tree at this path.
        Read(&'c str),
    }
    // Each entry once, borrowed from the change paths (a 100 000-entry commit has three
    // changes per entry: nothing is allocated per change but the values kept). The changes
    // of an entry created or deleted whole are its root's followed by its children's.
    // Sized once for a bulk change (an entry has about three changes), not rehashed as it
    // grows.
    let mut index: std::collections::HashMap<&str, usize> =
        std::collections::HashMap::with_capacity(tx.changes_under(SCI).count() / 3);
    let mut entries: Vec<(&str, Seen<'_>)> = Vec::new();
    let mut changes = tx.changes_under(SCI).peekable();
    while let Some(c) = changes.next() {
        let Some((entry, key)) = sci_entry_ref(&c.path) else { continue };
        let whole = c.path.len() == entry.len() && matches!(c.op, ChangeOp::Create | ChangeOp::Delete);
        let mut built = (whole && c.op == ChangeOp::Create).then(sci_defaults);
        let mut plain = whole;
        while let Some(n) = changes.peek() {
            if !n.path.starts_with(entry) || n.path.as_bytes().get(entry.len()) != Some(&b'/') {
                break;
            }
            let n = changes.next().expect("peeked");
            plain &= n.op == c.op;
            if let (Some(b), Some(name)) = (built.as_mut(), n.schema_path.strip_prefix(SCI_CHILD)) {
                if n.op == ChangeOp::Create && !n.is_key && !name.contains('/') {
                    sci_field(b, name, n.value.clone());
                }
            }
        }
        let seen = match (plain, built) {
            // In the tree's order: a later edit of the transaction may have added values.
            (true, Some(mut b)) => {
                b.cs_ids.sort_unstable();
                Seen::Created(b)
            }
            (true, None) => Seen::Deleted,
            (false, _) => Seen::Read(entry),
        };
        match index.entry(key) {
            std::collections::hash_map::Entry::Occupied(i) => entries[*i.get()].1 = Seen::Read(entry),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(entries.len());
                entries.push((key, seen));
            }
        }
    }
    let reads = entries.iter().filter(|(_, s)| matches!(s, Seen::Read(_))).count();
    // The entries that must be read: a few by path, many in one walk over the list.
    let mut walked: std::collections::HashMap<String, SciConfig> = std::collections::HashMap::new();
    if reads > WALK_ABOVE {
        if let Ok(scis) = tx.config.find_path(&format!("{ROOT}/scis")) {
            for n in scis.children().filter(|n| n.schema().name() == "sci") {
                let Some(key) = n.list_keys().next().and_then(|k| k.value_canonical()) else { continue };
                if matches!(index.get(key.as_str()).map(|&i| &entries[i].1), Some(Seen::Read(_))) {
                    let s = sci_of(&n);
                    walked.insert(key, s);
                }
            }
        }
    }
    let mut out: Vec<(String, Option<SciConfig>)> = entries
        .into_iter()
        .map(|(key, seen)| {
            let s = match seen {
                Seen::Created(s) => Some(s),
                Seen::Deleted => None,
                Seen::Read(_) if reads > WALK_ABOVE => walked.remove(key),
                Seen::Read(entry) => sci(tx.config, entry),
            };
            (key.to_owned(), s)
        })
        .collect();
    // Sorted last: `index` holds positions in `entries` as first seen.
    out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `/cats-sma:cats-sma/scis/sci[csci-id='x']/cs-id[.='y']` → the entry path and its key.
fn sci_entry(path: &str) -> Option<(String, String)> {
    sci_entry_ref(path).map(|(e, k)| (e.to_owned(), k.to_owned()))
}

/// [`sci_entry`] as slices of `path`.
fn sci_entry_ref(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix(SCI)?;
    let pred = rest.strip_prefix("[csci-id=")?;
    let quote = pred.chars().next()?;
    let end = pred[1..].find(quote)? + 1;
    let key = &pred[1..end];
    let entry = path.get(..SCI.len() + "[csci-id=".len() + end + 2)?;
    Some((entry, key))
}

/// An SCI configured `authentication none` is taken at its word: said at every start and
/// every commit that touches it (seed 004 requires SCIs to authenticate; this is for labs).
fn warn_unauthenticated(csci_id: &str, s: &SciConfig) {
    if s.unauthenticated {
        tracing::warn!(
            csci_id = %crate::text::printable(csci_id, 256),
            "SCI is configured 'authentication none': its reports are accepted without proof of origin \
             (lab use only; give it a credential-ref or a client certificate)"
        );
    }
}

/// Loads the whole engine configuration (start-up).
pub fn load_all(engine: &Engine, t: &DataTree<'static>) {
    let validation = validation(t);
    let smoothing = crate::engine::smooth::settings(t);
    let cache = cache(t);
    let function = function(t);
    let mut scis = Vec::new();
    if let Ok(set) = t.find_xpath(SCI) {
        for n in set {
            let path = n.path();
            if let (Some((entry, key)), Some(s)) = (sci_entry(&path), sci(t, &path)) {
                let _ = entry;
                warn_unauthenticated(&key, &s);
                scis.push((key, s));
            }
        }
    }
    let policy = compile_policy(t);
    let (pulled, probes) = (pull_targets(t), crate::engine::probe::settings(t));
    crate::engine::rate_limit::apply(engine, crate::engine::rate_limit::settings(t));
    let auth = crate::engine::auth::table(t);
    *engine.auth.write().unwrap_or_else(|e| e.into_inner()) = auth;
    let discovery = crate::engine::discovery::settings(t).unwrap_or_else(|e| {
        tracing::error!("scis/discovery in running is not usable, discovery stays off: {e}");
        Default::default()
    });
    if let Err(e) = engine.updates.reconfigure(update_config(t)) {
        tracing::error!("update-control in running is not usable, keeping the defaults: {e}");
    }
    engine.submit(move |core| {
        match policy {
            Ok(p) => core.set_policy(p),
            Err(e) => tracing::error!("the policy in running does not compile, running without it: {e}"),
        }
        core.validation = validation;
        core.set_smoothing(smoothing);
        core.set_cache_config(cache);
        core.set_function(function);
        core.set_pull_targets(pulled);
        core.failure.configure(probes);
        for (k, s) in scis {
            core.set_sci(&k, s);
        }
        crate::engine::discovery::set_config(core, discovery);
    });
}

/// The CSCI-IDs with a pull target (the engine asks only for those to be pulled).
fn pull_targets(t: &DataTree<'static>) -> std::collections::HashSet<String> {
    crate::engine::collect::pull::settings(t).into_keys().collect()
}

impl ConfigConsumer for EngineConfig {
    fn name(&self) -> &str {
        "metric engine"
    }

    fn prepare(&self, tx: &Transaction<'_>) -> Result<(), String> {
        if self.replay {
            if tx.changes_under(POLICY).next().is_some() {
                let p = compile_policy(tx.config)
                    .inspect_err(|e| tracing::error!("the recorded policy does not compile, replaying without it: {e}"))
                    .ok();
                *self.pending_policy.lock().unwrap_or_else(|e| e.into_inner()) = p;
            }
            return Ok(());
        }
        // Settings the schema allows but the engine cannot use are refused here.
        if tx.changes_under(POLICY).next().is_some() {
            let p = compile_policy(tx.config)?;
            *self.pending_policy.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
        }
        if tx.changes_under(&format!("{POLICY}/update-control")).next().is_some() {
            update_config(tx.config).validate().map_err(|e| e.to_string())?;
        }
        if tx.changes_under(&format!("{ROOT}/collection/authentication")).next().is_some() {
            crate::engine::auth::check(tx.config)?;
        }
        if tx.changes_under(&format!("{ROOT}/collection/http")).next().is_some() && !self.http_plain {
            // TLS files that cannot be used are refused now rather than closing the listener.
            let h = crate::engine::collect::http::settings(tx.config);
            if let Some(e) = h.tls_error {
                return Err(e);
            }
            if let Some(t) = h.tls.filter(|_| h.enabled) {
                crate::tls::server::check_files(&t).map_err(|e| format!("collection/http/tls: {e}"))?;
            }
        }
        if tx.changes_under(&format!("{ROOT}/collection/grpc")).next().is_some() {
            crate::engine::collect::grpc::check(tx.config)?;
        }
        if tx.changes_under(&format!("{ROOT}/scis/discovery")).next().is_some() {
            crate::engine::discovery::settings(tx.config)?;
        }
        if tx.changes_under(&format!("{ROOT}/cache")).next().is_some() {
            let c = cache(tx.config);
            if c.max_entries == 0 {
                return Err("cache/max-entries must be at least 1".into());
            }
        }
        // Plaintext only by explicit choice; TLS files readable and usable.
        if tx.changes_under(&format!("{ROOT}/collection/pull")).next().is_some() {
            crate::engine::collect::pull::check(tx.config)?;
        }
        if tx.changes_under(&format!("{ROOT}/collection/mqtt")).next().is_some() {
            crate::engine::collect::mqtt::check(tx.config)?;
        }
        if tx.changes_under(&format!("{ROOT}/failure-detection")).next().is_some() {
            crate::engine::probe::check(tx.config)?;
        }
        Ok(())
    }

    fn abort(&self, _tx: &Transaction<'_>) {
        self.pending_policy.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn apply(&self, tx: &Transaction<'_>) {
        let touched = |p: &str| tx.changes_under(&format!("{ROOT}/{p}")).next().is_some();
        // A recording takes the new configuration before anything it changes.
        if self.engine.recording() {
            let xml = crate::record::config_xml(tx.config);
            self.engine.submit(move |core| core.record(|| crate::record::Event::Config { xml }));
        }
        if let Some(p) = self.pending_policy.lock().unwrap_or_else(|e| e.into_inner()).take() {
            self.engine.submit(move |core| core.set_policy(p));
        }
        if tx.changes_under(&format!("{POLICY}/update-control")).next().is_some() {
            // Checked in prepare, so the controller accepts it.
            let _ = self.engine.updates.reconfigure(update_config(tx.config));
        }
        if touched("validation") {
            let v = validation(tx.config);
            let s = crate::engine::smooth::settings(tx.config);
            self.engine.submit(move |core| {
                core.validation = v;
                core.set_smoothing(s);
            });
        }
        if touched("cache") {
            let c = cache(tx.config);
            self.engine.submit(move |core| core.set_cache_config(c));
        }
        if touched("collection/http") {
            let mut h = crate::engine::collect::http::settings(tx.config);
            if let Some(a) = self.http_override {
                h.listen = a;
                h.enabled = true;
            }
            if self.http_plain {
                h.force_plain();
            }
            self.http.send_if_modified(|cur| std::mem::replace(cur, h.clone()) != h);
        }
        if touched("collection/grpc") {
            let g = crate::engine::collect::grpc::settings(tx.config);
            self.grpc.send_if_modified(|cur| std::mem::replace(cur, g.clone()) != g);
        }
        if touched("failure-detection") {
            let p = crate::engine::probe::settings(tx.config);
            self.engine.submit(move |core| core.failure.configure(p));
        }
        if touched("collection/pull") {
            let targets = pull_targets(tx.config);
            self.engine.submit(move |core| core.set_pull_targets(targets));
        }
        if touched("collection/mqtt") {
            let m = crate::engine::collect::mqtt::settings(tx.config);
            self.mqtt.send_if_modified(|cur| std::mem::replace(cur, m.clone()) != m);
        }
        if touched("collection/rate-limit") {
            crate::engine::rate_limit::apply(&self.engine, crate::engine::rate_limit::settings(tx.config));
        }
        if touched("aggregation") {
            let f = function(tx.config);
            self.engine.submit(move |core| core.set_function(f));
        }
        let updates = sci_updates(tx);
        // Before the registry changes reach the engine, so a new credential-ref is never
        // enforced without its key being known to the transports.
        if touched("collection/authentication") || touched("scis/discovery") {
            let table = crate::engine::auth::table(tx.config);
            *self.engine.auth.write().unwrap_or_else(|e| e.into_inner()) = table;
        } else if !updates.is_empty() {
            // Only SCI entries changed: their credential-refs, not a table rebuilt from
            // every SCI (100 000 of them for one SCI created).
            let mut auth = self.engine.auth.write().unwrap_or_else(|e| e.into_inner());
            for (key, s) in &updates {
                match s.as_ref().and_then(|s| s.credential_ref.clone()) {
                    Some(c) => auth.scis.insert(key.clone(), c),
                    None => auth.scis.remove(key),
                };
            }
        }
        if touched("scis/discovery") {
            // Checked in prepare.
            if let Ok(d) = crate::engine::discovery::settings(tx.config) {
                self.engine.submit(move |core| crate::engine::discovery::set_config(core, d));
            }
        }
        // The pull and sse targets start after the registry changes are queued: an event
        // stream opens at once, and its first reports must find their SCI registered.
        let pull = touched("collection/pull").then(|| crate::engine::collect::pull::settings(tx.config));
        let send_pull = |p: Option<crate::engine::collect::pull::PullSettings>| {
            if let Some(p) = p {
                self.pull.send_if_modified(|cur| std::mem::replace(cur, p.clone()) != p);
            }
        };
        if updates.is_empty() {
            send_pull(pull);
            return;
        }
        for (key, s) in &updates {
            if let Some(s) = s {
                warn_unauthenticated(key, s);
            }
        }
        // One engine job for the whole commit, not one per SCI.
        self.engine.submit(move |core| {
            let quiet = updates.len() > LOG_EACH_UP_TO;
            let mut withdrawn = 0usize;
            for (key, s) in updates {
                match s {
                    Some(s) => {
                        // A configured SCI replaces a discovered one of its CSCI-ID.
                        crate::engine::discovery::configured(core, &key);
                        core.set_sci(&key, s)
                    }
                    None if quiet => withdrawn += usize::from(core.remove_sci_quietly(&key)),
                    None => core.remove_sci(&key),
                }
            }
            if withdrawn > 0 {
                tracing::info!(count = withdrawn, "SCIs deregistered: their metrics are withdrawn");
            }
        });
        send_pull(pull);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Updates = Vec<(String, Option<SciConfig>)>;

    /// Records what `sci_updates` gives and what reading every entry from the tree gives.
    #[derive(Default)]
    struct Probe(std::sync::Mutex<Vec<(Updates, Updates)>>);

    impl ConfigConsumer for Probe {
        fn name(&self) -> &str {
            "probe"
        }
        fn prepare(&self, _tx: &Transaction<'_>) -> Result<(), String> {
            Ok(())
        }
        fn apply(&self, tx: &Transaction<'_>) {
            let got = sci_updates(tx);
            let want = got
                .iter()
                .map(|(k, _)| {
                    let path = format!("{SCI}[csci-id={}]", crate::datastore::tree::quote(k));
                    (k.clone(), sci(tx.config, &path))
                })
                .collect();
            self.0.lock().unwrap().push((got, want));
        }
    }

    #[test]
    fn issue14_sci_changes_give_what_the_tree_holds() {
        let ds = crate::datastore::Datastores::open(crate::yang::context(), None).unwrap();
        let probe = std::sync::Arc::new(Probe::default());
        ds.register_consumer(probe.clone());
        let edit = |body: String| {
            let xml = format!(
                "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\" xmlns:nc=\"urn:ietf:params:xml:ns:netconf:base:1.0\">{body}</cats-sma>"
            );
            let tree = ds.parse_edit(xml.as_bytes(), yang2::data::DataFormat::XML).unwrap();
            ds.edit_owned(1, crate::datastore::Datastore::Running, tree, Default::default()).unwrap();
        };
        let cred = "<collection><authentication><credential><name>k</name><type>hmac-sha256</type><key>MDEyMzQ1Njc4OWFiY2RlZg==</key></credential></authentication></collection>";
        let sci = |i: usize| {
            match i % 4 {
            0 => format!("<sci><csci-id>s{i}</csci-id><cs-id>A</cs-id></sci>"),
            1 => format!("<sci><csci-id>it's{i}</csci-id><cs-id>A</cs-id><cs-id>B</cs-id><expected-interval>700</expected-interval></sci>"),
            2 => format!("<sci><csci-id>s{i}</csci-id><cs-id>B</cs-id><credential-ref>k</credential-ref></sci>"),
            _ => format!("<sci><csci-id>s{i}</csci-id><cs-id>C</cs-id><authentication>none</authentication></sci>"),
        }
        };
        // Few and many (the walk) entries, created, changed, replaced, deleted.
        for n in [5, WALK_ABOVE + 50] {
            let all: String = (0..n).map(sci).collect();
            edit(format!("{cred}<scis>{all}</scis>"));
            let changed: String = (0..n)
                .step_by(3)
                .map(|i| {
                    format!(
                        "<sci><csci-id>s{i}</csci-id><expected-interval>900</expected-interval><cs-id>Z</cs-id></sci>"
                    )
                })
                .collect();
            edit(format!("<scis>{changed}</scis>"));
            let replaced: String = (0..n)
                .step_by(5)
                .map(|i| format!("<sci nc:operation=\"replace\"><csci-id>s{i}</csci-id><cs-id>R</cs-id></sci>"))
                .collect();
            edit(format!("<scis>{replaced}</scis>"));
            let deleted: String = (0..n)
                .map(|i| {
                    let id = if i % 4 == 1 { format!("it&apos;s{i}") } else { format!("s{i}") };
                    format!("<sci nc:operation=\"remove\"><csci-id>{id}</csci-id></sci>")
                })
                .collect();
            edit(format!("<scis>{deleted}</scis>"));
        }
        // Transactions of several edits: 300 entries changed (read in one walk) and others
        // created whole, first seen out of key order; an entry created by one edit and given
        // another value by the next.
        let many: String = (0..300).map(|i| format!("<sci><csci-id>m{i:03}</csci-id><cs-id>A</cs-id></sci>")).collect();
        edit(format!("<scis>{many}</scis>"));
        let owned = |body: String| {
            let xml = format!("<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\">{body}</cats-sma>");
            ds.parse_edit(xml.as_bytes(), yang2::data::DataFormat::XML).unwrap()
        };
        let changed: String = (0..300)
            .map(|i| format!("<sci><csci-id>m{i:03}</csci-id><expected-interval>900</expected-interval></sci>"))
            .collect();
        let edits = vec![
            owned(format!("<scis>{changed}</scis>")),
            owned("<scis><sci><csci-id>a</csci-id><cs-id>B</cs-id></sci><sci><csci-id>b</csci-id><cs-id>B</cs-id></sci></scis>".into()),
            // The next SCI change after b's creation: absorbed into it, in the tree's order.
            owned("<scis><sci><csci-id>b</csci-id><cs-id>A</cs-id></sci></scis>".into()),
        ];
        ds.edit_all_owned(1, crate::datastore::Datastore::Running, edits, Default::default()).unwrap();
        let seen = probe.0.lock().unwrap();
        assert_eq!(seen.len(), 10);
        let (last, _) = seen.last().unwrap();
        assert_eq!(last.len(), 302);
        assert!(last.iter().all(|(_, s)| s.is_some()));
        let b = last.iter().find(|(k, _)| k == "b").and_then(|(_, s)| s.clone()).unwrap();
        assert_eq!(b.cs_ids, vec!["A".to_string(), "B".to_string()]);
        for (got, want) in seen.iter() {
            assert!(!got.is_empty());
            assert_eq!(got, want);
        }
        // Created entries were built from the changes with the schema's defaults.
        let (first, _) = &seen[0];
        let s0 = first.iter().find(|(k, _)| k == "s0").and_then(|(_, s)| s.clone()).unwrap();
        assert_eq!(s0, SciConfig { cs_ids: vec!["A".into()], ..sci_defaults() });
    }

    fn tree(update_control: &str) -> DataTree<'static> {
        let xml = format!(
            "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><policy xmlns=\"urn:cats-sma:yang:cats-sma-policy\">\
             <update-control>{update_control}</update-control></policy></cats-sma>\0"
        );
        DataTree::parse_string(
            crate::yang::context(),
            xml.as_bytes(),
            yang2::data::DataFormat::XML,
            yang2::data::DataParserFlags::STRICT | yang2::data::DataParserFlags::NO_STATE,
            yang2::data::DataValidationFlags::NO_STATE,
        )
        .unwrap()
    }

    #[test]
    fn seed004_update_control_adaptive_heartbeat_and_load_shedding_are_read() {
        use crate::engine::update::{AdaptiveHeartbeat, LoadShedding};
        let c = update_config(&tree(""));
        assert_eq!((c.adaptive_heartbeat, c.load_shedding), (None, None));
        let c = update_config(&tree(
            "<adaptive-heartbeat/><load-shedding><report-rate-threshold>500</report-rate-threshold></load-shedding>",
        ));
        assert_eq!(c.adaptive_heartbeat, Some(AdaptiveHeartbeat::DEFAULT), "the YANG defaults");
        assert_eq!(c.load_shedding, Some(LoadShedding { threshold: 500, clear_percent: 80 }));
        let c = update_config(&tree(
            "<adaptive-heartbeat><min-interval>2</min-interval><max-interval>90</max-interval></adaptive-heartbeat>\
             <load-shedding><report-rate-threshold>7</report-rate-threshold><clear-percent>100</clear-percent></load-shedding>",
        ));
        assert_eq!(
            c.adaptive_heartbeat,
            Some(AdaptiveHeartbeat { min: Duration::from_secs(2), max: Duration::from_secs(90) })
        );
        assert_eq!(c.load_shedding, Some(LoadShedding { threshold: 7, clear_percent: 100 }));
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn entry_paths_from_change_paths() {
        assert_eq!(
            sci_entry("/cats-sma:cats-sma/scis/sci[csci-id='188.3.67.3:67']/cs-id[.='AR1']"),
            Some(("/cats-sma:cats-sma/scis/sci[csci-id='188.3.67.3:67']".into(), "188.3.67.3:67".into()))
        );
        assert_eq!(
            sci_entry("/cats-sma:cats-sma/scis/sci[csci-id=\"it's\"]"),
            Some(("/cats-sma:cats-sma/scis/sci[csci-id=\"it's\"]".into(), "it's".into()))
        );
        assert_eq!(sci_entry("/cats-sma:cats-sma/scis"), None);
    }
}
