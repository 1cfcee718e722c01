//! The YANG-Push subscription state machine with paused tokio time (DESIGN decision 4):
//! on-change dampening (RFC 8641 section 3.4.1), suspension of a subscription whose
//! receiver does not keep up and its resumption with a resync (RFC 8639 section 2.7,
//! RFC 8641 section 3.4), suspension-timeout, periodic anchor time (RFC 8641 section
//! 3.3), stop-time, start gating, and event stream replay (RFC 8639 section 2.4.2.1).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cats_sma::engine::changes::{ChangeSet, StateChange};
use cats_sma::error::RpcError;
use cats_sma::mgmt::events::EventBus;
use cats_sma::push::encode::{restconf_path, Edit};
use cats_sma::push::params::{EditOp, Trigger};
use cats_sma::push::subscription::{
    self, Control, Counters, End, Feeds, Outbox, StreamSelector, QUEUE, RESUME_CHECK, SUSPENSION_TIMEOUT,
};
use cats_sma::push::view::{Batch, View};
use tokio::sync::{broadcast, mpsc};
use tokio::time::{advance, Instant};

/// A view without datastores: snapshots are numbered, every SCI change is one replace edit.
struct FakeView {
    snapshots: AtomicU32,
}

impl View for FakeView {
    fn snapshot(&self) -> Result<String, RpcError> {
        Ok(format!("<snap n=\"{}\"/>", self.snapshots.fetch_add(1, Ordering::Relaxed)))
    }
    fn edits(&self, batch: &Batch) -> Vec<Edit> {
        let Batch::Engine(set) = batch else { return Vec::new() };
        set.changes
            .iter()
            .filter_map(|c| match c {
                StateChange::Sci { csci_id, leaves: Some(l) } => Some(Edit {
                    target: restconf_path(&format!("/cats-sma:cats-sma/metric-cache/entry[csci-id='{csci_id}']")),
                    op: EditOp::Replace,
                    value: Some(format!("<gas>{}</gas>", l[0].1)),
                }),
                StateChange::Sci { csci_id, leaves: None } => Some(Edit {
                    target: format!("/cats-sma:cats-sma/metric-cache/entry={csci_id}"),
                    op: EditOp::Delete,
                    value: None,
                }),
                _ => None,
            })
            .collect()
    }
    fn blocking(&self) -> bool {
        false
    }
}

fn change(csci: &str, gas: u32) -> Arc<ChangeSet> {
    Arc::new(ChangeSet {
        started: Instant::now(),
        changes: vec![StateChange::Sci { csci_id: csci.into(), leaves: Some(vec![("gas", gas.to_string())]) }],
    })
}

struct Harness {
    engine: broadcast::Sender<Arc<ChangeSet>>,
    ctrl: mpsc::UnboundedSender<Control>,
    rx: mpsc::Receiver<String>,
    counters: Arc<Counters>,
    task: tokio::task::JoinHandle<End>,
}

fn on_change(dampening_cs: u32, sync_on_start: bool, stop: Option<Instant>) -> Harness {
    let (engine, feed) = broadcast::channel(64);
    let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
    let (tx, rx) = mpsc::channel(QUEUE);
    let counters = Arc::new(Counters::default());
    let out = Outbox { id: 7, tx, counters: counters.clone(), encoding: cats_sma::notif::Encoding::Xml };
    let view: Arc<dyn View> = Arc::new(FakeView { snapshots: AtomicU32::new(0) });
    let trigger = Trigger::OnChange { dampening_cs, sync_on_start, excluded: vec![] };
    let feeds = Feeds { engine: Some(feed), running: None };
    let task = tokio::spawn(subscription::run_datastore(view, trigger, stop, feeds, ctrl_rx, out));
    Harness { engine, ctrl, rx, counters, task }
}

/// Lets the subscription task run what is ready, without moving time.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

fn drain(rx: &mut mpsc::Receiver<String>) -> Vec<String> {
    let mut v = Vec::new();
    while let Ok(m) = rx.try_recv() {
        v.push(m);
    }
    v
}

fn kind(msg: &str) -> &str {
    for k in [
        "push-change-update",
        "push-update",
        "subscription-suspended",
        "subscription-resumed",
        "subscription-terminated",
        "subscription-modified",
        "replay-completed",
    ] {
        if msg.contains(&format!("<{k} ")) {
            return k;
        }
    }
    "other"
}

