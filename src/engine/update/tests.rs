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

// Seed 004, Update Controller, SCI Discovery Trigger: "When a new SCI is discovered or an
// existing SCI is withdrawn, the UC sends a full update": a full snapshot to all, whatever
// the thresholds say and without waiting for the minimum interval (the batch window still
// applies); a failure stays an immediate critical delta.
#[test]
fn seed004_update_controller_sci_discovery_trigger_sends_full_update() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, sci("s1", "A", state(Some(SciState::Active), SciState::Healthy), Some(site("A", 200, 100))));
    h.event(0, UpdateEvent::Site(site("B", 300, 100)));
    h.run_to(1000);
    // Within A's 5 s minimum interval, and 200 → 205 is below every threshold.
    let two = SiteMetrics { sci_count: 2, ..site("A", 205, 100) };
    let mut out = h.event(1_000, sci("s2", "A", state(None, SciState::Active), Some(two.clone())));
    out.extend(h.run_to(1_049));
    none(out);
    let full = one(h.run_to(30_000), 1_050);
    assert_eq!(
        (full.kind, full.audience.clone(), full.trigger),
        (AdvertisementKind::Full, Audience::All, Trigger::Discovery)
    );
    assert_eq!(full.sites, vec![two, site("B", 300, 100)]);

    // Withdrawn (deregistered or evicted): a full update too, listing the SCI.
    let mut out = h.event(32_000, sci("s2", "A", SciChange::Removed, Some(site("A", 200, 100))));
    out.extend(h.run_to(33_000));
    let full = one(out, 32_050);
    assert_eq!((full.kind, full.trigger), (AdvertisementKind::Full, Trigger::Withdrawal));
    assert_eq!(full.sci_withdrawn, [SciWithdrawal::new("s2", ["A".to_string()])]);
    assert_eq!(full.sites[0], site("A", 200, 100));

    // A failure is a critical delta, immediate.
    let mut out = h.event(33_100, sci("s1", "A", state(Some(SciState::Stale), SciState::Failed), None));
    out.extend(h.run_to(34_000));
    let adv = one(out, 33_150);
    assert_eq!(
        (adv.kind, adv.trigger, adv.withdrawn.clone()),
        (AdvertisementKind::Delta, Trigger::SciFailure, vec!["A".to_string()])
    );
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
// scheduled maintenance"; YANG suppress non-critical: critical triggers still go out. The
// soft-state refresh keeps going (Update Controller, periodic updates: "This ensures the
// C-PS does not age out the C-SMA's entries"), carrying what the C-PSes were last told;
// what the window kept back goes out when it ends.
#[test]
fn seed004_policy_engine_maintenance_window_keeps_the_heartbeat() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.event(0, UpdateEvent::Site(site("B", 200, 100)));
    h.run_to(1000);
    let window = |level| UpdateEvent::Suppress { scope: SuppressScope::Global, level };

    none(h.event(10_000, window(Some(SuppressLevel::NonCritical))));
    none(h.event(11_000, UpdateEvent::Site(site("A", 1000, 100))));
    none(h.event(12_000, UpdateEvent::Site(site("C", 50, 100))));
    none(h.event(
        12_500,
        sci("s9", "A", state(None, SciState::Active), Some(SiteMetrics { sci_count: 2, ..site("A", 1000, 100) })),
    ));
    let change = SciChange::Health { from: Health::Healthy, to: Health::Degraded };
    let mut out = h.event(13_000, sci("s1", "B", change, Some(with_health(site("B", 150, 100), Health::Degraded))));
    out.extend(h.run_to(59_999));
    let adv = one(out, 13_050);
    assert_eq!((adv.trigger, ids(&adv)), (Trigger::HealthChange, vec!["B"]));
    // A, C and the SCI discovery.
    assert_eq!(h.uc.stats().suppressed, 3);

    // The heartbeat, in the window: A as last advertised, B as it went out, no C.
    let beat = one(h.run_to(60_000), 60_000);
    assert_eq!((beat.kind, beat.trigger), (AdvertisementKind::Full, Trigger::Heartbeat));
    assert_eq!(beat.sites, vec![site("A", 200, 100), with_health(site("B", 150, 100), Health::Degraded)]);

    // The end of the window: what it kept back, as a full update (an SCI was discovered).
    let full = one(h.event(100_000, window(None)).into_iter().chain(h.run_to(100_100)).collect(), 100_050);
    assert_eq!((full.kind, full.trigger), (AdvertisementKind::Full, Trigger::Discovery));
    assert_eq!(ids(&full), ["C", "A", "B"], "the revealed changes first, most urgent first");
    assert_eq!(full.sites[1].gas, 1000);
    none(h.run_to(160_049));
    assert_eq!(one(h.run_to(160_050), 160_050).kind, AdvertisementKind::Full);
}

