//! Metric engine benchmarks (issue 4, "Operational state and speed"): in-process ingest of
//! reports for 100 000 registered SCIs through `Core::ingest` (registry check, validation,
//! cache, state machine, aggregates), reported beside a bare hash-map update loop over the
//! same reports in the same run (goal: ≥ 3 M reports/s per core, within 5× of the bare
//! loop; issue 14: within 4×). Results and commands are recorded in docs/performance.md.
//!
//! `cargo bench --bench engine` (about a minute); one benchmark:
//! `cargo bench --bench engine -- core_ingest_100k`.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Duration;

use cats_sma::engine::clock::Clock;
use cats_sma::engine::core::{Core, SciConfig, Sender};
use cats_sma::engine::report::RawReport;
use chrono::{DateTime, Utc};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const SCIS: usize = 100_000;
/// CS-IDs the SCIs are spread over (1 000 SCIs per service).
const SERVICES: usize = 100;
/// Reports between two drains of the engine's event list (the engine task drains it after
/// every job; an HTTP or MQTT batch is one job).
const BATCH: usize = 1000;

fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn cs_id(i: usize) -> String {
    format!("CS{}", i % SERVICES)
}

/// A core with `SCIS` registered SCIs, each with one accepted report, and the reports of
/// the next round (one per SCI, in registration order shuffled by a fixed stride so that
/// consecutive reports hit unrelated entries).
fn populated() -> (Core, Vec<RawReport>) {
    let mut core = Core::new(Clock::new());
    let mut cfg = core.cache_config.clone();
    cfg.max_entries = SCIS;
    core.set_cache_config(cfg);
    for i in 0..SCIS {
        core.set_sci(
            &csci_id(i),
            SciConfig {
                cs_ids: vec![cs_id(i)],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: Duration::from_secs(10),
            },
        );
    }
    core.events.clear();
    let wall = core.clock.wall();
    // 7919 is prime and does not divide 100 000: the stride visits every SCI once.
    let reports: Vec<RawReport> = (0..SCIS)
        .map(|k| {
            let i = (k * 7919) % SCIS;
            RawReport {
                csci_id: csci_id(i),
                cs_id: cs_id(i),
                sequence: 0,
                timestamp: wall,
                gas: 400 + (i % 50) as i64,
                computing_time: 5 + (i % 7) as i64,
                health: "HEALTHY".into(),
                cost: Some(10),
                reputation: None,
                security_label: None,
            }
        })
        .collect();
    let mut reports = reports;
    round(&mut core, &mut reports, 0);
    (core, reports)
}

/// One report per SCI, each with the next sequence number and the current time: every
/// report is accepted (no anomaly: the metrics are steady).
fn round(core: &mut Core, reports: &mut [RawReport], seq: u64) {
    let wall = core.clock.wall();
    for chunk in reports.chunks_mut(BATCH) {
        for r in chunk.iter_mut() {
            r.sequence = seq;
            r.timestamp = wall;
            let _ = black_box(core.ingest(r, None));
        }
        core.events.clear();
    }
}

/// The same round as the collectors hand it over: each chunk of `BATCH` reports is one
/// message, ingested by `Core::ingest_batch` (the path of `Engine::ingest_from`, which HTTP
/// batches and MQTT messages take).
fn batch_round(core: &mut Core, reports: &mut [RawReport], seq: u64, sender: &Sender) {
    let wall = core.clock.wall();
    for chunk in reports.chunks_mut(BATCH) {
        for r in chunk.iter_mut() {
            r.sequence = seq;
            r.timestamp = wall;
        }
        let _ = black_box(core.ingest_batch(chunk, sender));
        core.events.clear();
    }
}

/// The bare loop: the same reports applied to a plain `HashMap<String, _>` holding what a
/// cache entry minimally needs (sequence, timestamp, metrics), with the sequence check.
#[derive(Default)]
struct Bare {
    sequence: u64,
    timestamp: Option<DateTime<Utc>>,
    gas: i64,
    computing_time: i64,
    healthy: bool,
}

fn bare_round(map: &mut HashMap<String, Bare>, reports: &mut [RawReport], seq: u64, wall: DateTime<Utc>) {
    for r in reports.iter_mut() {
        r.sequence = seq;
        r.timestamp = wall;
        if let Some(e) = map.get_mut(r.csci_id.as_str()) {
            if r.sequence > e.sequence {
                e.sequence = r.sequence;
                e.timestamp = Some(r.timestamp);
                e.gas = r.gas;
                e.computing_time = r.computing_time;
                e.healthy = r.health == "HEALTHY";
            }
        }
        black_box(&map);
    }
}

fn ingest(c: &mut Criterion) {
    let (mut core, mut reports) = populated();
    let mut g = c.benchmark_group("ingest");
    g.throughput(Throughput::Elements(SCIS as u64));
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(10));

    let mut seq = 1;
    g.bench_function("core_ingest_100k", |b| {
        b.iter(|| {
            seq += 1;
            round(&mut core, &mut reports, seq);
        })
    });
    assert_eq!(core.stats.received, core.stats.accepted, "every benchmark report is accepted");
    let sender = Sender::default();
    g.bench_function("core_ingest_batch_100k", |b| {
        b.iter(|| {
            seq += 1;
            batch_round(&mut core, &mut reports, seq, &sender);
        })
    });
    assert_eq!(core.stats.received, core.stats.accepted, "every benchmark report is accepted");

    let mut map: HashMap<String, Bare> = (0..SCIS).map(|i| (csci_id(i), Bare::default())).collect();
    let wall = Utc::now();
    let mut seq = 1;
    g.bench_function("bare_hashmap_100k", |b| {
        b.iter(|| {
            seq += 1;
            bare_round(&mut map, &mut reports, seq, wall);
        })
    });

    // The engine's job as the collectors run it: a batch of reports ingested, then
    // `settle` (each changed site re-evaluated once through site-scope policy).
    let mut seq = 1_000_000;
    g.bench_function("core_ingest_settle_100k", |b| {
        b.iter(|| {
            seq += 1;
            let wall = core.clock.wall();
            for chunk in reports.chunks_mut(BATCH) {
                for r in chunk.iter_mut() {
                    r.sequence = seq;
                    r.timestamp = wall;
                    let _ = black_box(core.ingest(r, None));
                }
                core.settle();
                core.events.clear();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
