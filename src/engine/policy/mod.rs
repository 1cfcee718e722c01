//! The Policy Engine (seed 004, "Policy Engine"): local rules `IF <condition> THEN
//! <action>`, the transformation policies and maintenance windows. A configuration is
//! compiled once at commit time ([`Policy::compile`]) and evaluated per report without
//! allocation (up to 64 configured rules; see [`Fired`]).
//!
//! # Rule language
//! A rule is configured as two strings (cats-sma-policy.yang, `rule/condition` and
//! `rule/action`); a leading `IF` or `THEN` is accepted. Keywords, variables and the health
//! constants are case-insensitive; the grammar is in `parse.rs`.
//! - Variables: `Site_GAS`, `Site_Computing_Time`, `Site_Health`, `SCI_GAS`,
//!   `SCI_Computing_Time`, `SCI_Health`, `Cost`, `Reputation`, `Security_Label`, and `Time`,
//!   which is only tested as `Time IN Maintenance_Window` (any configured window open) or
//!   `Time IN <window>` (that window; quote a name that is not a plain word or is spelled
//!   `Maintenance_Window`).
//! - Conditions: a numeric variable compared (`< <= > >= = !=`) with a whole number, in
//!   either order; a health variable `=`/`!=` `HEALTHY|DEGRADED|UNHEALTHY`; `AND`, `OR`,
//!   `NOT`, parentheses (at most 32 levels), `TRUE`, `FALSE`.
//! - Actions: `SET v = n`, `REDUCE v BY p%` (0 < p ≤ 100, up to 3 decimals), `CLAMP v TO
//!   a..b`, `SUPPRESS_UPDATES`. GAS, computing time, Cost, Reputation and Security_Label
//!   are assignable; constants are checked against the seed's ranges (GAS and Cost u32,
//!   computing time 0..3600000 ms, Reputation and Security_Label 0..10), so actions never
//!   produce a value the Validator would reject.
//!
//! # Scope
//! A rule that mentions an `SCI_` variable is SCI-scope: [`Policy::apply_sci`] runs it on
//! each SCI's metrics before aggregation. Any other rule is site-scope:
//! [`Policy::apply_site`] runs it on a CS-ID's aggregate. Mixing `SCI_` and `Site_` in one
//! rule is refused, as is `SUPPRESS_UPDATES` at SCI scope (suppression concerns a service's
//! updates, not one SCI's report). `Cost`, `Reputation`, `Security_Label` and `Time` are
//! valid in both scopes:
//! - at SCI scope they are the SCI's reported values;
//! - at site scope they are the aggregate's values, as `aggregate.rs` defines them: Cost is
//!   the lowest Cost of the contributing SCIs and Security_Label the lowest label (the site
//!   is as trustworthy as its weakest instance); Reputation likewise the lowest Reputation
//!   of the contributing SCIs (seed 004, Policy Engine: cost and reputation policies), so
//!   `IF Reputation < 5 THEN REDUCE Site_GAS BY 50%` acts on the site's weakest instance,
//!   and transforms/bounds may clamp it.
//!
//! # Absent metrics
//! Cost, Reputation and Security_Label are optional. A comparison on an absent one is
//! *unknown*; `AND`/`OR`/`NOT` follow Kleene's three-valued logic and a rule fires only if
//! its condition is true, so `NOT Cost > 100` does not fire on a report without Cost.
//! `SET` on an absent metric assigns it (security label assignment); `REDUCE` and `CLAMP`
//! leave it absent.
//!
//! # Evaluation
//! Rules run in ascending priority, ties in configuration (`ordered-by user`) order.
//! Disabled rules are compiled and checked but skipped. Every rule whose condition holds
//! fires, in turn: later conditions and actions see earlier results. `REDUCE` rounds down.
//! Fired rules are reported as a [`Fired`] set of [`RuleId`]s (indices into
//! [`Policy::rules`], which are in evaluation order); [`Policy::fired_names`] names them.
//!
//! # Site pipeline
//! [`Policy::apply_site`] does, in this order:
//! 1. site-scope rules on the aggregate (they see the raw `Site_GAS`);
//! 2. GAS safety factor: `reported = floor(gas × factor)` (seed: `Reported_GAS = Site_GAS *
//!    0.8`);
//! 3. bounds: each present metric clamped into its configured `[min, max]`;
//! 4. consistency: a site whose health is not HEALTHY (no HEALTHY SCI) reports GAS 0,
//!    whatever rules and bounds did (seed, Validator & Sanitizer: if Site_GAS > 0, at least
//!    one SCI MUST be HEALTHY), as the aggregator does before policy;
//! 5. EMA of the reported GAS with alpha (default 0.3): `s(t) = alpha·raw(t) + (1 −
//!    alpha)·s(t−1)`, first sample raw, kept in thousandths and rounded half up. Only GAS
//!    is smoothed, as the seed's formula and the YANG `ema` container say. Bounds come
//!    before the EMA, and an average of values within bounds stays within them.
//!
//! # EMA state
//! The caller keeps one [`EmaState`] per CS-ID (beside its aggregate) and passes it in,
//! so evaluation needs no lock and a compiled policy is immutable and shareable. One call
//! is one sample. While the EMA is disabled, or the site has no HEALTHY SCI, the state is
//! reset, so enabling it or recovering starts from the raw value. On a policy change the
//! caller keeps the states (a smooth transition) unless [`Policy::resets_ema`] says
//! something upstream of the EMA changed (rules, windows, safety factor, GAS bounds): then
//! the new policy should show at once (seed, Update Controller: policy change trigger), and
//! the caller calls [`EmaState::reset`].
//!
//! # Maintenance windows
//! Exactly what the YANG models: absolute `[start, end)` or weekly recurring (days, UTC
//! start time, duration up to a week, running past midnight). `SUPPRESS_UPDATES` only sets
//! [`SiteOutcome::suppress_updates`]; the Update Controller decides what to hold back,
//! and can ask [`EvalContext::maintenance`] for the windows' own `suppress` mode.

