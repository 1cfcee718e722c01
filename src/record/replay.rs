//! `cats-sma replay FILE [--with-config CONFIG]`: a fresh metric engine, update controller
//! and datastore (the same configuration consumer as the agent) run on a recording under
//! paused tokio time on one thread; every event goes in at its recorded time, the engine's
//! own timers (TTL, grace, aging, maintenance windows, the controller's batching and
//! heartbeats) fire at theirs. Printed: the advertisements (one line per service, SCI or
//! withdrawal) and the engine's notifications (SCI state changes, anomalies, auth
//! failures), each with its time since the recording's start.
//!
//! Determinism: one thread, paused time, the cache's hash seed fixed, timers due at an
//! event's instant run before the event (as they would have had the event come a moment
//! later), and lines of one instant from the same source kept in their order. The same
//! recording gives the same bytes on every run.
//!
//! `--with-config` replays against another configuration: it replaces the recorded one at
//! the start and every recorded configuration change is skipped. The output is the
//! difference between what the recorded configuration and the other one advertise, `-`
//! for lines only the recorded run has and `+` for lines only the other has.
//!
//! Not replayed: active probe results, pull requests the engine makes (the pulled reports
//! themselves are recorded, transport `pull`), reports mirrored from subordinates.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{read, transport_name, Event, Line};
use crate::datastore::{Datastore, Datastores, Source};
use crate::engine::core::{Proof, Sender};
use crate::engine::update::{Advertisement, AdvertisementKind};
use crate::engine::validate::Rejection;
use crate::engine::Engine;

/// How long the replay runs on after the last event (timers: TTLs, batching, heartbeats).
pub const DEFAULT_TAIL: Duration = Duration::from_secs(5);
/// The longest tail: a day.
const MAX_TAIL: Duration = Duration::from_secs(86_400);

/// The session id the replay's configuration edits are made as.
const REPLAY_SESSION: crate::datastore::SessionId = 0;

/// One printed line: when, and its text (without the time).
type Out = Arc<Mutex<Vec<(Duration, String)>>>;

