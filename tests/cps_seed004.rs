//! Seed 004 on the C-PS REST adapter against the reference C-PS over real HTTP on loopback
//! (issue 13): keepalive, the C-PS's refresh hint, per-SCI rows on the seed's URIs, the
//! XML and CBOR encodings, reputation and cost through every encoding. The update
//! controller is the stand-in of `cps_support` (hand-built advertisements).

mod cps_support;

use std::sync::Arc;
use std::time::Duration;

use cats_sma::cps::codec::Encoding;
use cats_sma::cps::reference::{CpsConfig, CpsState};
use cats_sma::cps::session::{Role, SessionState};
use cats_sma::cps::transport::{Request, Response, SendFuture, Transport};
use cats_sma::cps::wire::{Ack, Granularity, SiteState};
use cps_support::*;

fn cps_with(f: impl FnOnce(&mut CpsConfig)) -> Arc<CpsState> {
    let mut c = cps_config();
    f(&mut c);
    CpsState::new(c).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_keepalive_refreshes_the_cps_ttl_without_the_metrics() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let addr = free_addr();
    // A short entry TTL: without a refresh the C-PS really forgets the site.
    let cps = start_cps(addr, Some(cps_with(|c| c.entry_ttl = 1))).await;
    let state = cps.state.clone();
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    wait_for("initial snapshot", || full_snapshots(&state) == 1).await;
    let peer = adapters.peer("cps1").unwrap();
    wait_for("keepalive announced", || peer.status.lock().unwrap().keepalive_supported).await;
    assert_eq!(peer.status.lock().unwrap().entry_ttl, Some(Duration::from_secs(1)));

    // A heartbeat carrying what the C-PS holds: a keepalive, not the full set.
    let acked_before = acked(&state);
    let hb = ctl.heartbeat();
    wait_for("keepalive", || keepalives(&state) == 1).await;
    // The adapter empties its queue, then counts the send: wait for both.
    wait_for("heartbeat delivered", || {
        peer.queue.lock().unwrap().is_empty() && peer.status.lock().unwrap().keepalives_sent == 1
    })
    .await;
    assert_eq!(full_snapshots(&state), 1, "no metrics retransmitted");
    assert_eq!(acked(&state), acked_before, "a keepalive applies nothing");
    let st = peer.status.lock().unwrap().clone();
    assert_eq!((st.keepalives_sent, st.last_sent), (1, Some(hb)));

    // A delta, then a heartbeat equal to full + delta: still a keepalive.
    let d = ctl.delta("AR2", 7);
    wait_for("delta applied", || acked(&state) == d).await;
    ctl.heartbeat();
    wait_for("second keepalive", || keepalives(&state) == 2).await;
    assert_eq!(full_snapshots(&state), 1);

    // The view changed without a delta reaching the C-PS: the heartbeat goes in full.
    ctl.view.lock().unwrap().insert("AR1".into(), site("AR1", 55));
    let hb = ctl.heartbeat();
    wait_for("full heartbeat", || full_snapshots(&state) == 2 && acked(&state) == hb).await;
    assert_eq!(cst_services(&state), view_services(&ctl));

    // No refresh within the TTL: the C-PS ages the site out. The next heartbeat's keepalive
    // is refused (404) and the full set goes instead.
    wait_for("aged out", || {
        let mut c = state.cst.lock().unwrap();
        c.expire(std::time::Instant::now(), state.config.ttl());
        c.expired == 1
    })
    .await;
    assert!(cst_services(&state).is_empty());
    let hb = ctl.heartbeat();
    wait_for("restored by the full set", || acked(&state) == hb).await;
    assert_eq!(cst_services(&state), view_services(&ctl));
    assert_eq!(peer.status.lock().unwrap().keepalives_sent, 2, "the refused keepalive is not counted");
    assert_eq!(peer.state(), SessionState::Connected, "a refused keepalive is no failure");
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_no_keepalive_unless_the_cps_offers_it() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let addr = free_addr();
    let cps = start_cps(addr, Some(cps_with(|c| c.keepalive = false))).await;
    let state = cps.state.clone();
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    wait_for("initial snapshot", || full_snapshots(&state) == 1).await;
    let hb = ctl.heartbeat();
    wait_for("heartbeat in full", || full_snapshots(&state) == 2 && acked(&state) == hb).await;
    assert_eq!(keepalives(&state), 0);
    assert_eq!(adapters.peer("cps1").unwrap().status.lock().unwrap().keepalives_sent, 0);
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_the_cps_refresh_hint_reaches_the_update_controller() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let addr = free_addr();
    // entry_ttl 120 s, idle: a quarter of it (docs/cps-protocol.md, "Refresh hint").
    let cps = start_cps(addr, Some(cps_with(|c| c.entry_ttl = 120))).await;
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    let want = ("cps1".to_string(), Some(Duration::from_secs(30)));
    wait_for("RefreshHint", || ctl.hints.lock().unwrap().contains(&want)).await;
    assert_eq!(ctl.hints.lock().unwrap().len(), 1, "sent when it changes, not on every reply");
    ctl.delta("AR1", 10);
    wait_for("delta", || cst_services(&cps.state) == view_services(&ctl)).await;
    assert_eq!(ctl.hints.lock().unwrap().len(), 1);
    // The peer is removed: the controller forgets its hint.
    adapters.stop_peer("cps1");
    assert_eq!(ctl.hints.lock().unwrap().last(), Some(&("cps1".to_string(), None)));
    adapters.shutdown();
    cps.stop().await;
}

