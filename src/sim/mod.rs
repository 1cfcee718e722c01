//! `cats-sma simulate`: N simulated SCIs reporting to an agent over HTTP(S), MQTT or gRPC,
//! with a load profile, HMAC credentials, overload control (the SCI as DOIC reacting node,
//! `crate::overload::sci`), a progress line and a summary.
//!
//! Profiles (GAS is the capacity an SCI has left, so load going up is GAS going down):
//! - `steady`: every SCI reports its base GAS (a little spread between SCIs).
//! - `ramp`: GAS falls linearly from the base to a tenth of it over the run, computing
//!   time rises; below 30 % of the base an SCI reports DEGRADED.
//! - `burst`: steady, with a burst every 10 s: for 2 s the SCIs report five times as often
//!   with half their GAS.
//! - `failure`: steady, and `--fail-percent` of the SCIs stop reporting halfway through
//!   (the agent's failure detection takes them STALE, then FAILED).
//! - `cycle`: the load rises and falls on a sine of `--period` seconds shifted by `--phase`
//!   radians, from `--cycle-origin` (Unix seconds; several processes given the same origin
//!   keep their phases): busy = 0.5 + 0.45 sin(2πt/period + phase), GAS = base × (1 − busy),
//!   computing time 4 + 20 × busy ms (the demo's SCIs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::time::Instant;

use crate::cps::transport::{Endpoint, HttpTransport, Request, Transport};
use crate::overload::sci::SciReactor;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SimTransport {
    Http,
    Mqtt,
    Grpc,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    Steady,
    Ramp,
    Burst,
    Failure,
    Cycle,
}

/// `cats-sma simulate` options.
#[derive(Clone, Debug, clap::Args)]
pub struct SimArgs {
    #[arg(long, value_enum, default_value = "http")]
    pub transport: SimTransport,
    /// HTTP: the collector's base URL (`https://127.0.0.1:8470`); gRPC: its URL
    /// (`https://…` or `http://…`); MQTT: the broker as `host:port`.
    #[arg(long)]
    pub target: String,
    /// How many SCIs.
    #[arg(long, default_value_t = 10)]
    pub scis: usize,
    /// Their CSCI-IDs are PREFIX0, PREFIX1, …
    #[arg(long, default_value = "sim-")]
    pub prefix: String,
    /// Explicit CSCI-IDs instead (repeat the option; `--scis` is then their number).
    #[arg(long = "id")]
    pub ids: Vec<String>,
    /// The CS-IDs the SCIs serve, round robin (repeat the option for several).
    #[arg(long = "cs-id", default_values_t = vec!["AR1".to_owned()])]
    pub cs_ids: Vec<String>,
    #[arg(long, value_enum, default_value = "steady")]
    pub profile: Profile,
    /// Seconds to run.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Milliseconds between two reports of one SCI.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// An SCI's base GAS.
    #[arg(long, default_value_t = 500)]
    pub gas: u32,
    /// With `--profile cycle`: seconds of one load cycle, its phase (radians) and the Unix
    /// time the cycle counts from (default: the start).
    #[arg(long, default_value_t = 40.0)]
    pub period: f64,
    #[arg(long, default_value_t = 0.0)]
    pub phase: f64,
    #[arg(long)]
    pub cycle_origin: Option<f64>,
    /// With `--profile failure`: the share of SCIs that stop halfway.
    #[arg(long, default_value_t = 20)]
    pub fail_percent: u32,
    /// A file holding the base64 key of the SCIs' `hmac-sha256` credential: every message
    /// is signed (`Authorization: CATS-HMAC-SHA256 …`). Without it nothing is signed.
    #[arg(long, value_name = "FILE")]
    pub hmac_key_file: Option<std::path::PathBuf>,
    /// The CA that signed the collector's certificate (HTTPS, gRPC over TLS).
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<std::path::PathBuf>,
    /// The agent's csma-id, whose overload reports the SCIs believe (seed 003).
    #[arg(long, default_value = "")]
    pub csma_id: String,
    /// Concurrent senders (connections).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
}

/// What happened, counted by the senders.
#[derive(Default)]
pub struct Tally {
    pub sent: AtomicU64,
    pub accepted: AtomicU64,
    pub rejected: AtomicU64,
    pub errors: AtomicU64,
    /// Reports an overload report told an SCI to skip.
    pub abated: AtomicU64,
    pub reasons: Mutex<std::collections::BTreeMap<String, u64>>,
    /// Answer times (HTTP, gRPC), a bounded sample.
    pub latencies: Mutex<Vec<Duration>>,
    pub first_error: Mutex<Option<String>>,
}

