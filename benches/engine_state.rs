//! Operational state of the metric engine with 100 000 SCIs (issue 4 goal: get of
//! operational state ≤ 100 ms): running holds 100 000 registered SCIs, the engine (its real
//! task, on a tokio runtime) has one accepted report from each, and the operational
//! datastore is read the way NETCONF `<get>` / `<get-data>` read it. Results and commands
//! are recorded in docs/performance.md.
//!
//! `cargo bench --bench engine_state` (a few minutes: the setup builds 100 000 entries);
//! one benchmark: `cargo bench --bench engine_state -- read_operational_100k`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cats_sma::datastore::{Datastore, Datastores, Source, StateProvider};
use cats_sma::engine::clock::Clock;
use cats_sma::engine::northbound::{config, state::EngineState};
use cats_sma::engine::report::RawReport;
use cats_sma::engine::Engine;
use criterion::{criterion_group, criterion_main, Criterion};
use yang2::data::{DataFormat, DataTree};

const SCIS: usize = 100_000;
const NS: &str = "urn:cats-sma:yang:cats-sma";

fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

struct Setup {
    _rt: tokio::runtime::Runtime,
    ds: Datastores,
    provider: Arc<EngineState>,
}

fn populated() -> Setup {
    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ds = Datastores::open(cats_sma::yang::context(), None).unwrap();
    let mut xml = String::with_capacity(SCIS * 100);
    xml.push_str(&format!(
        r#"<cats-sma xmlns="{NS}"><agent><csma-id>bench</csma-id></agent><cache><max-entries>{SCIS}</max-entries></cache><scis>"#
    ));
    for i in 0..SCIS {
        xml.push_str(&format!(
            "<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id><authentication>none</authentication></sci>",
            csci_id(i),
            i % 100
        ));
    }
    xml.push_str("</scis></cats-sma>");
    let config = ds.parse_config(xml.as_bytes(), DataFormat::XML).unwrap();
    ds.copy(1, Source::Config(&config), Datastore::Running).unwrap();
    let engine = {
        let _guard = rt.enter();
        Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}))
    };
    ds.with_tree(Datastore::Running, |t| config::load_all(&engine, t)).unwrap();
    let accepted = engine
        .query_blocking(|core| {
            let wall = core.clock.wall();
            let mut n = 0;
            for i in 0..SCIS {
                let r = RawReport {
                    csci_id: csci_id(i),
                    cs_id: format!("CS{}", i % 100),
                    sequence: 1,
                    timestamp: wall,
                    gas: 400 + (i % 50) as i64,
                    computing_time: 5 + (i % 7) as i64,
                    health: "HEALTHY".into(),
                    cost: Some(10),
                    reputation: None,
                    security_label: None,
                };
                n += core.ingest(&r, None).is_ok() as usize;
                if i % 1000 == 0 {
                    core.settle();
                    core.events.clear();
                }
            }
            core.settle();
            core.events.clear();
            n
        })
        .unwrap();
    assert_eq!(accepted, SCIS);
    let provider = Arc::new(EngineState { engine });
    ds.register_state_provider(provider.clone());
    eprintln!("setup: {SCIS} SCIs in running and in the metric cache in {:.1} s", t0.elapsed().as_secs_f64());
    Setup { _rt: rt, ds, provider }
}

fn state(c: &mut Criterion) {
    let s = populated();
    let mut g = c.benchmark_group("state");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.bench_function("engine_render_100k", |b| {
        b.iter(|| {
            let mut t = DataTree::new(cats_sma::yang::context());
            s.provider.render(&mut t, None).unwrap();
            black_box(t)
        })
    });
    g.bench_function("read_operational_100k", |b| {
        b.iter(|| black_box(s.ds.read(Datastore::Operational, None).unwrap()))
    });
    g.bench_function("read_operational_metric_cache_100k", |b| {
        b.iter(|| black_box(s.ds.read(Datastore::Operational, Some("/cats-sma:cats-sma/metric-cache")).unwrap()))
    });
    g.bench_function("read_running_100k", |b| b.iter(|| black_box(s.ds.read(Datastore::Running, None).unwrap())));
    g.finish();
}

criterion_group!(benches, state);
criterion_main!(benches);