/// A C-PS announcing absurd hints (scripted, signed with the session's PSK).
struct Hostile {
    refresh: u32,
}

impl Transport for Hostile {
    fn send(&self, req: Request) -> SendFuture<'_> {
        let refresh = self.refresh;
        Box::pin(async move {
            let body = match req.method {
                "GET" => serde_json::to_vec(&SiteState {
                    site_id: SITE.into(),
                    csma_id: CSMA.into(),
                    keepalive: true,
                    entry_ttl: Some(0),
                    refresh_interval: Some(refresh),
                    ..SiteState::default()
                })
                .unwrap(),
                _ => serde_json::to_vec(&Ack { acked_sequence: 1, refresh_interval: Some(refresh), ..Ack::default() })
                    .unwrap(),
            };
            let nonce: u64 = req.headers.iter().find(|(k, _)| *k == "x-cats-nonce").unwrap().1.parse().unwrap();
            let mut resp = Response::new(200, body);
            let sig = cats_sma::cps::auth::sign_reply(SECRET, 200, CSMA, nonce, &resp.body);
            resp.headers.push((cats_sma::cps::auth::H_REPLY_SIGNATURE.into(), sig));
            Ok(resp)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_periodic_sync_an_absurd_refresh_hint_is_ignored() {
    for refresh in [0, 86_401, u32::MAX] {
        let ctl = Controller::new();
        ctl.delta("AR1", 100);
        let adapters = ctl.start_adapters();
        let addr = free_addr();
        adapters.start_peer(settings("evil", addr, Role::Primary, 100), Arc::new(Hostile { refresh }));
        let peer = adapters.peer("evil").unwrap();
        wait_for("delivered", || peer.status.lock().unwrap().sent >= 1).await;
        let st = peer.status.lock().unwrap().clone();
        assert_eq!((st.refresh_interval, st.entry_ttl), (None, None), "refresh {refresh}");
        assert!(ctl.hints.lock().unwrap().is_empty(), "refresh {refresh}: nothing reaches the controller");
        adapters.shutdown();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_put_cats_metrics_csci_id_carries_per_sci_rows() {
    let ctl = Controller::new();
    ctl.sci_delta("188.3.67.3:67", "AR1", 400);
    ctl.sci_delta("188.3.67.4:69", "AR1", 600);
    ctl.sci_delta("10.0.0.9:1", "SECRET", 5);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let state = cps.state.clone();
    let adapters = ctl.start_adapters();
    let mut s = settings("cps1", addr, Role::Primary, 100);
    s.granularity = Granularity::Both;
    adapters.start_peer(s, transport(addr));
    assert_eq!(*ctl.sci_detail.lock().unwrap(), [true], "the controller is asked for per-SCI rows");
    let rows = |st: &CpsState| -> Vec<(String, u32)> {
        st.cst
            .lock()
            .unwrap()
            .sites
            .get(SITE)
            .map(|e| e.scis.values().map(|x| (x.row.csci_id.clone(), x.row.gas)).collect())
            .unwrap_or_default()
    };
    wait_for("rows of the first snapshot", || rows(&state).len() == 2).await;
    assert!(!rows(&state).iter().any(|r| r.0 == "10.0.0.9:1"), "a row of an unauthorized CS-ID never leaves");
    let d = ctl.sci_delta("188.3.67.3:67", "AR1", 350);
    wait_for("row update", || acked(&state) == d).await;
    assert_eq!(rows(&state), [("188.3.67.3:67".to_string(), 350), ("188.3.67.4:69".to_string(), 600)]);
    assert_eq!(cst_services(&state), [("AR1".to_string(), 350)], "both: the site aggregate too");

    // GET /cats/metrics/{csci-id}: the cached row, for reconciliation; reputation and cost
    // carried.
    let t = transport(addr);
    let r = t
        .send(signed_request(adapters.keys().nonces.next(), "GET", "/cats/metrics/188.3.67.3:67", CSMA, b"", &[]))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(v["sci"]["gas"], 350);
    assert_eq!((v["sci"]["cost"].as_u64(), v["sci"]["reputation"].as_u64()), (Some(12), Some(8)));
    assert_eq!(v["sci"]["state"], "healthy");
    let r = t
        .send(signed_request(adapters.keys().nonces.next(), "GET", "/cats/metrics/188.3.67.3:67", "intruder", b"", &[]))
        .await
        .unwrap();
    assert_eq!(r.status, 403, "another C-SMA does not read this site's rows");

    // DELETE /cats/metrics/{csci-id}: the failed SCI's row is withdrawn.
    let w = ctl.sci_failed("188.3.67.4:69", "AR1", Some(350));
    wait_for("withdrawal", || acked(&state) == w).await;
    assert_eq!(rows(&state), [("188.3.67.3:67".to_string(), 350)]);
    // A full snapshot is the complete set of rows too: a row it lacks is gone.
    ctl.scis.lock().unwrap().clear();
    ctl.scis.lock().unwrap().insert("188.3.67.5:1".into(), sci_row("188.3.67.5:1", "AR1", 20));
    let f = ctl.full_for("cps1");
    wait_for("full", || acked(&state) == f).await;
    assert_eq!(rows(&state), [("188.3.67.5:1".to_string(), 20)]);

    adapters.stop_peer("cps1");
    assert_eq!(*ctl.sci_detail.lock().unwrap(), [true, false], "no peer takes rows any more");
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_granularity_sci_sends_rows_without_the_site_aggregate() {
    let ctl = Controller::new();
    ctl.sci_delta("188.3.67.3:67", "AR1", 400);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let adapters = ctl.start_adapters();
    let mut s = settings("cps1", addr, Role::Primary, 100);
    s.granularity = Granularity::Sci;
    adapters.start_peer(s, transport(addr));
    wait_for("row", || cps.state.cst.lock().unwrap().sites.get(SITE).is_some_and(|e| e.scis.len() == 1)).await;
    let d = ctl.sci_delta("188.3.67.3:67", "AR1", 300);
    wait_for("delta", || acked(&cps.state) == d).await;
    assert!(cst_services(&cps.state).is_empty(), "no site rows at granularity sci");
    let gas = cps.state.cst.lock().unwrap().sites[SITE].scis["188.3.67.3:67"].row.gas;
    assert_eq!(gas, 300);
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_protocol_adapter_xml_and_cbor_payloads_in_both_directions() {
    for enc in [Encoding::Xml, Encoding::Cbor, Encoding::Json] {
        let ctl = Controller::new();
        ctl.sci_delta("188.3.67.3:67", "AR1", 400);
        let mut s0 = site("AR2", 9);
        s0.cost = Some(77);
        s0.reputation = Some(6);
        s0.security_label = Some(2);
        ctl.view.lock().unwrap().insert("AR2".into(), s0);
        let addr = free_addr();
        let cps = start_cps(addr, None).await;
        let state = cps.state.clone();
        let adapters = ctl.start_adapters();
        let mut s = settings("cps1", addr, Role::Primary, 100);
        s.encoding = enc;
        s.granularity = Granularity::Both;
        adapters.start_peer(s, transport(addr));
        wait_for("snapshot", || full_snapshots(&state) == 1).await;
        let d = ctl.sci_delta("188.3.67.3:67", "AR1", 380);
        wait_for("delta", || acked(&state) == d).await;
        let w = ctl.sci_failed("188.3.67.3:67", "AR1", None);
        wait_for("withdrawal", || acked(&state) == w).await;
        assert_eq!(cst_services(&state), [("AR2".to_string(), 9)], "{enc:?}");
        // Reputation and cost arrive through every encoding.
        let ar2 = state.cst.lock().unwrap().sites[SITE].services["AR2"].clone();
        assert_eq!((ar2.cost, ar2.reputation, ar2.security_label), (Some(77), Some(6), Some(2)), "{enc:?}");
        // The C-PS answered in the request's encoding (what the session decoded).
        let r = transport(addr)
            .send(signed_request(
                adapters.keys().nonces.next(),
                "GET",
                "/cats/metrics",
                CSMA,
                b"",
                &[("accept", enc.content_type())],
            ))
            .await
            .unwrap();
        assert_eq!(r.header("content-type"), Some(enc.content_type()));
        let back: SiteState = enc.decode("site-state", &r.body).unwrap();
        assert_eq!(back.services.len(), 1);
        assert_eq!(back.services[0].reputation, Some(6));
        if enc == Encoding::Xml {
            let text = String::from_utf8(r.body.clone()).unwrap();
            assert!(text.starts_with("<site-state xmlns=\"urn:cats-sma:cps:1\">"), "{text}");
        }
        let st = adapters.peer("cps1").unwrap().status.lock().unwrap().clone();
        assert_eq!((st.failed, st.last_error), (0, None), "{enc:?}");
        assert_eq!(state.refused("malformed"), 0, "{enc:?}");
        adapters.shutdown();
        cps.stop().await;
    }
}

/// A scripted C-PS that records every request; its next reply to a POST can ask for a full
/// sync or report skipped (stale) reports.
#[derive(Default)]
struct Recorder {
    log: std::sync::Mutex<Vec<(String, String)>>,
    full_sync_requested: std::sync::atomic::AtomicBool,
    stale: std::sync::atomic::AtomicU32,
}

impl Recorder {
    fn log(&self) -> Vec<(String, String)> {
        self.log.lock().unwrap().clone()
    }

    fn count(&self, method: &str, path: &str) -> usize {
        self.log().iter().filter(|(m, p)| m == method && p == path).count()
    }
}

struct RecorderTransport(Arc<Recorder>);

impl Transport for RecorderTransport {
    fn send(&self, req: Request) -> SendFuture<'_> {
        let rec = self.0.clone();
        Box::pin(async move {
            use std::sync::atomic::Ordering::SeqCst;
            rec.log.lock().unwrap().push((req.method.to_string(), req.path.clone()));
            let body = match req.method {
                "GET" => serde_json::to_vec(&SiteState {
                    site_id: SITE.into(),
                    csma_id: CSMA.into(),
                    keepalive: true,
                    acked_sequence: 1,
                    ..SiteState::default()
                })
                .unwrap(),
                m => {
                    let post = m == "POST";
                    serde_json::to_vec(&Ack {
                        acked_sequence: 1,
                        keepalive: true,
                        full_sync_requested: post && rec.full_sync_requested.swap(false, SeqCst),
                        stale: if post { rec.stale.swap(0, SeqCst) } else { 0 },
                        ..Ack::default()
                    })
                    .unwrap()
                }
            };
            let nonce: u64 = req.headers.iter().find(|(k, _)| *k == "x-cats-nonce").unwrap().1.parse().unwrap();
            let mut resp = Response::new(200, body);
            let sig = cats_sma::cps::auth::sign_reply(SECRET, 200, CSMA, nonce, &resp.body);
            resp.headers.push((cats_sma::cps::auth::H_REPLY_SIGNATURE.into(), sig));
            Ok(resp)
        })
    }
}

/// Adapters whose resync requests are only recorded (the real controller may let a
/// heartbeat go first).
fn recording_adapters(ctl: &Arc<Controller>) -> Arc<cats_sma::cps::Adapters> {
    let mut hooks = ctl.hooks();
    let me = ctl.clone();
    hooks.resync = Arc::new(move |peer: &str| me.resyncs.lock().unwrap().push(peer.to_owned()));
    cats_sma::cps::Adapters::start(
        cats_sma::cps::session::Identity { csma_id: CSMA.into(), site_id: SITE.into() },
        ctl.tx.subscribe(),
        hooks,
    )
}

// Seed 004, Update Controller reconciliation: "The C-PS MAY request a full sync ... The
// C-SMA responds with all current metrics". Once the C-PS asked for one (or skipped
// reports as stale), what it holds is unknown: the next full set goes in full, never as a
// keepalive, even when it is a heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_update_controller_reconciliation_a_requested_full_sync_is_never_a_keepalive() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let rec = Arc::new(Recorder::default());
    let adapters = recording_adapters(&ctl);
    adapters.start_peer(settings("cps1", free_addr(), Role::Primary, 100), Arc::new(RecorderTransport(rec.clone())));
    let peer = adapters.peer("cps1").unwrap();
    wait_for("first contact asks for a full", || ctl.resyncs.lock().unwrap().len() == 1).await;
    ctl.full_for("cps1");
    wait_for("full delivered", || rec.count("POST", "/cats/metrics") == 1).await;
    wait_for("keepalive known", || peer.status.lock().unwrap().keepalive_supported).await;
    // Baseline: an unchanged heartbeat is a keepalive.
    ctl.heartbeat();
    wait_for("keepalive", || rec.count("POST", "/cats/keepalive") == 1).await;

    // The keepalive's reply asks for a full sync; a heartbeat comes first.
    rec.full_sync_requested.store(true, std::sync::atomic::Ordering::SeqCst);
    ctl.heartbeat();
    wait_for("keepalive asking for a full", || rec.count("POST", "/cats/keepalive") == 2).await;
    wait_for("resync asked", || ctl.resyncs.lock().unwrap().len() == 2).await;
    ctl.heartbeat();
    wait_for("heartbeat delivered", || {
        rec.count("POST", "/cats/metrics") == 2 || rec.count("POST", "/cats/keepalive") == 3
    })
    .await;
    assert_eq!(rec.count("POST", "/cats/keepalive"), 2, "the requested full sync went as a keepalive: {:?}", rec.log());
    assert_eq!(rec.count("POST", "/cats/metrics"), 2);

    // A delta the C-PS skipped as stale: the next heartbeat goes in full too.
    rec.stale.store(1, std::sync::atomic::Ordering::SeqCst);
    ctl.delta("AR1", 100);
    wait_for("delta", || rec.count("POST", "/cats/metrics") == 3).await;
    ctl.heartbeat();
    wait_for("heartbeat after stale", || {
        rec.count("POST", "/cats/metrics") == 4 || rec.count("POST", "/cats/keepalive") == 3
    })
    .await;
    assert_eq!(rec.count("POST", "/cats/keepalive"), 2, "after a stale report: {:?}", rec.log());
    adapters.shutdown();
}

// Seed 004, SCI Failure Trigger: a failed SCI's "metrics are withdrawn". A report that
// withdraws an SCI (DELETE /cats/metrics/{csci-id}) never PUTs its row back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_sci_failure_trigger_a_withdrawn_scis_row_is_not_put_in_the_same_report() {
    let ctl = Controller::new();
    ctl.sci_delta("s1", "AR1", 400);
    ctl.sci_delta("s2", "AR1", 100);
    let rec = Arc::new(Recorder::default());
    let adapters = ctl.start_adapters();
    let mut s = settings("cps1", free_addr(), Role::Primary, 100);
    s.granularity = Granularity::Both;
    adapters.start_peer(s, Arc::new(RecorderTransport(rec.clone())));
    wait_for("first full", || rec.count("POST", "/cats/metrics") >= 1).await;
    // An advertisement withdrawing s1 that (as before the fix) still carries its row.
    use cats_sma::engine::update::{Advertisement, AdvertisementKind, Audience, SciWithdrawal, Trigger};
    let _ = ctl.tx.send(Arc::new(Advertisement {
        seq: 1_000_000,
        kind: AdvertisementKind::Delta,
        audience: Audience::All,
        trigger: Trigger::SciFailure,
        sites: vec![site("AR1", 100)],
        withdrawn: vec![],
        sci_withdrawn: vec![SciWithdrawal::new("s1", ["AR1".to_string()])],
        scis: vec![sci_row("s1", "AR1", 400), sci_row("s2", "AR1", 100)],
        generated_at: chrono::Utc::now(),
    }));
    let peer = adapters.peer("cps1").unwrap();
    wait_for("withdrawal", || rec.count("DELETE", "/cats/metrics/s1") == 1).await;
    wait_for("delivered", || peer.queue.lock().unwrap().is_empty()).await;
    let log = rec.log();
    let delete = log.iter().position(|(m, p)| m == "DELETE" && p == "/cats/metrics/s1").unwrap();
    assert!(
        !log[delete..].iter().any(|(m, p)| m == "PUT" && p == "/cats/metrics/s1"),
        "s1 PUT back after its DELETE: {log:?}"
    );
    adapters.shutdown();
}
