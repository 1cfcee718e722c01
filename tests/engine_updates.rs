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
