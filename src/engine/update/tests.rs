//! The Update Controller against seed 004 ("Update Controller"; "Policy Engine", update
//! control) and YANG `update-control`: the state machine driven with explicit instants the
//! way its task drives it, and the task itself under paused time. No real sleeps.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::*;
use crate::engine::clock::Clock;
use crate::engine::model::{Health, SciState, SiteMetrics};

const WALL: &str = "2026-01-01T00:00:00Z";

fn wall() -> DateTime<Utc> {
    WALL.parse().unwrap()
}

fn site(cs: &str, gas: u32, ct: u32) -> SiteMetrics {
    SiteMetrics {
        cs_id: cs.into(),
        gas,
        computing_time_ms: ct,
        health: Health::Healthy,
        cost: None,
        reputation: None,
        security_label: None,
        sci_count: 1,
    }
}

fn with_health(mut s: SiteMetrics, health: Health) -> SiteMetrics {
    s.health = health;
    s
}

fn sci(csci: &str, cs: &str, change: SciChange, site: Option<SiteMetrics>) -> UpdateEvent {
    UpdateEvent::Sci(SciEvent { csci_id: csci.into(), cs_id: cs.into(), change, site })
}

fn state(from: Option<SciState>, to: SciState) -> SciChange {
    SciChange::State { from, to }
}

fn ids(adv: &Advertisement) -> Vec<&str> {
    adv.sites.iter().map(|s| s.cs_id.as_str()).collect()
}

/// The controller driven as its task drives it: timers run up to each event's instant,
/// then the event is applied. Every advertisement is logged with its offset in ms.
struct Harness {
    uc: UpdateController,
    t0: Instant,
    now: Instant,
    log: Vec<(u64, Advertisement)>,
}

impl Harness {
    fn new(config: UpdateConfig) -> Harness {
        let clock = Clock::starting_at(wall());
        let t0 = Instant::now();
        Harness { uc: UpdateController::new(config, clock, t0).unwrap(), t0, now: t0, log: Vec::new() }
    }

    fn at(&self, ms: u64) -> Instant {
        self.t0 + Duration::from_millis(ms)
    }

    fn record(&mut self, at: Instant, out: Vec<Advertisement>) -> Vec<(u64, Advertisement)> {
        let ms = at.duration_since(self.t0).as_millis() as u64;
        let out: Vec<_> = out.into_iter().map(|a| (ms, a)).collect();
        self.log.extend(out.iter().cloned());
        out
    }

    /// Fires every deadline up to `ms`. Fails if a deadline does not move forward (a
    /// driver would spin).
    fn run_to(&mut self, ms: u64) -> Vec<(u64, Advertisement)> {
        let until = self.at(ms);
        let mut out = Vec::new();
        let mut steps = 0;
        while let Some(deadline) = self.uc.next_deadline() {
            if deadline > until {
                break;
            }
            let t = deadline.max(self.now);
            self.now = t;
            let advs = self.uc.on_tick(t);
            out.extend(self.record(t, advs));
            steps += 1;
            assert!(steps < 1000, "next_deadline does not advance at {:?}", t - self.t0);
        }
        self.now = self.now.max(until);
        out
    }

    /// Runs the timers up to `ms`, then applies `event` there. Returns what went out.
    fn event(&mut self, ms: u64, event: UpdateEvent) -> Vec<(u64, Advertisement)> {
        let mut out = self.run_to(ms);
        let t = self.at(ms);
        let advs = self.uc.on_event(event, t);
        out.extend(self.record(t, advs));
        out
    }

    fn reconfigure(&mut self, ms: u64, config: UpdateConfig) -> Vec<(u64, Advertisement)> {
        let mut out = self.run_to(ms);
        let t = self.at(ms);
        let advs = self.uc.reconfigure(config, t).unwrap();
        out.extend(self.record(t, advs));
        out
    }
}

/// One advertisement, at `ms`.
fn one(out: Vec<(u64, Advertisement)>, ms: u64) -> Advertisement {
    assert_eq!(out.len(), 1, "expected one advertisement, got {out:#?}");
    let (at, adv) = out.into_iter().next().unwrap();
    assert_eq!(at, ms, "sent at {at} ms, expected {ms} ms: {adv:#?}");
    adv
}