impl Tally {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
    }
    fn rejected(&self, reason: &str, n: u64) {
        self.rejected.fetch_add(n, Ordering::Relaxed);
        *self.reasons.lock().unwrap_or_else(|e| e.into_inner()).entry(reason.to_owned()).or_default() += n;
    }
    fn latency(&self, d: Duration) {
        let mut l = self.latencies.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() < 1_000_000 {
            l.push(d);
        }
    }
}

/// One SCI's metrics at `t` into a run of `d`.
pub fn metrics(args: &SimArgs, i: usize, t: Duration, d: Duration) -> (u32, u32, &'static str) {
    let base = args.gas.saturating_add((i % 7) as u32 * args.gas / 50);
    let f = if d.is_zero() { 0.0 } else { (t.as_secs_f64() / d.as_secs_f64()).min(1.0) };
    match args.profile {
        Profile::Cycle => {
            let now = Utc::now().timestamp_micros() as f64 / 1e6;
            let since = args.cycle_origin.map_or(t.as_secs_f64(), |o| now - o);
            let busy = 0.5 + 0.45 * (2.0 * std::f64::consts::PI * since / args.period.max(0.001) + args.phase).sin();
            let gas = ((f64::from(args.gas) * (1.0 - busy)) as u32).max(1);
            (gas, (4.0 + 20.0 * busy) as u32, "HEALTHY")
        }
        Profile::Ramp => {
            let gas = (f64::from(base) * (1.0 - 0.9 * f)).round() as u32;
            let health = if gas * 10 < base * 3 { "DEGRADED" } else { "HEALTHY" };
            (gas, 10 + (40.0 * f) as u32, health)
        }
        Profile::Burst if in_burst(t) => (base / 2, 20, "HEALTHY"),
        _ => (base, 10, "HEALTHY"),
    }
}

fn in_burst(t: Duration) -> bool {
    t.as_secs() % 10 >= 8
}

/// Whether SCI `i` still reports at `t`.
fn alive(args: &SimArgs, i: usize, t: Duration, d: Duration) -> bool {
    let failing = (i as u64 * 100) < args.scis as u64 * u64::from(args.fail_percent.min(100));
    !(args.profile == Profile::Failure && failing && t * 2 >= d)
}

/// SCI `i`'s CSCI-ID.
pub fn csci_id(args: &SimArgs, i: usize) -> String {
    match args.ids.get(i) {
        Some(id) => id.clone(),
        None => format!("{}{i}", args.prefix),
    }
}

/// SCI `i`'s report with these metrics (from [`metrics`]).
fn report_json(args: &SimArgs, i: usize, seq: u64, (gas, ct, health): (u32, u32, &str)) -> String {
    let r = crate::engine::report::RawReport {
        csci_id: csci_id(args, i),
        cs_id: args.cs_ids[i % args.cs_ids.len().max(1)].clone(),
        sequence: seq,
        timestamp: Utc::now(),
        gas: i64::from(gas),
        computing_time: i64::from(ct),
        health: health.to_owned(),
        cost: None,
        reputation: None,
        security_label: None,
    };
    serde_json::to_string(&r).unwrap_or_default()
}

/// Runs the simulation; prints progress to stderr and returns the summary.
pub async fn run(mut args: SimArgs) -> Result<String, String> {
    if !args.ids.is_empty() {
        args.scis = args.ids.len();
    }
    if args.scis == 0 || args.cs_ids.is_empty() {
        return Err("--scis and --cs-id must not be empty".into());
    }
    let key = match &args.hmac_key_file {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Some(crate::engine::auth::decode_key(&text).ok_or_else(|| format!("{}: not a base64 key", p.display()))?)
        }
        None => None,
    };
    let args = Arc::new(args);
    let tally = Arc::new(Tally::default());
    let duration = Duration::from_secs(args.duration);
    let start = Instant::now();
    let senders = args.connections.clamp(1, args.scis);
    let mut tasks = Vec::new();
    for w in 0..senders {
        let ids: Vec<usize> = (w..args.scis).step_by(senders).collect();
        let (args, tally, key) = (args.clone(), tally.clone(), key.clone());
        let sender = Sender::connect(&args).await?;
        tasks.push(tokio::spawn(async move { worker(args, tally, key, sender, ids, start, duration).await }));
    }
    let progress = {
        let tally = tally.clone();
        tokio::spawn(async move {
            // SAFETY: isatty only inspects the descriptor.
            let tty = unsafe { libc::isatty(2) } == 1;
            let mut n = 0u64;
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                n += 1;
                let line = format!(
                    "{n:>4} s  sent {}  accepted {}  rejected {}  errors {}  abated {}",
                    tally.sent.load(Ordering::Relaxed),
                    tally.accepted.load(Ordering::Relaxed),
                    tally.rejected.load(Ordering::Relaxed),
                    tally.errors.load(Ordering::Relaxed),
                    tally.abated.load(Ordering::Relaxed)
                );
                if tty {
                    eprint!("\r\x1b[K{line}");
                } else if n.is_multiple_of(5) {
                    eprintln!("{line}");
                }
            }
        })
    };
    for t in tasks {
        let _ = t.await;
    }
    progress.abort();
    // SAFETY: as above.
    if unsafe { libc::isatty(2) } == 1 {
        eprintln!();
    }
    Ok(summary(&args, &tally, start.elapsed()))
}

