//! Datastore benchmarks of the foundation issue: with 100 000 SCI entries in running,
//! the edit + commit of one leaf (goal ≤ 5 ms) and get-config of the whole tree.
//! Results and the command are recorded in docs/performance.md.
//!
//! `cargo bench --bench datastore` (a few minutes; the 100 000 entries are built once, in a
//! few seconds, outside the measurements); one benchmark:
//! `cargo bench --bench datastore -- edit_running_one_leaf_100k`.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use cats_sma::datastore::{Datastore, Datastores, EditOptions, Source};
use criterion::{criterion_group, criterion_main, Criterion};
use yang2::data::{Data, DataFormat, DataPrinterFlags, DataTree};

const ENTRIES: usize = 100_000;
const CREDENTIALS: usize = 100;
const SESSION: u32 = 1;
const NS: &str = "urn:cats-sma:yang:cats-sma";
const POL: &str = "urn:cats-sma:yang:cats-sma-policy";

/// The CSCI-ID of entry `i`: 10.a.b.c:8080.
fn csci_id(i: usize) -> String {
    format!("10.{}.{}.{}:8080", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

/// The entry the one-entry benchmarks touch (in the middle of the list).
fn target_id() -> String {
    csci_id(ENTRIES / 2)
}

/// Running with `ENTRIES` SCIs (one cs-id and a credential-ref each, to one of
/// `CREDENTIALS` credentials: every commit that fully validates checks each leafref) and an explicit
/// heartbeat-interval, so that modifying it is a modification, not a creation.
/// The startup file is `startup` (absent until the copy benchmark writes it).
fn populated(startup: PathBuf) -> Datastores {
    let t0 = Instant::now();
    let ds = Datastores::open(cats_sma::yang::context(), Some(startup)).unwrap();
    let mut xml = String::with_capacity(ENTRIES * 140);
    xml.push_str(&format!(r#"<cats-sma xmlns="{NS}"><agent><csma-id>bench</csma-id></agent>"#));
    xml.push_str("<collection><authentication>");
    for c in 0..CREDENTIALS {
        xml.push_str(&format!(
            "<credential><name>cred-{c}</name><type>hmac-sha256</type><key>c2VjcmV0LWtleS1udW1iZXItMDA=</key></credential>"
        ));
    }
    xml.push_str("</authentication></collection><scis>");
    for i in 0..ENTRIES {
        xml.push_str(&format!(
            "<sci><csci-id>{}</csci-id><cs-id>CS{}</cs-id><credential-ref>cred-{}</credential-ref></sci>",
            csci_id(i),
            i % 100,
            i % CREDENTIALS
        ));
    }
    xml.push_str(&format!(
        r#"</scis><policy xmlns="{POL}"><update-control><heartbeat-interval>60</heartbeat-interval></update-control></policy></cats-sma>"#
    ));
    let config = ds.parse_config(xml.as_bytes(), DataFormat::XML).unwrap();
    ds.copy(SESSION, Source::Config(&config), Datastore::Running).unwrap();
    eprintln!(
        "setup: {ENTRIES} SCI entries in running ({} bytes of XML) in {:.1} s",
        xml.len(),
        t0.elapsed().as_secs_f64()
    );
    ds
}

fn parse(ds: &Datastores, xml: &str) -> DataTree<'static> {
    ds.parse_edit(xml.as_bytes(), DataFormat::XML).unwrap()
}

/// An edit setting the target SCI's expected-interval.
fn interval_edit(value: u32) -> String {
    format!(
        r#"<cats-sma xmlns="{NS}"><scis><sci><csci-id>{}</csci-id><expected-interval>{value}</expected-interval></sci></scis></cats-sma>"#,
        target_id()
    )
}

/// An edit setting heartbeat-interval, which the update-control must expression
/// references: the fast path refuses it, so the commit runs libyang's full validation.
fn heartbeat_edit(value: u32) -> String {
    format!(
        r#"<cats-sma xmlns="{NS}"><policy xmlns="{POL}"><update-control><heartbeat-interval>{value}</heartbeat-interval></update-control></policy></cats-sma>"#
    )
}

/// Alternates between two values so that every iteration is a real change.
fn alternate(n: &mut u32, a: u32) -> u32 {
    *n += 1;
    a + *n % 2
}

/// What get-config sends for the whole datastore (with-defaults explicit).
fn print(tree: &DataTree<'static>, format: DataFormat) -> String {
    tree.print_string(
        format,
        DataPrinterFlags::WITH_SIBLINGS | DataPrinterFlags::WD_EXPLICIT | DataPrinterFlags::SHRINK,
    )
    .unwrap()
    .unwrap_or_default()
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let ds = populated(dir.path().join("startup.xml"));
    let opts = EditOptions::default();

    let mut n = 0;
    c.bench_function("edit_running_one_leaf_100k", |b| {
        b.iter(|| {
            let edit = parse(&ds, &interval_edit(alternate(&mut n, 7000)));
            let changes = ds.edit(SESSION, Datastore::Running, &edit, opts).unwrap();
            assert_eq!(changes.len(), 1);
            changes
        })
    });

    c.bench_function("edit_candidate_commit_one_leaf_100k", |b| {
        b.iter(|| {
            let edit = parse(&ds, &interval_edit(alternate(&mut n, 7000)));
            ds.edit(SESSION, Datastore::Candidate, &edit, opts).unwrap();
            let changes = ds.commit(SESSION, false).unwrap();
            assert_eq!(changes.len(), 1);
            changes
        })
    });

    c.bench_function("edit_running_must_leaf_100k", |b| {
        b.iter(|| {
            let edit = parse(&ds, &heartbeat_edit(alternate(&mut n, 60)));
            let changes = ds.edit(SESSION, Datastore::Running, &edit, opts).unwrap();
            assert_eq!(changes.len(), 1);
            changes
        })
    });

    c.bench_function("edit_candidate_commit_must_leaf_100k", |b| {
        b.iter(|| {
            let edit = parse(&ds, &heartbeat_edit(alternate(&mut n, 60)));
            ds.edit(SESSION, Datastore::Candidate, &edit, opts).unwrap();
            let changes = ds.commit(SESSION, false).unwrap();
            assert_eq!(changes.len(), 1);
            changes
        })
    });

    c.bench_function("validate_running_100k", |b| {
        b.iter(|| ds.validate(Source::Datastore(Datastore::Running)).unwrap())
    });

    let xml_len = ds.with_tree(Datastore::Running, |t| print(t, DataFormat::XML).len()).unwrap();
    let json_len = ds.with_tree(Datastore::Running, |t| print(t, DataFormat::JSON).len()).unwrap();
    eprintln!("get-config of running: {xml_len} bytes of XML, {json_len} bytes of JSON");

    c.bench_function("get_config_running_100k", |b| {
        b.iter(|| ds.with_tree(Datastore::Running, |t| print(t, DataFormat::XML)).unwrap())
    });

    c.bench_function("get_config_running_100k_json", |b| {
        b.iter(|| ds.with_tree(Datastore::Running, |t| print(t, DataFormat::JSON)).unwrap())
    });

    // copy-config running → startup: duplicate, full validation, print, write_atomic
    // (fsync, rename, fsync dir), diff against the old startup.
    c.bench_function("copy_running_to_startup_100k", |b| {
        b.iter(|| ds.copy(SESSION, Source::Datastore(Datastore::Running), Datastore::Startup).unwrap())
    });

    let one = format!("/cats-sma:cats-sma/scis/sci[csci-id='{}']", target_id());
    c.bench_function("read_running_one_entry_100k", |b| {
        b.iter(|| {
            let tree = ds.read(Datastore::Running, Some(black_box(&one))).unwrap();
            assert!(tree.reference().is_some());
            tree
        })
    });
}

criterion_group! {
    name = datastore;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = benches
}
criterion_main!(datastore);