fn none(out: Vec<(u64, Advertisement)>) {
    assert!(out.is_empty(), "expected nothing, got {out:#?}");
}

// Seed 004, Policy Engine, update control: "GAS delta > 10%".
#[test]
fn seed_gas_delta_10_percent_just_below_and_just_above() {
    let mut h = Harness::new(UpdateConfig::default());
    let first = one(h.event(0, UpdateEvent::Site(site("A", 200, 100))).into_iter().chain(h.run_to(1000)).collect(), 50);
    assert_eq!((first.kind, first.trigger, first.sites[0].gas), (AdvertisementKind::Delta, Trigger::Discovery, 200));

    none(h.event(10_000, UpdateEvent::Site(site("A", 220, 100))));
    none(h.run_to(15_000));
    assert_eq!(h.uc.stats().below_threshold, 1);

    let mut out = h.event(20_000, UpdateEvent::Site(site("A", 221, 100)));
    out.extend(h.run_to(25_000));
    let adv = one(out, 20_050);
    assert_eq!((adv.trigger, adv.sites[0].gas), (Trigger::MetricChange, 221));
}

// Seed 004: "or absolute delta > 50" (1000 → 1050 is 5 %, below the percentage too).
#[test]
fn seed_gas_absolute_delta_50_just_below_and_just_above() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 1000, 100)));
    h.run_to(1000);
    none(h.event(10_000, UpdateEvent::Site(site("A", 1050, 100))));
    none(h.run_to(15_000));
    let mut out = h.event(20_000, UpdateEvent::Site(site("A", 1051, 100)));
    out.extend(h.run_to(25_000));
    assert_eq!(one(out, 20_050).sites[0].gas, 1051);
}

// Seed 004: "Computing Time delta > 20%".
#[test]
fn seed_computing_time_delta_20_percent_just_below_and_just_above() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 500, 100)));
    h.run_to(1000);
    none(h.event(10_000, UpdateEvent::Site(site("A", 500, 120))));
    none(h.run_to(15_000));
    let mut out = h.event(20_000, UpdateEvent::Site(site("A", 500, 121)));
    out.extend(h.run_to(25_000));
    assert_eq!(one(out, 20_050).sites[0].computing_time_ms, 121);
}

// Seed 004: "Security label change" triggers; drift is measured from the last advertised
// value, so small steps add up.
#[test]
fn seed_thresholds_measure_from_last_advertised_value() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    none(h.event(10_000, UpdateEvent::Site(site("A", 215, 100))));
    // 215 → 230 is 7 %, but 200 → 230 is 15 %.
    let mut out = h.event(20_000, UpdateEvent::Site(site("A", 230, 100)));
    out.extend(h.run_to(25_000));
    assert_eq!(one(out, 20_050).sites[0].gas, 230);

    let labelled = SiteMetrics { reputation: None, security_label: Some(5), ..site("A", 230, 100) };
    let mut out = h.event(30_000, UpdateEvent::Site(labelled));
    out.extend(h.run_to(35_000));
    assert_eq!(one(out, 30_050).sites[0].security_label, Some(5));
}

// Seed 004, Update Controller, periodic updates: "A full metric snapshot is sent at a fixed
// interval (e.g., every 60 seconds) even if no triggers have fired"; changes below the
// thresholds ride on it.
#[test]
fn seed_heartbeat_full_snapshot_every_60s_without_change() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.event(10, UpdateEvent::Site(site("B", 300, 100)));
    h.run_to(1000);
    none(h.event(30_000, UpdateEvent::Site(site("A", 210, 100))));

    let out = h.run_to(59_999);
    none(out);
    let beat = one(h.run_to(60_000), 60_000);
    assert_eq!(
        (beat.kind, beat.trigger, beat.audience.clone()),
        (AdvertisementKind::Full, Trigger::Heartbeat, Audience::All)
    );
    assert_eq!(beat.sites, vec![site("A", 210, 100), site("B", 300, 100)], "the heartbeat carries current values");

    let beat = one(h.run_to(120_000), 120_000);
    assert_eq!(beat.kind, AdvertisementKind::Full);
    assert_eq!(h.uc.stats().heartbeats, 2);
}

