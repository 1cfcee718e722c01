//! The engine feeds the update controller (seed 004, Update Controller): a first report
//! of a registered SCI is a discovery advertised with the site's metrics; a health change
//! is advertised at once; a failed SCI's service is withdrawn.

use std::sync::Arc;
use std::time::Duration;

use cats_sma::engine::clock::Clock;
use cats_sma::engine::core::SciConfig;
use cats_sma::engine::model::Health;
use cats_sma::engine::report::RawReport;
use cats_sma::engine::Engine;

fn raw(seq: u64, gas: i64, health: &str, clock: &Clock) -> RawReport {
    RawReport {
        csci_id: "188.3.67.3:67".into(),
        cs_id: "AR1".into(),
        sequence: seq,
        timestamp: clock.wall(),
        gas,
        computing_time: 5,
        health: health.into(),
        cost: None,
        reputation: None,
        security_label: None,
    }
}

#[tokio::test(start_paused = true)]
async fn reports_become_advertisements() {
    let clock = Clock::new();
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    engine
        .query(|core| {
            core.set_sci(
                "188.3.67.3:67",
                SciConfig {
                    cs_ids: vec!["AR1".into()],
                    credential_ref: None,
                    unauthenticated: true,
                    expected_interval: Duration::from_secs(5),
                },
            )
        })
        .await
        .unwrap();
    let r = engine.ingest(vec![raw(1, 400, "HEALTHY", &clock)], None).await;
    assert!(r[0].is_ok(), "{r:?}");
    let ad = tokio::time::timeout(Duration::from_secs(10), ads.recv()).await.unwrap().unwrap();
    assert_eq!(ad.sites.len(), 1);
    assert_eq!((ad.sites[0].cs_id.as_str(), ad.sites[0].gas, ad.sites[0].health), ("AR1", 400, Health::Healthy));
    let first_seq = ad.seq;

    // A health change goes out without waiting for the 5 s minimum interval.
    tokio::time::advance(Duration::from_millis(500)).await;
    let r = engine.ingest(vec![raw(2, 400, "DEGRADED", &clock)], None).await;
    assert!(r[0].is_ok(), "{r:?}");
    let ad = tokio::time::timeout(Duration::from_secs(1), ads.recv()).await.unwrap().unwrap();
    assert!(ad.seq > first_seq);
    assert_eq!(ad.sites[0].health, Health::Degraded);

    // No more reports: TTL (2 × 5 s) → STALE, grace 5 s → FAILED: AR1 is withdrawn.
    let withdrawn = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let ad = ads.recv().await.unwrap();
            if ad.withdrawn.iter().any(|c| c == "AR1") || ad.sites.iter().any(|s| s.cs_id == "AR1" && s.gas == 0) {
                return ad;
            }
        }
    })
    .await
    .expect("a withdrawal after the SCI failed");
    assert!(withdrawn.seq > first_seq);
}

/// A policy with one absolute maintenance window named "upgrade".
fn window_policy(
    start: &str,
    end: &str,
    suppress: cats_sma::engine::policy::Suppress,
) -> cats_sma::engine::policy::Policy {
    use cats_sma::engine::policy::{MaintenanceWindow, Policy, PolicyConfig, Schedule};
    let window = MaintenanceWindow {
        name: "upgrade".into(),
        schedule: Schedule::Absolute { start: start.parse().unwrap(), end: end.parse().unwrap() },
        suppress,
    };
    Policy::compile(&PolicyConfig { maintenance_windows: vec![window], ..Default::default() }).unwrap()
}