fn summary(args: &SimArgs, t: &Tally, took: Duration) -> String {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let sent = get(&t.sent);
    let mut out = format!(
        "simulated {} SCIs over {:?} for {:.1} s, profile {:?}\nsent {sent} reports ({:.1}/s): accepted {}, rejected {}, \
         transport errors {}, skipped by overload control {}\n",
        args.scis,
        args.transport,
        took.as_secs_f64(),
        args.profile,
        sent as f64 / took.as_secs_f64().max(1e-9),
        get(&t.accepted),
        get(&t.rejected),
        get(&t.errors),
        get(&t.abated),
    );
    let reasons = t.reasons.lock().unwrap_or_else(|e| e.into_inner());
    if !reasons.is_empty() {
        let r: Vec<String> = reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out.push_str(&format!("rejections: {}\n", r.join(", ")));
    }
    let mut l = t.latencies.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if !l.is_empty() {
        l.sort();
        let p = |q: f64| l[((l.len() as f64 * q) as usize).min(l.len() - 1)].as_secs_f64() * 1e3;
        out.push_str(&format!("answer time: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms\n", p(0.5), p(0.99), p(1.0)));
    }
    if let Some(e) = t.first_error.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        out.push_str(&format!("first transport error: {e}\n"));
    }
    out
}

/// One connection to the agent (or the broker).
enum Sender {
    Http(HttpTransport),
    Mqtt(rumqttc::v5::AsyncClient),
    Grpc(crate::engine::collect::grpc::pb::sci_collector_client::SciCollectorClient<tonic::transport::Channel>),
}

impl Sender {
    async fn connect(args: &SimArgs) -> Result<Sender, String> {
        match args.transport {
            SimTransport::Http => {
                let endpoint = Endpoint::parse(&args.target)?;
                let tls = match (&args.cacert, endpoint.https) {
                    (Some(ca), true) => Some((
                        crate::cps::transport::client_config(&crate::cps::transport::TlsFiles {
                            trusted_ca_file: ca.display().to_string(),
                            server_name: None,
                            client_certificate_file: None,
                            client_key_file: None,
                        })?,
                        None,
                    )),
                    (None, true) => return Err("an https target needs --cacert".into()),
                    _ => None,
                };
                Ok(Sender::Http(HttpTransport::new(endpoint, tls, Duration::from_secs(10))?))
            }
            SimTransport::Mqtt => {
                use rumqttc::v5::{AsyncClient, Event, MqttOptions};
                let (host, port) = args.target.rsplit_once(':').ok_or("--target for mqtt is host:port")?;
                let port: u16 = port.parse().map_err(|_| format!("bad port in {}", args.target))?;
                let id = format!("cats-sma-sim-{}-{}", std::process::id(), rand::random::<u32>());
                let mut opts = MqttOptions::new(id, host.trim_matches(['[', ']']), port);
                opts.set_keep_alive(Duration::from_secs(30));
                let (client, mut events) = AsyncClient::new(opts, 1024);
                // The event loop drives the connection; it ends when the client is dropped.
                tokio::spawn(async move {
                    loop {
                        match events.poll().await {
                            Ok(Event::Incoming(_)) | Ok(Event::Outgoing(_)) => {}
                            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                        }
                    }
                });
                Ok(Sender::Mqtt(client))
            }
            SimTransport::Grpc => {
                let mut ep = tonic::transport::Endpoint::from_shared(args.target.clone())
                    .map_err(|e| format!("--target {}: {e}", args.target))?;
                if args.target.starts_with("https://") {
                    let ca = args.cacert.as_ref().ok_or("an https target needs --cacert")?;
                    let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
                    ep = ep
                        .tls_config(
                            tonic::transport::ClientTlsConfig::new()
                                .ca_certificate(tonic::transport::Certificate::from_pem(pem)),
                        )
                        .map_err(|e| e.to_string())?;
                }
                let ch = ep.connect().await.map_err(|e| format!("connect {}: {e}", args.target))?;
                Ok(Sender::Grpc(crate::engine::collect::grpc::pb::sci_collector_client::SciCollectorClient::new(ch)))
            }
        }
    }
}