#[test]
fn seed_heartbeat_goes_out_with_nothing_to_report() {
    let mut h = Harness::new(UpdateConfig::default());
    let beat = one(h.run_to(60_000), 60_000);
    assert_eq!((beat.kind, beat.sites.len()), (AdvertisementKind::Full, 0));
}

// Seed 004: "Minimum update interval: suppress updates more frequent than 5 seconds"; YANG
// min-interval: "Critical triggers such as health changes are not suppressed".
#[test]
fn seed_health_change_bypasses_min_interval() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    // A routine change is held until 5.05 s...
    none(h.event(1_000, UpdateEvent::Site(site("A", 400, 100))));
    // ...a health change is not, and carries the latest values.
    let mut out = h.event(2_000, UpdateEvent::Site(with_health(site("A", 400, 100), Health::Degraded)));
    out.extend(h.run_to(10_000));
    let adv = one(out, 2_050);
    assert_eq!(adv.trigger, Trigger::HealthChange);
    assert_eq!(adv.priority(), Priority::Critical);
    assert_eq!(adv.sites, vec![with_health(site("A", 400, 100), Health::Degraded)]);
}

// Seed 004, Update Controller: an SCI's health change sends "an immediate update" even when
// the site's health (the best of its SCIs) stays the same.
#[test]
fn seed_sci_health_change_is_critical_even_if_site_health_is_unchanged() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    let change = SciChange::Health { from: Health::Healthy, to: Health::Degraded };
    let mut out = h.event(1_000, sci("s1", "A", change, Some(site("A", 190, 100))));
    out.extend(h.run_to(10_000));
    let adv = one(out, 1_050);
    assert_eq!((adv.trigger, adv.sites[0].gas), (Trigger::HealthChange, 190));
}

// Seed 004 / YANG min-interval: three changes within 5 s give one advertisement, with the
// latest value, when the interval ends.
#[test]
fn seed_min_interval_coalesces_three_changes_into_one_with_the_latest() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    let mut out = h.event(1_000, UpdateEvent::Site(site("A", 300, 100)));
    out.extend(h.event(2_000, UpdateEvent::Site(site("A", 400, 100))));
    out.extend(h.event(3_000, UpdateEvent::Site(site("A", 500, 100))));
    out.extend(h.run_to(59_000));
    // Advertised at 0.05 s, so the interval ends at 5.05 s.
    let adv = one(out, 5_050);
    assert_eq!((adv.trigger, adv.sites[0].gas), (Trigger::MetricChange, 500));
    let stats = h.uc.stats();
    assert_eq!((stats.held, stats.coalesced), (1, 2));
}

#[test]
fn seed_min_interval_held_update_is_rechecked_when_it_goes() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    h.event(1_000, UpdateEvent::Site(site("A", 300, 100)));
    h.event(2_000, UpdateEvent::Site(site("A", 205, 100)));
    none(h.run_to(59_000));
    assert_eq!(h.uc.stats().pending, 0);
}

// Seed 004, SCI Discovery Trigger: a new SCI is sent whatever the thresholds say, but it is
// not critical, so the minimum interval holds it.
#[test]
fn seed_discovery_bypasses_thresholds_not_min_interval() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, sci("s1", "A", state(Some(SciState::Active), SciState::Healthy), Some(site("A", 200, 100))));
    h.run_to(1000);
    let two = SiteMetrics { sci_count: 2, ..site("A", 205, 100) };
    let mut out = h.event(1_000, sci("s2", "A", state(None, SciState::Active), Some(two.clone())));
    out.extend(h.run_to(30_000));
    let adv = one(out, 5_050);
    assert_eq!((adv.trigger, adv.sites.clone()), (Trigger::Discovery, vec![two]));
}