#[tokio::test(start_paused = true)]
async fn nothing_is_sent_before_start() {
    let mut h = on_change(0, true, None);
    h.engine.send(change("a", 1)).unwrap();
    settle().await;
    advance(Duration::from_secs(1)).await;
    assert!(drain(&mut h.rx).is_empty(), "the reply must go first");
    h.ctrl.send(Control::Start).unwrap();
    settle().await;
    // The sync first; a change made after the subscription was established is not lost.
    let got = drain(&mut h.rx);
    assert_eq!(got.iter().map(|m| kind(m)).collect::<Vec<_>>(), ["push-update", "push-change-update"]);
    assert!(got[0].contains("<id>7</id>"));
}

#[tokio::test(start_paused = true)]
async fn dampening_batches_changes_and_keeps_the_last_value() {
    let mut h = on_change(100, false, None);
    h.ctrl.send(Control::Start).unwrap();
    settle().await;
    // The first change goes out at once: nothing was sent within the dampening period.
    h.engine.send(change("a", 1)).unwrap();
    settle().await;
    let first = drain(&mut h.rx);
    assert_eq!(first.len(), 1);
    assert!(first[0].contains("<gas>1</gas>") && first[0].contains("<patch-id>0</patch-id>"));
    // Three changes of a, one of b, within the next second.
    // At +100 ms, +200 ms and +300 ms.
    for (csci, gas) in [("a", 2), ("b", 9), ("a", 3)] {
        advance(Duration::from_millis(100)).await;
        h.engine.send(change(csci, gas)).unwrap();
        settle().await;
    }
    advance(Duration::from_millis(600)).await;
    settle().await;
    assert!(drain(&mut h.rx).is_empty(), "held until one dampening period after the last push");
    advance(Duration::from_millis(100)).await;
    settle().await;
    let second = drain(&mut h.rx);
    assert_eq!(second.len(), 1, "one push-change-update for the batch");
    let m = &second[0];
    assert!(m.contains("<patch-id>1</patch-id>"));
    assert_eq!(m.matches("<edit>").count(), 2, "one edit per object: {m}");
    assert!(m.contains("<gas>3</gas>") && m.contains("<gas>9</gas>") && !m.contains("<gas>2</gas>"));
    assert!(m.find("entry=a").unwrap() < m.find("entry=b").unwrap(), "edits in order of first change");
}

#[tokio::test(start_paused = true)]
async fn slow_receiver_is_suspended_then_resumed_with_a_resync() {
    let mut h = on_change(0, false, None);
    h.ctrl.send(Control::Start).unwrap();
    settle().await;
    // Nobody reads: the queue fills with push-change-updates up to its reserved slots.
    for i in 0..(QUEUE as u32 + 20) {
        h.engine.send(change("a", i)).unwrap();
        settle().await;
    }
    assert!(h.counters.suspended.load(Ordering::Relaxed));
    // While suspended, changes are dropped, not queued.
    h.engine.send(change("a", 5000)).unwrap();
    settle().await;
    let queued = drain(&mut h.rx);
    let kinds: Vec<&str> = queued.iter().map(|m| kind(m)).collect();
    assert_eq!(kinds.last(), Some(&"subscription-suspended"));
    assert!(queued.last().unwrap().contains("insufficient-resources"));
    assert!(kinds[..kinds.len() - 1].iter().all(|k| *k == "push-change-update"));
    assert!(!queued.iter().any(|m| m.contains("<gas>5000</gas>")));
    // The receiver caught up (we drained): at the next check it resumes and resyncs.
    advance(RESUME_CHECK).await;
    settle().await;
    let after = drain(&mut h.rx);
    assert_eq!(after.iter().map(|m| kind(m)).collect::<Vec<_>>(), ["subscription-resumed", "push-update"]);
    assert!(!h.counters.suspended.load(Ordering::Relaxed));
    // And changes flow again.
    h.engine.send(change("a", 6000)).unwrap();
    settle().await;
    assert!(drain(&mut h.rx).iter().any(|m| m.contains("<gas>6000</gas>")));
}

#[tokio::test(start_paused = true)]
async fn a_receiver_that_never_catches_up_is_terminated() {
    let mut h = on_change(0, false, None);
    h.ctrl.send(Control::Start).unwrap();
    settle().await;
    for i in 0..(QUEUE as u32) {
        h.engine.send(change("a", i)).unwrap();
        settle().await;
    }
    assert!(h.counters.suspended.load(Ordering::Relaxed));
    advance(SUSPENSION_TIMEOUT + RESUME_CHECK).await;
    settle().await;
    let end = h.task.await.unwrap();
    assert_eq!(end, End::Terminated("suspension-timeout"));
    let last = drain(&mut h.rx).pop().unwrap();
    assert_eq!(kind(&last), "subscription-terminated");
    assert!(last.contains("suspension-timeout"));
}