// The same under `suppress all`: the heartbeat goes, everything in it frozen.
#[test]
fn seed004_policy_engine_maintenance_window_all_keeps_the_heartbeat_frozen() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 200, 100)));
    h.run_to(1000);
    h.event(10_000, UpdateEvent::Suppress { scope: SuppressScope::Global, level: Some(SuppressLevel::All) });
    let change = SciChange::Health { from: Health::Healthy, to: Health::Unhealthy };
    none(h.event(11_000, sci("s1", "A", change, Some(with_health(site("A", 0, 100), Health::Unhealthy)))));
    none(h.event(12_000, UpdateEvent::Site(site("N", 5, 5))));
    let beat = one(h.run_to(60_000), 60_000);
    assert_eq!((beat.kind, beat.sites.clone()), (AdvertisementKind::Full, vec![site("A", 200, 100)]));
    let beat = one(h.run_to(120_000), 120_000);
    assert_eq!(beat.sites, vec![site("A", 200, 100)]);
    assert_eq!(h.uc.stats().heartbeats, 2);
    // The held critical update goes when the window closes; N (routine, dropped) too, as
    // it is new to the C-PSes.
    let adv = one(
        h.event(130_000, UpdateEvent::Suppress { scope: SuppressScope::Global, level: None })
            .into_iter()
            .chain(h.run_to(131_000))
            .collect(),
        130_000,
    );
    assert_eq!(
        (adv.trigger, adv.sites.clone()),
        (Trigger::HealthChange, vec![with_health(site("A", 0, 100), Health::Unhealthy), site("N", 5, 5)])
    );
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
    let adv = one(h.event(20_000, window(None)).into_iter().chain(h.run_to(21_000)).collect(), 20_000);
    assert_eq!(
        (adv.trigger, adv.withdrawn.clone(), adv.sci_withdrawn.clone()),
        (Trigger::SciFailure, vec!["A".to_string()], vec![SciWithdrawal::new("s1", ["A".to_string()])])
    );
    // B's routine change was dropped, not queued; being past the thresholds it goes with
    // the release.
    assert_eq!(adv.sites, vec![site("B", 900, 100)]);
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

    // Released: past the thresholds, so at once.
    let mut out = h.event(70_000, UpdateEvent::Suppress { scope, level: None });
    out.extend(h.run_to(71_000));
    assert_eq!(one(out, 70_050).sites, vec![site("B", 900, 100)]);
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
    let full = one(out, 50);
    assert_eq!((full.kind, full.trigger, full.sites), (AdvertisementKind::Full, Trigger::Discovery, vec![two]));

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

    // The discovery's full snapshot at 50 ms restarted the heartbeat.
    let beat = one(h.run_to(60_050), 60_050);
    assert!(beat.sites.is_empty() && beat.withdrawn.is_empty());

    // Back: a discovery, so a full update.
    let mut out =
        h.event(70_000, sci("s2", "A", state(Some(SciState::Failed), SciState::Healthy), Some(site("A", 100, 100))));
    out.extend(h.run_to(71_000));
    let full = one(out, 70_050);
    assert_eq!((full.kind, full.trigger), (AdvertisementKind::Full, Trigger::Discovery));
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