// Seed 004 SCI state machine: HEALTHY → STALE is not a trigger by itself.
#[test]
fn seed_stale_is_advertised_only_through_thresholds() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    none(h.event(10_000, sci("s1", "A", state(Some(SciState::Healthy), SciState::Stale), Some(site("A", 200, 100)))));
    none(h.run_to(30_000));
}

// Seed 004: "Token bucket algorithm to limit update rate"; Update Controller: "Critical
// triggers take precedence over routine triggers".
#[test]
fn seed_token_bucket_limits_a_burst_and_critical_goes_first() {
    let config = UpdateConfig {
        min_interval: Duration::ZERO,
        token_bucket: Some(TokenBucketConfig { rate_milli: 100, burst: 2 }), // 0.1/s
        ..UpdateConfig::default()
    };
    let mut h = Harness::new(config);
    let mut out = h.event(0, UpdateEvent::Site(site("X", 200, 100)));
    out.extend(h.event(1_000, UpdateEvent::Site(site("Z", 200, 100))));
    out.extend(h.run_to(1_500));
    assert_eq!(out.len(), 2, "the burst of 2 goes at once");

    // The bucket is empty: these wait, and coalesce while they wait.
    let mut out = h.event(2_000, UpdateEvent::Site(site("E", 200, 100)));
    out.extend(h.event(3_000, UpdateEvent::Site(site("F", 200, 100))));
    out.extend(h.event(3_500, UpdateEvent::Site(site("F", 300, 100))));
    let critical = SciChange::Health { from: Health::Healthy, to: Health::Unhealthy };
    out.extend(h.event(4_000, sci("s9", "Z", critical, Some(with_health(site("Z", 0, 100), Health::Unhealthy)))));
    out.extend(h.run_to(10_000));
    none(out);
    assert_eq!(h.uc.stats().rate_limited, 1);

    // 1 token left after 0.05 s, 0.1 after 1.05 s: the next one is there at 10.05 s.
    let adv = one(h.run_to(15_000), 10_050);
    assert_eq!(adv.trigger, Trigger::HealthChange);
    assert_eq!(ids(&adv), ["Z", "E", "F"], "the critical entry first");
    assert_eq!(adv.sites[2].gas, 300, "the waiting update carries the latest value");
}

// Seed 004, Policy Engine: "Maintenance window: suppress all non-critical updates during
// scheduled maintenance"; YANG suppress non-critical: critical triggers still go out, and
// "the heartbeat after the window carries the state".
#[test]
fn seed_maintenance_window_suppresses_non_critical_not_critical() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.event(0, UpdateEvent::Site(site("B", 200, 100)));
    h.run_to(1000);
    let window = |level| UpdateEvent::Suppress { scope: SuppressScope::Global, level };

    none(h.event(10_000, window(Some(SuppressLevel::NonCritical))));
    none(h.event(11_000, UpdateEvent::Site(site("A", 1000, 100))));
    none(h.event(12_000, UpdateEvent::Site(site("C", 50, 100))));
    let change = SciChange::Health { from: Health::Healthy, to: Health::Degraded };
    let mut out = h.event(13_000, sci("s1", "B", change, Some(with_health(site("B", 150, 100), Health::Degraded))));
    out.extend(h.run_to(99_000));
    let adv = one(out, 13_050);
    assert_eq!((adv.trigger, ids(&adv)), (Trigger::HealthChange, vec!["B"]));
    // A, C and the 60 s heartbeat.
    assert_eq!(h.uc.stats().suppressed, 3);

    // The heartbeat after the window: at once, since it is overdue.
    let beat = one(h.event(100_000, window(None)), 100_000);
    assert_eq!((beat.kind, beat.trigger), (AdvertisementKind::Full, Trigger::Heartbeat));
    assert_eq!(ids(&beat), ["A", "B", "C"]);
    assert_eq!(beat.sites[0].gas, 1000);
    none(h.run_to(159_999));
    assert_eq!(one(h.run_to(160_000), 160_000).kind, AdvertisementKind::Full);
}

