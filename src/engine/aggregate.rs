//! Per-service site aggregates (seed 004, Metric Cache: "range queries by CS-ID for
//! aggregation"), maintained incrementally: each SCI change removes its old contribution and
//! adds its new one, so a report costs O(log n) for the min/max multiset and O(1) otherwise,
//! never a rescan.
//!
//! Rules (seed 004, Validator & Sanitizer, consistency checks; the reasoning is in
//! docs/architecture.md, "How DEGRADED counts"): an SCI contributes while it is reporting
//! (state HEALTHY or STALE) with health HEALTHY or DEGRADED; UNHEALTHY and FAILED SCIs
//! contribute 0. Site_GAS is the saturating sum of the contributing GAS, so a site whose
//! SCIs are all UNHEALTHY advertises 0 ("If all SCIs are UNHEALTHY, Site_GAS MUST be 0"),
//! and a site with GAS > 0 has at least one SCI that is reporting and not UNHEALTHY ("If
//! Site_GAS > 0, at least one SCI MUST be HEALTHY", HEALTHY read as the state machine's
//! "reporting metrics normally"). A DEGRADED SCI serves with reduced capacity: it counts
//! with the GAS it reports (after SCI-scope policy such as the seed's "REDUCE SCI_GAS BY
//! 50%"). Computing time is at least 1 ms while Site_GAS is above 0 ("Computing Time
//! SHOULD be > 0 if GAS > 0"). Site health: healthy if any SCI is HEALTHY, else degraded if
//! any is DEGRADED, else unhealthy.

use std::collections::BTreeMap;

use super::model::{Health, Metrics, SiteMetrics};

/// How the site's computing time is derived from its SCIs (YANG aggregation function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ComputingTimeFunction {
    Mean,
    Min,
    Max,
    #[default]
    GasWeighted,
}

impl ComputingTimeFunction {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "mean" => Self::Mean,
            "min" => Self::Min,
            "max" => Self::Max,
            "gas-weighted" => Self::GasWeighted,
            _ => return None,
        })
    }

    pub fn yang(self) -> &'static str {
        match self {
            Self::Mean => "mean",
            Self::Min => "min",
            Self::Max => "max",
            Self::GasWeighted => "gas-weighted",
        }
    }
}

/// What one SCI contributes (None: nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Contribution {
    pub gas: u32,
    pub computing_time_ms: u32,
    pub health: Health,
    pub cost: Option<u32>,
    pub reputation: Option<u8>,
    pub security_label: Option<u8>,
}

impl Contribution {
    /// The contribution of an SCI with these (post-policy) metrics that is reporting.
    pub fn of(m: &Metrics) -> Option<Contribution> {
        (m.health != Health::Unhealthy).then_some(Contribution {
            gas: m.gas,
            computing_time_ms: m.computing_time_ms,
            health: m.health,
            cost: m.cost,
            reputation: m.reputation,
            security_label: m.security_label,
        })
    }
}

/// Running sums for one CS-ID.
#[derive(Clone, Debug, Default)]
pub struct Aggregate {
    pub registered: u32,
    pub contributing: u32,
    pub healthy: u32,
    pub degraded: u32,
    gas_sum: u64,
    ct_sum: u64,
    gas_ct_sum: u128,
    ct_multiset: BTreeMap<u32, u32>,
    cost_multiset: BTreeMap<u32, u32>,
    reputation_multiset: BTreeMap<u8, u32>,
    label_multiset: BTreeMap<u8, u32>,
}

fn add<K: Ord + Copy>(m: &mut BTreeMap<K, u32>, k: K) {
    *m.entry(k).or_insert(0) += 1;
}

fn sub<K: Ord + Copy>(m: &mut BTreeMap<K, u32>, k: K) {
    if let Some(c) = m.get_mut(&k) {
        *c -= 1;
        if *c == 0 {
            m.remove(&k);
        }
    }
}

impl Aggregate {
    pub fn add(&mut self, c: &Contribution) {
        self.contributing += 1;
        match c.health {
            Health::Healthy => self.healthy += 1,
            Health::Degraded => self.degraded += 1,
            Health::Unhealthy => {}
        }
        self.gas_sum += c.gas as u64;
        self.ct_sum += c.computing_time_ms as u64;
        self.gas_ct_sum += c.gas as u128 * c.computing_time_ms as u128;
        add(&mut self.ct_multiset, c.computing_time_ms);
        if let Some(cost) = c.cost {
            add(&mut self.cost_multiset, cost);
        }
        if let Some(r) = c.reputation {
            add(&mut self.reputation_multiset, r);
        }
        if let Some(l) = c.security_label {
            add(&mut self.label_multiset, l);
        }
    }

