//! The reporting node (RFC 8581 sections 5.1.2, 5.2.2 and 5.2.4): the C-SMA measures its own
//! load, and while overloaded tells the SCIs that announced the peer report to send less —
//! in its HTTP answers, its gRPC verdicts and on each SCI's MQTT control topic.
//!
//! The reduction follows the load. Each evaluation takes the worst of four indicators, as
//! a ratio to its threshold: the ingest rate, the occupancy of the engine's ingest queue,
//! the engine's lag (how long a job waits for the engine task) and the process's CPU. What
//! the SCIs would send without the report is estimated as `measured / (1 - r)`, so the
//! reduction asked is `r' = 1 - (1 - r) / worst`: it grows while the load is over the
//! thresholds, holds while the SCIs' backing off keeps it just under, and falls once the
//! load is under 80 % of them. Changes under 5 points are not sent (each change is a new
//! sequence number) and a report that does not change is issued again, with a new sequence
//! number, every half validity; when the target reaches 0 the overload ends, and the end
//! (validity 0) is sent for one validity period.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use tokio::time::Instant;

use super::wire::{Olr, Supported, OLR_DEFAULT_ALGO, OLR_PEER_REPORT, PEER_REPORT};
use super::{Direction, Settings, Transition, TransitionHook};

/// SCIs whose announcement is remembered (their state); past it they are still answered.
pub const MAX_SCI_PEERS: usize = 100_000;
/// The smallest change of the reduction that is sent as a new report.
const STEP: u8 = 5;
/// Under this share of every threshold the reduction falls.
const LOW_WATER: f64 = 0.8;

/// `overload-control/reporting`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportingSettings {
    pub interval: Duration,
    /// Reports per second the engine accepted (refused ones do not count: a flood of forged
    /// reports must not make the agent slow down every SCI; what refusing them costs shows in
    /// the queue, the lag and the CPU).
    pub rate_threshold: u32,
    /// Percent of the ingest queue's slots in use.
    pub queue_threshold: u8,
    pub lag_threshold: Duration,
    /// Percent of the machine's CPU time (all cores) used by the agent process.
    pub cpu_threshold: u8,
    /// The largest reduction ever asked (an SCI that sends nothing cannot hear the end).
    pub reduction_limit: u8,
    pub validity: u32,
    /// Where an SCI reporting over MQTT gets the reports: `+` is its CSCI-ID.
    pub mqtt_control_topic: String,
}

impl Default for ReportingSettings {
    fn default() -> ReportingSettings {
        ReportingSettings {
            interval: Duration::from_millis(1000),
            rate_threshold: 10_000,
            queue_threshold: 80,
            lag_threshold: Duration::from_millis(500),
            cpu_threshold: 90,
            reduction_limit: 90,
            validity: 30,
            mqtt_control_topic: "cats/sci/+/control".into(),
        }
    }
}

/// One load measurement.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Load {
    /// Reports per second.
    pub rate: f64,
    /// Percent of the ingest queue in use.
    pub queue: f64,
    pub lag: Duration,
    /// Percent of the machine's CPU.
    pub cpu: f64,
}

/// An SCI that announced the peer report (the reporting node's per-peer OCS, RFC 8581
/// section 5.2.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SciPeer {
    pub transport: &'static str,
    pub algorithm: u64,
    pub at: DateTime<Utc>,
    /// Answers that carried a report.
    pub reports_sent: u64,
    pub last_sequence: u64,
    /// The SCI's last announcement; an SCI not heard from for [`SCI_PEER_IDLE`] (or three
    /// validities, if longer) is forgotten.
    pub last_heard: Instant,
}

/// How long an SCI's announcement is remembered without a new one, at least.
pub const SCI_PEER_IDLE: Duration = Duration::from_secs(300);

/// The report this C-SMA sends, and what it measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Local {
    pub reduction: u8,
    pub report: Option<Olr>,
    /// The end of the last overload, sent until then.
    pub ending: Option<(Olr, Instant)>,
    pub last_sequence: u64,
    pub load: Load,
    /// Which indicator was the worst at the last evaluation, and its ratio.
    pub worst: (&'static str, f64),
    pub since: Option<DateTime<Utc>>,
    pub evaluations: u64,
    /// When the reduction last changed.
    pub changed_at: Option<Instant>,
    /// When the report in force was issued (it is issued again, with a new sequence
    /// number, every half validity: RFC 7683 counts the validity from the first report
    /// with a given sequence number).
    pub issued: Option<Instant>,
}