mod config;
mod error;
mod eval;
mod lex;
mod parse;
mod rule;
mod transform;
mod window;

use std::collections::HashSet;

use chrono::{DateTime, Utc};

pub use config::{BoundsConfig, EmaConfig, PolicyConfig, RuleConfig, TransformsConfig};
pub use error::{Field, PolicyError, RuleError, RuleErrorKind};
pub use rule::{Action, CmpOp, Cond, Metric, Scope, Var, VarKind};
pub use transform::EmaState;
pub use window::{MaintenanceWindow, Schedule, Suppress, TimeOfDay, Weekdays};

use crate::engine::model::{Health, Metrics, SiteMetrics};
use eval::{apply, eval};
use transform::Transforms;
use window::Instant;

/// A compiled rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    name: String,
    priority: u32,
    enabled: bool,
    scope: Scope,
    condition: Cond,
    action: Action,
}

impl Rule {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn priority(&self) -> u32 {
        self.priority
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn scope(&self) -> Scope {
        self.scope
    }

    /// The condition; `Display` gives its canonical text.
    pub fn condition(&self) -> &Cond {
        &self.condition
    }

    pub fn action(&self) -> &Action {
        &self.action
    }
}

/// A rule's position in [`Policy::rules`] (evaluation order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(u32);

impl RuleId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The rules that fired in one evaluation, as a bit set: allocation-free for the first 64
/// rules of a policy. Iterates in evaluation order, which is firing order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fired {
    first: u64,
    more: Vec<u64>,
}

impl Fired {
    fn insert(&mut self, index: usize) {
        if index < 64 {
            self.first |= 1 << index;
        } else {
            let word = index / 64 - 1;
            if self.more.len() <= word {
                self.more.resize(word + 1, 0);
            }
            self.more[word] |= 1 << (index % 64);
        }
    }

    pub fn contains(&self, id: RuleId) -> bool {
        let i = id.index();
        let word = if i < 64 { Some(self.first) } else { self.more.get(i / 64 - 1).copied() };
        word.is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    pub fn is_empty(&self) -> bool {
        self.first == 0 && self.more.iter().all(|&w| w == 0)
    }

    pub fn len(&self) -> usize {
        self.words().map(|(_, w)| w.count_ones() as usize).sum()
    }

    pub fn iter(&self) -> impl Iterator<Item = RuleId> + '_ {
        self.words().flat_map(|(base, mut w)| {
            std::iter::from_fn(move || {
                (w != 0).then(|| {
                    let bit = w.trailing_zeros();
                    w &= w - 1;
                    RuleId(base + bit)
                })
            })
        })
    }

    fn words(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied()).zip((0u32..).step_by(64)).map(|(w, b)| (b, w))
    }
}

/// The time a policy is evaluated at, with the policy's maintenance windows.
#[derive(Clone, Copy, Debug)]
pub struct EvalContext<'p> {
    instant: Instant,
    windows: &'p [MaintenanceWindow],
}

impl<'p> EvalContext<'p> {
    /// Wall-clock time of the evaluation.
    pub fn now(&self) -> DateTime<Utc> {
        self.instant.now
    }

    /// The configured maintenance windows.
    pub fn windows(&self) -> &'p [MaintenanceWindow] {
        self.windows
    }

    /// The windows open now.
    pub fn active_windows(&self) -> impl Iterator<Item = &'p MaintenanceWindow> + '_ {
        self.windows.iter().filter(|w| w.active_at(&self.instant))
    }

    /// The strongest suppression of the windows open now, for the Update Controller.
    pub fn maintenance(&self) -> Option<Suppress> {
        self.active_windows().map(|w| w.suppress).max()
    }
}

