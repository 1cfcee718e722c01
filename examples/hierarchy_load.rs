//! Hierarchy load generator (issue 20; a benchmark, not a test): `--subordinates` agent
//! processes with `--scis` SCIs each, under one coordinator process, all real `cats-sma`
//! binaries on loopback. It measures
//!
//! - the coordinator's first sync: from its start until every SCI of every subordinate is
//!   in its metric cache (the sync-on-start push-updates), and its resident memory then;
//! - the latency from an SCI report POSTed to a subordinate to the coordinator pushing the
//!   mirrored entry on its own on-change subscription (what a C-PS taking per-SCI rows, or
//!   any YANG-Push collector above the coordinator, sees), p50 / p99, at `--rate` reports
//!   per second spread over the subordinates;
//! - the coordinator's CPU time per mirrored update over that window (/proc).
//!
//! ```sh
//! cargo build --release --bin cats-sma --example hierarchy_load
//! target/release/examples/hierarchy_load --subordinates 10 --scis 10000 --rate 1000 --seconds 10
//! ```
//!
//! The NETCONF client and the notification decoder are the coordinator's own
//! (`cats_sma::hierarchy::{client, decode}`).

#[path = "support/http_client.rs"]
mod http_client;
#[path = "support/nc_client.rs"]
mod nc_client;

use http_client::Http;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cats_sma::hierarchy::client::{establish_on_change, subscription_id, ClientAuth, HostKeyPin, Session, Target};
use cats_sma::hierarchy::decode::{decode, Change, Event, Limits};
use clap::Parser;

const PASSWORD: &str = "hierarchy-bench";
const CATS: &str = "urn:cats-sma:yang:cats-sma";

#[derive(Parser, Debug)]
#[command(about = "A coordinator over subordinate cats-sma processes: sync time, report-to-coordinator latency, CPU")]
struct Args {
    #[arg(long, default_value_t = 10)]
    subordinates: usize,
    /// SCIs per subordinate.
    #[arg(long, default_value_t = 10_000)]
    scis: usize,
    /// Reports per second during the latency window, over all subordinates.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The cats-sma binary (default: beside this example's directory).
    #[arg(long)]
    bin: Option<PathBuf>,
}