// YANG maintenance-window suppress "all": every update waits; critical ones (held, latest
// value) go when the window closes, routine ones are dropped.
#[test]
fn seed_suppress_all_holds_critical_until_the_window_closes() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, sci("s1", "A", state(None, SciState::Healthy), Some(site("A", 200, 100))));
    h.event(0, UpdateEvent::Site(site("B", 200, 100)));
    h.run_to(1000);
    let window = |level| UpdateEvent::Suppress { scope: SuppressScope::Global, level };
    none(h.event(10_000, window(Some(SuppressLevel::All))));
    none(h.event(11_000, sci("s1", "A", state(Some(SciState::Stale), SciState::Failed), None)));
    none(h.event(12_000, UpdateEvent::Site(site("B", 900, 100))));
    none(h.run_to(19_000));
    let adv = one(h.event(20_000, window(None)), 20_000);
    assert_eq!(
        (adv.trigger, adv.withdrawn.clone(), adv.sci_withdrawn.clone()),
        (Trigger::SciFailure, vec!["A".to_string()], vec![SciWithdrawal::new("s1", ["A".to_string()])])
    );
    assert!(adv.sites.is_empty(), "B's routine change was dropped, not queued");
}

// Seed 004 SUPPRESS_UPDATES on one service: the others are unaffected, and the heartbeat
// keeps the suppressed service alive with its last advertised values.
#[test]
fn seed_suppress_updates_per_service() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.event(0, UpdateEvent::Site(site("B", 200, 100)));
    h.run_to(1000);
    let scope = SuppressScope::Service("B".into());
    h.event(10_000, UpdateEvent::Suppress { scope: scope.clone(), level: Some(SuppressLevel::NonCritical) });
    none(h.event(11_000, UpdateEvent::Site(site("B", 900, 100))));
    let mut out = h.event(12_000, UpdateEvent::Site(site("A", 900, 100)));
    out.extend(h.run_to(30_000));
    assert_eq!(ids(&one(out, 12_050)), ["A"]);

    let beat = one(h.run_to(60_000), 60_000);
    assert_eq!(beat.sites, vec![site("A", 900, 100), site("B", 200, 100)]);

    h.event(70_000, UpdateEvent::Suppress { scope, level: None });
    let beat = one(h.run_to(120_000), 120_000);
    assert_eq!(beat.sites[1], site("B", 900, 100));
}

// Seed 004, Scalability: "The UC SHOULD batch multiple SCI updates into a single C-PS
// advertisement".
#[test]
fn seed_batching_of_simultaneous_cs_id_changes() {
    let mut h = Harness::new(UpdateConfig::default());
    let sites = vec![site("A", 100, 10), site("B", 100, 10), site("C", 100, 10)];
    let mut out = h.event(0, UpdateEvent::PolicyChanged(sites));
    out.extend(h.run_to(1000));
    assert_eq!(ids(&one(out, 50)), ["A", "B", "C"]);

    // Within the 50 ms batch delay of each other: one advertisement.
    let mut out = h.event(10_000, UpdateEvent::Site(site("A", 200, 10)));
    out.extend(h.event(10_020, UpdateEvent::Site(site("B", 200, 10))));
    out.extend(h.event(10_040, UpdateEvent::Site(site("C", 200, 10))));
    // Later than that: the next one.
    out.extend(h.event(10_200, UpdateEvent::Site(site("D", 200, 10))));
    out.extend(h.run_to(11_000));
    assert_eq!(out.len(), 2);
    assert_eq!((out[0].0, ids(&out[0].1)), (10_050, vec!["A", "B", "C"]));
    assert_eq!((out[1].0, ids(&out[1].1)), (10_250, vec!["D"]));
}

#[test]
fn zero_batch_delay_sends_each_event_at_once() {
    let mut h = Harness::new(UpdateConfig { batch_delay: Duration::ZERO, ..UpdateConfig::default() });
    let adv = one(h.event(0, UpdateEvent::PolicyChanged(vec![site("A", 1, 1), site("B", 1, 1)])), 0);
    assert_eq!(ids(&adv), ["A", "B"]);
}