// Seed 004, Update Controller, Policy Change Trigger: "When a local policy is updated, the
// UC re-evaluates all metrics and sends updates as needed": every service whose values
// differ in any field from what was advertised (no threshold), without waiting for the
// minimum interval; a service missing from the set is withdrawn; an unchanged one is not
// sent.
#[test]
fn seed004_update_controller_policy_change_trigger_sends_every_difference() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(
        0,
        UpdateEvent::PolicyChanged(vec![site("A", 100, 10), site("B", 100, 10), site("C", 100, 10), site("D", 1, 1)]),
    );
    h.run_to(1000);
    // At 2 s, inside every CS-ID's 5 s minimum interval. B: 5 % and 5 slots, below every
    // threshold; D: unchanged.
    let cost = SiteMetrics { cost: Some(7), ..site("B", 95, 10) };
    let mut out = h.event(2_000, UpdateEvent::PolicyChanged(vec![site("A", 80, 10), cost.clone(), site("D", 1, 1)]));
    out.extend(h.run_to(2_049));
    none(out);
    let adv = one(h.run_to(2_500), 2_050);
    assert_eq!((adv.kind, adv.trigger), (AdvertisementKind::Delta, Trigger::Withdrawal));
    assert_eq!(adv.sites, vec![site("A", 80, 10), cost]);
    assert_eq!(adv.withdrawn, ["C"]);

    // A routine change held by the minimum interval becomes a policy change: it goes now.
    none(h.event(3_000, UpdateEvent::Site(site("A", 200, 10))));
    let mut out =
        h.event(3_500, UpdateEvent::PolicyChanged(vec![site("A", 201, 10), site("B", 95, 10), site("D", 1, 1)]));
    out.extend(h.run_to(4_000));
    let adv = one(out, 3_550);
    assert_eq!((adv.trigger, ids(&adv)), (Trigger::PolicyChange, vec!["A", "B"]));

    // Suppression still applies.
    h.event(
        10_000,
        UpdateEvent::Suppress { scope: SuppressScope::Service("D".into()), level: Some(SuppressLevel::NonCritical) },
    );
    let mut out =
        h.event(11_000, UpdateEvent::PolicyChanged(vec![site("A", 201, 10), site("B", 95, 10), site("D", 2, 1)]));
    out.extend(h.run_to(12_000));
    none(out);
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

// Seed 004, Update Controller, periodic updates: "The heartbeat interval SHOULD be
// configurable and MAY be adjusted dynamically based on network conditions or C-PS load".
// With adaptive-heartbeat the interval follows the shortest C-PS refresh hint, within the
// bounds; without a hint, or without adaptive-heartbeat, it is the configured one.
#[test]
fn seed004_update_controller_adaptive_heartbeat_follows_cps_hints_within_bounds() {
    let hint = |peer: &str, s: Option<u64>| UpdateEvent::RefreshHint {
        peer: peer.into(),
        interval: s.map(Duration::from_secs),
    };
    // Without adaptive-heartbeat a hint changes nothing.
    let mut h = Harness::new(UpdateConfig::default());
    none(h.event(0, hint("cps1", Some(20))));
    assert_eq!(h.uc.heartbeat_interval(), Duration::from_secs(60));
    assert_eq!(one(h.run_to(60_000), 60_000).trigger, Trigger::Heartbeat);

    let config = UpdateConfig {
        adaptive_heartbeat: Some(AdaptiveHeartbeat { min: Duration::from_secs(15), max: Duration::from_secs(120) }),
        ..UpdateConfig::default()
    };
    let mut h = Harness::new(config.clone());
    none(h.event(0, hint("cps1", Some(30))));
    none(h.event(1, hint("cps2", Some(45))));
    assert_eq!(h.uc.heartbeat_interval(), Duration::from_secs(30), "the shortest hint");
    assert_eq!(h.uc.stats().heartbeat_interval, Duration::from_secs(30));
    none(h.run_to(29_999));
    assert_eq!(one(h.run_to(30_000), 30_000).trigger, Trigger::Heartbeat);
    // Clamped to the lower bound; then the upper.
    none(h.event(31_000, hint("cps1", Some(1))));
    assert_eq!(one(h.run_to(45_000), 45_000).trigger, Trigger::Heartbeat);
    none(h.event(46_000, hint("cps1", Some(3600))));
    none(h.event(46_001, hint("cps2", None)));
    assert_eq!(h.uc.heartbeat_interval(), Duration::from_secs(120));
    none(h.run_to(164_999));
    one(h.run_to(165_000), 165_000);
    // No hint left: the configured interval.
    none(h.event(170_000, hint("cps1", None)));
    assert_eq!(h.uc.heartbeat_interval(), Duration::from_secs(60));
    one(h.run_to(225_000), 225_000);
    // Bounds are checked.
    let bad = UpdateConfig {
        adaptive_heartbeat: Some(AdaptiveHeartbeat { min: Duration::from_secs(60), max: Duration::from_secs(30) }),
        ..config
    };
    assert!(matches!(bad.validate(), Err(ConfigError::AdaptiveBounds { .. })));
}

