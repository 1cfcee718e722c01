//! Seed 003 load generator (a benchmark, not a test): an agent as DOIC reporting node and N
//! SCIs as reacting nodes (`cats_sma::overload::sci::SciReactor`) over HTTP keep-alive.
//! The SCIs offer twice the agent's rate threshold, then half of it; each second prints
//! what they offered and sent and the reduction in force, and at the end how fast the
//! overload was brought under control and ended. `--ignore-reports` runs the same load with
//! SCIs that announce but do not back off (the baseline: the agent stays overloaded).
//!
//! ```sh
//! cargo build --release && cargo build --release --example doic_load
//! target/release/examples/doic_load --scis 200 --threshold 2000 --high 20 --low 15
//! target/release/examples/doic_load --scis 200 --threshold 2000 --high 20 --low 15 --ignore-reports
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use cats_sma::overload::sci::SciReactor;

const CSMA: &str = "doic-load";

#[derive(Parser)]
struct Args {
    /// The agent binary.
    #[arg(long, default_value = "target/release/cats-sma")]
    agent: PathBuf,
    #[arg(long, default_value_t = 200)]
    scis: usize,
    /// The agent's rate-threshold, reports per second.
    #[arg(long, default_value_t = 2000)]
    threshold: u32,
    /// Seconds at twice the threshold.
    #[arg(long, default_value_t = 20)]
    high: u64,
    /// Seconds at half the threshold.
    #[arg(long, default_value_t = 15)]
    low: u64,
    /// SCIs announce but never back off (the baseline).
    #[arg(long)]
    ignore_reports: bool,
}

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn startup(args: &Args) -> String {
    let mut xml = format!(
        "<cats-sma xmlns=\"urn:cats-sma:yang:cats-sma\"><agent><csma-id>{CSMA}</csma-id></agent>\
         <collection><rate-limit><enabled>false</enabled></rate-limit></collection>\
         <overload-control xmlns=\"urn:cats-sma:yang:cats-sma-overload\"><reporting>\
         <evaluation-interval>500</evaluation-interval><rate-threshold>{}</rate-threshold></reporting></overload-control><scis>",
        args.threshold
    );
    for i in 0..args.scis {
        xml.push_str(&format!(
            "<sci><csci-id>sci-{i}</csci-id><cs-id>AR{}</cs-id><authentication>none</authentication></sci>",
            i % 10
        ));
    }
    xml.push_str("</scis></cats-sma>");
    xml
}

fn report(csci: &str, cs: &str, seq: u64) -> String {
    format!(
        r#"{{"csci-id":"{csci}","cs-id":"{cs}","seq":{seq},"timestamp":"{}","gas":300,"computing-time":5,"health":"HEALTHY"}}"#,
        chrono::Utc::now().to_rfc3339()
    )
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("startup.xml"), startup(&args)).unwrap();
    let sci = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _agent = Reaped(
        Command::new(&args.agent)
            .args(["run", "--state-dir"])
            .arg(&state)
            .args(["--netconf-listen", &format!("127.0.0.1:{}", free_port()), "--sci-listen", &sci.to_string()])
            .args(["--restconf-listen", &format!("127.0.0.1:{}", free_port()), "--sci-plain-http"])
            .env("CATS_SMA_ADMIN_PASSWORD", "bench")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e} (cargo build --release first)", args.agent.display())),
    );
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let url = format!("http://{sci}/reports");
    // Ready: the collector answers.
    let t0 = Instant::now();
    loop {
        let req = hyper::Request::post(&url)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(report("sci-0", "AR0", 0))))
            .unwrap();
        if client.request(req).await.is_ok() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "the agent did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each SCI offers one report per period: twice the threshold over all SCIs, then half.
    let high = Duration::from_secs_f64(args.scis as f64 / (2.0 * f64::from(args.threshold)));
    let low = high * 4;
    let period_ns = Arc::new(AtomicU64::new(high.as_nanos() as u64));
    let (offered, sent, stop) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let reduction_sum = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..args.scis {
        let (client, url, period_ns, offered, sent, stop, reduction_sum) = (
            client.clone(),
            url.clone(),
            period_ns.clone(),
            offered.clone(),
            sent.clone(),
            stop.clone(),
            reduction_sum.clone(),
        );
        let ignore = args.ignore_reports;
        tasks.push(tokio::spawn(async move {
            let (id, cs) = (format!("sci-{i}"), format!("AR{}", i % 10));
            let mut me = SciReactor::new(&id, CSMA);
            let announce = me.announcement();
            let mut next = tokio::time::Instant::now();
            let mut seq = 1;
            let mut last_reduction = 0u64;
            while !stop.load(Ordering::Relaxed) {
                next += Duration::from_nanos(period_ns.load(Ordering::Relaxed));
                tokio::time::sleep_until(next).await;
                offered.fetch_add(1, Ordering::Relaxed);
                if !ignore && !me.should_send(false) {
                    continue;
                }
                seq += 1;
                let req = hyper::Request::post(&url)
                    .header("content-type", "application/json")
                    .header("x-cats-oc-supported-features", &announce)
                    .body(Full::new(Bytes::from(report(&id, &cs, seq))))
                    .unwrap();
                let Ok(resp) = client.request(req).await else { continue };
                sent.fetch_add(1, Ordering::Relaxed);
                let h = resp.headers();
                let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_owned);
                let (s, o) = (get("x-cats-oc-supported-features"), get("x-cats-oc-olr"));
                let _ = resp.into_body().collect().await;
                me.take(s.as_deref(), o.as_deref());
                let r = u64::from(me.reduction());
                reduction_sum.fetch_add(r.wrapping_sub(last_reduction), Ordering::Relaxed);
                last_reduction = r;
            }
        }));
    }
    println!("second  offered/s  sent/s  mean-reduction%  (threshold {}/s, {} SCIs)", args.threshold, args.scis);
    let start = Instant::now();
    let (mut last_o, mut last_s) = (0, 0);
    let (mut controlled_at, mut ended_at, mut steady) = (None, None, Vec::new());
    for second in 1..=args.high + args.low {
        if second == args.high + 1 {
            period_ns.store(low.as_nanos() as u64, Ordering::Relaxed);
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(start + Duration::from_secs(second))).await;
        let (o, s) = (offered.load(Ordering::Relaxed), sent.load(Ordering::Relaxed));
        let (o_rate, s_rate) = (o - last_o, s - last_s);
        (last_o, last_s) = (o, s);
        let mean = reduction_sum.load(Ordering::Relaxed) as f64 / args.scis as f64;
        println!("{second:>6}  {o_rate:>9}  {s_rate:>6}  {mean:>15.1}");
        if second <= args.high {
            if controlled_at.is_none() && (s_rate as f64) <= 1.1 * f64::from(args.threshold) {
                controlled_at = Some(second);
            }
            if second + 5 > args.high {
                steady.push((o_rate, s_rate));
            }
        } else if ended_at.is_none() && mean < 0.5 {
            ended_at = Some(second - args.high);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let (so, ss): (u64, u64) = steady.iter().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    println!(
        "offered {:.0}/s at twice the threshold; sent {:.0}/s in its last 5 s ({:.2}x the threshold); \
         at or under 1.1x the threshold from second {}; the reduction ended {} s after the load halved",
        so as f64 / steady.len().max(1) as f64,
        ss as f64 / steady.len().max(1) as f64,
        ss as f64 / steady.len().max(1) as f64 / f64::from(args.threshold),
        controlled_at.map_or("never".into(), |s| s.to_string()),
        ended_at.map_or("never".into(), |s| s.to_string()),
    );
}
