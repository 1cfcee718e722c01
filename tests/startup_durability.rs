//! DESIGN decision 6, "Durable means durable": a `kill -9` at any point leaves a startup
//! file that loads, holding either the last configuration whose write completed or the one
//! being written when the process died, never an older one and never a torn mix.
//!
//! The test re-executes its own binary as a writer child (selected by the
//! `CATS_SMA_DURABILITY_CHILD` environment variable). The child opens the datastores on a
//! startup file in a scratch directory and loops forever: edit running to generation N,
//! `copy-config running → startup`, report N. The parent kills it with SIGKILL at random
//! moments (before it is ready, mid-edit, mid-validation, mid-write, mid-fsync), then opens
//! the file the way the agent does at boot and checks what it finds. The next child goes on
//! from the state the parent loaded, so generations keep rising.
//!
//! Tunables (environment): `CATS_SMA_DURABILITY_KILLS` (default 60 kills) and
//! `CATS_SMA_DURABILITY_SEED` (the seed is printed, so a failing run can be repeated).

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use cats_sma::datastore::{Datastore, Datastores, EditOptions, Source, SYSTEM_SESSION};
use yang2::data::{Data, DataFormat};

const CHILD_ENV: &str = "CATS_SMA_DURABILITY_CHILD";
const KILLS_ENV: &str = "CATS_SMA_DURABILITY_KILLS";
const SEED_ENV: &str = "CATS_SMA_DURABILITY_SEED";
const TEST_NAME: &str = "sigkill_at_any_point_leaves_a_loadable_startup_of_the_last_or_next_generation";

const NS: &str = "urn:cats-sma:yang:cats-sma";
const CSMA_ID: &str = "/cats-sma:cats-sma/agent/csma-id";
const SCI_DESCRIPTIONS: &str = "/cats-sma:cats-sma/scis/sci/description";
/// SCI entries per generation, and the padding of each description: about 2 MB of XML.
const SCIS: usize = 300;
/// SCI credentials the entries refer to (credential-ref is a leafref).
const CREDENTIALS: usize = 16;
const PADDING: usize = 7000;

const STARTUP: &str = "startup.xml";
const PROGRESS: &str = "progress";
const CHILD_STDERR: &str = "child.stderr";

#[test]
fn sigkill_at_any_point_leaves_a_loadable_startup_of_the_last_or_next_generation() {
    if let Some(dir) = std::env::var_os(CHILD_ENV) {
        writer(Path::new(&dir));
    }
    parent();
}

// ----- the writer child ----------------------------------------------------------------

/// The configuration of generation `gen`: csma-id `gen-N` and `SCIS` entries whose
/// descriptions all carry the generation, so that a mix of two generations is visible.
fn generation_xml(gen: u64) -> String {
    let mut s = String::with_capacity(SCIS * (PADDING + 200) + 200);
    s.push_str(&format!(r#"<cats-sma xmlns="{NS}"><agent><csma-id>gen-{gen}</csma-id></agent>"#));
    s.push_str("<collection><authentication>");
    for c in 0..CREDENTIALS {
        s.push_str(&format!(
            "<credential><name>cred-{c}</name><type>hmac-sha256</type><key>c2VjcmV0LWtleS1udW1iZXItMDA=</key></credential>"
        ));
    }
    s.push_str("</authentication></collection><scis>");
    for i in 0..SCIS {
        let fill = char::from(b'a' + ((gen as usize + i) % 26) as u8);
        let padding: String = std::iter::repeat_n(fill, PADDING).collect();
        s.push_str(&format!(
            "<sci><csci-id>10.0.{}.{}:8080</csci-id><cs-id>AR1</cs-id>\
             <credential-ref>cred-{}</credential-ref>\
             <expected-interval>{}</expected-interval>\
             <description>gen-{gen} sci-{i} {padding}</description></sci>",
            i / 256,
            i % 256,
            i % CREDENTIALS,
            1000 + gen % 1000,
        ));
    }
    s.push_str("</scis></cats-sma>");
    s
}

fn generation_of(ds: &Datastores, store: Datastore) -> u64 {
    ds.with_tree(store, |t| t.find_path(CSMA_ID).ok().and_then(|n| n.value_canonical()))
        .unwrap()
        .map(|v| {
            v.strip_prefix("gen-").and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("csma-id {v:?} is not gen-N"))
        })
        .unwrap_or(0)
}

/// Never returns: writes generation after generation until it is killed.
fn writer(dir: &Path) -> ! {
    let mut progress = fs::OpenOptions::new().append(true).create(true).open(dir.join(PROGRESS)).unwrap();
    let ds = Datastores::open(cats_sma::yang::context(), Some(dir.join(STARTUP))).unwrap();
    let mut gen = generation_of(&ds, Datastore::Running);
    // One write() per line: a line in the file is complete or absent.
    progress.write_all(format!("ready {gen}\n").as_bytes()).unwrap();
    loop {
        gen += 1;
        let t0 = Instant::now();
        let edit = ds.parse_edit(generation_xml(gen).as_bytes(), DataFormat::XML).unwrap();
        ds.edit(SYSTEM_SESSION, Datastore::Running, &edit, EditOptions::default()).unwrap();
        ds.copy(SYSTEM_SESSION, Source::Datastore(Datastore::Running), Datastore::Startup).unwrap();
        let cycle = t0.elapsed().as_micros();
        progress.write_all(format!("done {gen} {cycle}\n").as_bytes()).unwrap();
    }
}

// ----- the parent ----------------------------------------------------------------------

/// splitmix64: enough randomness for kill times, and reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..=max`.
    fn duration(&mut self, max: Duration) -> Duration {
        let us = max.as_micros() as u64;
        Duration::from_micros(self.next() % (us + 1))
    }
}