fn row(csci: &str, cs: &str, gas: u32, state: SciState) -> SciMetrics {
    SciMetrics {
        csci_id: csci.into(),
        cs_id: cs.into(),
        state,
        metrics: crate::engine::model::Metrics {
            gas,
            computing_time_ms: 5,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
        },
    }
}

// Per-SCI rows (seed 004, Protocol Adapter: PUT /cats/metrics/{csci-id}): while some C-PS
// wants them, a full snapshot carries every row of its services, a delta the rows of its
// services changed since they were last advertised; a row change alone sends nothing (it
// rides with its service's next update); with detail off nothing is kept.
#[test]
fn seed004_update_controller_per_sci_rows_ride_with_their_services() {
    let mut h = Harness::new(UpdateConfig { min_interval: Duration::ZERO, ..UpdateConfig::default() });
    h.event(0, UpdateEvent::SciRows(vec![row("s1", "A", 100, SciState::Healthy)]));
    let adv = one(h.event(0, UpdateEvent::Site(site("A", 100, 5))).into_iter().chain(h.run_to(100)).collect(), 50);
    assert!(adv.scis.is_empty(), "detail off: no rows, none kept");
    assert_eq!(h.uc.stats().sci_rows, None);

    h.event(1_000, UpdateEvent::SciDetail(true));
    h.event(
        1_000,
        UpdateEvent::SciRows(vec![
            row("s1", "A", 100, SciState::Healthy),
            row("s2", "A", 50, SciState::Healthy),
            row("t1", "B", 7, SciState::Healthy),
        ]),
    );
    h.event(1_000, UpdateEvent::Site(site("B", 7, 5)));
    let full = one(h.event(1_000, UpdateEvent::Resync { peer: None }), 1_000);
    assert_eq!(full.scis.iter().map(|r| r.csci_id.as_str()).collect::<Vec<_>>(), ["s1", "s2", "t1"]);
    assert_eq!(h.uc.stats().sci_rows, Some(3));

    // s2 changes a little (below the thresholds): nothing goes.
    none(h.event(2_000, UpdateEvent::SciRows(vec![row("s2", "A", 52, SciState::Healthy)])));
    none(h.event(2_000, UpdateEvent::Site(site("A", 102, 5))));
    none(h.run_to(3_000));
    // s1 too, and the service past a threshold: the delta has the two changed rows of A.
    h.event(
        4_000,
        UpdateEvent::SciRows(vec![row("s1", "A", 300, SciState::Healthy), row("t1", "B", 8, SciState::Healthy)]),
    );
    let adv =
        one(h.event(4_000, UpdateEvent::Site(site("A", 352, 5))).into_iter().chain(h.run_to(5_000)).collect(), 4_050);
    assert_eq!(ids(&adv), ["A"]);
    assert_eq!(adv.scis, vec![row("s1", "A", 300, SciState::Healthy), row("s2", "A", 52, SciState::Healthy)]);

    // Removed: its row is gone; a peer's snapshot has the rest (t1's latest row).
    h.event(6_000, sci("s2", "A", SciChange::Removed, Some(site("A", 300, 5))));
    h.run_to(7_000);
    let peer = one(h.event(8_000, UpdateEvent::Resync { peer: Some("p".into()) }), 8_000);
    assert_eq!(peer.scis, vec![row("s1", "A", 300, SciState::Healthy), row("t1", "B", 8, SciState::Healthy)]);

    // Off: dropped; rows that arrive after are ignored.
    h.event(9_000, UpdateEvent::SciDetail(false));
    h.event(9_000, UpdateEvent::SciRows(vec![row("s1", "A", 1, SciState::Healthy)]));
    assert!(one(h.event(9_000, UpdateEvent::Resync { peer: None }), 9_000).scis.is_empty());
    assert_eq!(h.uc.stats().sci_rows, None);
}