// Seed 004 SCI state machine: "FAILED: ... Its metrics are withdrawn"; Metric Cache: the
// C-SMA sends an update reflecting the reduced capacity; Protocol Adapter: DELETE
// /cats/metrics/{csci-id} withdraws a failed SCI.
#[test]
fn seed_withdrawal_on_last_sci_failing() {
    let mut h = Harness::new(UpdateConfig::default());
    let two = SiteMetrics { sci_count: 2, ..site("A", 200, 100) };
    h.event(0, sci("s1", "A", state(Some(SciState::Active), SciState::Healthy), Some(site("A", 100, 100))));
    let mut out = h.event(10, sci("s2", "A", state(Some(SciState::Active), SciState::Healthy), Some(two.clone())));
    out.extend(h.run_to(1000));
    assert_eq!(one(out, 50).sites, vec![two]);

    let mut out =
        h.event(10_000, sci("s1", "A", state(Some(SciState::Stale), SciState::Failed), Some(site("A", 100, 100))));
    out.extend(h.run_to(10_500));
    let adv = one(out, 10_050);
    assert_eq!((adv.trigger, adv.sites.clone()), (Trigger::SciFailure, vec![site("A", 100, 100)]));
    assert_eq!(adv.sci_withdrawn, [SciWithdrawal::new("s1", ["A".to_string()])]);

    // The last one, inside the minimum interval: critical, so it goes at once.
    let mut out = h.event(11_000, sci("s2", "A", state(Some(SciState::Stale), SciState::Failed), None));
    out.extend(h.run_to(30_000));
    let adv = one(out, 11_050);
    assert_eq!(
        (adv.sites.len(), adv.withdrawn.clone(), adv.sci_withdrawn.clone()),
        (0, vec!["A".to_string()], vec![SciWithdrawal::new("s2", ["A".to_string()])])
    );

    let beat = one(h.run_to(60_000), 60_000);
    assert!(beat.sites.is_empty() && beat.withdrawn.is_empty());

    // Back: a discovery.
    let mut out =
        h.event(70_000, sci("s2", "A", state(Some(SciState::Failed), SciState::Healthy), Some(site("A", 100, 100))));
    out.extend(h.run_to(71_000));
    assert_eq!(one(out, 70_050).trigger, Trigger::Discovery);
}

// Seed 004 Metric Cache: "Eviction of an entry triggers a withdrawal advertisement"; YANG
// suppress non-critical: withdrawals still go out during maintenance.
#[test]
fn seed_eviction_is_a_withdrawal_that_maintenance_does_not_hold() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(SiteMetrics { sci_count: 2, ..site("A", 200, 100) }));
    h.run_to(1000);
    h.event(2_000, UpdateEvent::Suppress { scope: SuppressScope::Global, level: Some(SuppressLevel::NonCritical) });
    let mut out = h.event(3_000, sci("s1", "A", SciChange::Removed, Some(site("A", 100, 100))));
    out.extend(h.run_to(10_000));
    let adv = one(out, 3_050);
    assert_eq!(
        (adv.trigger, adv.sci_withdrawn.clone()),
        (Trigger::Withdrawal, vec![SciWithdrawal::new("s1", ["A".to_string()])])
    );
    assert_eq!(adv.sites, vec![site("A", 100, 100)]);
}

// Seed 004 Policy Change Trigger: re-evaluate everything; a service missing from the set is
// withdrawn; what stays within thresholds is not sent.
#[test]
fn seed_policy_change_reevaluates_the_full_set() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::PolicyChanged(vec![site("A", 100, 10), site("B", 100, 10), site("C", 100, 10)]));
    h.run_to(1000);
    let mut out = h.event(10_000, UpdateEvent::PolicyChanged(vec![site("A", 80, 10), site("B", 95, 10)]));
    out.extend(h.run_to(20_000));
    let adv = one(out, 10_050);
    assert_eq!(adv.trigger, Trigger::Withdrawal);
    assert_eq!(ids(&adv), ["A"]);
    assert_eq!(adv.withdrawn, ["C"]);
}

