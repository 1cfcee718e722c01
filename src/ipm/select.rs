//! The site selection algorithm of seed 000, section 4, and how its pairwise costs become
//! a ranking. Pure; the agent's `select-site` RPC and the reference C-PS both call it.
//!
//! For sites i and j of one application, with Load (Load Index), CP (Capacity Index), Pref
//! (Site Preference Index) and Delay (RTT to the site's A-ER):
//!
//! ```text
//! r(i, j) = w * (Load-i * CP-j) / (Load-j * CP-i) + (1 - w) * (Pref-j * Delay-i) / (Pref-i * Delay-j)
//! ```
//!
//! r(i, j) < 1 says i is the cheaper of the two (each term is a ratio of i's figure to j's).
//! With x = (Load-i/CP-i)/(Load-j/CP-j) and y = (Delay-i/Pref-i)/(Delay-j/Pref-j),
//! r(i, j) = w·x + (1−w)·y and r(j, i) = w/x + (1−w)/y ≥ 1/r(i, j) (a weighted harmonic mean
//! is at most the arithmetic one), so i and j never both win; both may lose (neither is
//! cheaper on the weighted balance), which counts as a tie.
//!
//! The seed's Cost-i is min over j of r(i, j). A ranking needs more than that minimum (it
//! only compares i with its easiest rival), so sites are ranked by the number of rivals they
//! beat (a Copeland ranking of the pairwise comparisons), then by Cost-i, then by site-id.
//! With two sites this is exactly the seed's comparison. Sites missing a term (no completed
//! measurement interval, no capacity, no RTT) cannot be compared and come last, in site-id
//! order, with the reason.
//!
//! A delay below 1 µs counts as 1 µs and a load of 0 as 1e-9, so that every ratio is
//! finite; the agent's Load Index is raised to at least 1 before it gets here
//! (`rpc::candidates`). The reference C-PS ranks with this code too (`cps::selection`), with
//! its own load (computing time per available slot).

/// One candidate site and its terms.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    pub site_id: String,
    pub load: Option<f64>,
    pub capacity: Option<f64>,
    /// Higher is preferred; positive.
    pub preference: f64,
    /// Microseconds.
    pub delay: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incomplete {
    NoLoadIndex,
    NoCapacityIndex,
    NoDelay,
}

impl Incomplete {
    pub fn yang(self) -> &'static str {
        match self {
            Incomplete::NoLoadIndex => "no-load-index",
            Incomplete::NoCapacityIndex => "no-capacity-index",
            Incomplete::NoDelay => "no-delay",
        }
    }
}

/// A site's place in the ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct Ranked {
    pub candidate: Candidate,
    pub rank: u32,
    pub cost: Option<f64>,
    pub wins: u32,
    pub incomplete: Option<Incomplete>,
}

struct Terms {
    load: f64,
    capacity: f64,
    preference: f64,
    delay: f64,
}

fn terms(c: &Candidate) -> Result<Terms, Incomplete> {
    let load = c.load.ok_or(Incomplete::NoLoadIndex)?;
    let capacity = c.capacity.filter(|c| *c > 0.0).ok_or(Incomplete::NoCapacityIndex)?;
    let delay = c.delay.ok_or(Incomplete::NoDelay)?;
    Ok(Terms {
        load: load.max(1e-9),
        capacity,
        preference: if c.preference > 0.0 { c.preference } else { 1.0 },
        delay: f64::from(delay.max(1)),
    })
}

/// r(i, j) of the section 4 formula.
fn pairwise(w: f64, i: &Terms, j: &Terms) -> f64 {
    w * (i.load * j.capacity) / (j.load * i.capacity) + (1.0 - w) * (j.preference * i.delay) / (i.preference * j.delay)
}

