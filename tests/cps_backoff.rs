//! Retry timing of an unreachable C-PS (seed 004, C-PS Failure Handling: exponential
//! backoff 1 s, 2 s, 4 s, 8 s, ... up to 60 s), on tokio's paused clock: the session runs
//! against a transport that records when it is called and fails (or succeeds) on demand.

mod cps_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cats_sma::cps::auth::NonceSource;
use cats_sma::cps::session::{Peer, Registry, Role, Session, SessionState};
use cats_sma::cps::transport::{Request, Response, SendFuture, Transport, TransportError};
use cats_sma::cps::wire::{Ack, SiteState};
use tokio::time::Instant;

/// Fails every request while `down`; otherwise answers like a C-PS that kept its state.
struct Scripted {
    down: AtomicBool,
    calls: Mutex<Vec<(Instant, &'static str)>>,
}

impl Transport for Scripted {
    fn send(&self, req: Request) -> SendFuture<'_> {
        Box::pin(async move {
            self.calls.lock().unwrap().push((Instant::now(), req.method));
            if self.down.load(Ordering::SeqCst) {
                return Err(TransportError::Connect("connection refused".into()));
            }
            let body = match req.method {
                "GET" => serde_json::to_vec(&SiteState {
                    site_id: cps_support::SITE.into(),
                    csma_id: cps_support::CSMA.into(),
                    acked_sequence: 0,
                    ..SiteState::default()
                })
                .unwrap(),
                _ => serde_json::to_vec(&Ack { acked_sequence: 1, ..Ack::default() }).unwrap(),
            };
            // A C-PS sharing the session's PSK signs its replies (seed 004, C-PS Authentication).
            let nonce: u64 = req.headers.iter().find(|(k, _)| *k == "x-cats-nonce").unwrap().1.parse().unwrap();
            let mut resp = Response::new(200, body);
            let sig = cats_sma::cps::auth::sign_reply(cps_support::SECRET, 200, cps_support::CSMA, nonce, &resp.body);
            resp.headers.push((cats_sma::cps::auth::H_REPLY_SIGNATURE.into(), sig));
            Ok(resp)
        })
    }
}

#[tokio::test(start_paused = true)]
async fn retries_after_1_2_4_8_16_32_then_every_60_seconds_and_resets_on_success() {
    let ctl = cps_support::Controller::new();
    let mut s = cps_support::settings("cps1", cps_support::free_addr(), Role::Primary, 10);
    s.backoff_initial = Duration::from_secs(1);
    s.backoff_max = Duration::from_secs(60);
    let peer = Arc::new(Peer::new(s));
    let registry = Registry::new(cats_sma::cps::session::Identity {
        csma_id: cps_support::CSMA.into(),
        site_id: cps_support::SITE.into(),
    });
    registry.peers.write().unwrap().insert("cps1".into(), peer.clone());
    let transport = Arc::new(Scripted { down: AtomicBool::new(true), calls: Mutex::new(Vec::new()) });
    let session = Session {
        peer: peer.clone(),
        registry,
        transport: transport.clone().into(),
        hooks: ctl.hooks(),
        nonces: Arc::new(NonceSource::new()),
        signing: None,
    };
    // The dispatcher's job: the controller's advertisements into the peer's buffer.
    let mut rx = ctl.tx.subscribe();
    let fed = peer.clone();
    tokio::spawn(async move {
        while let Ok(ad) = rx.recv().await {
            fed.offer(&ad);
        }
    });
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let start = Instant::now();
    let task = tokio::spawn(session.run(stop_rx));

    // Nine attempts take 1+2+4+8+16+32+60+60 = 183 s of (virtual) time.
    while transport.calls.lock().unwrap().len() < 9 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(start.elapsed() < Duration::from_secs(600), "too few attempts");
    }
    let calls = transport.calls.lock().unwrap().clone();
    let gaps: Vec<u64> = calls.windows(2).map(|w| (w[1].0 - w[0].0).as_secs()).collect();
    assert_eq!(gaps, [1, 2, 4, 8, 16, 32, 60, 60]);
    assert!(calls.iter().all(|c| c.1 == "GET"), "each retry starts with reconciliation");
    assert_eq!(ctl.unreachable.lock().unwrap().len(), 1, "one c-ps-unreachable per outage");
    assert_eq!(peer.state(), SessionState::Backoff);
    let st = peer.status.lock().unwrap().clone();
    assert_eq!(st.failed, 9);
    let remaining = st.backoff_until.unwrap().saturating_duration_since(Instant::now());
    assert!(remaining <= Duration::from_secs(60) && remaining > Duration::from_secs(0));

    // The C-PS comes back: connected at the next retry; the next outage starts again at 1 s.
    transport.down.store(false, Ordering::SeqCst);
    while peer.state() != SessionState::Connected {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    transport.down.store(true, Ordering::SeqCst);
    transport.calls.lock().unwrap().clear();
    ctl.delta("AR1", 5); // fails, enters backoff
    while transport.calls.lock().unwrap().len() < 3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let calls = transport.calls.lock().unwrap().clone();
    let gaps: Vec<u64> = calls.windows(2).map(|w| (w[1].0 - w[0].0).as_millis() as u64).collect();
    // The failed POST (or PUT), then GETs 1 s and 2 s later.
    assert_eq!(gaps.iter().map(|g| (g + 50) / 1000).collect::<Vec<_>>(), [1, 2], "{gaps:?}");
    assert_eq!(ctl.unreachable.lock().unwrap().len(), 2, "a new outage, a new notification");
    let _ = stop_tx.send(true);
    let _ = task.await;
}