async fn worker(
    args: Arc<SimArgs>,
    tally: Arc<Tally>,
    key: Option<Vec<u8>>,
    mut sender: Sender,
    ids: Vec<usize>,
    start: Instant,
    duration: Duration,
) {
    let mut reactors: Vec<SciReactor> =
        ids.iter().map(|&i| SciReactor::new(&csci_id(&args, i), &args.csma_id)).collect();
    let mut health: Vec<&'static str> = vec!["HEALTHY"; ids.len()];
    let base_seq = Utc::now().timestamp_micros().max(0) as u64;
    let mut round = 0u64;
    let interval = Duration::from_millis(args.interval_ms.max(1));
    let mut next = start;
    loop {
        let t = next.saturating_duration_since(start);
        if t >= duration {
            return;
        }
        for (k, &i) in ids.iter().enumerate() {
            if !alive(&args, i, t, duration) {
                continue;
            }
            let m = metrics(&args, i, t, duration);
            let h = m.2;
            let changed = health[k] != h;
            health[k] = h;
            if !reactors[k].should_send(changed) {
                tally.abated.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let body = report_json(&args, i, base_seq + round, m);
            tally.sent.fetch_add(1, Ordering::Relaxed);
            send(&args, &tally, &mut sender, &mut reactors[k], i, body, key.as_deref()).await;
        }
        round += 1;
        let step = if args.profile == Profile::Burst && in_burst(t) { interval / 5 } else { interval };
        next += step;
        tokio::time::sleep_until(next).await;
    }
}

async fn send(
    args: &SimArgs,
    tally: &Tally,
    sender: &mut Sender,
    reactor: &mut SciReactor,
    i: usize,
    body: String,
    key: Option<&[u8]>,
) {
    let sign = |bytes: &[u8]| key.map(|k| crate::engine::auth::sign_hmac(k, Utc::now().timestamp(), bytes));
    match sender {
        Sender::Http(h) => {
            let mut headers = vec![
                ("content-type", "application/json".to_owned()),
                (crate::overload::wire::H_OC_SUPPORTED, reactor.announcement()),
            ];
            if let Some(p) = sign(body.as_bytes()) {
                headers.push(("authorization", p));
            }
            let req = Request { method: "POST", path: "/reports".into(), headers, body: body.into_bytes() };
            let t0 = Instant::now();
            match h.send(req).await {
                Ok(r) => {
                    tally.latency(t0.elapsed());
                    reactor.take(
                        r.header(crate::overload::wire::H_OC_SUPPORTED),
                        r.header(crate::overload::wire::H_OC_OLR),
                    );
                    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
                    tally.accepted.fetch_add(v["accepted"].as_u64().unwrap_or(0), Ordering::Relaxed);
                    match v["rejected"].as_array() {
                        Some(rej) if !rej.is_empty() => {
                            for x in rej {
                                tally.rejected(x["reason"].as_str().unwrap_or("unknown"), 1);
                            }
                        }
                        _ if r.status >= 400 => {
                            let reason =
                                v["reason"].as_str().map_or_else(|| format!("http-{}", r.status), str::to_owned);
                            tally.rejected(&reason, 1);
                        }
                        _ => {}
                    }
                }
                Err(e) => tally.error(e.to_string()),
            }
        }
        Sender::Mqtt(c) => {
            use rumqttc::v5::mqttbytes::v5::PublishProperties;
            use rumqttc::v5::mqttbytes::QoS;
            let mut props = PublishProperties {
                user_properties: vec![(crate::overload::wire::H_OC_SUPPORTED.to_owned(), reactor.announcement())],
                ..Default::default()
            };
            if let Some(p) = sign(body.as_bytes()) {
                props.user_properties.push(("authorization".to_owned(), p));
            }
            let topic = format!("cats/sci/{}/report", csci_id(args, i));
            if let Err(e) = c.publish_with_properties(topic, QoS::AtLeastOnce, false, body.into_bytes(), props).await {
                tally.error(e.to_string());
            }
        }
        Sender::Grpc(c) => {
            use crate::engine::collect::grpc::pb;
            use prost::Message;
            let r: crate::engine::report::RawReport = match serde_json::from_str(&body) {
                Ok(r) => r,
                Err(e) => return tally.error(e.to_string()),
            };
            let health = match r.health.as_str() {
                "DEGRADED" => pb::Health::Degraded,
                "UNHEALTHY" => pb::Health::Unhealthy,
                _ => pb::Health::Healthy,
            };
            let batch = pb::ReportBatch {
                reports: vec![pb::Report {
                    csci_id: r.csci_id,
                    cs_id: r.cs_id,
                    sequence: r.sequence,
                    timestamp: Some(prost_types::Timestamp {
                        seconds: r.timestamp.timestamp(),
                        nanos: r.timestamp.timestamp_subsec_nanos() as i32,
                    }),
                    gas: r.gas,
                    computing_time: r.computing_time,
                    health: health as i32,
                    ..pb::Report::default()
                }],
            };
            // The proof covers the batch bytes as sent (docs/sci-protocol.md).
            let proof = sign(&batch.encode_to_vec());
            let mut req = tonic::Request::new(batch);
            if let Some(v) = proof.and_then(|p| p.parse().ok()) {
                req.metadata_mut().insert("authorization", v);
            }
            let t0 = Instant::now();
            match c.batch(req).await {
                Ok(resp) => {
                    tally.latency(t0.elapsed());
                    for v in resp.into_inner().verdicts {
                        if v.accepted {
                            tally.accepted.fetch_add(1, Ordering::Relaxed);
                        } else {
                            tally.rejected(&v.reason, 1);
                        }
                        let (s, o) = (v.oc_supported_features.clone(), v.oc_olr.clone());
                        reactor.take((!s.is_empty()).then_some(s.as_str()), (!o.is_empty()).then_some(o.as_str()));
                    }
                }
                Err(e) => tally.error(format!("{}: {}", e.code(), e.message())),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    fn args(extra: &[&str]) -> SimArgs {
        let mut v = vec!["x", "--target", "http://127.0.0.1:1"];
        v.extend_from_slice(extra);
        Cli::parse_from(v).sim
    }

    #[test]
    fn profiles_shape_gas_health_and_failures() {
        let d = Duration::from_secs(100);
        let ramp = args(&["--profile", "ramp", "--gas", "1000"]);
        assert_eq!(metrics(&ramp, 0, Duration::ZERO, d), (1000, 10, "HEALTHY"));
        let (g, ct, h) = metrics(&ramp, 0, d, d);
        assert_eq!((g, ct, h), (100, 50, "DEGRADED"));
        let burst = args(&["--profile", "burst", "--gas", "1000"]);
        assert_eq!(metrics(&burst, 0, Duration::from_secs(3), d).0, 1000);
        assert_eq!(metrics(&burst, 0, Duration::from_secs(18), d).0, 500);
        let fail = args(&["--profile", "failure", "--scis", "10", "--fail-percent", "20"]);
        let dead: Vec<usize> = (0..10).filter(|&i| !alive(&fail, i, Duration::from_secs(60), d)).collect();
        assert_eq!(dead, vec![0, 1]);
        assert!((0..10).all(|i| alive(&fail, i, Duration::from_secs(10), d)));
        // cycle: a quarter period after the origin with phase 0 the load peaks (busy 0.95).
        let origin = (Utc::now().timestamp_micros() as f64 / 1e6 - 10.0).to_string();
        let cycle = args(&["--profile", "cycle", "--gas", "400", "--period", "40", "--cycle-origin", &origin]);
        let (g, ct, _) = metrics(&cycle, 3, Duration::ZERO, d);
        assert!((19..=21).contains(&g) && (22..=23).contains(&ct), "{g} {ct}");
        let explicit = args(&["--id", "a:1", "--id", "b\"2"]);
        assert_eq!((csci_id(&explicit, 1), csci_id(&args(&[]), 4)), ("b\"2".to_owned(), "sim-4".to_owned()));
        let v: serde_json::Value =
            serde_json::from_str(&report_json(&explicit, 1, 7, metrics(&explicit, 1, Duration::ZERO, d))).unwrap();
        assert_eq!((v["csci-id"].as_str(), v["sequence"].as_u64()), (Some("b\"2"), Some(7)));
    }
}