pub struct ReportingNode {
    settings: RwLock<(Settings, ReportingSettings)>,
    csma_id: RwLock<String>,
    state: Mutex<Local>,
    scis: Mutex<BTreeMap<String, SciPeer>>,
    hook: RwLock<Option<Arc<TransitionHook>>>,
    /// Bumped with each new report or end (the MQTT control topic publisher watches it).
    pub changed: watch::Sender<u64>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for ReportingNode {
    fn default() -> ReportingNode {
        ReportingNode {
            settings: RwLock::new((Settings::default(), ReportingSettings::default())),
            csma_id: RwLock::new(String::new()),
            state: Mutex::new(Local::default()),
            scis: Mutex::new(BTreeMap::new()),
            hook: RwLock::new(None),
            changed: watch::Sender::new(0),
        }
    }
}

impl ReportingNode {
    pub fn new() -> Arc<ReportingNode> {
        Arc::new(ReportingNode::default())
    }

    pub fn set_settings(&self, s: Settings, r: ReportingSettings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = (s, r);
    }

    pub fn settings(&self) -> (Settings, ReportingSettings) {
        self.settings.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_csma_id(&self, id: &str) {
        *self.csma_id.write().unwrap_or_else(|e| e.into_inner()) = id.to_owned();
    }

    pub fn csma_id(&self) -> String {
        self.csma_id.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_hook(&self, hook: Arc<TransitionHook>) {
        *self.hook.write().unwrap_or_else(|e| e.into_inner()) = Some(hook);
    }

    pub fn local(&self) -> Local {
        lock(&self.state).clone()
    }

    pub fn scis(&self) -> BTreeMap<String, SciPeer> {
        lock(&self.scis).clone()
    }

    /// The report to send now: the one in force, or the end of the last one for a while.
    pub fn current(&self) -> Option<Olr> {
        let mut st = lock(&self.state);
        if let Some(r) = &st.report {
            return Some(r.clone());
        }
        match &st.ending {
            Some((end, until)) if *until > Instant::now() => Some(end.clone()),
            Some(_) => {
                st.ending = None;
                None
            }
            None => None,
        }
    }

    /// What to answer an SCI's message with (RFC 8581 sections 5.1.2 and 5.2.4): nothing
    /// unless this node reports, the SCI announced the peer report with the loss algorithm
    /// and its SourceID is the CSCI-ID the message was authenticated for; then the answer
    /// (the loss algorithm selected, this C-SMA as SourceID) and the report in force.
    pub fn answer(
        &self,
        csci_id: &str,
        announced: &Supported,
        transport: &'static str,
    ) -> Option<(Supported, Option<Olr>)> {
        self.answer_news(csci_id, announced, transport).map(|(a, r, _)| (a, r))
    }

    /// [`ReportingNode::answer`], and whether it is news to the SCI (its first answer, or a
    /// report it was not sent yet): what the MQTT control topic publishes.
    pub fn answer_news(
        &self,
        csci_id: &str,
        announced: &Supported,
        transport: &'static str,
    ) -> Option<(Supported, Option<Olr>, bool)> {
        let (s, _) = self.settings();
        // Turned off during an overload, the node still sends its end while it lasts.
        let ending = !s.reporting() && lock(&self.state).ending.is_some();
        if !(s.reporting() || ending) || !announced.peer_report() || announced.source_id != csci_id {
            return None;
        }
        let offered = if ending { OLR_DEFAULT_ALGO } else { s.algorithms };
        let algorithm = announced.peer_algo & offered & OLR_DEFAULT_ALGO;
        if algorithm == 0 {
            return None;
        }
        let report = self.current();
        let news = {
            let mut scis = lock(&self.scis);
            let n = scis.len();
            let mut news = false;
            let entry = match scis.get_mut(csci_id) {
                Some(e) => Some(e),
                None if n < MAX_SCI_PEERS => {
                    news = true;
                    Some(scis.entry(csci_id.to_owned()).or_insert(SciPeer {
                        transport,
                        algorithm,
                        at: Utc::now(),
                        reports_sent: 0,
                        last_sequence: 0,
                        last_heard: Instant::now(),
                    }))
                }
                // The table is full: not remembered, so every answer is news to it.
                None => {
                    news = true;
                    None
                }
            };
            if let Some(e) = entry {
                e.transport = transport;
                e.last_heard = Instant::now();
                if let Some(r) = &report {
                    news |= e.last_sequence != r.sequence;
                    e.reports_sent += 1;
                    e.last_sequence = r.sequence;
                }
            }
            news
        };
        let answer =
            Supported { feature_vector: OLR_PEER_REPORT | algorithm, peer_algo: algorithm, source_id: self.csma_id() };
        Some((answer, report, news))
    }

    /// The SCIs that announced the peer report over `transport`.
    pub fn announced_over(&self, transport: &str) -> Vec<String> {
        lock(&self.scis).iter().filter(|(_, p)| p.transport == transport).map(|(k, _)| k.clone()).collect()
    }

    /// One evaluation (RFC 8581 section 5.2.2): the reduction from the load, a new report
    /// (new sequence number) when it changed enough, the end when it reaches 0.
    pub fn evaluate(&self, load: Load) {
        let (s, r) = self.settings();
        let ratio = |v: f64, t: f64| if t > 0.0 { v / t } else { 0.0 };
        let indicators = [
            ("ingest-rate", ratio(load.rate, f64::from(r.rate_threshold))),
            ("queue", ratio(load.queue, f64::from(r.queue_threshold))),
            ("engine-lag", ratio(load.lag.as_secs_f64(), r.lag_threshold.as_secs_f64())),
            ("cpu", ratio(load.cpu, f64::from(r.cpu_threshold))),
        ];
        let worst = indicators.into_iter().fold(("none", 0.0), |a, b| if b.1 > a.1 { b } else { a });
        let mut transition = None;
        {
            let mut st = lock(&self.state);
            st.load = load;
            st.worst = worst;
            st.evaluations += 1;
            let old = f64::from(st.reduction) / 100.0;
            // The time right after a change still holds reports sent before the SCIs heard
            // of it: judged on it, the reduction would overshoot. One and a half evaluation
            // intervals, at least 2 s, are not judged (SCIs that report more rarely than
            // that still make it overshoot, then come back down).
            let hold = (r.interval * 3 / 2).max(Duration::from_secs(2));
            let settling = st.changed_at.is_some_and(|t| Instant::now().saturating_duration_since(t) < hold);
            let target = if !s.reporting() {
                0.0
            } else if settling {
                old
            } else if worst.1 > 1.0 {
                1.0 - (1.0 - old) / worst.1
            } else if worst.1 < LOW_WATER {
                (1.0 - (1.0 - old) * LOW_WATER / worst.1.max(1e-9)).max(0.0)
            } else {
                old
            };
            // Rounded up to whole percent: any target above 0 asks for at least 1 %.
            let new = ((target * 100.0).ceil().clamp(0.0, 100.0) as u8).min(r.reduction_limit);
            let big_enough = new.abs_diff(st.reduction) >= STEP || (new == 0) != (st.reduction == 0);
            // Not changing (equal, or within a step): the report in force is renewed.
            let changing = new != st.reduction && big_enough;
            let renew = !changing
                && st.report.is_some()
                && st.issued.is_some_and(|t| {
                    Instant::now().saturating_duration_since(t) >= Duration::from_secs(u64::from(r.validity.max(2) / 2))
                });
            if renew {
                let sequence = next_sequence(&mut st.last_sequence);
                if let Some(rep) = st.report.as_mut() {
                    rep.sequence = sequence;
                    rep.validity = Some(r.validity);
                }
                st.issued = Some(Instant::now());
                self.changed.send_modify(|g| *g += 1);
            }
            if changing {
                st.changed_at = Some(Instant::now());
                st.issued = Some(Instant::now());
                let csma = self.csma_id();
                let sequence = next_sequence(&mut st.last_sequence);
                let was = st.reduction;
                st.reduction = new;
                if new > 0 {
                    st.report = Some(Olr {
                        sequence,
                        report_type: PEER_REPORT,
                        reduction: new,
                        validity: Some(r.validity),
                        source_id: csma.clone(),
                    });
                    st.ending = None;
                    if was == 0 {
                        st.since = Some(Utc::now());
                        transition = Some((true, "started", sequence, new));
                    }
                } else {
                    st.report = None;
                    st.since = None;
                    let end =
                        Olr { sequence, report_type: PEER_REPORT, reduction: 0, validity: Some(0), source_id: csma };
                    st.ending = Some((end, Instant::now() + Duration::from_secs(u64::from(r.validity.max(1)))));
                    transition = Some((false, "ended", sequence, 0));
                }
                self.changed.send_modify(|g| *g += 1);
            }
        }
        if self.local().evaluations.is_multiple_of(60) {
            let idle = SCI_PEER_IDLE.max(Duration::from_secs(3 * u64::from(r.validity)));
            let now = Instant::now();
            lock(&self.scis).retain(|_, p| now.saturating_duration_since(p.last_heard) < idle);
        }
        if let Some((overloaded, cause, sequence, reduction)) = transition {
            let t = Transition {
                direction: Direction::ToSci,
                peer: self.csma_id(),
                overloaded,
                cause,
                sequence,
                reduction,
            };
            if overloaded {
                tracing::warn!(
                    reduction,
                    indicator = worst.0,
                    ratio = worst.1,
                    "C-SMA overloaded: asking its SCIs to report less"
                );
            } else {
                tracing::info!("C-SMA no longer overloaded: the SCIs' reduction ends");
            }
            let hook = self.hook.read().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(h) = hook {
                h(&t);
            }
        }
    }
}

/// Measures the engine's and the process's load every `evaluation-interval` and evaluates
/// the reporting node with it; runs as long as the engine does.
pub async fn run_sampler(engine: crate::engine::Engine) {
    let node = engine.doic.clone();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut last: Option<(Instant, u64, Option<Duration>)> = None;
    loop {
        let (_, r) = node.settings();
        tokio::time::sleep(r.interval.max(Duration::from_millis(100))).await;
        let Some(sample) = engine.load_sample().await else { break };
        let (now, cpu) = (Instant::now(), process_cpu());
        if let Some((at, accepted, cpu_before)) = last {
            let secs = now.saturating_duration_since(at).as_secs_f64().max(1e-3);
            let used = match (cpu, cpu_before) {
                (Some(c), Some(b)) => c.saturating_sub(b).as_secs_f64(),
                _ => 0.0,
            };
            node.evaluate(Load {
                rate: sample.accepted.saturating_sub(accepted) as f64 / secs,
                queue: sample.queue,
                lag: sample.lag,
                cpu: 100.0 * used / secs / cores,
            });
        }
        last = Some((now, sample.accepted, cpu));
    }
}

/// Sequence numbers from the clock (milliseconds), so they increase across restarts too
/// (RFC 7683 section 5.5.2).
pub fn next_sequence(last: &mut u64) -> u64 {
    let now = Utc::now().timestamp_millis().max(0) as u64;
    *last = now.max(*last + 1);
    *last
}

/// The process's CPU time so far (user + system), from `/proc/self/stat`.
pub fn process_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The fields after the command (which may hold spaces) start after its last ')'.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = if hz > 0 { hz as u64 } else { 100 };
    Some(Duration::from_nanos(ticks.saturating_mul(1_000_000_000 / hz)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rate: u32) -> Arc<ReportingNode> {
        let n = ReportingNode::new();
        n.set_csma_id("csma-1");
        n.set_settings(Settings::default(), ReportingSettings { rate_threshold: rate, ..ReportingSettings::default() });
        n
    }

    fn rate(r: f64) -> Load {
        Load { rate: r, ..Load::default() }
    }

    #[tokio::test(start_paused = true)]
    async fn rfc8581_5_2_2_the_reduction_follows_the_load_is_renewed_and_ends() {
        let settle = || tokio::time::advance(Duration::from_secs(3));
        let n = node(100);
        n.evaluate(rate(50.0));
        assert!(n.current().is_none());
        // Offered 300/s against 100/s: two thirds.
        n.evaluate(rate(300.0));
        let r = n.current().unwrap();
        assert_eq!((r.reduction, r.validity, r.report_type, r.source_id.as_str()), (67, Some(30), 2, "csma-1"));
        // Right after the change nothing is judged (reports sent before the SCIs heard).
        n.evaluate(rate(1000.0));
        assert_eq!(n.current().unwrap(), r);
        settle().await;
        // The SCIs back off to 99/s: the reduction holds, no new report.
        n.evaluate(rate(99.0));
        assert_eq!(n.current().unwrap().sequence, r.sequence);
        // Half the validity later the same report goes out again with a new sequence number.
        tokio::time::advance(Duration::from_secs(15)).await;
        n.evaluate(rate(99.0));
        let renewed = n.current().unwrap();
        assert_eq!(renewed.reduction, 67);
        assert!(renewed.sequence > r.sequence);
        // The SCIs' demand falls (30/s measured at 67 %): the reduction falls, a new report.
        n.evaluate(rate(30.0));
        let lower = n.current().unwrap();
        assert!(lower.reduction < 67 && lower.sequence > renewed.sequence, "{lower:?}");
        settle().await;
        // Far under: the end, with validity 0.
        n.evaluate(rate(1.0));
        let end = n.current().unwrap();
        assert_eq!((end.reduction, end.validity), (0, Some(0)));
        assert!(end.sequence > lower.sequence);
        assert_eq!(n.local().reduction, 0);
    }

    #[test]
    fn rfc8581_5_1_2_answers_only_an_announcement_from_the_authenticated_sci() {
        let n = node(100);
        let a = Supported::announce(OLR_DEFAULT_ALGO, "sci-1");
        assert!(n.answer("sci-2", &a, "http").is_none(), "SourceID is another SCI");
        assert!(n.answer("sci-1", &Supported { feature_vector: 1, ..a.clone() }, "http").is_none(), "no peer report");
        let (answer, report) = n.answer("sci-1", &a, "http").unwrap();
        assert_eq!((answer.peer_algo, answer.source_id.as_str()), (OLR_DEFAULT_ALGO, "csma-1"));
        assert!(answer.peer_report() && report.is_none());
        n.evaluate(rate(1000.0));
        let (_, report) = n.answer("sci-1", &a, "http").unwrap();
        assert_eq!(report.unwrap().reduction, 90, "capped at the reduction limit");
        assert_eq!(n.scis()["sci-1"].reports_sent, 1);
        assert!(process_cpu().is_some());
    }
}