// Seed 004 Security Considerations: "The C-SMA includes a freshness indicator (e.g.,
// sequence number or epoch) in each report".
#[test]
fn seed_seq_strictly_increasing_across_kinds_and_audiences() {
    let config = UpdateConfig { min_interval: Duration::ZERO, ..UpdateConfig::default() };
    let mut h = Harness::new(config);
    for i in 0..20u64 {
        h.event(i * 7_000, UpdateEvent::Site(site("A", 100 + 100 * i as u32, 10)));
        if i % 5 == 0 {
            h.event(i * 7_000 + 1, UpdateEvent::Resync { peer: Some("cps1".into()) });
        }
    }
    h.run_to(300_000);
    let seqs: Vec<u64> = h.log.iter().map(|(_, a)| a.seq).collect();
    assert!(seqs.len() > 25);
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    // Seeded from the wall clock in µs, so a restarted agent continues upwards.
    let start = wall().timestamp_micros() as u64;
    assert!((start..start + 1_000_000).contains(&seqs[0]), "{} vs {start}", seqs[0]);
    assert_eq!(h.uc.stats().last_seq, seqs.last().copied());
    assert!(h.log.iter().any(|(_, a)| a.kind == AdvertisementKind::Full && a.audience == Audience::All));
    assert!(h.log.iter().any(|(_, a)| a.audience == Audience::Peer("cps1".into())));
}

#[test]
fn generated_at_is_the_wall_time_of_the_decision() {
    let mut h = Harness::new(UpdateConfig::default());
    let beat = one(h.run_to(60_000), 60_000);
    let offset = beat.generated_at - wall();
    assert!((offset - chrono::Duration::seconds(60)).num_milliseconds().abs() < 5, "{offset}");
}

// Seed 004 Update Controller, reconciliation: "The C-PS MAY request a full sync ... The
// C-SMA responds with all current metrics"; YANG rpc resync (optionally one peer).
#[test]
fn seed_resync_gives_full() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::PolicyChanged(vec![site("A", 100, 10), site("B", 100, 10)]));
    h.run_to(1000);
    none(h.event(5_000, UpdateEvent::Site(site("A", 105, 10))));

    let full = one(h.event(10_000, UpdateEvent::Resync { peer: None }), 10_000);
    assert_eq!(
        (full.kind, full.trigger, full.audience.clone()),
        (AdvertisementKind::Full, Trigger::Resync, Audience::All)
    );
    assert_eq!(full.sites, vec![site("A", 105, 10), site("B", 100, 10)]);

    // One peer: addressed to it, and the heartbeat stays 60 s after the last full to all.
    let peer = one(h.event(20_000, UpdateEvent::Resync { peer: Some("cps1".into()) }), 20_000);
    assert_eq!((peer.kind, peer.audience.clone()), (AdvertisementKind::Full, Audience::Peer("cps1".into())));
    assert!(peer.is_for("cps1") && !peer.is_for("cps2"));
    none(h.run_to(69_999));
    assert_eq!(one(h.run_to(70_000), 70_000).trigger, Trigger::Heartbeat);
    assert_eq!(h.uc.stats().resync_requests, 2);
}

#[test]
fn resyncs_waiting_for_a_token_merge_into_one_full_to_all() {
    let config = UpdateConfig {
        token_bucket: Some(TokenBucketConfig { rate_milli: 1000, burst: 1 }),
        ..UpdateConfig::default()
    };
    let mut h = Harness::new(config);
    h.event(0, UpdateEvent::Site(site("A", 100, 10)));
    h.run_to(100);
    let mut out = h.event(200, UpdateEvent::Resync { peer: Some("cps1".into()) });
    out.extend(h.event(300, UpdateEvent::Resync { peer: Some("cps2".into()) }));
    out.extend(h.run_to(5_000));
    let full = one(out, 1_050);
    assert_eq!((full.kind, full.audience), (AdvertisementKind::Full, Audience::All));
}

