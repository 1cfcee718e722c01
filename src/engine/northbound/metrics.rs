//! The engine's figures in `/metrics` (`crate::mgmt::metrics`): reports by transport and
//! verdict, rejections by reason, cache entries by SCI state, the site aggregates per
//! service, the quarantine. Read with one engine query per scrape; nothing here walks the
//! cache (its per-state counts are kept as entries move).

use crate::engine::model::SiteMetrics;
use crate::engine::validate::Rejection;
use crate::engine::Engine;
use crate::mgmt::metrics::{Exposition, Source};

pub struct EngineMetrics {
    pub engine: Engine,
}

struct Snapshot {
    received: u64,
    accepted: u64,
    rejected: [u64; Rejection::ALL.len()],
    by_transport: [[u64; Rejection::ALL.len() + 1]; crate::engine::rate_limit::TRANSPORTS.len() + 1],
    states: [(crate::engine::model::SciState, usize); 4],
    evictions: u64,
    quarantine: usize,
    sites: Vec<SiteMetrics>,
}

impl Source for EngineMetrics {
    fn reads(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("cats-sma", "/cats-sma:cats-sma"),
            ("cats-sma", "/cats-sma:cats-sma/statistics"),
            ("cats-sma", "/cats-sma:cats-sma/metric-cache"),
            ("cats-sma", "/cats-sma:cats-sma/services"),
            ("cats-sma", "/cats-sma:cats-sma/quarantine"),
            ("cats-sma", "/cats-sma:cats-sma/cache"),
        ]
    }

    fn collect(&self, out: &mut Exposition) {
        let Some(s) = self.engine.query_blocking(|core| {
            let mut sites: Vec<SiteMetrics> = core.reported.values().map(|(m, _)| m.clone()).collect();
            sites.sort_by(|a, b| a.cs_id.cmp(&b.cs_id));
            Snapshot {
                received: core.stats.received,
                accepted: core.stats.accepted,
                rejected: core.stats.rejected,
                by_transport: core.stats.by_transport,
                states: core.cache.state_counts(),
                evictions: core.cache.evictions,
                quarantine: core.quarantine.len(),
                sites,
            }
        }) else {
            return;
        };
        out.counter("reports_received", "SCI reports received (each report of a batch counts)").count(&[], s.received);
        out.counter("reports_accepted", "SCI reports accepted into the metric cache").count(&[], s.accepted);
        let f = out.counter("reports", "SCI reports by transport and verdict (accepted, or the rejection reason)");
        for (row, counts) in s.by_transport.iter().enumerate().filter(|(_, c)| c.iter().any(|n| *n > 0)) {
            let transport = crate::engine::core::Stats::transport_of_row(row);
            f.count(&[("transport", transport), ("verdict", "accepted")], counts[0]);
            for r in Rejection::ALL {
                if counts[1 + r.index()] > 0 {
                    f.count(&[("transport", transport), ("verdict", r.identity())], counts[1 + r.index()]);
                }
            }
        }
        let f = out.counter("rejections", "SCI reports rejected, by reason (YANG statistics/rejection)");
        for r in Rejection::ALL {
            f.count(&[("reason", r.identity())], s.rejected[r.index()]);
        }
        let f = out.gauge("cache_entries", "Metric-cache entries by SCI state");
        for (state, n) in s.states {
            f.set(&[("state", state.yang())], n as i64);
        }
        out.counter("cache_evictions", "Metric-cache entries evicted to make room").count(&[], s.evictions);
        let f = out.counter(
            "ingress_refused",
            "Messages refused by the ingress rate limits (per-source ones never reach the engine)",
        );
        use crate::engine::rate_limit::{Limit, TRANSPORTS};
        for t in TRANSPORTS {
            for (limit, name) in [(Limit::PerSource, "per-source"), (Limit::PerSci, "per-sci")] {
                f.count(&[("transport", t), ("limit", name)], self.engine.ingress.counters.refused(limit, t).0);
            }
        }
        out.gauge("quarantined_reports", "Reports held in quarantine for review").set(&[], s.quarantine as i64);
        let f = out.gauge("site_gas", "The site's reported GAS per service, after policy");
        for m in &s.sites {
            f.set(&[("cs_id", &m.cs_id)], i64::from(m.gas));
        }
        let f = out.gauge("site_computing_time_ms", "The site's reported computing time per service (ms)");
        for m in &s.sites {
            f.set(&[("cs_id", &m.cs_id)], i64::from(m.computing_time_ms));
        }
        let f = out.gauge("site_scis", "SCIs contributing to the site's aggregate per service");
        for m in &s.sites {
            f.set(&[("cs_id", &m.cs_id)], i64::from(m.sci_count));
        }
        let f = out.gauge("site_health", "The site's reported health per service (1 for the current value)");
        for m in &s.sites {
            f.set(&[("cs_id", &m.cs_id), ("health", m.health.yang())], 1);
        }
    }
}