#[tokio::test(start_paused = true)]
async fn seed_004_policy_engine_maintenance_window_suppresses_on_its_own_timer() {
    // seed 004, Policy Engine / update control: "Maintenance window: suppress all
    // non-critical updates during scheduled maintenance". The engine opens and closes the
    // suppression at the window's edges by itself: updates handed straight to the
    // controller (not through the engine) are suppressed inside the window only.
    use cats_sma::engine::policy::Suppress;
    use cats_sma::engine::update::UpdateEvent;
    let clock = Clock::starting_at("2026-03-01T00:00:00Z".parse().unwrap());
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    let policy = window_policy("2026-03-01T00:01:00Z", "2026-03-01T00:02:00Z", Suppress::NonCritical);
    engine
        .query(move |core| {
            core.set_policy(policy);
            core.set_sci(
                "188.3.67.3:67",
                SciConfig {
                    cs_ids: vec!["AR1".into()],
                    credential_ref: None,
                    unauthenticated: true,
                    expected_interval: Duration::from_secs(600),
                },
            )
        })
        .await
        .unwrap();
    assert!(engine.ingest(vec![raw(1, 400, "HEALTHY", &clock)], None).await[0].is_ok());
    let ad = tokio::time::timeout(Duration::from_secs(10), ads.recv()).await.unwrap().unwrap();
    assert_eq!(ad.sites[0].gas, 400);
    let site = engine.query(|core| core.reported.get("AR1").unwrap().0.clone()).await.unwrap();

    let settle = || async {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    };
    // Into the window, with no engine work at all: only its timer can notice.
    tokio::time::advance(Duration::from_secs(70)).await;
    settle().await;
    while ads.try_recv().is_ok() {}
    let before = engine.updates.stats().suppressed;
    engine.updates.send(UpdateEvent::Site(cats_sma::engine::model::SiteMetrics { gas: 4000, ..site.clone() })).unwrap();
    settle().await;
    assert_eq!(engine.updates.stats().suppressed, before + 1, "a metric change inside the window is suppressed");
    assert!(ads.try_recv().is_err());

    // Past the end: the next change goes out.
    tokio::time::advance(Duration::from_secs(60)).await;
    settle().await;
    while ads.try_recv().is_ok() {}
    engine.updates.send(UpdateEvent::Site(cats_sma::engine::model::SiteMetrics { gas: 9000, ..site })).unwrap();
    let ad = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let ad = ads.recv().await.unwrap();
            if ad.sites.iter().any(|s| s.gas == 9000) {
                return ad;
            }
        }
    })
    .await
    .expect("advertised after the window closed");
    assert_eq!(ad.sites[0].cs_id, "AR1");
}

fn register(csci: &str, interval: Duration) -> impl FnOnce(&mut cats_sma::engine::core::Core) + Send + 'static {
    let csci = csci.to_owned();
    move |core| {
        core.set_sci(
            &csci,
            SciConfig {
                cs_ids: vec!["AR1".into()],
                credential_ref: None,
                unauthenticated: true,
                expected_interval: interval,
            },
        )
    }
}

fn raw_from(csci: &str, seq: u64, gas: i64, clock: &Clock) -> RawReport {
    RawReport { csci_id: csci.into(), ..raw(seq, gas, "HEALTHY", clock) }
}

async fn next_ad(
    ads: &mut tokio::sync::broadcast::Receiver<Arc<cats_sma::engine::update::Advertisement>>,
) -> Arc<cats_sma::engine::update::Advertisement> {
    tokio::time::timeout(Duration::from_secs(600), ads.recv()).await.expect("an advertisement").unwrap()
}

#[tokio::test(start_paused = true)]
async fn seed004_update_controller_per_sci_rows_through_the_engine_loop() {
    // Seed 004, Protocol Adapter: "PUT /cats/metrics/{csci-id} (update metrics for a
    // specific CSCI-ID)". While a C-PS wants per-SCI metrics the engine sends each changed
    // SCI's row (state and metrics after SCI-scope policy) and the advertisements carry
    // them: a full update every row of its services, a delta the rows that changed.
    use cats_sma::engine::model::SciState;
    use cats_sma::engine::update::{AdvertisementKind, UpdateEvent};
    let clock = Clock::new();
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    engine.updates.send(UpdateEvent::SciDetail(true)).unwrap();
    engine.query(register("sci-1", Duration::from_secs(600))).await.unwrap();
    engine.query(register("sci-2", Duration::from_secs(600))).await.unwrap();
    assert!(engine.ingest(vec![raw_from("sci-1", 1, 100, &clock)], None).await[0].is_ok());
    let ad = next_ad(&mut ads).await;
    assert_eq!(ad.kind, AdvertisementKind::Full);
    assert_eq!(ad.scis.iter().map(|r| (r.csci_id.as_str(), r.metrics.gas)).collect::<Vec<_>>(), [("sci-1", 100)]);
    assert_eq!(ad.scis[0].state, SciState::Healthy);

    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(engine.ingest(vec![raw_from("sci-2", 1, 50, &clock)], None).await[0].is_ok());
    let ad = next_ad(&mut ads).await;
    assert_eq!(ad.scis.iter().map(|r| r.csci_id.as_str()).collect::<Vec<_>>(), ["sci-1", "sci-2"]);

    // sci-2 alone changes, past the site's thresholds: a delta with its row only.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(engine.ingest(vec![raw_from("sci-2", 2, 70, &clock)], None).await[0].is_ok());
    let ad = next_ad(&mut ads).await;
    assert_eq!((ad.kind, ad.sites[0].gas), (AdvertisementKind::Delta, 170));
    assert_eq!(ad.scis.iter().map(|r| (r.csci_id.as_str(), r.metrics.gas)).collect::<Vec<_>>(), [("sci-2", 70)]);

    // Off: no rows.
    engine.updates.send(UpdateEvent::SciDetail(false)).unwrap();
    engine.updates.send(UpdateEvent::Resync { peer: None }).unwrap();
    let ad = next_ad(&mut ads).await;
    assert!(ad.scis.is_empty(), "{ad:?}");
}