    pub fn remove(&mut self, c: &Contribution) {
        self.contributing -= 1;
        match c.health {
            Health::Healthy => self.healthy -= 1,
            Health::Degraded => self.degraded -= 1,
            Health::Unhealthy => {}
        }
        self.gas_sum -= c.gas as u64;
        self.ct_sum -= c.computing_time_ms as u64;
        self.gas_ct_sum -= c.gas as u128 * c.computing_time_ms as u128;
        sub(&mut self.ct_multiset, c.computing_time_ms);
        if let Some(cost) = c.cost {
            sub(&mut self.cost_multiset, cost);
        }
        if let Some(r) = c.reputation {
            sub(&mut self.reputation_multiset, r);
        }
        if let Some(l) = c.security_label {
            sub(&mut self.label_multiset, l);
        }
    }

    /// Replaces an SCI's contribution.
    pub fn update(&mut self, old: Option<&Contribution>, new: Option<&Contribution>) {
        if old == new {
            // A steady SCI re-reporting the same metrics (the common case) changes nothing.
            return;
        }
        if let Some(o) = old {
            self.remove(o);
        }
        if let Some(n) = new {
            self.add(n);
        }
    }

    /// The site metrics before site-scope policy. Cost is the lowest contributing cost, and
    /// the reputation and security label the lowest contributing ones (the site is as
    /// trustworthy as its weakest instance).
    pub fn site(&self, cs_id: &str, f: ComputingTimeFunction) -> SiteMetrics {
        let health = if self.healthy > 0 {
            Health::Healthy
        } else if self.degraded > 0 {
            Health::Degraded
        } else {
            Health::Unhealthy
        };
        // Every contribution is HEALTHY or DEGRADED (UNHEALTHY ones are never added).
        let gas = if self.healthy + self.degraded == 0 { 0 } else { self.gas_sum.min(u32::MAX as u64) as u32 };
        let computing_time_ms = if self.contributing == 0 {
            0
        } else {
            match f {
                ComputingTimeFunction::Mean => (self.ct_sum / self.contributing as u64) as u32,
                ComputingTimeFunction::Min => self.ct_multiset.keys().next().copied().unwrap_or(0),
                ComputingTimeFunction::Max => self.ct_multiset.keys().next_back().copied().unwrap_or(0),
                ComputingTimeFunction::GasWeighted if self.gas_sum > 0 => {
                    (self.gas_ct_sum / self.gas_sum as u128) as u32
                }
                ComputingTimeFunction::GasWeighted => (self.ct_sum / self.contributing as u64) as u32,
            }
        };
        // A site that can take requests takes time to serve them: 0 ms (every SCI reported
        // 0, or rounding) is shown as the 1 ms resolution, never as "instant".
        let computing_time_ms = if gas > 0 { computing_time_ms.max(1) } else { computing_time_ms };
        SiteMetrics {
            cs_id: cs_id.to_owned(),
            gas,
            computing_time_ms,
            health,
            cost: self.cost_multiset.keys().next().copied(),
            reputation: self.reputation_multiset.keys().next().copied(),
            security_label: self.label_multiset.keys().next().copied(),
            sci_count: self.contributing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(gas: u32, ct: u32, health: Health) -> Metrics {
        Metrics { gas, computing_time_ms: ct, health, cost: None, reputation: None, security_label: None }
    }

    #[test]
    fn seed_table_site_gas_and_computing_time() {
        // seed 004 Metric Cache Structure: AR1 is served by 188.3.67.3:67 (400, 5 ms) and
        // 188.3.67.4:69 (600, 6 ms), both HEALTHY.
        let mut a = Aggregate::default();
        a.add(&Contribution::of(&m(400, 5, Health::Healthy)).unwrap());
        a.add(&Contribution::of(&m(600, 6, Health::Healthy)).unwrap());
        let s = a.site("AR1", ComputingTimeFunction::GasWeighted);
        assert_eq!((s.gas, s.health, s.sci_count), (1000, Health::Healthy, 2));
        assert_eq!(s.computing_time_ms, (400 * 5 + 600 * 6) / 1000);
        assert_eq!(a.site("AR1", ComputingTimeFunction::Min).computing_time_ms, 5);
        assert_eq!(a.site("AR1", ComputingTimeFunction::Max).computing_time_ms, 6);
        assert_eq!(a.site("AR1", ComputingTimeFunction::Mean).computing_time_ms, 5);
    }

    #[test]
    fn seed_consistency_rules() {
        // All UNHEALTHY ⇒ Site_GAS 0.
        assert!(Contribution::of(&m(500, 5, Health::Unhealthy)).is_none());
        let a = Aggregate::default();
        assert_eq!(a.site("X", ComputingTimeFunction::Mean).gas, 0);
    }

    #[test]
    fn seed004_validator_consistency_degraded_sci_contributes_its_gas() {
        // seed 004 Metric Cache Structure: LLM1 is served by 188.3.67.4:70 alone, DEGRADED,
        // GAS 300, 12 ms: the site advertises 300 (degraded), not 0.
        let mut a = Aggregate::default();
        let c = Contribution::of(&m(300, 12, Health::Degraded)).unwrap();
        a.add(&c);
        let s = a.site("LLM1", ComputingTimeFunction::Mean);
        assert_eq!((s.gas, s.computing_time_ms, s.health, s.sci_count), (300, 12, Health::Degraded, 1));
        // The SCI turns UNHEALTHY: it no longer contributes, the site is 0.
        a.remove(&c);
        assert!(Contribution::of(&m(300, 12, Health::Unhealthy)).is_none());
        let s = a.site("LLM1", ComputingTimeFunction::Mean);
        assert_eq!((s.gas, s.health, s.sci_count), (0, Health::Unhealthy, 0));
    }

    #[test]
    fn seed004_validator_consistency_computing_time_positive_when_gas_positive() {
        // "Computing Time SHOULD be > 0 if GAS > 0".
        let mut a = Aggregate::default();
        a.add(&Contribution::of(&m(50, 0, Health::Healthy)).unwrap());
        for f in [ComputingTimeFunction::Mean, ComputingTimeFunction::Min, ComputingTimeFunction::GasWeighted] {
            assert_eq!(a.site("X", f).computing_time_ms, 1, "{f:?}");
        }
        // GAS 0 with 0 ms stays 0.
        let mut a = Aggregate::default();
        a.add(&Contribution::of(&m(0, 0, Health::Healthy)).unwrap());
        assert_eq!(a.site("X", ComputingTimeFunction::Mean).computing_time_ms, 0);
    }

    #[test]
    fn seed004_policy_engine_site_reputation_is_the_lowest_contributing() {
        let mut a = Aggregate::default();
        let r = |gas, rep| Contribution::of(&Metrics { reputation: Some(rep), ..m(gas, 5, Health::Healthy) }).unwrap();
        let (hi, lo) = (r(100, 9), r(100, 4));
        a.add(&hi);
        a.add(&lo);
        assert_eq!(a.site("X", ComputingTimeFunction::Mean).reputation, Some(4));
        a.remove(&lo);
        assert_eq!(a.site("X", ComputingTimeFunction::Mean).reputation, Some(9));
        a.remove(&hi);
        assert_eq!(a.site("X", ComputingTimeFunction::Mean).reputation, None);
    }

    #[test]
    fn incremental_updates_equal_a_recount() {
        let mut a = Aggregate::default();
        let mut live: Vec<Contribution> = Vec::new();
        let mut x: u64 = 7;
        for i in 0..2000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let c = Contribution::of(&m((x >> 33) as u32 % 1000, 1 + (x >> 20) as u32 % 100, Health::Healthy)).unwrap();
            if i % 3 == 2 && !live.is_empty() {
                let old = live.swap_remove((x as usize) % live.len());
                a.remove(&old);
            } else {
                a.add(&c);
                live.push(c);
            }
        }
        let mut b = Aggregate::default();
        for c in &live {
            b.add(c);
        }
        for f in [
            ComputingTimeFunction::Mean,
            ComputingTimeFunction::Min,
            ComputingTimeFunction::Max,
            ComputingTimeFunction::GasWeighted,
        ] {
            assert_eq!(a.site("S", f), b.site("S", f));
        }
    }
}
