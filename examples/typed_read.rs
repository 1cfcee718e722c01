//! Typed reads of operational state at scale (issue 14 goal 1): running holds `--scis`
//! registered SCIs, the engine (its real task) one accepted report from each, and reads
//! are served the way NETCONF `<get>` / `<get-data>`, RESTCONF GET and YANG-Push periodic
//! serve them (`datastore::render::read_typed`, NACM on, as for a NACM-restricted user),
//! beside the baseline of the same run: a get-config of the whole SCI list (libyang prints
//! running) and the libyang path for one entry (the view built, NACM, the filter).
//!
//! ```sh
//! cargo build --release --example typed_read
//! target/release/examples/typed_read --scis 100000 --repeat 20
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use cats_sma::datastore::render::{read_typed, Format, Options};
use cats_sma::datastore::select::Selection;
use cats_sma::datastore::{Datastore, Datastores, Source};
use cats_sma::engine::clock::Clock;
use cats_sma::engine::northbound::{config, state::EngineState};
use cats_sma::engine::report::RawReport;
use cats_sma::engine::Engine;
use cats_sma::mgmt::with_defaults::WithDefaults;
use cats_sma::nacm::Nacm;
use cats_sma::yang::PrintText as _;
use yang2::data::{Data, DataFormat, DataPrinterFlags};

const NS: &str = "urn:cats-sma:yang:cats-sma";

fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// CPU time of the whole process (every thread: the reader and the engine task).
fn cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a pointer to a timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Median and max wall time of `n` runs of `f`, median process CPU time, and the size of
/// what it returned.
fn time(n: usize, mut f: impl FnMut() -> usize) -> (Duration, Duration, Duration, usize) {
    let mut v = Vec::with_capacity(n);
    let mut c = Vec::with_capacity(n);
    let mut size = 0;
    for _ in 0..n {
        let (t, c0) = (Instant::now(), cpu());
        size = std::hint::black_box(f());
        v.push(t.elapsed());
        c.push(cpu().saturating_sub(c0));
    }
    v.sort();
    c.sort();
    (v[n / 2], v[n - 1], c[n / 2], size)
}

fn main() {
    let scis = arg("--scis", 100_000);
    let repeat = arg("--repeat", 20).max(1);
    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let ds = Datastores::open(cats_sma::yang::context(), None).unwrap();
    let mut xml = format!(
        r#"<cats-sma xmlns="{NS}"><agent><csma-id>bench</csma-id></agent><cache><max-entries>{scis}</max-entries></cache><scis>"#
    );
    for i in 0..scis {
        xml.push_str(&format!(
            "<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id><authentication>none</authentication></sci>",
            csci_id(i),
            i % 100
        ));
    }
    xml.push_str("</scis></cats-sma>");
    let cfg = ds.parse_config(xml.as_bytes(), DataFormat::XML).unwrap();
    ds.copy(1, Source::Config(&cfg), Datastore::Running).unwrap();
    let engine = {
        let _g = rt.enter();
        Engine::start(Clock::new(), Arc::new(|_: &str, _: &str, _: String| {}))
    };
    ds.with_tree(Datastore::Running, |t| config::load_all(&engine, t)).unwrap();
    engine
        .query_blocking(move |core| {
            let wall = core.clock.wall();
            for i in 0..scis {
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
                let _ = core.ingest(&r, None);
                if i % 1000 == 0 {
                    core.settle();
                    core.events.clear();
                }
            }
            core.settle();
            core.events.clear();
        })
        .unwrap();
    ds.register_state_provider(Arc::new(EngineState { engine }));
    eprintln!("setup: {scis} SCIs in running and in the metric cache in {:.1} s", t0.elapsed().as_secs_f64());

    // NACM as for an ordinary user: rules are evaluated (the schema's default-deny-all
    // nodes), nothing in the engine's state is denied.
    let nacm = Nacm::new(None);
    let access = nacm.read_access("operator").expect("schema-only NACM");
    let opts = Options { format: Format::Xml, skip: 0, max_depth: None, with_defaults: WithDefaults::Explicit };
    let json = Options { format: Format::Json, ..opts };
    let one = Selection::from_xpath(&format!("/cats-sma:cats-sma/metric-cache/entry[csci-id='{}']", csci_id(scis / 2)));
    let stats = Selection::from_xpath("/cats-sma:cats-sma/statistics");
    let cache = Selection::from_xpath("/cats-sma:cats-sma/metric-cache");
    let typed = |sel: &Selection, o: Options| read_typed(&ds, sel, &access, o).unwrap().expect("served typed").len();

    if std::env::args().any(|a| a == "--only-cache") {
        // For a profile of the whole-cache read alone (`perf record -D <setup ms>`).
        eprintln!("profiling from now");
        let (med, _, _, _) = time(repeat, || typed(&cache, opts));
        eprintln!("whole metric-cache (XML): median {:.1} ms", med.as_secs_f64() * 1e3);
        return;
    }
    println!("| read ({scis} SCIs) | wall median | wall max | CPU median (all threads) | bytes |");
    println!("|---|---|---|---|---|");
    let row = |what: &str, (med, max, c, size): (Duration, Duration, Duration, usize)| {
        println!(
            "| {what} | {:.3} ms | {:.3} ms | {:.3} ms | {size} |",
            med.as_secs_f64() * 1e3,
            max.as_secs_f64() * 1e3,
            c.as_secs_f64() * 1e3
        );
    };
    row("typed: one metric-cache entry (XML)", time(repeat * 10, || typed(&one, opts)));
    row("typed: one metric-cache entry (JSON)", time(repeat * 10, || typed(&one, json)));
    row("typed: statistics (XML)", time(repeat * 10, || typed(&stats, opts)));
    row("typed: whole metric-cache (XML)", time(repeat, || typed(&cache, opts)));
    row("typed: whole metric-cache (JSON)", time(repeat, || typed(&cache, json)));
    row(
        "baseline: get-config of the SCI list (libyang prints running)",
        time(repeat, || {
            ds.with_tree(Datastore::Running, |t| {
                t.print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::SHRINK)
                    .unwrap()
                    .unwrap_or_default()
                    .len()
            })
            .unwrap()
        }),
    );
    row(
        "libyang path: one entry via read_covering + NACM + filter",
        time(repeat, || {
            let t = nacm.readable("operator", ds.read_covering(Datastore::Operational, &one).unwrap());
            t.tree().print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS).unwrap().unwrap_or_default().len()
        }),
    );
    row(
        "libyang path: statistics via read_covering + NACM",
        time(repeat, || {
            let t = nacm.readable("operator", ds.read_covering(Datastore::Operational, &stats).unwrap());
            t.tree().print_text(DataFormat::XML, DataPrinterFlags::WITH_SIBLINGS).unwrap().unwrap_or_default().len()
        }),
    );
    row(
        "old libyang path: one entry, whole view built (read(Operational)) + NACM",
        time(2, || {
            let t = nacm.readable("operator", ds.read(Datastore::Operational, None).unwrap());
            t.tree().find_xpath(&one.xpath().unwrap()).map(|s| s.count()).unwrap_or(0)
        }),
    );
}
