//! Site selection for a C-PS (seed 000, section 4, "Algorithm in Selecting the optimal
//! Target Location"). For sites i and j of one service, from one ingress:
//!
//! ```text
//!   C(i, j) = w * (Load_i * CP_j) / (Load_j * CP_i) + (1 - w) * (Pref_j * Delay_i) / (Pref_i * Delay_j)
//! ```
//!
//! C(i, j) < 1 means i is cheaper than j. The ranking is the agent's own
//! (`ipm::select`, the same code the `select-site` RPC uses): the site that beats the most
//! others pairwise, then the lowest `Cost_i = min_j C(i, j)` (the seed's formula), then the
//! lower site id. With two sites this is exactly the seed's pairwise choice.
//!
//! Inputs, where the seed leaves them to the deployment:
//! - `Load_i` is derived from what the C-SMA advertises: milliseconds of computing time per
//!   available slot, `max(computing-time, 1) / GAS`. It rises when requests get slower and
//!   when free slots shrink — the seed's "running status" of the site.
//! - `CP_i` (capacity index) and `Pref_i` (preference index) are configured per site (and
//!   optionally per CS-ID) at the C-PS; `Delay_i` is the configured RTT from the ingress to
//!   the site's egress, in milliseconds; `w` is configured.
//! - A site is not a candidate when it advertises GAS 0, health UNHEALTHY, or has no delay
//!   configured from this ingress (the C-PS cannot reach it).

/// One candidate site.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub site: String,
    pub gas: u32,
    pub computing_time_ms: u32,
    pub capacity: f64,
    pub preference: f64,
    pub delay_ms: f64,
}

impl Candidate {
    pub fn load(&self) -> f64 {
        f64::from(self.computing_time_ms.max(1)) / f64::from(self.gas.max(1))
    }
}

/// The outcome: the chosen site and each candidate's cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub site: String,
    /// (site, Cost_i = min_j C(i, j)) in the order of the input; 1.0 for a lone site.
    pub costs: Vec<(String, f64)>,
}

/// The smallest positive delay, so a 0 ms delay does not divide by zero.
const MIN_DELAY_MS: f64 = 0.001;

/// Chooses among `candidates` (already eligible: GAS > 0, healthy enough, reachable) with
/// the agent's ranking (`ipm::select::rank`: pairwise wins, then the seed's Cost-i, then
/// site id). `None` when there is none. `w` is clamped to 0..=1; capacity and preference
/// indexes must be positive (the configuration refuses others).
pub fn choose(candidates: &[Candidate], w: f64) -> Option<Choice> {
    use crate::ipm::select;
    let sites: Vec<select::Candidate> = candidates
        .iter()
        .map(|c| select::Candidate {
            site_id: c.site.clone(),
            load: Some(c.load()),
            capacity: Some(c.capacity),
            preference: c.preference,
            delay: Some((c.delay_ms.max(MIN_DELAY_MS) * 1000.0).round().clamp(1.0, f64::from(u32::MAX)) as u32),
        })
        .collect();
    let ranked = select::rank(w, &sites);
    let best = ranked.first()?;
    let costs = candidates
        .iter()
        .map(|c| {
            let r = ranked.iter().find(|r| r.candidate.site_id == c.site);
            (c.site.clone(), r.and_then(|r| r.cost).unwrap_or(1.0))
        })
        .collect();
    Some(Choice { site: best.candidate.site_id.clone(), costs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(site: &str, gas: u32, ct: u32, cap: f64, pref: f64, delay: f64) -> Candidate {
        Candidate { site: site.into(), gas, computing_time_ms: ct, capacity: cap, preference: pref, delay_ms: delay }
    }

    #[test]
    fn equal_sites_cost_one_and_the_tie_goes_to_the_lower_id() {
        let a = c("a", 100, 10, 1.0, 1.0, 5.0);
        let b = c("b", 100, 10, 1.0, 1.0, 5.0);
        let ch = choose(&[b, a], 0.5).unwrap();
        assert_eq!(ch.site, "a");
        assert!(ch.costs.iter().all(|(_, c)| (c - 1.0).abs() < 1e-12), "{ch:?}");
    }

    #[test]
    fn load_and_delay_trade_off_through_w() {
        // Site "near": 2 ms away but loaded (10 ms per slot); "far": 10 ms away, idle (1 ms per slot).
        let near = c("near", 10, 100, 1.0, 1.0, 2.0);
        let far = c("far", 100, 100, 1.0, 1.0, 10.0);
        // w = 1: only load and capacity count.
        assert_eq!(choose(&[near.clone(), far.clone()], 1.0).unwrap().site, "far");
        // w = 0: only delay and preference count.
        assert_eq!(choose(&[near.clone(), far.clone()], 0.0).unwrap().site, "near");
        // The seed's formula by hand at w = 0.5: C(near, far) = 0.5*10 + 0.5*0.2 = 5.1 and
        // C(far, near) = 0.5*0.1 + 0.5*5 = 2.55: neither below 1, far on cost.
        let ch = choose(&[near, far], 0.5).unwrap();
        assert_eq!(ch.site, "far");
        assert!((ch.costs[0].1 - 5.1).abs() < 1e-9 && (ch.costs[1].1 - 2.55).abs() < 1e-9, "{ch:?}");
    }

    #[test]
    fn capacity_and_preference_indexes_count() {
        let a = c("a", 100, 10, 1.0, 1.0, 5.0);
        let b = c("b", 100, 10, 4.0, 1.0, 5.0);
        assert_eq!(choose(&[a.clone(), b.clone()], 0.5).unwrap().site, "b", "higher capacity");
        let p = c("p", 100, 10, 1.0, 3.0, 5.0);
        assert_eq!(choose(&[a, p], 0.5).unwrap().site, "p", "higher preference");
    }

    #[test]
    fn lone_site_and_no_site() {
        let a = c("a", 1, 1, 1.0, 1.0, 0.0);
        let ch = choose(std::slice::from_ref(&a), 0.5).unwrap();
        assert_eq!((ch.site.as_str(), ch.costs[0].1), ("a", 1.0));
        assert!(choose(&[], 0.5).is_none());
    }
}
