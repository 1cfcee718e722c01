//! Ingress rate limiting and burst control (seed 004, Security Considerations): token
//! buckets per source address, checked when a message arrives, before its body is read or
//! any proof is verified, and per SCI, checked in the engine once the sender is
//! authenticated and authorised, on the CSCI-ID it was proven (or attributed by its
//! transport) to be, so that claiming a legitimate SCI's CSCI-ID does not drain its
//! bucket. Reports over a limit are refused with the `rate-limited` reason and a time to
//! wait; the per-source table is capped and evicts the least recently used source.

use std::collections::HashMap;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::update::{TokenBucket, TokenBucketConfig};

/// The per-source bucket (YANG `collection/rate-limit/per-source`): messages, whatever they
/// carry, from one IPv4 address or IPv6 /64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceLimit {
    /// Messages per second.
    pub rate: u32,
    pub burst: u32,
    /// Sources tracked at once; the least recently seen is forgotten first.
    pub max_sources: usize,
}

/// The per-SCI bucket (YANG `collection/rate-limit/per-sci`): reports of one SCI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SciLimit {
    /// A fixed rate in thousandths of a report per second; when `None`, `multiplier` times
    /// the SCI's expected rate (one report per `expected-interval`).
    pub rate_milli: Option<u32>,
    pub multiplier: u32,
    pub burst: u32,
}

/// YANG `collection/rate-limit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitConfig {
    pub enabled: bool,
    pub per_source: SourceLimit,
    pub per_sci: SciLimit,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        RateLimitConfig {
            enabled: true,
            per_source: SourceLimit { rate: 1000, burst: 2000, max_sources: 65536 },
            per_sci: SciLimit { rate_milli: None, multiplier: 10, burst: 50 },
        }
    }
}

/// Which bucket refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    PerSource,
    PerSci,
}

impl Limit {
    pub const ALL: [Limit; 2] = [Limit::PerSource, Limit::PerSci];

    pub fn yang(self) -> &'static str {
        match self {
            Limit::PerSource => "per-source",
            Limit::PerSci => "per-sci",
        }
    }
}

/// The collection transports counted (YANG `collection-transport`).
pub const TRANSPORTS: [&str; 5] = ["http", "grpc", "mqtt", "pull", "sse"];

pub fn transport_index(t: &str) -> Option<usize> {
    TRANSPORTS.iter().position(|x| *x == t)
}

/// Refusals per bucket kind and transport, shared by the transports (per source) and the
/// engine task (per SCI); read for the operational state.
#[derive(Debug, Default)]
pub struct Counters {
    refused: [[AtomicU64; TRANSPORTS.len()]; 2],
    /// Unix milliseconds of the last refusal; 0 for never.
    last: [[AtomicI64; TRANSPORTS.len()]; 2],
    /// Sources forgotten because the table was full.
    pub evicted: AtomicU64,
}

impl Counters {
    fn count(&self, limit: Limit, transport: &str) {
        let Some(t) = transport_index(transport) else { return };
        let l = limit as usize;
        self.refused[l][t].fetch_add(1, Ordering::Relaxed);
        self.last[l][t].store(chrono::Utc::now().timestamp_millis().max(1), Ordering::Relaxed);
    }

    /// (count, last refusal) per limit and transport.
    pub fn refused(&self, limit: Limit, transport: &str) -> (u64, Option<chrono::DateTime<chrono::Utc>>) {
        let Some(t) = transport_index(transport) else { return (0, None) };
        let l = limit as usize;
        let at = self.last[l][t].load(Ordering::Relaxed);
        (
            self.refused[l][t].load(Ordering::Relaxed),
            (at > 0).then(|| chrono::DateTime::from_timestamp_millis(at)).flatten(),
        )
    }

    /// Per-source refusals on every transport, with the latest time: they never reach the
    /// engine, so the engine's statistics add them to its own `rate-limited` count.
    pub fn source_refusals(&self) -> (u64, Option<chrono::DateTime<chrono::Utc>>) {
        let mut n = 0;
        let mut last = None;
        for t in TRANSPORTS {
            let (c, at) = self.refused(Limit::PerSource, t);
            n += c;
            last = last.max(at);
        }
        (n, last)
    }
}