struct Proc {
    child: Child,
    netconf: SocketAddr,
    sci: Option<SocketAddr>,
    host_key: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts an agent on a state directory whose startup file is `config`; waits for its
/// ready line and reads its host key from the log.
fn start(bin: &Path, dir: &Path, config: &str) -> Proc {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let file = dir.join("startup.xml");
    std::fs::write(&file, config).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut child = Command::new(bin)
        .args(["run", "--state-dir"])
        .arg(dir)
        .args(["--netconf-listen", "127.0.0.1:0", "--restconf-listen", "127.0.0.1:0"])
        .args(["--sci-listen", "127.0.0.1:0", "--sci-plain-http"])
        .env("CATS_SMA_ADMIN_PASSWORD", PASSWORD)
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn cats-sma");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut host_key = String::new();
    let (netconf, sci) = loop {
        let line = lines.next().expect("the agent stopped before it was ready").unwrap();
        if let Some(k) = line.split("SSH host key ").nth(1) {
            host_key = k.split(" (SHA256:").next().unwrap_or("").trim().to_owned();
        }
        if let Some(rest) = line.split("NETCONF over SSH listening on ").nth(1) {
            let nc = rest.split([',', ' ', ';']).next().unwrap().parse().unwrap();
            let sci = line.split("SCI reports: http://").nth(1).and_then(|r| r.split('/').next()?.parse().ok());
            break (nc, sci);
        }
    };
    // Keep draining the log so the agent never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines.by_ref() {});
    Proc { child, netconf, sci, host_key }
}

fn csci(s: usize, i: usize) -> String {
    format!("10.{s}.{}.{}:80", (i >> 8) & 255, i & 255)
}

fn report(s: usize, i: usize, seq: u64, gas: u64) -> String {
    format!(
        "{{\"csci-id\":\"{}\",\"cs-id\":\"AR1\",\"seq\":{seq},\"timestamp\":\"{}\",\"gas\":{gas},\"computing-time\":5,\"health\":\"HEALTHY\"}}",
        csci(s, i),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    )
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let bin = args.bin.clone().unwrap_or_else(|| {
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().join("cats-sma")
    });
    let work = tempfile::tempdir().unwrap();
    let (n_subs, n_scis) = (args.subordinates.max(1), args.scis.max(1));
    assert!(n_subs < 256 && n_scis <= 65_536, "at most 255 subordinates of 65 536 SCIs");
    let cache = |n: usize| {
        format!(
            "<cache><max-entries>{n}</max-entries></cache>\
             <validation><anomaly><gas-change-window>1</gas-change-window></anomaly></validation>"
        )
    };
    let t = Instant::now();
    let mut subs = Vec::new();
    for s in 0..n_subs {
        let mut scis = String::with_capacity(n_scis * 120);
        for i in 0..n_scis {
            scis.push_str(&format!(
                "<sci><csci-id>{}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication>\
                 <expected-interval>600000</expected-interval></sci>",
                csci(s, i)
            ));
        }
        let config = format!("<cats-sma xmlns=\"{CATS}\"><scis>{scis}</scis>{}</cats-sma>", cache(n_scis));
        subs.push(start(&bin, &work.path().join(format!("s{s}")), &config));
    }
    println!("{n_subs} subordinates with {n_scis} SCIs each started in {:.1} s", t.elapsed().as_secs_f64());
    let mut seq: Vec<Vec<u64>> = vec![vec![0; n_scis]; n_subs];
    let t = Instant::now();
    for (s, p) in subs.iter().enumerate() {
        let mut http = Http::connect(p.sci.expect("collector")).await;
        for chunk in (0..n_scis).collect::<Vec<_>>().chunks(200) {
            let body: Vec<String> = chunk
                .iter()
                .map(|&i| {
                    seq[s][i] += 1;
                    report(s, i, seq[s][i], 100)
                })
                .collect();
            http.post(&format!("[{}]", body.join(","))).await;
        }
    }
    println!("{} SCI reports accepted by the subordinates in {:.1} s", n_subs * n_scis, t.elapsed().as_secs_f64());

    // The coordinator.
    let list: String = subs
        .iter()
        .enumerate()
        .map(|(s, p)| {
            format!(
                "<subordinate><name>s{s}</name><address>{}</address><port>{}</port><username>admin</username>\
                 <password>{PASSWORD}</password><host-key>{}</host-key></subordinate>",
                p.netconf.ip(),
                p.netconf.port(),
                p.host_key
            )
        })
        .collect();
    let total = n_subs * n_scis;
    let config = format!(
        "<cats-sma xmlns=\"{CATS}\">{}<hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\">{list}</hierarchy></cats-sma>",
        cache(total + 1)
    );
    let t = Instant::now();
    let coord = start(&bin, &work.path().join("coordinator"), &config);
    let target = Target {
        host: coord.netconf.ip().to_string(),
        port: coord.netconf.port(),
        username: "admin".into(),
        auth: ClientAuth::Password(PASSWORD.into()),
        host_key: HostKeyPin::Key(coord.host_key.clone()),
        connect_timeout: Duration::from_secs(30),
        max_message_size: 512 << 20,
    };
    let mut nc = Session::connect(&target).await.expect("NETCONF to the coordinator");
    let get = format!(
        "<get><filter type=\"subtree\"><cats-sma xmlns=\"{CATS}\"><hierarchy xmlns=\"urn:cats-sma:yang:cats-sma-hierarchy\">\
         <subordinate><state><scis-contributed/></state></subordinate></hierarchy></cats-sma></filter></get>"
    );
    loop {
        let r = nc.rpc(&get, Duration::from_secs(60)).await.expect("get");
        let sum: usize =
            r.split("<scis-contributed>").skip(1).filter_map(|x| x.split('<').next()?.parse::<usize>().ok()).sum();
        if sum == total {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(600), "the coordinator has {sum} of {total} SCIs");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let sync = t.elapsed();
    let rss = nc_client::rss_kib(coord.child.id()).unwrap_or(0);
    println!(
        "coordinator synced {total} SCIs from {n_subs} subordinates in {:.2} s (start included); RSS {:.1} MiB ({} B per SCI)",
        sync.as_secs_f64(),
        rss as f64 / 1024.0,
        rss * 1024 / total as u64
    );

    // The coordinator's own on-change subscription to its metric cache.
    let reply = nc
        .rpc(
            &establish_on_change(&format!("<cats-sma xmlns=\"{CATS}\"><metric-cache/></cats-sma>"), 0),
            Duration::from_secs(60),
        )
        .await
        .expect("establish-subscription");
    let id = subscription_id(&reply).unwrap();
    // The sync-on-start push-update of everything comes first.
    let limits = Limits { max_bytes: 512 << 20, max_items: 10_000_000 };
    let limits = &*Box::leak(Box::new(limits));
    loop {
        let m = nc.next_notification().await.expect("notification");
        if matches!(decode(&m, limits), Ok(Event::Snapshot { id: i, .. }) if i == id) {
            break;
        }
    }
    // The baseline, in the same run: the same reports seen one hop down, on the first
    // subordinate's own on-change subscription (report -> subordinate push).
    let mut sub0 = Session::connect(&Target {
        host: subs[0].netconf.ip().to_string(),
        port: subs[0].netconf.port(),
        host_key: HostKeyPin::Key(subs[0].host_key.clone()),
        ..target.clone()
    })
    .await
    .expect("NETCONF to the first subordinate");
    let reply = sub0
        .rpc(
            &establish_on_change(&format!("<cats-sma xmlns=\"{CATS}\"><metric-cache/></cats-sma>"), 0),
            Duration::from_secs(60),
        )
        .await
        .expect("establish-subscription at the subordinate");
    let id0 = subscription_id(&reply).unwrap();
    loop {
        let m = sub0.next_notification().await.expect("notification");
        if matches!(decode(&m, limits), Ok(Event::Snapshot { id: i, .. }) if i == id0) {
            break;
        }
    }
    let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let sent0: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let sent_w = sent.clone();
    let sent0_w = sent0.clone();
    let sent0_r = sent0.clone();
    let secs0 = args.seconds;
    let baseline = tokio::spawn(async move {
        let mut lat = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(secs0 + 5);
        while Instant::now() < deadline {
            let Ok(m) = tokio::time::timeout(deadline - Instant::now(), sub0.next_notification()).await else { break };
            let at = Instant::now();
            let Ok(Event::Changes { changes, .. }) = decode(&m.expect("notification"), limits) else { continue };
            for c in changes {
                if let Change::Sci(v) = c {
                    if let Some(t0) = v.gas.and_then(|g| sent0_r.lock().unwrap().remove(&u64::from(g))) {
                        lat.push(at - t0);
                    }
                }
            }
        }
        lat
    });
    let (rate, secs) = (args.rate.max(1), args.seconds);
    let addrs: Vec<SocketAddr> = subs.iter().map(|p| p.sci.unwrap()).collect();
    let cpu0 = nc_client::cpu_seconds(coord.child.id()).unwrap_or(0.0);
    let writer = tokio::spawn(async move {
        let mut conns = Vec::new();
        for a in &addrs {
            conns.push(Http::connect(*a).await);
        }
        let start = Instant::now();
        let mut posted: u64 = 0;
        while start.elapsed() < Duration::from_secs(secs) {
            let due = start + Duration::from_secs_f64(posted as f64 / rate as f64);
            if due > Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
            let k = posted as usize;
            let (s, i) = (k % addrs.len(), (k / addrs.len() * 7919) % n_scis);
            seq[s][i] += 1;
            // A GAS value of its own identifies the report in the coordinator's push.
            let gas = 1000 + posted;
            let now = Instant::now();
            sent_w.lock().unwrap().insert(gas, now);
            if s == 0 {
                sent0_w.lock().unwrap().insert(gas, now);
            }
            conns[s].post(&report(s, i, seq[s][i], gas)).await;
            posted += 1;
        }
        posted
    });
    let mut latencies = Vec::new();
    let mut updates = 0u64;
    let deadline = Instant::now() + Duration::from_secs(secs + 5);
    while Instant::now() < deadline {
        let Ok(m) = tokio::time::timeout(deadline - Instant::now(), nc.next_notification()).await else { break };
        let at = Instant::now();
        let Ok(Event::Changes { changes, .. }) = decode(&m.expect("notification"), limits) else { continue };
        for c in changes {
            if let Change::Sci(v) = c {
                updates += 1;
                if let Some(t0) = v.gas.and_then(|g| sent.lock().unwrap().remove(&u64::from(g))) {
                    latencies.push(at - t0);
                }
            }
        }
        if writer.is_finished() && sent.lock().unwrap().is_empty() {
            break;
        }
    }
    let posted = writer.await.unwrap();
    let cpu = nc_client::cpu_seconds(coord.child.id()).unwrap_or(0.0) - cpu0;
    println!(
        "{posted} reports posted at {rate}/s; {} seen at the coordinator ({} missing); latency report -> coordinator push: \
         p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        latencies.len(),
        sent.lock().unwrap().len(),
        pct(&mut latencies, 0.5),
        pct(&mut latencies, 0.99),
        pct(&mut latencies, 1.0)
    );
    let mut base = baseline.await.unwrap();
    let (c50, c99, b50, b99) =
        (pct(&mut latencies, 0.5), pct(&mut latencies, 0.99), pct(&mut base, 0.5), pct(&mut base, 0.99));
    println!(
        "baseline, the same reports one hop down (report -> the first subordinate's own push): n={} p50 {b50:.2} ms, \
         p99 {b99:.2} ms; the coordinator hop: p50 x{:.2}, p99 x{:.2}",
        base.len(),
        c50 / b50,
        c99 / b99
    );
    println!(
        "coordinator CPU {:.2} s for {updates} mirrored updates: {:.1} us per update",
        cpu,
        cpu * 1e6 / updates.max(1) as f64
    );
    let _ = std::io::stdout().flush();
    nc.close().await;
}