/// Result of [`Policy::apply_site`].
#[derive(Clone, Debug, PartialEq)]
pub struct SiteOutcome {
    /// The metrics to report, after rules and transforms.
    pub metrics: SiteMetrics,
    /// A `SUPPRESS_UPDATES` rule fired.
    pub suppress_updates: bool,
    pub fired: Fired,
}

/// Result of [`Policy::apply_site_in_place`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteVerdict {
    pub suppress_updates: bool,
    pub fired: Fired,
}

/// A compiled, immutable policy. `Policy::default()` changes nothing.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// In evaluation order.
    rules: Vec<Rule>,
    /// Enabled SCI-scope rules, as indices into `rules`.
    sci_rules: Vec<usize>,
    /// Enabled site-scope rules, as indices into `rules`.
    site_rules: Vec<usize>,
    transforms: Transforms,
    windows: Vec<MaintenanceWindow>,
}

impl Policy {
    /// Checks and compiles a configuration; refuses it whole on the first error.
    pub fn compile(cfg: &PolicyConfig) -> Result<Policy, PolicyError> {
        let mut names = HashSet::new();
        for w in &cfg.maintenance_windows {
            check_window(w)?;
            if !names.insert(w.name.as_str()) {
                return Err(PolicyError::DuplicateWindow(w.name.clone()));
            }
        }
        let transforms = Transforms::compile(&cfg.transforms)?;

        let mut names = HashSet::new();
        let mut order: Vec<&RuleConfig> = cfg.rules.iter().collect();
        // Stable: equal priorities keep list order.
        order.sort_by_key(|r| r.priority);
        let mut rules = Vec::with_capacity(order.len());
        for rc in order {
            if !(1..=64).contains(&rc.name.chars().count()) {
                return Err(PolicyError::RuleName(rc.name.clone()));
            }
            if !names.insert(rc.name.as_str()) {
                return Err(PolicyError::DuplicateRule(rc.name.clone()));
            }
            let parsed = parse::parse_rule(&rc.condition, &rc.action, &cfg.maintenance_windows)
                .map_err(|error| PolicyError::Rule { rule: rc.name.clone(), error })?;
            rules.push(Rule {
                name: rc.name.clone(),
                priority: rc.priority,
                enabled: rc.enabled,
                scope: parsed.scope,
                condition: parsed.condition,
                action: parsed.action,
            });
        }
        let enabled_in = |scope: Scope| -> Vec<usize> {
            rules.iter().enumerate().filter(|(_, r)| r.enabled && r.scope == scope).map(|(i, _)| i).collect()
        };
        let sci_rules = enabled_in(Scope::Sci);
        let site_rules = enabled_in(Scope::Site);
        Ok(Policy { rules, sci_rules, site_rules, transforms, windows: cfg.maintenance_windows.clone() })
    }

