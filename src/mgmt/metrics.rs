//! Prometheus / OpenMetrics exposition: `GET /metrics` on the RESTCONF listener (issue 21).
//!
//! The figures are read when a scrape asks for them, from the counters the agent keeps for
//! its operational state anyway (the engine's statistics, the C-PS sessions, the NETCONF
//! statistics): each part of the agent registers a [`Source`] that copies its figures into
//! an [`Exposition`]. Only what has no operational counterpart is kept here: the RPC
//! counts by operation and error tag, and the ingest and push latency histograms.
//!
//! The text format (names, `_total` suffixes, label escaping, `# EOF`) is the
//! `prometheus-client` crate's: it is the Prometheus project's own Rust client, and its
//! encoder is what scrapers are tested against.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// Every metric's name starts with this.
pub const PREFIX: &str = "cats_sma";
/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Distinct (transport, operation, error-tag) triples counted; more (an operation name is
/// the client's to choose) are counted under operation `other`.
const MAX_RPC_SERIES: usize = 512;
/// The longest operation name counted under its own name.
const MAX_LABEL: usize = 64;

type Labels = Vec<(&'static str, String)>;
/// Counts per operation name.
type OpCounts = HashMap<String, u64>;

/// What the RPC counts and the two histograms are read from, for NACM.
const RPC_READS: &[(&str, &str)] = &[("ietf-netconf-monitoring", "/ietf-netconf-monitoring:netconf-state")];
const INGEST_READS: &[(&str, &str)] =
    &[("cats-sma", "/cats-sma:cats-sma"), ("cats-sma", "/cats-sma:cats-sma/statistics")];
const PUSH_READS: &[(&str, &str)] =
    &[("ietf-subscribed-notifications", "/ietf-subscribed-notifications:subscriptions")];

#[derive(Debug)]
enum Values {
    Counter(Vec<(Labels, u64)>),
    Gauge(Vec<(Labels, i64)>),
}

/// One metric family, as a source fills it in.
#[derive(Debug)]
pub struct Family {
    name: &'static str,
    help: &'static str,
    values: Values,
}

impl Family {
    /// A counter sample (`labels` may be empty).
    pub fn count(&mut self, labels: &[(&'static str, &str)], v: u64) -> &mut Self {
        if let Values::Counter(s) = &mut self.values {
            s.push((own(labels), v));
        }
        self
    }

    /// A gauge sample.
    pub fn set(&mut self, labels: &[(&'static str, &str)], v: i64) -> &mut Self {
        if let Values::Gauge(s) = &mut self.values {
            s.push((own(labels), v));
        }
        self
    }
}

/// Label values escaped as the text format wants (`\\`, `\"`, `\n`): the encoder of
/// `prometheus-client` 0.24 writes them as given, and a CS-ID or a peer name may hold a
/// quote or a backslash.
fn own(labels: &[(&'static str, &str)]) -> Labels {
    labels.iter().map(|(k, v)| (*k, escape(v))).collect()
}

fn escape(v: &str) -> String {
    if !v.contains(['\\', '"', '\n']) {
        return v.to_owned();
    }
    let mut out = String::with_capacity(v.len() + 4);
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// What one scrape shows, filled in by the sources.
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

impl Exposition {
    /// A counter family (`name` without the prefix and without `_total`).
    pub fn counter(&mut self, name: &'static str, help: &'static str) -> &mut Family {
        self.family(name, help, Values::Counter(Vec::new()))
    }

    pub fn gauge(&mut self, name: &'static str, help: &'static str) -> &mut Family {
        self.family(name, help, Values::Gauge(Vec::new()))
    }

    fn family(&mut self, name: &'static str, help: &'static str, values: Values) -> &mut Family {
        // Two sources naming one family add to it (the format allows a name once).
        let i = match self.families.iter().position(|f| f.name == name) {
            Some(i) => i,
            None => {
                self.families.push(Family { name, help, values });
                self.families.len() - 1
            }
        };
        &mut self.families[i]
    }
}

impl Collector for Exposition {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in &self.families {
            match &f.values {
                Values::Counter(samples) => {
                    let mut m = encoder.encode_descriptor(f.name, f.help, None, MetricType::Counter)?;
                    for (labels, v) in samples {
                        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
                    }
                }
                Values::Gauge(samples) => {
                    let mut m = encoder.encode_descriptor(f.name, f.help, None, MetricType::Gauge)?;
                    for (labels, v) in samples {
                        ConstGauge::new(*v).encode(m.encode_family(labels)?)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A part of the agent with figures to show.
pub trait Source: Send + Sync {
    /// The data nodes (module, schema path) its figures come from, ancestors included: a
    /// reader whose NACM rules deny any of them does not see this source's figures.
    fn reads(&self) -> &'static [(&'static str, &'static str)];

    /// Copies the figures into `out`; runs on a blocking thread (it may wait for the
    /// engine task).
    fn collect(&self, out: &mut Exposition);
}

/// The sources and the figures kept here.
#[derive(Default)]
pub struct Metrics {
    sources: RwLock<Vec<Arc<dyn Source>>>,
    /// (transport, error tag) → operation → count; a hit allocates nothing.
    rpcs: Mutex<HashMap<(&'static str, &'static str), OpCounts>>,
    rpc_series: std::sync::atomic::AtomicUsize,
}

/// Reports from hand-over to the engine task until their verdict (seconds).
static INGEST_LATENCY: LazyLock<Histogram> = LazyLock::new(|| Histogram::new(exponential_buckets(1e-5, 2.0, 20)));
/// A change from entering the engine until its push-change-update is queued for the
/// subscriber's session (seconds).
static PUSH_LATENCY: LazyLock<Histogram> = LazyLock::new(|| Histogram::new(exponential_buckets(1e-5, 2.0, 20)));

/// Records how long a job that judged reports took from hand-over to verdict.
pub fn observe_ingest(d: Duration) {
    INGEST_LATENCY.observe(d.as_secs_f64());
}

/// Records a push-change-update's latency.
pub fn observe_push(d: Duration) {
    PUSH_LATENCY.observe(d.as_secs_f64());
}

impl Metrics {
    pub fn register(&self, s: Arc<dyn Source>) {
        self.sources.write().unwrap_or_else(|e| e.into_inner()).push(s);
    }

    /// Counts one management operation: `transport` (`netconf`, `restconf`), the
    /// operation's name and the first error's tag (`ok` when it succeeded).
    pub fn count_rpc(&self, transport: &'static str, operation: &str, error_tag: &'static str) {
        use std::sync::atomic::Ordering;
        let mut m = self.rpcs.lock().unwrap_or_else(|e| e.into_inner());
        let ops = m.entry((transport, error_tag)).or_default();
        if let Some(n) = ops.get_mut(operation) {
            *n += 1;
            return;
        }
        // A name is at most MAX_LABEL bytes of what a YANG identifier may hold; the series
        // are at most MAX_RPC_SERIES: whatever clients send, this holds a few tens of KiB.
        let fits = operation.len() <= MAX_LABEL
            && operation.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
        let op = if fits && self.rpc_series.load(Ordering::Relaxed) < MAX_RPC_SERIES { operation } else { "other" };
        let n = ops.entry(op.to_owned()).or_insert_with(|| {
            self.rpc_series.fetch_add(1, Ordering::Relaxed);
            0
        });
        *n += 1;
    }

    /// The exposition, in the OpenMetrics text format, of what `may_read(module, schema
    /// path)` allows; None when it allows nothing.
    pub fn render(&self, may_read: &dyn Fn(&str, &str) -> bool) -> Option<String> {
        let allowed = |paths: &[(&str, &str)]| paths.iter().all(|(m, p)| may_read(m, p));
        let mut out = Exposition::default();
        let mut any = false;
        let sources = self.sources.read().unwrap_or_else(|e| e.into_inner()).clone();
        for s in sources.iter().filter(|s| allowed(s.reads())) {
            any = true;
            s.collect(&mut out);
        }
        let (rpcs, ingest, push) = (allowed(RPC_READS), allowed(INGEST_READS), allowed(PUSH_READS));
        if rpcs {
            any = true;
            let mut rpcs: Vec<_> = self
                .rpcs
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .flat_map(|(&(t, tag), ops)| ops.iter().map(move |(op, n)| ((t, op.clone(), tag), *n)))
                .collect();
            rpcs.sort();
            let f = out.counter("rpcs", "Management operations by transport, operation and error tag (ok: none)");
            for ((transport, op, tag), n) in &rpcs {
                f.count(&[("transport", transport), ("operation", op), ("error_tag", tag)], *n);
            }
        }
        if !any && !ingest && !push {
            return None;
        }
        let mut registry = Registry::with_prefix(PREFIX);
        registry.register_collector(Box::new(out));
        if ingest {
            registry.register_with_unit(
                "ingest_latency",
                "SCI reports from hand-over to the engine until their verdict",
                Unit::Seconds,
                INGEST_LATENCY.clone(),
            );
        }
        if push {
            registry.register_with_unit(
                "push_latency",
                "A metric change from the engine until its YANG-Push push-change-update is queued",
                Unit::Seconds,
                PUSH_LATENCY.clone(),
            );
        }
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl Source for Fixed {
        fn reads(&self) -> &'static [(&'static str, &'static str)] {
            &[("cats-sma", "/cats-sma:cats-sma")]
        }
        fn collect(&self, out: &mut Exposition) {
            out.counter("reports", "Reports").count(&[("transport", "http"), ("verdict", "accepted")], 3);
            out.gauge("site_gas", "GAS").set(&[("cs_id", "a\"b\\c\nd")], 80);
        }
    }

    #[test]
    fn openmetrics_text_with_escaped_labels_and_eof() {
        let m = Metrics::default();
        m.register(Arc::new(Fixed));
        m.count_rpc("netconf", "get-config", "ok");
        m.count_rpc("netconf", "get-config", "ok");
        let t = m.render(&|_, _| true).unwrap();
        assert!(t.contains("# TYPE cats_sma_reports counter"), "{t}");
        assert!(t.contains("cats_sma_reports_total{transport=\"http\",verdict=\"accepted\"} 3"), "{t}");
        assert!(t.contains("cats_sma_site_gas{cs_id=\"a\\\"b\\\\c\\nd\"} 80"), "{t}");
        assert!(t.contains("cats_sma_rpcs_total{transport=\"netconf\",operation=\"get-config\",error_tag=\"ok\"} 2"));
        assert!(t.contains("# TYPE cats_sma_ingest_latency_seconds histogram"), "{t}");
        assert!(t.ends_with("# EOF\n"), "{t}");
    }

    #[test]
    fn a_reader_sees_only_the_sources_nacm_lets_it_read() {
        let m = Metrics::default();
        m.register(Arc::new(Fixed));
        m.count_rpc("netconf", "get", "ok");
        let t = m.render(&|module, _| module != "cats-sma").unwrap();
        assert!(!t.contains("cats_sma_reports_total") && !t.contains("ingest_latency"), "{t}");
        assert!(t.contains("cats_sma_rpcs_total") && t.contains("push_latency"), "{t}");
        assert!(m.render(&|_, _| false).is_none());
    }

    #[test]
    fn operation_names_chosen_by_clients_cannot_grow_the_series_without_bound() {
        let m = Metrics::default();
        for i in 0..10 * MAX_RPC_SERIES {
            m.count_rpc("netconf", &format!("op{i}"), "operation-not-supported");
        }
        // Long names and names no YANG identifier has are never series of their own.
        let fresh = Metrics::default();
        fresh.count_rpc("netconf", &"x".repeat(MAX_LABEL + 1), "access-denied");
        fresh.count_rpc("netconf", "a\"b", "access-denied");
        fresh.count_rpc("netconf", "cats-sma:resync", "access-denied");
        let series = fresh.rpcs.lock().unwrap();
        let ops = &series[&("netconf", "access-denied")];
        assert_eq!((ops["other"], ops["cats-sma:resync"], ops.len()), (2, 1, 2));
        let series = m.rpcs.lock().unwrap();
        let ops = &series[&("netconf", "operation-not-supported")];
        assert!(ops.len() <= MAX_RPC_SERIES + 1);
        assert_eq!(ops["other"], (9 * MAX_RPC_SERIES) as u64);
    }
}