/// Replays `path`; the output lines.
pub fn run(path: &Path, config: Option<&Path>, tail: Duration) -> Result<Vec<String>, String> {
    let (wall, events) = read(path)?;
    let other = match config {
        Some(p) => Some(std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    crate::engine::cache::fix_hash_seed(0x0c47_5eed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let lines = rt.block_on(replay(wall, events, other, tail))?;
    Ok(lines)
}

/// Replays with the recorded configuration and with `config`, and prints the difference
/// in what is advertised.
pub fn diff(path: &Path, config: &Path, tail: Duration) -> Result<Vec<String>, String> {
    // What is advertised, without the advertisement's number (the two runs number theirs).
    let keep = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .filter(|l| l.contains(" advertise ") || l.contains(" withdraw "))
            .map(|l| l.split(' ').filter(|w| !w.starts_with('#')).collect::<Vec<_>>().join(" "))
            .collect()
    };
    let a = keep(run(path, None, tail)?);
    let b = keep(run(path, Some(config), tail)?);
    // Per instant: the lines one side has and the other has not (as multisets).
    let group = |v: &[String]| {
        let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for l in v {
            let (t, rest) = l.split_once(' ').unwrap_or((l, ""));
            m.entry(t.to_owned()).or_default().push(rest.to_owned());
        }
        m
    };
    let (ga, gb) = (group(&a), group(&b));
    let mut times: Vec<&String> = ga.keys().chain(gb.keys()).collect();
    times.sort_by(|x, y| time_of(x).total_cmp(&time_of(y)).then(x.cmp(y)));
    times.dedup();
    let mut out = Vec::new();
    for t in times {
        let mut only_b: Vec<&String> = gb.get(t).map(|v| v.iter().collect()).unwrap_or_default();
        for l in ga.get(t).into_iter().flatten() {
            match only_b.iter().position(|x| *x == l) {
                Some(i) => {
                    only_b.remove(i);
                }
                None => out.push(format!("- {t} {l}")),
            }
        }
        out.extend(only_b.into_iter().map(|l| format!("+ {t} {l}")));
    }
    Ok(out)
}

fn time_of(t: &str) -> f64 {
    t.trim_start_matches('+').trim_end_matches('s').parse().unwrap_or(0.0)
}

fn stamp(d: Duration) -> String {
    format!("+{}.{:06}s", d.as_secs(), d.subsec_micros())
}

async fn replay(
    wall: chrono::DateTime<chrono::Utc>,
    events: Vec<Line>,
    other: Option<Vec<u8>>,
    tail: Duration,
) -> Result<Vec<String>, String> {
    let origin = Instant::now();
    let out: Out = Default::default();
    let since = move || Instant::now().saturating_duration_since(origin);
    let sink_out = out.clone();
    let sink: crate::engine::NotificationSink = Arc::new(move |_module, name, body: String| {
        let body: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
        sink_out.lock().unwrap_or_else(|e| e.into_inner()).push((since(), format!("notify {name} {body}")));
    });
    let engine = Engine::start(crate::engine::clock::Clock::starting_at(wall), sink);
    let ds = Arc::new(Datastores::open(crate::yang::context(), None).map_err(|e| e.to_string())?);
    register_engine_consumer(&ds, &engine)?;
    let mut adverts = engine.updates.subscribe();
    let adv_out = out.clone();
    let printer = tokio::spawn(async move {
        let mut first_seq = None;
        loop {
            match adverts.recv().await {
                Ok(a) => {
                    let base = *first_seq.get_or_insert(a.seq);
                    let t = since();
                    let mut o = adv_out.lock().unwrap_or_else(|e| e.into_inner());
                    for l in advertisement_lines(&a, a.seq - base) {
                        o.push((t, l));
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    adv_out.lock().unwrap_or_else(|e| e.into_inner()).push((since(), format!("lagged {n}")));
                }
                Err(_) => return,
            }
        }
    });
    let mut configured = false;
    if let Some(xml) = &other {
        apply_config(&ds, xml).map_err(|e| format!("--with-config: {e}"))?;
        configured = true;
    }
    let last = events.last().map_or(0, |l| l.t);
    for line in events {
        tokio::time::sleep_until(origin + Duration::from_micros(line.t)).await;
        // Timers due now run first (the engine task and the controller are woken already).
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
        match line.ev {
            Event::Start { .. } => {}
            Event::Config { xml } => {
                if other.is_none() || !configured {
                    if let Err(e) = apply_config(&ds, xml.as_bytes()) {
                        out.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push((since(), format!("config refused: {}", e.replace('\n', " "))));
                    }
                    configured = true;
                }
            }
            Event::Reports { transport, address, sender, proof, credential, domain, claimed_cs_ids, reports } => {
                let grant =
                    credential.map(|c| crate::engine::discovery::Grant { credential: c, domain, claimed_cs_ids });
                let sender = Sender {
                    csci_id: sender,
                    proof: match proof.as_deref() {
                        Some("credential") => Some(Proof::Credential),
                        Some("certificate") => Some(Proof::Certificate),
                        _ => None,
                    },
                    transport: transport_name(&transport),
                    address,
                    grant,
                };
                engine.ingest_from(reports, sender).await;
            }
            Event::Refused { transport, reason, source } => {
                let reason =
                    Rejection::ALL.into_iter().find(|r| r.identity() == reason).unwrap_or(Rejection::Malformed);
                let t = transport_name(&transport);
                engine.query(move |core| core.count_rejection(reason, t, &source)).await;
            }
            Event::AuthFailure { transport, address, claimed, detail, reports } => {
                let sender = Sender { transport: transport_name(&transport), address, ..Sender::default() };
                engine.query(move |core| core.auth_failure(&sender, claimed, detail, reports)).await;
            }
            Event::Quarantine { csci_id, accept } => {
                engine.query(move |core| core.clear_quarantine(csci_id.as_deref(), accept)).await;
            }
        }
    }
    let end = Duration::from_micros(last).checked_add(tail.min(MAX_TAIL)).unwrap_or(Duration::from_micros(last));
    tokio::time::sleep_until(origin + end).await;
    for _ in 0..4 {
        tokio::task::yield_now().await;
    }
    printer.abort();
    // An engine that stopped (a panic on some input) gave no complete answer: say so.
    if engine.query(|_| ()).await.is_none() {
        return Err("the engine stopped during the replay (see the log); the output would be incomplete".into());
    }
    let mut lines = std::mem::take(&mut *out.lock().unwrap_or_else(|e| e.into_inner()));
    // One instant's lines: advertisements in their order, notifications in theirs.
    lines.sort_by_key(|(t, _)| *t);
    Ok(lines.into_iter().map(|(t, l)| format!("{} {l}", stamp(t))).collect())
}

fn apply_config(ds: &Datastores, xml: &[u8]) -> Result<(), String> {
    let tree = ds.parse_config(xml, yang2::data::DataFormat::XML).map_err(|e| e.message.clone())?;
    ds.copy(REPLAY_SESSION, Source::Config(&tree), Datastore::Running).map_err(|e| e.message.clone())?;
    Ok(())
}

/// The agent's engine consumer, with collectors that listen to nobody.
fn register_engine_consumer(ds: &Arc<Datastores>, engine: &Engine) -> Result<(), String> {
    use crate::engine::collect::{grpc, http, mqtt, pull};
    let (h, m, p, g) = ds
        .with_tree(Datastore::Running, |t| (http::settings(t), mqtt::settings(t), pull::settings(t), grpc::settings(t)))
        .map_err(|e| e.to_string())?;
    ds.register_consumer(Arc::new(crate::engine::northbound::config::EngineConfig {
        engine: engine.clone(),
        http: tokio::sync::watch::channel(h).0,
        http_override: None,
        http_plain: false,
        grpc: tokio::sync::watch::channel(g).0,
        mqtt: tokio::sync::watch::channel(m).0,
        pull: tokio::sync::watch::channel(p).0,
        pending_policy: Default::default(),
        replay: true,
    }));
    Ok(())
}

/// One line per service, SCI row and withdrawal of an advertisement.
fn advertisement_lines(a: &Advertisement, n: u64) -> Vec<String> {
    let kind = match a.kind {
        AdvertisementKind::Full => "full",
        AdvertisementKind::Delta => "delta",
    };
    let to = match &a.audience {
        crate::engine::update::Audience::All => String::new(),
        crate::engine::update::Audience::Peer(p) => format!(" to={p}"),
    };
    let head = format!("#{n} {kind} {}{to}", a.trigger.name());
    let mut out = Vec::new();
    for s in &a.sites {
        let mut l = format!(
            "{head} advertise {} gas={} computing-time={} health={} scis={}",
            s.cs_id,
            s.gas,
            s.computing_time_ms,
            s.health.yang(),
            s.sci_count
        );
        for (k, v) in [("cost", s.cost), ("reputation", s.reputation.map(u32::from))] {
            if let Some(v) = v {
                l.push_str(&format!(" {k}={v}"));
            }
        }
        if let Some(v) = s.security_label {
            l.push_str(&format!(" security-label={v}"));
        }
        out.push(l);
    }
    for w in &a.withdrawn {
        out.push(format!("{head} withdraw {w}"));
    }
    for w in &a.sci_withdrawn {
        out.push(format!("{head} withdraw sci {} from {}", w.csci_id, w.cs_ids.join(",")));
    }
    if a.sites.is_empty() && a.withdrawn.is_empty() && a.sci_withdrawn.is_empty() {
        out.push(format!("{head} (nothing)"));
    }
    out
}