#[tokio::test(start_paused = true)]
async fn seed004_policy_engine_maintenance_window_heartbeat_in_paused_time() {
    // Seed 004, Policy Engine: "Maintenance window: suppress all non-critical updates"; the
    // soft-state refresh keeps going, with what the C-PSes were last told (suppress all).
    use cats_sma::engine::policy::Suppress;
    use cats_sma::engine::update::Trigger;
    let clock = Clock::starting_at("2026-03-01T00:00:00Z".parse().unwrap());
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    let policy = window_policy("2026-03-01T00:00:30Z", "2026-03-01T00:05:00Z", Suppress::All);
    engine.query(move |core| core.set_policy(policy)).await.unwrap();
    engine.query(register("188.3.67.3:67", Duration::from_secs(600))).await.unwrap();
    assert!(engine.ingest(vec![raw(1, 400, "HEALTHY", &clock)], None).await[0].is_ok());
    assert_eq!(next_ad(&mut ads).await.sites[0].gas, 400);

    tokio::time::advance(Duration::from_secs(40)).await;
    assert!(engine.ingest(vec![raw(2, 300, "HEALTHY", &clock)], None).await[0].is_ok());
    // Every 60 s a heartbeat inside the window, with the value from before it; when the
    // window ends, the change.
    let end: chrono::DateTime<chrono::Utc> = "2026-03-01T00:05:00Z".parse().unwrap();
    let mut beats = 0;
    let ad = loop {
        let ad = next_ad(&mut ads).await;
        if ad.trigger != Trigger::Heartbeat {
            break ad;
        }
        assert_eq!((ad.trigger, ad.sites[0].gas), (Trigger::Heartbeat, 400), "{ad:?}");
        assert!(clock.wall() < end);
        beats += 1;
    };
    assert_eq!(beats, 4, "at 1, 2, 3 and 4 minutes");
    // (It shares the full snapshot of the heartbeat due at the same time.)
    assert_eq!((ad.trigger, ad.sites[0].gas), (Trigger::MetricChange, 300));
    assert!(clock.wall() >= end);
}

#[tokio::test(start_paused = true)]
async fn seed004_update_controller_an_sci_moved_off_its_cs_id_is_withdrawn_from_it() {
    // Seed 004, Update Controller, SCI Discovery Trigger: "an existing SCI is withdrawn" —
    // also when its registration no longer lists the CS-ID it reported for: a full update
    // listing the SCI as withdrawn from that CS-ID.
    use cats_sma::engine::update::{AdvertisementKind, SciWithdrawal, Trigger};
    let clock = Clock::new();
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    engine.query(register("sci-1", Duration::from_secs(600))).await.unwrap();
    engine.query(register("sci-2", Duration::from_secs(600))).await.unwrap();
    assert!(engine.ingest(vec![raw_from("sci-1", 1, 100, &clock)], None).await[0].is_ok());
    assert!(engine.ingest(vec![raw_from("sci-2", 1, 100, &clock)], None).await[0].is_ok());
    let ad = next_ad(&mut ads).await;
    assert_eq!(ad.sites[0].sci_count, 2, "{ad:?}");

    tokio::time::advance(Duration::from_secs(10)).await;
    engine
        .query(|core| {
            core.set_sci(
                "sci-2",
                SciConfig {
                    cs_ids: vec!["LLM1".into()],
                    credential_ref: None,
                    unauthenticated: true,
                    expected_interval: Duration::from_secs(600),
                },
            )
        })
        .await
        .unwrap();
    let ad = next_ad(&mut ads).await;
    assert_eq!((ad.kind, ad.trigger), (AdvertisementKind::Full, Trigger::Withdrawal));
    assert_eq!(ad.sci_withdrawn, [SciWithdrawal::new("sci-2", ["AR1".to_string()])]);
    assert_eq!((ad.sites[0].gas, ad.sites[0].sci_count), (100, 1));
}