/// Ranks `sites` with weight `w` (0..=1); best first.
pub fn rank(w: f64, sites: &[Candidate]) -> Vec<Ranked> {
    let w = w.clamp(0.0, 1.0);
    let complete: Vec<(usize, Terms)> =
        sites.iter().enumerate().filter_map(|(k, c)| terms(c).ok().map(|t| (k, t))).collect();
    let mut out: Vec<Ranked> = complete
        .iter()
        .map(|(k, ti)| {
            let mut cost: Option<f64> = None;
            let mut wins = 0;
            for (l, tj) in &complete {
                if l == k {
                    continue;
                }
                let r = pairwise(w, ti, tj);
                if r < 1.0 {
                    wins += 1;
                }
                cost = Some(cost.map_or(r, |c| c.min(r)));
            }
            Ranked { candidate: sites[*k].clone(), rank: 0, cost, wins, incomplete: None }
        })
        .collect();
    out.sort_by(|a, b| {
        b.wins
            .cmp(&a.wins)
            .then(a.cost.unwrap_or(f64::INFINITY).total_cmp(&b.cost.unwrap_or(f64::INFINITY)))
            .then(a.candidate.site_id.cmp(&b.candidate.site_id))
    });
    let mut rest: Vec<Ranked> = sites
        .iter()
        .filter_map(|c| {
            terms(c).err().map(|why| Ranked {
                candidate: c.clone(),
                rank: 0,
                cost: None,
                wins: 0,
                incomplete: Some(why),
            })
        })
        .collect();
    rest.sort_by(|a, b| a.candidate.site_id.cmp(&b.candidate.site_id));
    out.extend(rest);
    for (n, r) in out.iter_mut().enumerate() {
        r.rank = n as u32 + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(id: &str, load: f64, cp: f64, pref: f64, delay: u32) -> Candidate {
        Candidate { site_id: id.into(), load: Some(load), capacity: Some(cp), preference: pref, delay: Some(delay) }
    }

    fn order(r: &[Ranked]) -> Vec<&str> {
        r.iter().map(|r| r.candidate.site_id.as_str()).collect()
    }

    /// Seed 000 section 4, by hand: near is 2 ms away but carries 4x the load of far (8 ms);
    /// same capacity and preference.
    ///   r(near, far) = w * 400/100 + (1-w) * 2/8 = 4w + 0.25(1-w)
    ///   r(far, near) = w * 100/400 + (1-w) * 8/2 = 0.25w + 4(1-w)
    /// w = 0.3: r(near, far) = 1.2 + 0.175 = 1.375, r(far, near) = 0.075 + 2.8 = 2.875:
    ///   neither is below 1, a tie, and near wins on Cost (1.375 < 2.875).
    /// w = 0.2: r(near, far) = 0.8 + 0.2 = 1.0 (not below 1); w = 0.1: 0.4 + 0.225 = 0.625 < 1,
    ///   near beats far outright.
    /// w = 0.7: r(near, far) = 2.8 + 0.075 = 2.875, r(far, near) = 0.175 + 1.2 = 1.375: far
    ///   wins on Cost; w = 0.9: r(far, near) = 0.225 + 0.4 = 0.625 < 1, far beats near.
    #[test]
    fn seed000_4_w_below_half_favours_delay_above_half_favours_load() {
        let sites = [site("near", 400.0, 10.0, 1.0, 2000), site("far", 100.0, 10.0, 1.0, 8000)];
        let r = rank(0.3, &sites);
        assert_eq!(order(&r), ["near", "far"]);
        assert_eq!((r[0].wins, r[1].wins), (0, 0));
        assert!((r[0].cost.unwrap() - 1.375).abs() < 1e-12);
        assert!((r[1].cost.unwrap() - 2.875).abs() < 1e-12);
        let r = rank(0.1, &sites);
        assert_eq!((order(&r)[0], r[0].wins), ("near", 1));
        assert!((r[0].cost.unwrap() - 0.625).abs() < 1e-12);
        let r = rank(0.7, &sites);
        assert_eq!(order(&r), ["far", "near"]);
        assert!((r[0].cost.unwrap() - 1.375).abs() < 1e-12);
        let r = rank(0.9, &sites);
        assert_eq!((order(&r)[0], r[0].wins), ("far", 1));
        assert!((r[0].cost.unwrap() - 0.625).abs() < 1e-12);
    }

    /// Capacity and preference, by hand, w = 0.5:
    ///   a: Load 600, CP 10, Pref 1, 4 ms; b: Load 200, CP 2, Pref 1, 4 ms; c: Load 300, CP 10,
    ///   Pref 2, 6 ms.
    ///   r(a,b) = .5*(600*2)/(200*10) + .5*(1*4)/(1*4) = .3 + .5 = .8      a beats b
    ///   r(a,c) = .5*(600*10)/(300*10) + .5*(2*4)/(1*6) = 1 + .6667 = 1.6667
    ///   r(b,a) = .5*(200*10)/(600*2) + .5 = .8333 + .5 = 1.3333
    ///   r(b,c) = .5*(200*10)/(300*2) + .5*(2*4)/(1*6) = 1.6667 + .6667 = 2.3333
    ///   r(c,a) = .5*(300*10)/(600*10) + .5*(1*6)/(2*4) = .25 + .375 = .625   c beats a
    ///   r(c,b) = .5*(300*2)/(200*10) + .5*(1*6)/(2*4) = .15 + .375 = .525    c beats b
    ///   c: 2 wins, cost .525; a: 1 win, cost .8; b: 0 wins, cost 1.3333.
    #[test]
    fn seed000_4_capacity_and_preference_three_sites() {
        let sites =
            [site("a", 600.0, 10.0, 1.0, 4000), site("b", 200.0, 2.0, 1.0, 4000), site("c", 300.0, 10.0, 2.0, 6000)];
        let r = rank(0.5, &sites);
        assert_eq!(order(&r), ["c", "a", "b"]);
        assert_eq!(r.iter().map(|r| r.wins).collect::<Vec<_>>(), [2, 1, 0]);
        let costs: Vec<f64> = r.iter().map(|r| r.cost.unwrap()).collect();
        for (got, want) in costs.iter().zip([0.525, 0.8, 4.0 / 3.0]) {
            assert!((got - want).abs() < 1e-12, "{costs:?}");
        }
        assert_eq!(r.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn seed000_4_incomplete_sites_come_last_and_idle_sites_stay_finite() {
        let mut sites = vec![
            site("idle", 1.0, 1.0, 1.0, 5000),
            site("busy", 50.0, 1.0, 1.0, 5000),
            Candidate { site_id: "new".into(), load: None, capacity: Some(1.0), preference: 1.0, delay: Some(1) },
            Candidate { site_id: "far".into(), load: Some(1.0), capacity: Some(1.0), preference: 1.0, delay: None },
        ];
        let r = rank(0.5, &sites);
        assert_eq!(order(&r), ["idle", "busy", "far", "new"]);
        assert_eq!(r[2].incomplete, Some(Incomplete::NoDelay));
        assert_eq!(r[3].incomplete, Some(Incomplete::NoLoadIndex));
        assert!(r[0].cost.unwrap().is_finite());
        // One complete site: ranked first, no cost (nothing to compare with).
        sites.truncate(1);
        let r = rank(0.5, &sites);
        assert_eq!((r[0].rank, r[0].cost), (1, None));
    }
}