    /// All rules, enabled or not, in evaluation order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn rule(&self, id: RuleId) -> Option<&Rule> {
        self.rules.get(id.index())
    }

    /// The names of the fired rules, in firing order.
    pub fn fired_names<'a>(&'a self, fired: &'a Fired) -> impl Iterator<Item = &'a str> + 'a {
        fired.iter().filter_map(|id| self.rule(id)).map(Rule::name)
    }

    /// When any maintenance window next opens or closes after `now`.
    pub fn next_window_edge(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.windows.iter().filter_map(|w| w.next_edge(now)).min()
    }

    pub fn windows(&self) -> &[MaintenanceWindow] {
        &self.windows
    }

    /// The context to evaluate at wall time `now` (e.g. `Clock::wall`).
    pub fn context(&self, now: DateTime<Utc>) -> EvalContext<'_> {
        EvalContext { instant: Instant::new(now), windows: &self.windows }
    }

    /// Whether any enabled SCI-scope rule exists; without one, `apply_sci` is the identity
    /// and the caller may skip it.
    pub fn has_sci_rules(&self) -> bool {
        !self.sci_rules.is_empty()
    }

    /// Runs the SCI-scope rules on one SCI's metrics (before aggregation).
    pub fn apply_sci(&self, metrics: &Metrics, ctx: &EvalContext<'_>) -> (Metrics, Fired) {
        let mut out = *metrics;
        let mut fired = Fired::default();
        for &i in &self.sci_rules {
            let rule = &self.rules[i];
            if eval(&rule.condition, &out, &ctx.instant, &self.windows) == Some(true) {
                apply(&rule.action, &mut out);
                fired.insert(i);
            }
        }
        (out, fired)
    }

    /// Runs the site pipeline (module docs, "Site pipeline") on a copy of `site`.
    pub fn apply_site(&self, site: &SiteMetrics, ema: &mut EmaState, ctx: &EvalContext<'_>) -> SiteOutcome {
        let mut metrics = site.clone();
        let SiteVerdict { suppress_updates, fired } = self.apply_site_in_place(&mut metrics, ema, ctx);
        SiteOutcome { metrics, suppress_updates, fired }
    }

    /// [`Policy::apply_site`] without cloning `SiteMetrics` (whose CS-ID is a `String`).
    pub fn apply_site_in_place(
        &self,
        site: &mut SiteMetrics,
        ema: &mut EmaState,
        ctx: &EvalContext<'_>,
    ) -> SiteVerdict {
        let mut verdict = SiteVerdict::default();
        for &i in &self.site_rules {
            let rule = &self.rules[i];
            if eval(&rule.condition, &*site, &ctx.instant, &self.windows) == Some(true) {
                verdict.suppress_updates |= apply(&rule.action, site);
                verdict.fired.insert(i);
            }
        }
        let t = &self.transforms;
        site.gas = t.bound(Metric::Gas, t.safety(site.gas));
        site.computing_time_ms = t.bound(Metric::ComputingTime, site.computing_time_ms);
        site.cost = site.cost.map(|c| t.bound(Metric::Cost, c));
        // The bound's min is at most 10 (checked at compile time), so both stay a u8.
        site.reputation = site.reputation.map(|r| t.bound(Metric::Reputation, r.into()).min(10) as u8);
        site.security_label = site.security_label.map(|l| t.bound(Metric::SecurityLabel, l.into()).min(10) as u8);
        match t.ema_alpha_milli {
            // seed 004 consistency: an UNHEALTHY site (no SCI that is reporting and not
            // UNHEALTHY) advertises 0; a DEGRADED one its (reduced) GAS (aggregate.rs).
            _ if site.health == Health::Unhealthy => {
                site.gas = 0;
                ema.reset();
            }
            Some(alpha) => site.gas = ema.update(site.gas, alpha),
            None => ema.reset(),
        }
        verdict
    }

    /// Whether a change from `previous` to `self` touched what feeds the EMA (rules,
    /// windows, safety factor, GAS bounds), so the EMA states should be reset to let the
    /// new policy show at once. Alpha, enabling the EMA and other bounds keep them.
    pub fn resets_ema(&self, previous: &Policy) -> bool {
        !self.effective_rules().eq(previous.effective_rules())
            || self.windows != previous.windows
            || self.transforms.safety_milli != previous.transforms.safety_milli
            || self.transforms.bounds[Metric::Gas.index()] != previous.transforms.bounds[Metric::Gas.index()]
    }

    fn effective_rules(&self) -> impl Iterator<Item = (&Cond, &Action)> {
        self.rules.iter().filter(|r| r.enabled).map(|r| (&r.condition, &r.action))
    }
}

