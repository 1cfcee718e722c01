//! The C-PS adapter against the reference C-PS over real HTTP on loopback (seed 004, C-PS
//! Failure Handling and Update Controller reconciliation; issue 6 tests).

mod cps_support;

use cats_sma::cps::session::{Role, SessionState};
use cps_support::*;

fn no_duplicates(v: &[u64]) -> bool {
    let mut s = v.to_vec();
    s.sort_unstable();
    s.dedup();
    s.len() == v.len()
}

fn increasing(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed004_network_partition_upon_reconnection_a_full_sync_goes_before_any_buffered_delta() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let state = cps.state.clone();
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    // First contact: the C-PS holds nothing, so a full snapshot goes first.
    wait_for("initial full snapshot", || cst_services(&state) == vec![("AR1".into(), 100)]).await;
    let first = acked(&state);

    // The C-PS goes away (keeping its table, as after a partition).
    cps.stop().await;
    let mut sent = Vec::new();
    for i in 0..40u32 {
        sent.push(ctl.delta(if i % 2 == 0 { "AR1" } else { "AR2" }, 200 + i));
    }
    let peer = adapters.peer("cps1").unwrap();
    wait_for("session in backoff", || peer.state() == SessionState::Backoff).await;
    wait_for("updates buffered", || peer.queue.lock().unwrap().len() == 40).await;
    assert_eq!(ctl.unreachable.lock().unwrap().len(), 1, "one c-ps-unreachable per outage");

    // The C-PS comes back with its table (a partition healed): "upon reconnection, the
    // C-SMA performs a full sync to reconcile state" — one complete snapshot, newer than
    // every buffered delta, and none of those deltas before it (they are superseded).
    let cps = start_cps(addr, Some(state.clone())).await;
    wait_for("full sync after reconnection", || acked(&state) > *sent.last().unwrap()).await;
    // The C-PS records the ack before its reply reaches the adapter: wait for the adapter
    // to have taken the reply too, then read both sides.
    let reconnection_ack = acked(&state);
    wait_for("adapter took the ack", || {
        peer.status.lock().unwrap().last_acked == Some(reconnection_ack) && peer.queue.lock().unwrap().is_empty()
    })
    .await;
    let got = applied(&state);
    assert_eq!(got.len(), 2, "the first snapshot, then the reconnection's: {got:?}");
    assert_eq!(got[0], first);
    assert!(no_duplicates(&got) && increasing(&got));
    assert_eq!(state.cst.lock().unwrap().sites.get(SITE).unwrap().full_snapshots, 2);
    assert_eq!(cst_services(&state), view_services(&ctl));
    let (len, dropped, superseded) = {
        let q = peer.queue.lock().unwrap();
        (q.len(), q.dropped, q.superseded)
    };
    assert_eq!((len, dropped, superseded), (0, 0, 40));
    let st = peer.status.lock().unwrap().clone();
    assert_eq!(st.state, SessionState::Connected);
    assert_eq!(st.last_acked, Some(got[1]));
    assert_eq!(st.full_syncs, 2, "first contact and the reconnection");
    assert!(state.refused("bad-signature") + state.refused("replayed-nonce") == 0);
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffer_overflow_drops_the_oldest_counts_them_and_a_snapshot_settles_the_gap() {
    let ctl = Controller::new();
    ctl.delta("AR1", 1);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let state = cps.state.clone();
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 5), transport(addr));
    wait_for("initial snapshot", || acked(&state) > 0).await;
    // The adapter takes the C-PS's reply after the C-PS recorded the ack: until then the
    // snapshot is still queued, and the first overflow would drop it too.
    let peer = adapters.peer("cps1").unwrap();
    wait_for("adapter took the ack", || peer.queue.lock().unwrap().is_empty()).await;
    cps.stop().await;
    let before = applied(&state);
    for i in 0..12 {
        ctl.delta("AR1", 10 + i);
    }
    wait_for("buffer full", || peer.queue.lock().unwrap().dropped == 7).await;
    assert_eq!(peer.queue.lock().unwrap().len(), 5);

    let cps = start_cps(addr, Some(state.clone())).await;
    // Deltas were lost, so the C-SMA's view wins: a full snapshot, not a gappy replay.
    wait_for("snapshot after the gap", || cst_services(&state) == view_services(&ctl)).await;
    wait_for("session settled", || peer.queue.lock().unwrap().is_empty()).await;
    assert_eq!(cst_services(&state), vec![("AR1".into(), 21)]);
    let got = applied(&state);
    assert_eq!(got.len(), before.len() + 1, "one snapshot, none of the gappy deltas: {got:?}");
    assert!(no_duplicates(&got) && increasing(&got));
    let counts = {
        let q = peer.queue.lock().unwrap();
        (q.dropped, q.superseded)
    };
    assert_eq!(counts, (7, 5));
    assert_eq!(peer.status.lock().unwrap().full_syncs, 2);
    adapters.shutdown();
    cps.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_is_used_while_the_primary_is_down_and_the_primary_resumes() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    let (a, b) = (free_addr(), free_addr());
    let primary = start_cps(a, None).await;
    let fallback = start_cps(b, None).await;
    let (pstate, fstate) = (primary.state.clone(), fallback.state.clone());
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("primary", a, Role::Primary, 100), transport(a));
    adapters.start_peer(settings("backup", b, Role::Fallback, 100), transport(b));
    wait_for("primary in sync", || cst_services(&pstate) == view_services(&ctl)).await;
    let fb = adapters.peer("backup").unwrap();
    assert_eq!(fb.state(), SessionState::Disconnected, "fallback on standby");
    let d1 = ctl.delta("AR1", 90);
    wait_for("primary gets d1", || acked(&pstate) == d1).await;
    assert!(applied(&fstate).is_empty(), "the fallback gets nothing while the primary is up");

    primary.stop().await;
    ctl.delta("AR1", 80);
    // The primary fails on that delta; the fallback takes over with a full snapshot.
    wait_for("fallback in sync", || cst_services(&fstate) == vec![("AR1".into(), 80)]).await;
    let d3 = ctl.delta("AR2", 50);
    wait_for("fallback gets d3", || acked(&fstate) == d3).await;
    assert_eq!(cst_services(&fstate), view_services(&ctl));

    // The primary comes back with its table: it gets what it missed, in order; the fallback
    // goes back to standby.
    let primary = start_cps(a, Some(pstate.clone())).await;
    // Reconnected: a full sync (newer than d3) instead of the buffered d2, d3.
    wait_for("primary resumed", || acked(&pstate) > d3).await;
    wait_for("fallback standby", || fb.state() == SessionState::Disconnected).await;
    let got = applied(&pstate);
    assert!(got.len() >= 2 && got[got.len() - 2] == d1 && got[got.len() - 1] > d3, "{got:?}");
    assert!(no_duplicates(&got) && increasing(&got));
    assert_eq!(cst_services(&pstate), view_services(&ctl));
    let d4 = ctl.delta("AR2", 40);
    wait_for("primary gets d4", || acked(&pstate) == d4).await;
    assert_eq!(acked(&fstate), d3, "standby fallback gets nothing");
    adapters.shutdown();
    primary.stop().await;
    fallback.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cps_restart_that_lost_its_state_is_reconciled_with_a_full_snapshot() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    ctl.delta("AR2", 200);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    wait_for("in sync", || cst_services(&cps.state) == view_services(&ctl)).await;
    ctl.delta("LLM1", 300);
    wait_for("in sync again", || cst_services(&cps.state) == view_services(&ctl)).await;

    // Restart with an empty table.
    cps.stop().await;
    let fresh = start_cps(addr, None).await;
    // The next change reaches the new C-PS, which holds nothing for the site: it asks for a
    // full sync (or the session reconnects and finds nothing) and gets the whole view.
    ctl.delta("AR1", 110);
    wait_for("reconciled", || cst_services(&fresh.state) == view_services(&ctl)).await;
    assert_eq!(cst_services(&fresh.state), vec![("AR1".into(), 110), ("AR2".into(), 200), ("LLM1".into(), 300)]);
    let snaps = fresh.state.cst.lock().unwrap().sites.get(SITE).map_or(0, |e| e.full_snapshots);
    assert!(snaps >= 1);
    // Divergence: the C-PS asks for a full sync itself; the C-SMA's view replaces its table.
    fresh.state.cst.lock().unwrap().sites.get_mut(SITE).unwrap().services.clear();
    fresh.state.cst.lock().unwrap().request_full_sync(SITE);
    ctl.delta("AR2", 210);
    wait_for("C-SMA view wins", || cst_services(&fresh.state) == view_services(&ctl)).await;
    adapters.shutdown();
    fresh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sci_withdrawal_is_a_delete_and_unauthorized_cs_ids_never_leave() {
    let ctl = Controller::new();
    ctl.delta("AR1", 100);
    ctl.delta("SECRET", 5);
    let addr = free_addr();
    let cps = start_cps(addr, None).await;
    let adapters = ctl.start_adapters();
    adapters.start_peer(settings("cps1", addr, Role::Primary, 100), transport(addr));
    wait_for("in sync", || cst_services(&cps.state).iter().any(|s| s.0 == "AR1")).await;
    let seq = ctl.sci_failed("188.3.67.3:67", "AR1", None);
    wait_for("withdrawal applied", || acked(&cps.state) == seq).await;
    let e = cps.state.cst.lock().unwrap().sites.get(SITE).unwrap().clone();
    assert!(e.services.is_empty(), "AR1 withdrawn, SECRET never sent: {:?}", e.services.keys());
    assert_eq!(e.withdrawn_scis.back().map(String::as_str), Some("188.3.67.3:67"));
    adapters.shutdown();
    cps.stop().await;
}