#[tokio::test(start_paused = true)]
async fn stop_time_ends_the_subscription() {
    let h = on_change(0, false, Some(Instant::now() + Duration::from_secs(2)));
    h.ctrl.send(Control::Start).unwrap();
    settle().await;
    advance(Duration::from_millis(1990)).await;
    settle().await;
    assert!(!h.task.is_finished());
    advance(Duration::from_millis(20)).await;
    assert_eq!(h.task.await.unwrap(), End::StopTime);
}

#[tokio::test(start_paused = true)]
async fn kill_sends_subscription_terminated_and_delete_is_silent() {
    let mut h = on_change(0, false, None);
    h.ctrl.send(Control::Start).unwrap();
    h.ctrl.send(Control::Terminate("no-such-subscription")).unwrap();
    assert_eq!(h.task.await.unwrap(), End::Terminated("no-such-subscription"));
    let msgs = drain(&mut h.rx);
    assert_eq!(msgs.len(), 1);
    assert!(msgs[0].contains("<subscription-terminated ") && msgs[0].contains("sn:no-such-subscription"));

    let mut h = on_change(0, false, None);
    h.ctrl.send(Control::Start).unwrap();
    h.ctrl.send(Control::Delete).unwrap();
    assert_eq!(h.task.await.unwrap(), End::Deleted);
    assert!(drain(&mut h.rx).is_empty());
}

#[tokio::test(start_paused = true)]
async fn periodic_pushes_align_to_the_anchor_time() {
    let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
    let (tx, mut rx) = mpsc::channel(QUEUE);
    let out = Outbox { id: 3, tx, counters: Arc::new(Counters::default()), encoding: cats_sma::notif::Encoding::Xml };
    let view: Arc<dyn View> = Arc::new(FakeView { snapshots: AtomicU32::new(0) });
    // Anchored 250 ms ago with a 1 s period: pushes at +750 ms, +1750 ms, ...
    let anchor = chrono::Utc::now() - chrono::Duration::milliseconds(250);
    let trigger = Trigger::Periodic { period_cs: 100, anchor: Some(anchor) };
    let feeds = Feeds { engine: None, running: None };
    tokio::spawn(subscription::run_datastore(view, trigger, None, feeds, ctrl_rx, out));
    ctrl.send(Control::Start).unwrap();
    settle().await;
    advance(Duration::from_millis(700)).await;
    settle().await;
    assert!(drain(&mut rx).is_empty());
    advance(Duration::from_millis(100)).await;
    settle().await;
    let first = drain(&mut rx);
    assert_eq!(first.len(), 1);
    assert!(first[0].contains("<snap n=\"0\"/>"));
    advance(Duration::from_millis(900)).await;
    settle().await;
    assert!(drain(&mut rx).is_empty());
    advance(Duration::from_millis(100)).await;
    settle().await;
    assert!(drain(&mut rx)[0].contains("<snap n=\"1\"/>"));
}

#[tokio::test(start_paused = true)]
async fn stream_replay_then_replay_completed_then_live() {
    let bus = EventBus::default();
    bus.publish("cats-sma", "sci-state-change", "<old/>".into());
    let start = chrono::Utc::now() - chrono::Duration::seconds(1);
    bus.publish("ietf-netconf-notifications", "netconf-session-start", "<a/>".into());
    bus.publish("cats-sma", "metric-anomaly", "<b/>".into());
    let (replay, live) = bus.subscribe(Some(start));
    let (ctrl, ctrl_rx) = mpsc::unbounded_channel();
    let (tx, mut rx) = mpsc::channel(QUEUE);
    let counters = Arc::new(Counters::default());
    let out = Outbox { id: 9, tx, counters: counters.clone(), encoding: cats_sma::notif::Encoding::Xml };
    // The cats-sma stream: only that module's notifications.
    let selector = Arc::new(Mutex::new(StreamSelector {
        module: Some("cats-sma".into()),
        filter: None,
        allowed: Box::new(|_, _| true),
        content: Box::new(|ev| Some(ev.clone())),
    }));
    tokio::spawn(subscription::run_stream(selector, replay, true, live, None, ctrl_rx, out));
    ctrl.send(Control::Start).unwrap();
    settle().await;
    let got = drain(&mut rx);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].contains("<old/>") && got[1].contains("<b/>"), "{got:?}");
    assert_eq!(kind(&got[2]), "replay-completed");
    assert_eq!(counters.excluded.load(Ordering::Relaxed), 1, "the session start is not on this stream");
    bus.publish("cats-sma", "sci-state-change", "<c/>".into());
    settle().await;
    let live = drain(&mut rx);
    assert_eq!(live.len(), 1);
    assert!(live[0].contains("<c/>"));
    assert_eq!(counters.sent.load(Ordering::Relaxed), 3);
}
