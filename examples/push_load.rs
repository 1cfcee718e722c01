//! YANG-Push load generator (a benchmark, not a test). Starts a cats-sma agent in this
//! process (loopback NETCONF and SCI collector, a temporary state directory), registers
//! `--scis` SCIs, subscribes over a real NETCONF/SSH session (russh client), then:
//!
//! - `on-change`: posts SCI reports over HTTP at `--rate` changes per second (each report
//!   a new GAS value of the next SCI, `--batch` reports per POST) for `--seconds`, and
//!   measures (a) the agent-side latency from the report entering the engine to the
//!   push-change-update being queued for the session's SSH writer (`push::probe`), and
//!   (b) the client-side latency from posting the report to receiving the edit carrying
//!   its value; and the changes per second delivered. `--rate 0` posts as fast as it can
//!   (throughput).
//! - `periodic`: a periodic subscription to the whole metric cache at `--period-cs`; every
//!   SCI reports once first; prints per push-update its size, entries and the interval.
//!
//! ```sh
//! cargo build --release --example push_load
//! target/release/examples/push_load on-change --scis 1000 --rate 10000 --seconds 10
//! target/release/examples/push_load on-change --scis 1000 --rate 0 --seconds 10
//! target/release/examples/push_load periodic --scis 100000 --period-cs 100 --seconds 10
//! target/release/examples/push_load periodic --scis 10000 --subscribers 10 --period-cs 100 --seconds 20
//! ```
//!
//! `periodic --subscribers N` opens N sessions, each with the same periodic subscription,
//! and prints the lateness of every push-update against its schedule (the first arrival
//! plus k periods), p50/p99 over all subscribers.

#[path = "support/http_client.rs"]
mod http_client;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use http_client::Http;
use russh::client;
use russh::ChannelMsg;

const NS_BASE: &str = "urn:ietf:params:xml:ns:netconf:base:1.0";
const CATS: &str = "urn:cats-sma:yang:cats-sma";
const SN: &str = "urn:ietf:params:xml:ns:yang:ietf-subscribed-notifications";
const YP: &str = "urn:ietf:params:xml:ns:yang:ietf-yang-push";
const PASSWORD: &str = "push-bench";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    OnChange,
    Periodic,
}

#[derive(Parser, Debug)]
#[command(about = "YANG-Push latency and throughput against an in-process cats-sma")]
struct Args {
    #[arg(value_enum)]
    mode: Mode,
    #[arg(long, default_value_t = 1000)]
    scis: usize,
    /// Changes per second to post (0 = as fast as possible).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Reports per HTTP POST.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Period of the periodic subscription, centiseconds.
    #[arg(long, default_value_t = 100)]
    period_cs: u32,
    /// Dampening period of the on-change subscription, centiseconds.
    #[arg(long, default_value_t = 0)]
    dampening_cs: u32,
    /// Periodic: subscriptions, each on a NETCONF session of its own.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Register the SCIs in the startup file instead of one edit-config (a bulk edit of
    /// 100 000 SCIs takes minutes, issue 14 goal 4).
    #[arg(long)]
    startup: bool,
}

struct AnyHostKey;