/// Where a round aims its kill.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Aim {
    Starting,
    Anywhere,
    MidWrite,
    AfterRename,
}

/// What a killed child reported: the generation it started from and those it completed.
#[derive(Default)]
struct Progress {
    ready: Option<u64>,
    done: Vec<u64>,
    cycles: Vec<Duration>,
}

fn read_progress(dir: &Path) -> Progress {
    let text = fs::read_to_string(dir.join(PROGRESS)).unwrap_or_default();
    let mut p = Progress::default();
    // Only newline-terminated lines are complete.
    let complete = match text.rfind('\n') {
        Some(end) => &text[..=end],
        None => "",
    };
    for line in complete.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("ready"), Some(g), None) => p.ready = Some(g.parse().unwrap()),
            (Some("done"), Some(g), Some(us)) => {
                p.done.push(g.parse().unwrap());
                p.cycles.push(Duration::from_micros(us.parse().unwrap()));
            }
            _ => panic!("bad progress line {line:?}"),
        }
    }
    p
}

fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let prefix = format!(".{STARTUP}.tmp.");
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

fn child_failure(dir: &Path, child: &mut Child, what: &str) -> ! {
    let _ = child.kill();
    let status = child.wait();
    panic!(
        "writer child {what} (status {status:?}); its stderr:\n{}",
        fs::read_to_string(dir.join(CHILD_STDERR)).unwrap_or_default()
    );
}