// Seed 004, SCI Failure Trigger: a failed SCI's "metrics are withdrawn", its "GAS
// contribution set to 0": its row leaves with it (the C-PS gets a DELETE), and no later
// snapshot puts it back with its old GAS; it returns with its recovery.
#[test]
fn seed004_sci_failure_trigger_a_failed_scis_row_is_withdrawn_and_not_put_back() {
    let mut h = Harness::new(UpdateConfig { min_interval: Duration::ZERO, ..UpdateConfig::default() });
    h.event(0, UpdateEvent::Site(site("A", 500, 5)));
    h.run_to(100);
    h.event(1_000, UpdateEvent::SciDetail(true));
    h.event(
        1_000,
        UpdateEvent::SciRows(vec![row("s1", "A", 400, SciState::Healthy), row("s2", "A", 100, SciState::Healthy)]),
    );
    h.run_to(1_500);
    let failed = one(
        h.event(2_000, sci("s1", "A", state(Some(SciState::Healthy), SciState::Failed), Some(site("A", 100, 5))))
            .into_iter()
            .chain(h.run_to(2_500))
            .collect(),
        2_050,
    );
    assert_eq!(failed.sci_withdrawn, vec![SciWithdrawal::new("s1", ["A".to_string()])]);
    assert!(failed.scis.iter().all(|r| r.csci_id != "s1"), "{:?}", failed.scis);
    assert_eq!(h.uc.stats().sci_rows, Some(1));
    let out = h.run_to(62_000);
    let beat = &out.iter().find(|(_, a)| a.trigger == Trigger::Heartbeat).expect("a heartbeat").1;
    assert_eq!(beat.scis, vec![row("s2", "A", 100, SciState::Healthy)], "the heartbeat does not put s1 back");
    // Recovered: its row (sent by the engine before the event) is back.
    h.event(70_000, UpdateEvent::SciRows(vec![row("s1", "A", 300, SciState::Healthy)]));
    h.event(70_000, sci("s1", "A", state(Some(SciState::Failed), SciState::Healthy), Some(site("A", 400, 5))));
    let back = one(h.run_to(71_000), 70_050);
    assert!(back.scis.contains(&row("s1", "A", 300, SciState::Healthy)), "{:?}", back.scis);
}

// Seed 004, Update Controller reconciliation: "The C-PS MAY request a full sync ... The
// C-SMA responds with all current metrics". A peer's resync that the heartbeat settles is
// a resync: an adapter must not answer it with a keepalive.
#[test]
fn seed004_update_controller_reconciliation_a_resync_settled_by_the_heartbeat_is_not_a_heartbeat() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 100, 10)));
    h.run_to(1_000);
    let t = h.at(60_000);
    let out = h.uc.on_event(UpdateEvent::Resync { peer: Some("cps1".into()) }, t);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(
        (out[0].kind, out[0].audience.clone(), out[0].trigger),
        (AdvertisementKind::Full, Audience::All, Trigger::Resync)
    );
    // The next one is a plain heartbeat again.
    assert_eq!(one(h.run_to(120_000), 120_000).trigger, Trigger::Heartbeat);
}

