//! Load generator for the C-PS adapters: advertisements per second from one C-SMA to one
//! reference C-PS on loopback, for several batch sizes, with HMAC signing, over REST (with
//! and without gzip) and / or the gRPC stream (protobuf, one Advertisement per batch, each
//! acknowledged before the next, as REST's POSTs). Everything runs in this process; bounded
//! in count, it stops by itself.
//!
//! `cargo run --release --example cps_load -- [ADVERTISEMENTS] [SERVICES] [--transport rest|grpc|both]`
//! (defaults 20000, 10 and rest: each advertisement is a delta of one of SERVICES services).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cats_sma::cps::auth::{hex, Psk};
use cats_sma::cps::grpc::{GrpcEndpoint, GrpcLink};
use cats_sma::cps::reference::config::KeyConfig;
use cats_sma::cps::reference::{CpsConfig, CpsState, RefCps, RefGrpc};
use cats_sma::cps::session::{Hooks, Identity, PeerSettings, Role};
use cats_sma::cps::transport::{Endpoint, HttpTransport};
use cats_sma::cps::Adapters;
use cats_sma::engine::model::{Health, SiteMetrics};
use cats_sma::engine::update::{Advertisement, AdvertisementKind, Audience, Trigger};
use tokio::sync::broadcast;

const SECRET: &[u8] = b"load generator pre-shared key 32";

fn delta(seq: u64, cs: usize, gas: u32) -> Arc<Advertisement> {
    Arc::new(Advertisement {
        seq,
        kind: AdvertisementKind::Delta,
        audience: Audience::All,
        trigger: Trigger::MetricChange,
        sites: vec![SiteMetrics {
            cs_id: format!("CS{cs}"),
            gas,
            computing_time_ms: 5,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
            sci_count: 3,
        }],
        withdrawn: vec![],
        sci_withdrawn: vec![],
        scis: vec![],
        generated_at: chrono::Utc::now(),
    })
}

async fn run(n: u64, services: usize, batch: usize, gzip: bool, grpc: bool) -> (f64, u64, u64) {
    let config = CpsConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        keys: vec![KeyConfig { id: "k".into(), secret: hex(SECRET) }],
        ..CpsConfig::default()
    };
    let cps = RefCps::start(config.listen, CpsState::new(config).unwrap()).await.unwrap();
    let stream = if grpc {
        Some(RefGrpc::start("127.0.0.1:0".parse().unwrap(), cps.state.clone()).await.unwrap())
    } else {
        None
    };
    let (tx, rx) = broadcast::channel::<Arc<Advertisement>>(n as usize + 16);
    let seq0 = 1_000_000u64;
    let full_tx = tx.clone();
    let hooks = Hooks {
        // The controller's answer to a resync: an (empty) full snapshot for the peer.
        resync: Arc::new(move |peer: &str| {
            let _ = full_tx.send(Arc::new(Advertisement {
                seq: seq0,
                kind: AdvertisementKind::Full,
                audience: Audience::Peer(peer.to_owned()),
                trigger: Trigger::Resync,
                sites: vec![],
                withdrawn: vec![],
                sci_withdrawn: vec![],
                scis: vec![],
                generated_at: chrono::Utc::now(),
            }));
        }),
        unreachable: Arc::new(|u| eprintln!("unreachable: {}", u.error)),
        refresh_hint: Arc::new(|_, _| {}),
        sci_detail: Arc::new(|_| {}),
    };
    let adapters = Adapters::start(Identity { csma_id: "csma".into(), site_id: "site".into() }, rx, hooks);
    let allowed: BTreeSet<String> = (0..services).map(|i| format!("CS{i}")).collect();
    let settings = PeerSettings {
        name: "cps".into(),
        url: match &stream {
            Some(g) => format!("grpc://{}", g.addr),
            None => format!("http://{}", cps.addr),
        },
        role: Role::Primary,
        priority: 100,
        allowed,
        psk: Some(Psk { key_id: "k".into(), secret: SECRET.to_vec() }),
        gzip,
        buffer_size: n as usize + 16,
        batch_size: batch,
        backoff_initial: Duration::from_millis(10),
        backoff_max: Duration::from_millis(100),
        encoding: cats_sma::cps::codec::Encoding::Json,
        granularity: cats_sma::cps::wire::Granularity::Site,
        source_id: None,
    };
    if grpc {
        let endpoint = GrpcEndpoint::parse(&settings.url).unwrap();
        adapters.start_peer(settings, Arc::new(GrpcLink::new(endpoint, None, Duration::from_secs(10), None).unwrap()));
    } else {
        let endpoint = Endpoint::parse(&settings.url).unwrap();
        adapters.start_peer(settings, Arc::new(HttpTransport::new(endpoint, None, Duration::from_secs(10)).unwrap()));
    }
    let acked = |s: &CpsState| s.cst.lock().unwrap().sites.get("site").map_or(0, |e| e.acked_sequence);
    while acked(&cps.state) < seq0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let requests0 = cps.state.requests.load(std::sync::atomic::Ordering::Relaxed);
    let start = Instant::now();
    let last = seq0 + n;
    for i in 1..=n {
        let _ = tx.send(delta(seq0 + i, (i as usize) % services, 100 + (i % 500) as u32));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked(&cps.state) < last {
        assert!(Instant::now() < deadline, "not delivered within 120 s");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let secs = start.elapsed().as_secs_f64();
    let requests = cps.state.requests.load(std::sync::atomic::Ordering::Relaxed) - requests0;
    let failed = adapters.peer("cps").map_or(0, |p| p.status.lock().unwrap().failed);
    adapters.shutdown();
    if let Some(g) = stream {
        g.stop().await;
    }
    cps.stop().await;
    (n as f64 / secs, requests, failed)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut positional = Vec::new();
    let mut transport = "rest".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--transport" {
            transport = args.next().unwrap_or_default();
        } else {
            positional.push(a);
        }
    }
    let (rest, grpc) = match transport.as_str() {
        "rest" => (true, false),
        "grpc" => (false, true),
        "both" => (true, true),
        other => {
            eprintln!("cps_load: --transport is rest, grpc or both, not '{other}'");
            std::process::exit(2);
        }
    };
    let n: u64 = positional.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let services: usize = positional.get(1).and_then(|a| a.parse().ok()).unwrap_or(10);
    println!("{n} advertisements (deltas of 1 of {services} services), one C-SMA -> one reference C-PS, loopback, HMAC-SHA256");
    println!("{:>9} {:>6} {:>5} {:>14} {:>9} {:>7}", "transport", "batch", "gzip", "adverts/s", "requests", "failed");
    for &batch in &[1usize, 10, 100, 1000] {
        let count = if batch == 1 { n.min(5_000) } else { n };
        let mut runs = Vec::new();
        if rest {
            runs.extend([("rest", false), ("rest", true)]);
        }
        if grpc {
            runs.push(("grpc", false));
        }
        for (name, gzip) in runs {
            let (rate, requests, failed) = run(count, services, batch, gzip, name == "grpc").await;
            println!(
                "{name:>9} {batch:>6} {:>5} {rate:>14.0} {requests:>9} {failed:>7}",
                if gzip { "yes" } else { "no" }
            );
        }
    }
}