async fn next_full(
    ads: &mut tokio::sync::broadcast::Receiver<Arc<cats_sma::engine::update::Advertisement>>,
) -> Arc<cats_sma::engine::update::Advertisement> {
    loop {
        let ad = next_ad(ads).await;
        if ad.kind == cats_sma::engine::update::AdvertisementKind::Full {
            return ad;
        }
    }
}

fn row_ids(ad: &cats_sma::engine::update::Advertisement) -> Vec<&str> {
    ad.scis.iter().map(|r| r.csci_id.as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn seed004_sci_failure_trigger_a_failed_sci_has_no_row_even_when_every_row_is_sent() {
    // Seed 004, SCI Failure Trigger: a failed SCI's "metrics are withdrawn", "GAS
    // contribution set to 0". The engine keeps its last metrics (flagged gas-zeroed) but
    // sends no row for it, not even when it sends every row (detail switched on again).
    use cats_sma::engine::update::UpdateEvent;
    let clock = Clock::new();
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    engine.updates.send(UpdateEvent::SciDetail(true)).unwrap();
    engine.query(register("sci-1", Duration::from_secs(5))).await.unwrap();
    engine.query(register("sci-2", Duration::from_secs(600))).await.unwrap();
    assert!(engine.ingest(vec![raw_from("sci-1", 1, 400, &clock)], None).await[0].is_ok());
    assert!(engine.ingest(vec![raw_from("sci-2", 1, 100, &clock)], None).await[0].is_ok());
    // No more reports from sci-1: STALE, then FAILED and withdrawn.
    let failed = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let ad = ads.recv().await.unwrap();
            if ad.sci_withdrawn.iter().any(|w| w.csci_id == "sci-1") {
                return ad;
            }
        }
    })
    .await
    .expect("sci-1 withdrawn");
    assert!(!row_ids(&failed).contains(&"sci-1"), "{failed:?}");

    engine.updates.send(UpdateEvent::SciDetail(false)).unwrap();
    engine.updates.send(UpdateEvent::SciDetail(true)).unwrap();
    engine.query(|_| {}).await.unwrap();
    engine.updates.send(UpdateEvent::Resync { peer: None }).unwrap();
    let full = next_full(&mut ads).await;
    assert_eq!(row_ids(&full), ["sci-2"], "{full:?}");
    assert_eq!(engine.query(|core| core.cache.get("sci-1").map(|e| e.flags.gas_zeroed)).await.unwrap(), Some(true));
}

#[tokio::test(start_paused = true)]
async fn seed004_protocol_adapter_per_sci_detail_switched_on_reaches_the_cps_at_once() {
    // Seed 004, Protocol Adapter (PUT /cats/metrics/{csci-id}): a peer that takes per-SCI
    // rows is added while the SCIs are quiet. Woken (what the agent's `sci_detail` hook
    // does), the engine sends every row and the controller a full snapshot with them,
    // within the batch window: not at the next report or heartbeat.
    use cats_sma::engine::update::UpdateEvent;
    let clock = Clock::new();
    let engine = Engine::start(clock, Arc::new(|_: &str, _: &str, _: String| {}));
    let mut ads = engine.updates.subscribe();
    engine.query(register("sci-1", Duration::from_secs(600))).await.unwrap();
    assert!(engine.ingest(vec![raw_from("sci-1", 1, 100, &clock)], None).await[0].is_ok());
    let first = next_ad(&mut ads).await;
    assert!(first.scis.is_empty());
    tokio::time::advance(Duration::from_secs(5)).await;

    engine.updates.send(UpdateEvent::SciDetail(true)).unwrap();
    engine.waker()();
    let full = tokio::time::timeout(Duration::from_secs(1), next_full(&mut ads)).await.expect("a full at once");
    assert_eq!(row_ids(&full), ["sci-1"]);
    assert_eq!(full.sites[0].cs_id, "AR1");
}