// Seed 004, Protocol Adapter (PUT /cats/metrics/{csci-id}): when per-SCI detail is switched
// on (a `granularity sci|both` peer added), its first rows go out at once in a full snapshot
// to every C-PS, not at the next threshold crossing or heartbeat.
#[test]
fn seed004_protocol_adapter_per_sci_detail_switched_on_sends_the_rows_at_once() {
    let mut h = Harness::new(UpdateConfig::default());
    h.event(0, UpdateEvent::Site(site("A", 100, 5)));
    h.run_to(1_000);
    none(h.event(5_000, UpdateEvent::SciDetail(true)));
    let mut out = h.event(5_000, UpdateEvent::SciRows(vec![row("s1", "A", 100, SciState::Healthy)]));
    out.extend(h.run_to(5_100));
    let full = one(out, 5_050);
    assert_eq!((full.kind, full.audience.clone()), (AdvertisementKind::Full, Audience::All));
    assert_eq!(full.scis, vec![row("s1", "A", 100, SciState::Healthy)]);
    // Later rows of the same epoch ride with their services as before.
    none(h.event(6_000, UpdateEvent::SciRows(vec![row("s1", "A", 101, SciState::Healthy)])));
    none(h.run_to(7_000));
    // Off and on again: a new epoch, a new snapshot.
    h.event(8_000, UpdateEvent::SciDetail(false));
    h.event(8_000, UpdateEvent::SciDetail(true));
    h.event(8_000, UpdateEvent::SciRows(vec![row("s1", "A", 101, SciState::Healthy)]));
    assert_eq!(one(h.run_to(8_100), 8_050).scis.len(), 1);
}

// Seed 004, Scalability: "The PE MAY suppress non-critical metrics (e.g., optional extension
// metrics) during high-load conditions": above the report-rate threshold cost and
// reputation are left out (GAS, computing time, health and the security label never),
// counted; below the clear level they are back.
#[test]
fn seed004_scalability_high_load_sheds_optional_metrics() {
    let config = UpdateConfig {
        min_interval: Duration::ZERO,
        load_shedding: Some(LoadShedding { threshold: 100, clear_percent: 50 }),
        ..UpdateConfig::default()
    };
    let mut h = Harness::new(config);
    let rich = |gas| SiteMetrics { cost: Some(7), reputation: Some(9), security_label: Some(3), ..site("A", gas, 5) };
    let row = SciMetrics {
        metrics: crate::engine::model::Metrics {
            cost: Some(7),
            reputation: Some(9),
            ..row("s1", "A", 1, SciState::Healthy).metrics
        },
        ..row("s1", "A", 1, SciState::Healthy)
    };
    h.event(0, UpdateEvent::SciDetail(true));
    h.event(0, UpdateEvent::SciRows(vec![row.clone()]));
    h.uc.observe_load(0, h.at(0));
    let adv = one(h.event(0, UpdateEvent::Site(rich(100))).into_iter().chain(h.run_to(100)).collect(), 50);
    assert_eq!(adv.sites[0], rich(100));
    // 150 reports in the next second: high load.
    h.uc.observe_load(150, h.at(1_000));
    assert!(h.uc.stats().load_shedding_since.is_some());
    assert_eq!(h.uc.stats().report_rate, 150);
    assert_eq!(h.uc.next_deadline(), Some(h.at(2_000)), "sampled every second");
    let moved = SciMetrics { metrics: crate::engine::model::Metrics { gas: 2, ..row.metrics }, ..row.clone() };
    h.event(1_500, UpdateEvent::SciRows(vec![moved]));
    let adv = one(h.event(1_500, UpdateEvent::Site(rich(300))).into_iter().chain(h.run_to(1_600)).collect(), 1_550);
    let lean = SiteMetrics { cost: None, reputation: None, ..rich(300) };
    assert_eq!(adv.sites, vec![lean]);
    assert_eq!((adv.scis[0].metrics.cost, adv.scis[0].metrics.reputation, adv.scis[0].metrics.gas), (None, None, 2));
    assert_eq!(h.uc.stats().shed_advertisements, 1);
    // 60 per second: above 50 % of the threshold, still shedding; 40: back.
    h.uc.observe_load(210, h.at(2_000));
    assert!(h.uc.stats().load_shedding_since.is_some());
    h.uc.observe_load(250, h.at(3_000));
    assert_eq!(h.uc.stats().load_shedding_since, None);
    let adv = one(h.event(3_500, UpdateEvent::Site(rich(900))).into_iter().chain(h.run_to(3_600)).collect(), 3_550);
    assert_eq!(adv.sites, vec![rich(900)]);
    assert_eq!(h.uc.stats().shed_advertisements, 1);
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