// YANG update-control is configuration: changes apply at run time.
#[test]
fn seed_reconfigure_takes_effect() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    none(h.event(10_000, UpdateEvent::Site(site("A", 215, 100))));

    // A lower threshold makes the waiting difference significant.
    let mut config = UpdateConfig { gas_delta_percent: 5, ..UpdateConfig::default() };
    let mut out = h.reconfigure(20_000, config.clone());
    out.extend(h.run_to(25_000));
    let adv = one(out, 20_050);
    assert_eq!((adv.trigger, adv.sites[0].gas), (Trigger::PolicyChange, 215));

    // A shorter heartbeat: overdue, so at once; then every 10 s.
    config.heartbeat_interval = Duration::from_secs(10);
    let beat = one(h.reconfigure(30_000, config.clone()), 30_000);
    assert_eq!(beat.trigger, Trigger::Heartbeat);
    assert_eq!(one(h.run_to(40_000), 40_000).trigger, Trigger::Heartbeat);

    // A token bucket: one advertisement, then the next waits for the refill.
    config.heartbeat_interval = Duration::from_secs(60);
    config.min_interval = Duration::ZERO;
    config.token_bucket = Some(TokenBucketConfig { rate_milli: 200, burst: 1 });
    none(h.reconfigure(41_000, config.clone()));
    let mut out = h.event(42_000, UpdateEvent::Site(site("A", 400, 100)));
    out.extend(h.event(42_100, UpdateEvent::Site(site("A", 800, 100))));
    out.extend(h.run_to(60_000));
    assert_eq!(out.iter().map(|(t, _)| *t).collect::<Vec<_>>(), [42_050, 47_050]);

    // Refused: the YANG must "min-interval <= heartbeat-interval"; nothing changes.
    let bad = UpdateConfig { min_interval: Duration::from_secs(120), ..config.clone() };
    assert!(matches!(h.uc.reconfigure(bad, h.at(60_000)), Err(ConfigError::MinAboveHeartbeat { .. })));
    assert_eq!(h.uc.config(), &config);
}

#[test]
fn invalid_initial_config_is_refused() {
    let bad =
        UpdateConfig { heartbeat_interval: Duration::ZERO, min_interval: Duration::ZERO, ..UpdateConfig::default() };
    assert!(UpdateController::new(bad, Clock::new(), Instant::now()).is_err());
}

// The task: DESIGN decision 4, paused time instead of sleeps.
#[tokio::test(start_paused = true)]
async fn task_delivers_deltas_and_heartbeats_in_virtual_time() {
    let start = Instant::now();
    let (handle, task) = spawn(UpdateConfig::default(), Clock::starting_at(wall()), 16).unwrap();
    let mut rx = handle.subscribe();
    handle.send(UpdateEvent::Site(site("A", 100, 10))).unwrap();
    let delta = rx.recv().await.unwrap();
    assert_eq!((delta.kind, start.elapsed()), (AdvertisementKind::Delta, Duration::from_millis(50)));
    let beat = rx.recv().await.unwrap();
    assert_eq!((beat.kind, start.elapsed()), (AdvertisementKind::Full, Duration::from_secs(60)));
    let stats = handle.stats();
    assert_eq!((stats.advertisements, stats.heartbeats, stats.last_seq), (2, 1, Some(beat.seq)));

    assert!(matches!(
        handle.reconfigure(UpdateConfig { gas_delta_percent: 20_000, ..UpdateConfig::default() }),
        Err(UpdateError::Config(ConfigError::Percent { .. }))
    ));
    drop(handle);
    task.await.unwrap();
}

// Module documentation: a subscriber that falls behind is told it lagged, and asks for a
// resync to get a full snapshot addressed to it.
#[tokio::test(start_paused = true)]
async fn lagging_subscriber_learns_it_lagged_and_resyncs() {
    let (handle, _task) = spawn(UpdateConfig::default(), Clock::starting_at(wall()), 2).unwrap();
    let mut rx = handle.subscribe();
    for _ in 0..4 {
        handle.send(UpdateEvent::Resync { peer: None }).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(matches!(rx.recv().await, Err(RecvError::Lagged(2))));
    // Drain, then ask for our own snapshot.
    while rx.try_recv().is_ok() {}
    handle.send(UpdateEvent::Resync { peer: Some("cps1".into()) }).unwrap();
    let full = rx.recv().await.unwrap();
    assert_eq!((full.kind, full.audience.clone()), (AdvertisementKind::Full, Audience::Peer("cps1".into())));
}