/// Waits until the child reported that it is ready; false if `limit` passed first.
fn wait_ready(dir: &Path, child: &mut Child, limit: Duration) -> bool {
    let t0 = Instant::now();
    loop {
        if read_progress(dir).ready.is_some() {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            child_failure(dir, child, "exited before it was ready");
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What identifies one version of the startup file: inode, size, modification time.
fn stamp(file: &Path) -> Option<(u64, u64, SystemTime)> {
    let m = fs::metadata(file).ok()?;
    Some((m.ino(), m.len(), m.modified().ok()?))
}

/// Polls (every 50 µs) until `done` holds; false if `limit` passed first.
fn poll(child: &mut Child, dir: &Path, limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if done() {
            return true;
        }
        if let Ok(Some(_)) = child.try_wait() {
            child_failure(dir, child, "exited on its own");
        }
        if t0.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Waits until the child starts writing startup: a temporary file appears, or (should a
/// writer ever write in place) the startup file itself changes.
fn wait_write_start(dir: &Path, child: &mut Child, limit: Duration) -> bool {
    let file = dir.join(STARTUP);
    let before = stamp(&file);
    poll(child, dir, limit, || !temporaries(dir).is_empty() || stamp(&file) != before)
}

/// Opens the startup file as the agent does at boot and checks that it is one whole
/// generation; returns that generation.
fn load_and_check(file: &Path) -> u64 {
    let ds = Datastores::open(cats_sma::yang::context(), Some(file.to_path_buf()))
        .unwrap_or_else(|e| panic!("the startup file does not load after kill -9: {e}"));
    let gen = generation_of(&ds, Datastore::Startup);
    assert_eq!(gen, generation_of(&ds, Datastore::Running), "running starts as startup");
    if gen == 0 {
        // Killed before the first write completed: no file, or an empty configuration.
        return 0;
    }
    let tag = format!("gen-{gen} ");
    let descriptions: Vec<String> = ds
        .with_tree(Datastore::Startup, |t| {
            t.find_xpath(SCI_DESCRIPTIONS).unwrap().filter_map(|n| n.value_canonical()).collect()
        })
        .unwrap();
    assert_eq!(descriptions.len(), SCIS, "generation {gen}: SCI entries");
    for d in &descriptions {
        assert!(
            d.starts_with(&tag) && d.len() > PADDING,
            "torn startup: csma-id says generation {gen}, an SCI says {:?}",
            &d[..d.len().min(40)]
        );
    }
    gen
}

fn parent() {
    let kills: usize =
        std::env::var(KILLS_ENV).ok().map(|v| v.parse().expect("CATS_SMA_DURABILITY_KILLS is a number")).unwrap_or(60);
    let seed: u64 =
        std::env::var(SEED_ENV).ok().map(|v| v.parse().expect("CATS_SMA_DURABILITY_SEED is a number")).unwrap_or_else(
            || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
        );
    println!("durability: {kills} kills, seed {seed} (set {SEED_ENV} to repeat)");
    let mut rng = Rng(seed);
    // On the build disk rather than a possibly memory-backed /tmp, so fsync costs what it
    // costs on a real disk.
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dir = scratch.path();
    let file = dir.join(STARTUP);
    let exe = std::env::current_exe().unwrap();

    let started = Instant::now();
    let mut gen = 0u64; // what the startup file holds, as last verified
    let mut cycle = Duration::from_millis(100); // edit + copy, refined from the reports
    let mut startup_time = Duration::from_millis(300); // spawn → ready, refined as measured
    let mut write_window = Duration::from_millis(5); // temporary file's lifetime, measured
    let (mut mid_write, mut early, mut unreported, mut written) = (0, 0, 0, 0u64);

    for round in 0..kills {
        fs::write(dir.join(PROGRESS), b"").unwrap();
        let spawned = Instant::now();
        let mut child = Command::new(&exe)
            .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.join(CHILD_STDERR)).unwrap())
            .spawn()
            .unwrap();
        // Where the kill lands. One round in eight: while the child is still starting
        // (loading startup, removing temporaries). Of the rest, a quarter at a uniformly
        // random moment 0 to 2.5 edit+copy cycles after the child is ready (anywhere in the
        // loop), half aimed at the write: 0 to 1 write duration after the temporary file
        // appears, and a quarter just after the rename (the temporary file has gone but the
        // child has not reported yet), which also measures how long a write takes.
        let aim = match (round % 8, round % 4) {
            (7, _) => Aim::Starting,
            (_, 0) => Aim::Anywhere,
            (_, 3) => Aim::AfterRename,
            _ => Aim::MidWrite,
        };
        if aim != Aim::Starting {
            if !wait_ready(dir, &mut child, Duration::from_secs(30)) {
                child_failure(dir, &mut child, "was not ready within 30 s");
            }
            startup_time = (startup_time + spawned.elapsed()) / 2;
        }
        match aim {
            Aim::Starting => std::thread::sleep(rng.duration(startup_time)),
            Aim::Anywhere => std::thread::sleep(rng.duration(cycle * 5 / 2)),
            Aim::MidWrite => {
                wait_write_start(dir, &mut child, cycle * 10);
                std::thread::sleep(rng.duration(write_window));
            }
            Aim::AfterRename => {
                if wait_write_start(dir, &mut child, cycle * 10) {
                    let appeared = Instant::now();
                    if poll(&mut child, dir, cycle * 10, || temporaries(dir).is_empty()) {
                        write_window = (write_window + appeared.elapsed()) / 2;
                    }
                }
                std::thread::sleep(rng.duration(write_window / 2));
            }
        }
        if let Ok(Some(_)) = child.try_wait() {
            child_failure(dir, &mut child, "exited on its own");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();

        let p = read_progress(dir);
        if p.ready.is_none() {
            early += 1;
        }
        if let Some(r) = p.ready {
            assert_eq!(r, gen, "the child goes on from the state the parent loaded");
        }
        for (i, &d) in p.done.iter().enumerate() {
            assert_eq!(d, gen + 1 + i as u64, "generations are reported in order");
        }
        match p.cycles.iter().max() {
            Some(c) => cycle = (cycle + *c) / 2,
            // A kill anywhere after ready with nothing completed: the estimate is too short.
            None if aim == Aim::Anywhere && p.ready.is_some() => cycle = (cycle * 2).min(Duration::from_secs(5)),
            None => {}
        }
        written += p.done.len() as u64;
        let last_done = p.done.last().copied().unwrap_or(gen);

        if !temporaries(dir).is_empty() {
            mid_write += 1;
        }
        let loaded = load_and_check(&file);
        let left = temporaries(dir);
        assert!(left.is_empty(), "opening the datastores leaves stale temporaries: {left:?}");
        assert!(
            loaded == last_done || loaded == last_done + 1,
            "round {round}: startup holds generation {loaded}, but the child completed \
             {last_done} (only {last_done} or {} are acceptable)",
            last_done + 1
        );
        if loaded == last_done + 1 {
            unreported += 1;
        }
        gen = loaded;
    }

    println!(
        "durability: {kills} kills in {:.1} s: {mid_write} with a temporary file present \
         (mid-write), {early} before the child was ready, {unreported} after a write \
         completed but before it was reported; {written} generations written, startup \
         ends at generation {gen}; edit+copy cycle ≈ {} ms, write ≈ {:.1} ms, file {} bytes",
        started.elapsed().as_secs_f64(),
        cycle.as_millis(),
        write_window.as_secs_f64() * 1e3,
        fs::metadata(&file).map(|m| m.len()).unwrap_or(0)
    );
    assert!(
        mid_write >= 1,
        "no kill landed while a temporary file existed: the test did not exercise a \
         kill mid-write"
    );
    assert!(gen > 0, "no generation was ever written");
}