fn check_window(w: &MaintenanceWindow) -> Result<(), PolicyError> {
    if !(1..=64).contains(&w.name.chars().count()) {
        return Err(PolicyError::WindowName(w.name.clone()));
    }
    match &w.schedule {
        Schedule::Absolute { start, end } if end <= start => Err(PolicyError::WindowEndsBeforeStart(w.name.clone())),
        Schedule::Recurring { days, .. } if days.is_empty() => Err(PolicyError::WindowNoDays(w.name.clone())),
        Schedule::Recurring { duration_minutes, .. } if !(1..=10080).contains(duration_minutes) => {
            Err(PolicyError::WindowDuration { name: w.name.clone(), minutes: *duration_minutes })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn noon() -> DateTime<Utc> {
        at("2026-03-02T12:00:00Z")
    }

    fn compile(rules: &[(&str, u32, &str, &str)]) -> Policy {
        let rules = rules.iter().map(|&(n, p, c, a)| RuleConfig::new(n, p, c, a)).collect();
        Policy::compile(&PolicyConfig { rules, ..PolicyConfig::default() }).unwrap()
    }

    fn sci(gas: u32, computing_time_ms: u32, health: Health) -> Metrics {
        Metrics { gas, computing_time_ms, health, cost: None, reputation: None, security_label: None }
    }

    fn site(gas: u32, computing_time_ms: u32) -> SiteMetrics {
        SiteMetrics {
            cs_id: "AR1".into(),
            gas,
            computing_time_ms,
            health: Health::Healthy,
            cost: None,
            reputation: None,
            security_label: None,
            sci_count: 2,
        }
    }

    fn run_site(p: &Policy, s: &SiteMetrics) -> SiteOutcome {
        p.apply_site(s, &mut EmaState::new(), &p.context(noon()))
    }

    fn names(p: &Policy, fired: &Fired) -> Vec<String> {
        p.fired_names(fired).map(str::to_string).collect()
    }

    #[test]
    fn seed_example_1_site_gas_below_100_sets_security_label() {
        let p = compile(&[("low-capacity", 10, "IF Site_GAS < 100", "THEN SET Security_Label = 5")]);
        let out = run_site(&p, &site(80, 5));
        assert_eq!(out.metrics.security_label, Some(5));
        assert_eq!(names(&p, &out.fired), ["low-capacity"]);
        let out = run_site(&p, &site(100, 5));
        assert_eq!(out.metrics.security_label, None);
        assert!(out.fired.is_empty());
    }

    #[test]
    fn seed_example_2_degraded_sci_gas_is_halved_before_aggregation() {
        let p = compile(&[("degraded-half", 10, "SCI_Health = DEGRADED", "REDUCE SCI_GAS BY 50%")]);
        assert!(p.has_sci_rules());
        let ctx = p.context(noon());
        // Seed 004 Metric Cache Structure: 188.3.67.4:70 LLM1 300 12 DEGRADED.
        let (m, fired) = p.apply_sci(&sci(300, 12, Health::Degraded), &ctx);
        assert_eq!(m.gas, 150);
        assert_eq!(m.computing_time_ms, 12);
        assert_eq!(names(&p, &fired), ["degraded-half"]);
        let (m, fired) = p.apply_sci(&sci(7, 12, Health::Degraded), &ctx);
        assert_eq!(m.gas, 3, "REDUCE rounds down");
        assert!(!fired.is_empty());
        let (m, fired) = p.apply_sci(&sci(400, 5, Health::Healthy), &ctx);
        assert_eq!((m.gas, fired.is_empty()), (400, true));
        // Site-scope evaluation does not run SCI-scope rules.
        assert!(run_site(&p, &site(300, 12)).fired.is_empty());
    }

    #[test]
    fn seed_example_3_maintenance_window_suppresses_updates() {
        let windows = vec![
            MaintenanceWindow {
                name: "upgrade".into(),
                schedule: Schedule::Absolute { start: at("2026-03-01T02:00:00Z"), end: at("2026-03-01T04:00:00Z") },
                suppress: Suppress::All,
            },
            MaintenanceWindow {
                name: "nightly".into(),
                schedule: Schedule::Recurring {
                    days: Weekdays::parse("monday tuesday wednesday thursday friday").unwrap(),
                    start: TimeOfDay::parse("23:30").unwrap(),
                    duration_minutes: 60,
                },
                suppress: Suppress::NonCritical,
            },
        ];
        let cfg = PolicyConfig {
            rules: vec![
                RuleConfig::new("maintenance", 1, "IF Time IN Maintenance_Window", "THEN SUPPRESS_UPDATES"),
                RuleConfig::new("nightly-only", 2, "Time IN nightly", "SET Security_Label = 1"),
            ],
            maintenance_windows: windows,
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let s = site(500, 5);
        let mut ema = EmaState::new();
        let check = |now: &str| {
            let ctx = p.context(at(now));
            let out = p.apply_site(&s, &mut ema.clone(), &ctx);
            (out.suppress_updates, out.metrics.security_label, ctx.maintenance())
        };
        assert_eq!(check("2026-03-01T03:00:00Z"), (true, None, Some(Suppress::All)));
        // Monday 23:30 to Tuesday 00:30.
        assert_eq!(check("2026-03-03T00:15:00Z"), (true, Some(1), Some(Suppress::NonCritical)));
        assert_eq!(check("2026-03-03T12:00:00Z"), (false, None, None));
        // Suppression does not change the metrics.
        let out = p.apply_site(&s, &mut ema, &p.context(at("2026-03-01T03:00:00Z")));
        assert_eq!((out.metrics.gas, out.metrics.computing_time_ms), (500, 5));
    }

    #[test]
    fn seed_example_4_cost_is_capped_at_100() {
        let p = compile(&[("cost-cap", 10, "IF Cost > 100", "THEN SET Cost = 100")]);
        let out = run_site(&p, &SiteMetrics { cost: Some(250), ..site(10, 5) });
        assert_eq!(out.metrics.cost, Some(100));
        let out = run_site(&p, &SiteMetrics { cost: Some(90), ..site(10, 5) });
        assert_eq!((out.metrics.cost, out.fired.is_empty()), (Some(90), true));
        let out = run_site(&p, &site(10, 5));
        assert_eq!((out.metrics.cost, out.fired.is_empty()), (None, true), "no Cost reported: the rule does not fire");

        // The same cap per SCI, before aggregation.
        let p = compile(&[("sci-cost-cap", 10, "Cost > 100 AND SCI_GAS > 0", "SET Cost = 100")]);
        let (m, _) = p.apply_sci(&Metrics { cost: Some(250), ..sci(10, 5, Health::Healthy) }, &p.context(noon()));
        assert_eq!(m.cost, Some(100));
    }

    #[test]
    fn seed_transform_safety_factor_0_8() {
        let cfg = PolicyConfig {
            rules: vec![RuleConfig::new("sees-raw", 1, "Site_GAS = 500", "SET Cost = 1")],
            transforms: TransformsConfig { gas_safety_factor: 0.8, ..TransformsConfig::default() },
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let out = run_site(&p, &site(500, 5));
        assert_eq!(out.metrics.gas, 400, "Reported_GAS = Site_GAS * 0.8");
        assert_eq!(out.metrics.cost, Some(1), "rules see Site_GAS before the safety factor");
        assert_eq!(run_site(&p, &site(9, 5)).metrics.gas, 7, "floor(7.2)");
    }

    #[test]
    fn seed_transform_bounds_computing_time_1_to_10000_ms() {
        let cfg = PolicyConfig {
            transforms: TransformsConfig {
                bounds: vec![BoundsConfig { metric: Metric::ComputingTime, min: Some(1), max: Some(10_000) }],
                ..TransformsConfig::default()
            },
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        assert_eq!(run_site(&p, &site(10, 0)).metrics.computing_time_ms, 1);
        assert_eq!(run_site(&p, &site(10, 20_000)).metrics.computing_time_ms, 10_000);
        assert_eq!(run_site(&p, &site(10, 15)).metrics.computing_time_ms, 15);
        assert_eq!(run_site(&p, &site(10, 15)).metrics.gas, 10, "other metrics unbounded");
    }

    #[test]
    fn seed_transform_bounds_apply_to_optional_metrics_only_when_present() {
        let cfg = PolicyConfig {
            transforms: TransformsConfig {
                bounds: vec![
                    BoundsConfig { metric: Metric::Cost, min: Some(5), max: None },
                    BoundsConfig { metric: Metric::SecurityLabel, min: None, max: Some(3) },
                    BoundsConfig { metric: Metric::Gas, min: None, max: Some(1000) },
                ],
                ..TransformsConfig::default()
            },
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let out =
            run_site(&p, &SiteMetrics { cost: Some(1), reputation: None, security_label: Some(9), ..site(5000, 1) });
        assert_eq!((out.metrics.cost, out.metrics.security_label, out.metrics.gas), (Some(5), Some(3), 1000));
        let out = run_site(&p, &site(10, 1));
        assert_eq!((out.metrics.cost, out.metrics.security_label), (None, None));
    }

    #[test]
    fn seed_transform_ema_alpha_0_3_over_a_sequence() {
        let cfg = PolicyConfig {
            transforms: TransformsConfig {
                gas_safety_factor: 0.5,
                ema: EmaConfig { enabled: true, ..EmaConfig::default() },
                ..TransformsConfig::default()
            },
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let ctx = p.context(noon());
        let mut ema = EmaState::new();
        // Raw site GAS 200, 400, 400, 100 → reported (× 0.5) 100, 200, 200, 50, smoothed:
        // 100; 0.3·200 + 0.7·100 = 130; 0.3·200 + 0.7·130 = 151; 0.3·50 + 0.7·151 = 120.7.
        let got: Vec<u32> =
            [200, 400, 400, 100].iter().map(|&g| p.apply_site(&site(g, 5), &mut ema, &ctx).metrics.gas).collect();
        assert_eq!(got, [100, 130, 151, 121]);
        assert_eq!(ema.value(), Some(121));

        // Computing time is not smoothed.
        assert_eq!(p.apply_site(&site(100, 77), &mut ema, &ctx).metrics.computing_time_ms, 77);

        // A DEGRADED site (seed 004: LLM1, one DEGRADED SCI) keeps being averaged; an
        // UNHEALTHY one reports 0 at once and restarts the average.
        let degraded = SiteMetrics { health: Health::Degraded, ..site(400, 5) };
        let g = p.apply_site(&degraded, &mut ema, &ctx).metrics.gas;
        assert!(g > 0 && ema.value() == Some(g), "{g}");
        let down = SiteMetrics { health: Health::Unhealthy, ..site(400, 5) };
        assert_eq!(p.apply_site(&down, &mut ema, &ctx).metrics.gas, 0);
        assert_eq!(ema.value(), None);
        assert_eq!(p.apply_site(&site(400, 5), &mut ema, &ctx).metrics.gas, 200);
    }

    #[test]
    fn seed_transform_ema_disabled_leaves_gas_raw_and_state_empty() {
        let p = Policy::default();
        let mut ema = EmaState::new();
        ema.update(10, 300);
        let out = p.apply_site(&site(1234, 5), &mut ema, &p.context(noon()));
        assert_eq!(out.metrics, site(1234, 5), "the default policy changes nothing");
        assert_eq!(ema.value(), None);
    }

    #[test]
    fn seed_consistency_no_healthy_sci_means_gas_0_whatever_the_rules() {
        let cfg = PolicyConfig {
            rules: vec![RuleConfig::new("inflate", 1, "TRUE", "SET Site_GAS = 1000")],
            transforms: TransformsConfig {
                bounds: vec![BoundsConfig { metric: Metric::Gas, min: Some(50), max: None }],
                ..TransformsConfig::default()
            },
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let out = run_site(&p, &SiteMetrics { health: Health::Unhealthy, ..site(0, 5) });
        assert_eq!(out.metrics.gas, 0);
        assert_eq!(run_site(&p, &site(0, 5)).metrics.gas, 1000);
    }

    #[test]
    fn yang_rules_run_in_ascending_priority_ties_in_list_order() {
        let p = compile(&[
            ("b", 20, "Site_GAS < 100", "SET Cost = 7"),
            ("a", 10, "TRUE", "SET Site_GAS = 50"),
            ("c", 10, "Site_GAS = 50", "REDUCE Site_GAS BY 10%"),
            ("d", 10, "Site_GAS = 50", "SET Cost = 1"),
        ]);
        let order: Vec<&str> = p.rules().iter().map(Rule::name).collect();
        assert_eq!(order, ["a", "c", "d", "b"]);
        let out = run_site(&p, &site(500, 5));
        // c saw a's result; d saw c's (45 ≠ 50) and did not fire; b saw 45 < 100.
        assert_eq!(out.metrics.gas, 45);
        assert_eq!(out.metrics.cost, Some(7));
        assert_eq!(names(&p, &out.fired), ["a", "c", "b"]);
        assert!(!out.fired.contains(RuleId(2)));
    }

    #[test]
    fn yang_disabled_rules_are_checked_but_skipped() {
        let mut cfg = PolicyConfig {
            rules: vec![
                RuleConfig { enabled: false, ..RuleConfig::new("off", 1, "TRUE", "SET Site_GAS = 1") },
                RuleConfig::new("on", 2, "TRUE", "SET Cost = 2"),
            ],
            ..PolicyConfig::default()
        };
        let p = Policy::compile(&cfg).unwrap();
        let out = run_site(&p, &site(500, 5));
        assert_eq!((out.metrics.gas, out.metrics.cost), (500, Some(2)));
        assert_eq!(names(&p, &out.fired), ["on"]);
        assert!(!p.rules()[0].enabled());

        cfg.rules[0].action = "SET Site_GAS = -1".into();
        let e = Policy::compile(&cfg).unwrap_err();
        assert_eq!(e.to_string(), "rule off: action, column 16: unexpected character '-'");
    }

    #[test]
    fn absent_optional_metrics_make_comparisons_unknown() {
        let p = compile(&[
            ("not-expensive", 1, "NOT Cost > 100", "SET Security_Label = 1"),
            ("or-true", 2, "Cost > 100 OR TRUE", "SET Site_Computing_Time = 9"),
            ("and-false", 3, "NOT (Cost > 100 AND FALSE)", "SET Site_GAS = 9"),
        ]);
        let out = run_site(&p, &site(500, 5));
        assert_eq!(names(&p, &out.fired), ["or-true", "and-false"]);
        assert_eq!(out.metrics.security_label, None);
    }

    #[test]
    fn sci_scope_later_rules_see_earlier_results() {
        let p = compile(&[
            ("halve", 1, "SCI_Health = DEGRADED", "REDUCE SCI_GAS BY 50%"),
            ("floor", 2, "SCI_GAS < 100", "SET SCI_GAS = 0"),
            ("trust", 3, "SCI_GAS = 0", "SET Reputation = 0"),
        ]);
        let (m, fired) =
            p.apply_sci(&Metrics { reputation: Some(8), ..sci(150, 5, Health::Degraded) }, &p.context(noon()));
        assert_eq!((m.gas, m.reputation), (0, Some(0)));
        assert_eq!(fired.len(), 3);
    }

    #[test]
    fn fired_set_grows_past_64_rules() {
        let rules: Vec<RuleConfig> =
            (0..70).map(|i| RuleConfig::new(&format!("r{i}"), i, "TRUE", &format!("SET Cost = {i}"))).collect();
        let p = Policy::compile(&PolicyConfig { rules, ..PolicyConfig::default() }).unwrap();
        let out = run_site(&p, &site(1, 1));
        assert_eq!(out.metrics.cost, Some(69));
        assert_eq!(out.fired.len(), 70);
        assert!(out.fired.contains(RuleId(65)));
        assert_eq!(names(&p, &out.fired).last().map(String::as_str), Some("r69"));
        assert_eq!(out.fired.iter().map(RuleId::index).collect::<Vec<_>>(), (0..70).collect::<Vec<_>>());
    }

    #[test]
    fn policy_change_resets_ema_only_when_its_input_changed() {
        let base = PolicyConfig {
            rules: vec![RuleConfig::new("r", 1, "TRUE", "SET Cost = 1")],
            transforms: TransformsConfig {
                ema: EmaConfig { enabled: true, alpha: 0.3 },
                ..TransformsConfig::default()
            },
            ..PolicyConfig::default()
        };
        let old = Policy::compile(&base).unwrap();
        let mut cfg = base.clone();
        cfg.transforms.ema.alpha = 0.5;
        cfg.transforms.bounds = vec![BoundsConfig { metric: Metric::ComputingTime, min: Some(1), max: None }];
        cfg.rules[0].priority = 7;
        assert!(!Policy::compile(&cfg).unwrap().resets_ema(&old));
        cfg.transforms.gas_safety_factor = 0.9;
        assert!(Policy::compile(&cfg).unwrap().resets_ema(&old));
        let mut cfg = base.clone();
        cfg.rules[0].action = "SET Cost = 2".into();
        assert!(Policy::compile(&cfg).unwrap().resets_ema(&old));
        let mut cfg = base;
        cfg.rules[0].enabled = false;
        assert!(Policy::compile(&cfg).unwrap().resets_ema(&old));
    }

    #[test]
    fn compile_refuses_bad_configurations() {
        let window = |name: &str, schedule| MaintenanceWindow { name: name.into(), schedule, suppress: Suppress::All };
        let weekly = |days, minutes| Schedule::Recurring {
            days: Weekdays::from_bits(days),
            start: TimeOfDay::new(1, 0).unwrap(),
            duration_minutes: minutes,
        };
        let refuse = |cfg: PolicyConfig| Policy::compile(&cfg).unwrap_err().to_string();

        let rules = vec![RuleConfig::new("r1", 1, "TRUE", "SET Security_Label = 11")];
        assert_eq!(
            refuse(PolicyConfig { rules, ..PolicyConfig::default() }),
            "rule r1: action, column 22: Security_Label takes 0..10, got 11"
        );
        let rules =
            vec![RuleConfig::new("r1", 1, "TRUE", "SET Cost = 1"), RuleConfig::new("r1", 2, "TRUE", "SET Cost = 1")];
        assert_eq!(refuse(PolicyConfig { rules, ..PolicyConfig::default() }), "rule r1 is configured twice");
        let rules = vec![RuleConfig::new("", 1, "TRUE", "SET Cost = 1")];
        assert_eq!(refuse(PolicyConfig { rules, ..PolicyConfig::default() }), "rule name '' must be 1..64 characters");

        let windows = vec![window("w", weekly(1, 60)), window("w", weekly(1, 60))];
        assert_eq!(
            refuse(PolicyConfig { maintenance_windows: windows, ..PolicyConfig::default() }),
            "maintenance window w is configured twice"
        );
        let windows = vec![window("w", weekly(0, 60))];
        assert_eq!(
            refuse(PolicyConfig { maintenance_windows: windows, ..PolicyConfig::default() }),
            "maintenance window w: no days set, the window would never open"
        );
        let windows = vec![window("w", weekly(1, 10081))];
        assert_eq!(
            refuse(PolicyConfig { maintenance_windows: windows, ..PolicyConfig::default() }),
            "maintenance window w: duration must be 1..10080 minutes, got 10081"
        );
        let t = at("2026-03-01T02:00:00Z");
        let windows = vec![window("w", Schedule::Absolute { start: t, end: t })];
        assert_eq!(
            refuse(PolicyConfig { maintenance_windows: windows, ..PolicyConfig::default() }),
            "maintenance window w: end must be later than start"
        );
        let transforms = TransformsConfig { gas_safety_factor: -0.1, ..TransformsConfig::default() };
        assert_eq!(
            refuse(PolicyConfig { transforms, ..PolicyConfig::default() }),
            "gas-safety-factor must lie in 0..1, got -0.1"
        );
        // A rule may only name a configured window.
        let rules = vec![RuleConfig::new("r", 1, "Time IN nightly", "SUPPRESS_UPDATES")];
        assert_eq!(
            refuse(PolicyConfig { rules, ..PolicyConfig::default() }),
            "rule r: condition, column 9: no maintenance window named 'nightly'"
        );
    }
}