impl client::Handler for AnyHostKey {
    type Error = russh::Error;
    async fn check_server_key(&mut self, _key: &russh::keys::PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// A NETCONF session with base:1.1 chunked framing.
struct Nc {
    _handle: client::Handle<AnyHostKey>,
    channel: russh::Channel<client::Msg>,
    buf: Vec<u8>,
    next_id: u64,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Nc {
    async fn connect(addr: std::net::SocketAddr) -> Nc {
        let config = client::Config { nodelay: true, window_size: 16 * 1024 * 1024, ..Default::default() };
        let mut handle = client::connect(Arc::new(config), addr, AnyHostKey).await.expect("SSH connect");
        assert!(handle.authenticate_password("admin", PASSWORD).await.expect("auth").success());
        let channel = handle.channel_open_session().await.expect("channel");
        channel.request_subsystem(true, "netconf").await.expect("subsystem");
        let mut nc = Nc { _handle: handle, channel, buf: Vec::new(), next_id: 1 };
        // The server hello is end-of-message framed.
        loop {
            if let Some(p) = find(&nc.buf, b"]]>]]>") {
                nc.buf.drain(..p + 6);
                break;
            }
            nc.fill().await;
        }
        let hello = format!(
            "<hello xmlns=\"{NS_BASE}\"><capabilities><capability>urn:ietf:params:netconf:base:1.1</capability></capabilities></hello>]]>]]>"
        );
        nc.channel.data(hello.as_bytes()).await.expect("hello");
        nc
    }

    async fn fill(&mut self) {
        match self.channel.wait().await {
            Some(ChannelMsg::Data { data }) => self.buf.extend_from_slice(&data),
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => panic!("the server closed the session"),
            Some(_) => {}
        }
    }

    /// The next chunked message.
    async fn message(&mut self) -> String {
        loop {
            if let Some((msg, used)) = take_chunked(&self.buf) {
                self.buf.drain(..used);
                return String::from_utf8(msg).expect("UTF-8");
            }
            self.fill().await;
        }
    }

    async fn rpc(&mut self, op: &str) -> String {
        let id = self.next_id;
        self.next_id += 1;
        let msg = format!("<rpc xmlns=\"{NS_BASE}\" message-id=\"{id}\">{op}</rpc>");
        let frame = format!("\n#{}\n{msg}\n##\n", msg.len());
        self.channel.data(frame.as_bytes()).await.expect("send");
        loop {
            let m = self.message().await;
            if m.contains("<rpc-reply") {
                assert!(!m.contains("<rpc-error>"), "rpc failed: {m}");
                return m;
            }
        }
    }
}

fn take_chunked(buf: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut msg = Vec::new();
    let mut pos = 0;
    loop {
        if buf.len() < pos + 4 {
            return None;
        }
        if buf[pos + 2] == b'#' {
            return Some((msg, pos + 4));
        }
        let nl = buf[pos + 2..].iter().position(|&b| b == b'\n')? + pos + 2;
        let size: usize = std::str::from_utf8(&buf[pos + 2..nl]).ok()?.parse().ok()?;
        if buf.len() < nl + 1 + size {
            return None;
        }
        msg.extend_from_slice(&buf[nl + 1..nl + 1 + size]);
        pos = nl + 1 + size;
    }
}

fn csci(i: usize) -> String {
    format!("10.{}.{}.{}:80", (i >> 16) & 255, (i >> 8) & 255, i & 255)
}

fn report(i: usize, seq: u64, gas: u64) -> String {
    format!(
        "{{\"csci-id\":\"{}\",\"cs-id\":\"AR1\",\"seq\":{seq},\"timestamp\":\"{}\",\"gas\":{gas},\"computing-time\":5,\"health\":\"HEALTHY\"}}",
        csci(i),
        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
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

fn summary(name: &str, v: &mut [Duration]) {
    println!(
        "{name}: n={} p50={:.3} ms p90={:.3} ms p99={:.3} ms max={:.3} ms",
        v.len(),
        pct(v, 0.50),
        pct(v, 0.90),
        pct(v, 0.99),
        pct(v, 1.0)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().expect("temp dir");
    std::env::set_var("CATS_SMA_ADMIN_PASSWORD", PASSWORD);
    let boot = cats_sma::config::Bootstrap {
        state_dir: Some(dir.path().join("state")),
        netconf: cats_sma::config::NetconfSettings {
            listen: vec!["127.0.0.1:0".parse().unwrap()],
            ..Default::default()
        },
        sci_listen: Some("127.0.0.1:0".parse().unwrap()),
        // The load is measured in plain text (docs/performance.md compares it with TLS).
        sci_plain_http: true,
        ..Default::default()
    };
    let config_xml = |scis: &str| {
        format!(
            "<cats-sma xmlns=\"{CATS}\"><scis>{scis}</scis>\
             <cache><max-entries>{}</max-entries></cache>\
             <validation><anomaly><gas-change-window>1</gas-change-window></anomaly></validation></cats-sma>",
            args.scis.max(1)
        )
    };
    let mut scis = String::with_capacity(args.scis * 80);
    for i in 0..args.scis {
        scis.push_str(&format!(
            "<sci><csci-id>{}</csci-id><cs-id>AR1</cs-id><authentication>none</authentication></sci>",
            csci(i)
        ));
    }
    if args.startup {
        use std::os::unix::fs::PermissionsExt;
        let state = dir.path().join("state");
        std::fs::create_dir_all(&state).expect("state dir");
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).expect("state dir mode");
        let file = state.join("startup.xml");
        std::fs::write(&file, config_xml(&scis)).expect("startup file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("startup mode");
    }
    let t = Instant::now();
    let agent = cats_sma::agent::Agent::start(boot).await.expect("agent");
    let sci_addr = agent.sci_http.expect("collector");
    let mut probe = cats_sma::push::probe::enable().expect("probe");
    let mut nc = Nc::connect(agent.netconf_addrs[0]).await;

    // Configuration: the SCIs, a cache that holds them all, anomaly windows short enough
    // that every GAS change is accepted.
    if !args.startup {
        nc.rpc(&format!(
            "<edit-config><target><running/></target><config>{}</config></edit-config>",
            config_xml(&scis)
        ))
        .await;
    }
    println!("configured {} SCIs in {:.2} s", args.scis, t.elapsed().as_secs_f64());
    let mut http = Http::connect(sci_addr).await;
    let mut seq = vec![0u64; args.scis];
    let mut gas_counter: u64 = 1;
    for chunk in (0..args.scis).collect::<Vec<_>>().chunks(200) {
        let body: Vec<String> = chunk
            .iter()
            .map(|&i| {
                seq[i] += 1;
                report(i, seq[i], 1)
            })
            .collect();
        http.post(&format!("[{}]", body.join(","))).await;
    }

    match args.mode {
        Mode::Periodic => {
            // Every subscriber on a session of its own; lateness of the k-th push-update is
            // its arrival after the first one's plus k periods (RFC 8641 section 3.1: updates
            // are sent at the anchor time plus multiples of the period).
            let period = Duration::from_millis(u64::from(args.period_cs) * 10);
            let end = Instant::now() + Duration::from_secs(args.seconds);
            let mut tasks = Vec::new();
            for s in 0..args.subscribers.max(1) {
                let mut c = Nc::connect(agent.netconf_addrs[0]).await;
                let est = c
                    .rpc(&format!(
                        "<establish-subscription xmlns=\"{SN}\" xmlns:yp=\"{YP}\"><yp:datastore xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\">ds:operational</yp:datastore>\
                         <yp:datastore-xpath-filter xmlns:c=\"{CATS}\">/c:cats-sma/c:metric-cache</yp:datastore-xpath-filter>\
                         <yp:periodic><yp:period>{}</yp:period></yp:periodic></establish-subscription>",
                        args.period_cs
                    ))
                    .await;
                if s == 0 {
                    println!("established: {}", est.trim());
                }
                tasks.push(tokio::spawn(async move {
                    let mut arrivals: Vec<(Instant, usize, usize)> = Vec::new();
                    while Instant::now() < end {
                        let m = match tokio::time::timeout(end - Instant::now(), c.message()).await {
                            Ok(m) => m,
                            Err(_) => break,
                        };
                        if m.contains("<push-update") {
                            arrivals.push((Instant::now(), m.len(), m.matches("<entry>").count()));
                        }
                    }
                    arrivals
                }));
            }
            let mut lateness = Vec::new();
            let mut intervals = Vec::new();
            for (s, t) in tasks.into_iter().enumerate() {
                let arrivals = t.await.expect("subscriber");
                let Some(&(first, ..)) = arrivals.first() else {
                    println!("subscriber {s}: no push-update");
                    continue;
                };
                for (k, &(at, len, entries)) in arrivals.iter().enumerate() {
                    let due = first + period * k as u32;
                    lateness.push(at.saturating_duration_since(due));
                    if k > 0 {
                        intervals.push(at - arrivals[k - 1].0);
                    }
                    if s == 0 {
                        println!(
                            "push-update {k}: {:.1} MB, {entries} entries, {:.3} s late",
                            len as f64 / 1e6,
                            at.saturating_duration_since(due).as_secs_f64()
                        );
                    }
                }
                println!("subscriber {s}: {} push-updates", arrivals.len());
            }
            summary("push-update interval", &mut intervals);
            summary("push-update lateness (after the first's anchor)", &mut lateness);
        }
        Mode::OnChange => {
            nc.rpc(&format!(
                "<establish-subscription xmlns=\"{SN}\" xmlns:yp=\"{YP}\"><yp:datastore xmlns:ds=\"urn:ietf:params:xml:ns:yang:ietf-datastores\">ds:operational</yp:datastore>\
                 <yp:datastore-xpath-filter xmlns:c=\"{CATS}\">/c:cats-sma/c:metric-cache/c:entry</yp:datastore-xpath-filter>\
                 <yp:on-change><yp:dampening-period>{}</yp:dampening-period><yp:sync-on-start>false</yp:sync-on-start></yp:on-change></establish-subscription>",
                args.dampening_cs
            ))
            .await;
            // Drop what the initial reports still produce.
            tokio::time::sleep(Duration::from_millis(300)).await;
            while probe.try_recv().is_ok() {}
            let sent: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
            let sent_w = sent.clone();
            let (rate, batch, secs, n) = (args.rate, args.batch.max(1), args.seconds, args.scis);
            let start_gas = gas_counter + 1_000_000;
            gas_counter = start_gas;
            let writer = tokio::spawn(async move {
                let start = Instant::now();
                let mut posted: u64 = 0;
                let mut next = 0usize;
                while start.elapsed() < Duration::from_secs(secs) {
                    if rate > 0 {
                        let due = start + Duration::from_secs_f64(posted as f64 / rate as f64);
                        if due > Instant::now() {
                            tokio::time::sleep_until(due.into()).await;
                        }
                    }
                    let mut body = Vec::with_capacity(batch);
                    let now = Instant::now();
                    {
                        let mut s = sent_w.lock().unwrap();
                        for _ in 0..batch {
                            let i = next % n;
                            next += 1;
                            seq[i] += 1;
                            gas_counter += 1;
                            s.insert(gas_counter, now);
                            body.push(report(i, seq[i], gas_counter));
                        }
                    }
                    http.post(&format!("[{}]", body.join(","))).await;
                    posted += batch as u64;
                }
                (posted, start.elapsed())
            });
            let mut client_lat = Vec::new();
            let mut edits = 0u64;
            let t0 = Instant::now();
            let deadline = t0 + Duration::from_secs(args.seconds + 2);
            let mut last_edit = t0;
            while Instant::now() < deadline {
                let Ok(m) = tokio::time::timeout_at(deadline.into(), nc.message()).await else { break };
                if !m.contains("<push-change-update") {
                    if m.contains("subscription-suspended") {
                        println!("subscription suspended");
                    }
                    continue;
                }
                let now = Instant::now();
                let s = sent.lock().unwrap();
                for part in m.split("<gas>").skip(1) {
                    let Some(v) = part.split('<').next().and_then(|v| v.parse::<u64>().ok()) else { continue };
                    edits += 1;
                    last_edit = now;
                    if let Some(t) = s.get(&v) {
                        client_lat.push(now - *t);
                    }
                }
            }
            let (posted, took) = writer.await.unwrap();
            let mut agent_lat = Vec::new();
            while let Ok(d) = probe.try_recv() {
                agent_lat.push(d);
            }
            println!(
                "posted {posted} changes in {:.2} s ({:.0}/s); received {edits} edits ({:.0}/s over {:.2} s)",
                took.as_secs_f64(),
                posted as f64 / took.as_secs_f64(),
                edits as f64 / (last_edit - t0).as_secs_f64().max(1e-9),
                (last_edit - t0).as_secs_f64()
            );
            summary("agent: report in engine -> push-change-update queued for SSH", &mut agent_lat);
            summary("client: report posted -> edit received", &mut client_lat);
        }
    }
    agent.shutdown().await;
}