/// How long to wait for the bucket's next token, in whole seconds (at least 1: the value of
/// an HTTP `Retry-After`).
fn wait(bucket: &TokenBucket, now: Instant) -> Duration {
    let d = bucket.available_at().saturating_duration_since(now);
    Duration::from_secs(d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(Duration::from_secs(1))
}

struct Sources {
    enabled: bool,
    limit: SourceLimit,
    buckets: lru::LruCache<IpAddr, TokenBucket>,
}

/// The per-source table, shared by the transports (one lock, taken once per message).
pub struct Ingress {
    sources: Mutex<Sources>,
    pub counters: Arc<Counters>,
}

impl Default for Ingress {
    fn default() -> Self {
        let c = RateLimitConfig::default();
        Ingress {
            sources: Mutex::new(Sources {
                enabled: c.enabled,
                limit: c.per_source,
                buckets: lru::LruCache::new(capacity(c.per_source.max_sources)),
            }),
            counters: Arc::default(),
        }
    }
}

fn capacity(n: usize) -> NonZeroUsize {
    NonZeroUsize::new(n).unwrap_or(NonZeroUsize::MIN)
}

fn source_bucket(l: SourceLimit) -> TokenBucketConfig {
    TokenBucketConfig { rate_milli: l.rate.saturating_mul(1000), burst: l.burst }
}

impl Ingress {
    fn lock(&self) -> std::sync::MutexGuard<'_, Sources> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies a new configuration; buckets already tracked keep their level (capped at
    /// the new depth).
    pub fn configure(&self, enabled: bool, limit: SourceLimit) {
        let now = Instant::now();
        let mut s = self.lock();
        s.enabled = enabled;
        if s.limit != limit {
            s.limit = limit;
            s.buckets.resize(capacity(limit.max_sources));
            for (_, b) in s.buckets.iter_mut() {
                b.reconfigure(source_bucket(limit), now);
            }
        }
        if !enabled {
            s.buckets.clear();
        }
    }

    /// Takes a token for one message from `addr` arriving on `transport`; over the limit,
    /// counts the refusal and returns how long the source should wait.
    pub fn admit(&self, addr: IpAddr, transport: &str) -> Result<(), Duration> {
        let key = crate::mgmt::auth_limits::source_key(addr);
        let now = Instant::now();
        let mut s = self.lock();
        if !s.enabled {
            return Ok(());
        }
        let limit = s.limit;
        let verdict = match s.buckets.get_mut(&key) {
            Some(b) => {
                b.refill(now);
                if b.try_take() {
                    Ok(())
                } else {
                    Err(wait(b, now))
                }
            }
            None => {
                let mut b = TokenBucket::new(source_bucket(limit), now);
                b.try_take();
                if s.buckets.push(key, b).is_some() {
                    self.counters.evicted.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            }
        };
        drop(s);
        if verdict.is_err() {
            self.counters.count(Limit::PerSource, transport);
        }
        verdict
    }

    /// Sources tracked now.
    pub fn sources(&self) -> usize {
        self.lock().buckets.len()
    }
}

struct SciBucket {
    bucket: TokenBucket,
    /// Reports refused since the bucket last admitted one (logged when it does again).
    refused: u64,
}

/// The per-SCI buckets, owned by the engine task (no lock on the report path). Only SCIs
/// in the registry get a bucket, so the table is as large as the registry.
pub struct SciLimiter {
    enabled: bool,
    limit: SciLimit,
    buckets: HashMap<String, SciBucket, crate::engine::cache::IdHash>,
    pub counters: Arc<Counters>,
}

impl Default for SciLimiter {
    fn default() -> Self {
        let c = RateLimitConfig::default();
        SciLimiter { enabled: c.enabled, limit: c.per_sci, buckets: HashMap::default(), counters: Arc::default() }
    }
}

impl SciLimiter {
    /// A new configuration starts every bucket afresh (full).
    pub fn configure(&mut self, enabled: bool, limit: SciLimit) {
        if (enabled, limit) != (self.enabled, self.limit) {
            self.enabled = enabled;
            self.limit = limit;
            self.buckets.clear();
        }
    }

    fn bucket_config(&self, expected_interval: Duration) -> TokenBucketConfig {
        let rate_milli = self.limit.rate_milli.unwrap_or_else(|| {
            // multiplier × (1000 ms / interval) reports/s, in thousandths.
            let ms = expected_interval.as_millis().max(1);
            let milli = u128::from(self.limit.multiplier) * 1_000_000 / ms;
            u32::try_from(milli).unwrap_or(u32::MAX).max(1)
        });
        TokenBucketConfig { rate_milli, burst: self.limit.burst }
    }

    /// Takes a token for one report of `csci_id` (already authenticated and authorised),
    /// which reports every `expected_interval`. Pull and in-process reports are not
    /// limited: the agent paces those itself.
    pub fn admit(&mut self, csci_id: &str, expected_interval: Duration, transport: &str) -> Result<(), String> {
        if !self.enabled || transport_index(transport).is_none() || transport == "pull" {
            return Ok(());
        }
        let now = Instant::now();
        let cfg = self.bucket_config(expected_interval);
        // The CSCI-ID is copied only for an SCI's first report, not for every one.
        if !self.buckets.contains_key(csci_id) {
            self.buckets.insert(csci_id.to_owned(), SciBucket { bucket: TokenBucket::new(cfg, now), refused: 0 });
        }
        let Some(b) = self.buckets.get_mut(csci_id) else { return Ok(()) };
        b.bucket.refill(now);
        if b.bucket.try_take() {
            if b.refused > 0 {
                tracing::info!(csci_id, refused = b.refused, "SCI back under its rate limit");
                b.refused = 0;
            }
            return Ok(());
        }
        b.refused += 1;
        let wait = wait(&b.bucket, now);
        let rate = f64::from(cfg.rate_milli) / 1000.0;
        let detail = format!(
            "{csci_id} is over its rate limit ({rate} reports/s, burst {}); retry in {} s",
            cfg.burst,
            wait.as_secs()
        );
        // One line per episode, not per refused report.
        if b.refused == 1 {
            tracing::warn!(csci_id, transport, "SCI rate limit reached: {detail}");
        }
        self.counters.count(Limit::PerSci, transport);
        Err(detail)
    }

    /// How long `csci_id` should wait for its next token (HTTP `Retry-After`).
    pub fn retry_after(&self, csci_id: &str) -> Option<Duration> {
        self.buckets.get(csci_id).map(|b| wait(&b.bucket, Instant::now()))
    }

    /// The SCI left the registry, or its expected interval changed: its bucket goes.
    pub fn forget(&mut self, csci_id: &str) {
        self.buckets.remove(csci_id);
    }
}

/// The collection/rate-limit settings in a configuration tree.
pub fn settings(t: &yang2::data::DataTree<'static>) -> RateLimitConfig {
    use crate::engine::northbound::{leaf, leaf_u64, ROOT};
    let d = RateLimitConfig::default();
    let p = |s: &str| format!("{ROOT}/collection/rate-limit/{s}");
    let u32_or = |s: &str, def: u32| leaf_u64(t, &p(s)).and_then(|v| u32::try_from(v).ok()).unwrap_or(def);
    RateLimitConfig {
        enabled: leaf(t, &p("enabled")).as_deref() != Some("false"),
        per_source: SourceLimit {
            rate: u32_or("per-source/rate", d.per_source.rate),
            burst: u32_or("per-source/burst", d.per_source.burst),
            max_sources: u32_or("per-source/max-sources", d.per_source.max_sources as u32) as usize,
        },
        per_sci: SciLimit {
            rate_milli: leaf(t, &p("per-sci/rate")).and_then(|v| milli(&v)),
            multiplier: u32_or("per-sci/rate-multiplier", d.per_sci.multiplier),
            burst: u32_or("per-sci/burst", d.per_sci.burst),
        },
    }
}

/// A decimal64 with up to three fraction digits, in thousandths.
fn milli(v: &str) -> Option<u32> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    let frac: String = frac.chars().chain("000".chars()).take(3).collect();
    let n = int.parse::<u64>().ok()?.checked_mul(1000)?.checked_add(frac.parse::<u64>().ok()?)?;
    u32::try_from(n).ok().filter(|n| *n > 0)
}

/// Applies the collection/rate-limit settings: the per-source table at once, the per-SCI
/// buckets in the engine task.
pub fn apply(engine: &crate::engine::Engine, c: RateLimitConfig) {
    engine.ingress.configure(c.enabled, c.per_source);
    engine.submit(move |core| core.rate.configure(c.enabled, c.per_sci));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn seed_004_security_considerations_per_source_burst_then_rate() {
        let ingress = Ingress::default();
        ingress.configure(true, SourceLimit { rate: 2, burst: 3, max_sources: 2 });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        for _ in 0..3 {
            assert!(ingress.admit(a, "http").is_ok());
        }
        assert_eq!(ingress.admit(a, "http"), Err(Duration::from_secs(1)));
        assert_eq!(ingress.counters.refused(Limit::PerSource, "http").0, 1);
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(ingress.admit(a, "http").is_ok(), "one token per 0.5 s");
        assert!(ingress.admit(a, "http").is_err());
        // IPv6 sources count per /64.
        let v6a: IpAddr = "2001:db8::1".parse().unwrap();
        let v6b: IpAddr = "2001:db8::2".parse().unwrap();
        for _ in 0..3 {
            assert!(ingress.admit(v6a, "http").is_ok());
        }
        assert!(ingress.admit(v6b, "http").is_err(), "same /64, same bucket");
    }

    #[tokio::test(start_paused = true)]
    async fn seed_004_security_considerations_per_source_table_is_bounded_lru() {
        let ingress = Ingress::default();
        ingress.configure(true, SourceLimit { rate: 1, burst: 1, max_sources: 2 });
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        assert!(ingress.admit(ip(1), "http").is_ok());
        assert!(ingress.admit(ip(2), "http").is_ok());
        // 1 is used again (refused, but most recent): 3 evicts 2, not 1.
        assert!(ingress.admit(ip(1), "http").is_err());
        assert!(ingress.admit(ip(3), "http").is_ok());
        assert_eq!(ingress.sources(), 2);
        assert_eq!(ingress.counters.evicted.load(Ordering::Relaxed), 1);
        assert!(ingress.admit(ip(1), "http").is_err(), "the busy source kept its empty bucket");
        for i in 4..200 {
            let _ = ingress.admit(ip(i), "http");
        }
        assert_eq!(ingress.sources(), 2, "never more than max-sources");
    }

    #[tokio::test(start_paused = true)]
    async fn seed_004_security_considerations_per_sci_follows_expected_interval() {
        let mut l = SciLimiter::default();
        l.configure(true, SciLimit { rate_milli: None, multiplier: 10, burst: 2 });
        // 10 × one report per 5 s = 2 reports/s.
        let interval = Duration::from_secs(5);
        assert!(l.admit("a", interval, "http").is_ok());
        assert!(l.admit("a", interval, "mqtt").is_ok());
        let e = l.admit("a", interval, "http").unwrap_err();
        assert!(e.contains("2 reports/s") && e.contains("retry in 1 s"), "{e}");
        assert_eq!(l.counters.refused(Limit::PerSci, "http").0, 1);
        // Another SCI has its own bucket; pull and in-process reports are not limited.
        assert!(l.admit("b", interval, "http").is_ok());
        for _ in 0..10 {
            assert!(l.admit("a", interval, "pull").is_ok());
            assert!(l.admit("a", interval, "").is_ok());
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        assert!(l.admit("a", interval, "http").is_ok());
        // A fixed rate overrides the multiplier.
        l.configure(true, SciLimit { rate_milli: Some(500), multiplier: 10, burst: 1 });
        assert!(l.admit("a", interval, "http").is_ok());
        assert!(l.admit("a", interval, "http").is_err());
        assert_eq!(l.retry_after("a"), Some(Duration::from_secs(2)));
        l.configure(false, SciLimit { rate_milli: Some(500), multiplier: 10, burst: 1 });
        assert!(l.admit("a", interval, "http").is_ok());
    }

    #[test]
    fn decimal_rates_in_thousandths() {
        assert_eq!(milli("2.5"), Some(2500));
        assert_eq!(milli("0.001"), Some(1));
        assert_eq!(milli("10"), Some(10_000));
        assert_eq!(milli("0"), None);
    }
}
