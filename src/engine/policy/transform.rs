//! Transformation policies (seed 004, "Policy Engine", transformation policies): the GAS
//! safety factor, per-metric bounds and the EMA of the reported GAS. Integer arithmetic
//! in thousandths throughout, so results are exact and the same on every platform.

use super::config::TransformsConfig;
use super::error::PolicyError;
use super::rule::Metric;

/// Compiled `transforms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Transforms {
    /// Safety factor in thousandths, 0..=1000.
    pub safety_milli: u32,
    /// `[min, max]` per metric (indexed by `Metric::index`), `None` when unbounded.
    pub bounds: [Option<(u32, u32)>; 5],
    /// EMA alpha in thousandths (1..=1000), `None` when the EMA is disabled.
    pub ema_alpha_milli: Option<u32>,
}

impl Default for Transforms {
    fn default() -> Self {
        Transforms { safety_milli: 1000, bounds: [None; 5], ema_alpha_milli: None }
    }
}

/// A decimal64 with 3 fraction digits in `lo..=hi`, as thousandths.
fn milli(x: f64, lo: f64, hi: f64) -> Option<u32> {
    // NaN fails the range test.
    (lo..=hi).contains(&x).then(|| (x * 1000.0).round() as u32)
}

impl Transforms {
    pub fn compile(cfg: &TransformsConfig) -> Result<Transforms, PolicyError> {
        let safety_milli =
            milli(cfg.gas_safety_factor, 0.0, 1.0).ok_or(PolicyError::SafetyFactor(cfg.gas_safety_factor))?;
        let ema_alpha_milli = if cfg.ema.enabled {
            Some(milli(cfg.ema.alpha, 0.001, 1.0).ok_or(PolicyError::EmaAlpha(cfg.ema.alpha))?)
        } else {
            None
        };
        let mut bounds = [None; 5];
        for b in &cfg.bounds {
            let slot = &mut bounds[b.metric.index()];
            if slot.is_some() {
                return Err(PolicyError::DuplicateBounds(b.metric));
            }
            let (min, max) = (b.min.unwrap_or(0), b.max.unwrap_or(u32::MAX));
            if min > max {
                return Err(PolicyError::BoundsEmpty { metric: b.metric, min, max });
            }
            if min > b.metric.max() {
                return Err(PolicyError::BoundsOutOfRange { metric: b.metric, min, valid_max: b.metric.max() });
            }
            *slot = Some((min, max));
        }
        Ok(Transforms { safety_milli, bounds, ema_alpha_milli })
    }

    /// `Reported_GAS = floor(Site_GAS × factor)`.
    #[inline]
    pub fn safety(&self, gas: u32) -> u32 {
        // factor <= 1, so the result never exceeds `gas`.
        (u64::from(gas) * u64::from(self.safety_milli) / 1000) as u32
    }

    /// `value` clamped into the metric's configured bounds.
    #[inline]
    pub fn bound(&self, metric: Metric, value: u32) -> u32 {
        match self.bounds[metric.index()] {
            Some((min, max)) => value.max(min).min(max),
            None => value,
        }
    }
}

/// EMA state of one CS-ID's reported GAS. The caller keeps one per CS-ID (next to its
/// aggregate) and passes it to `Policy::apply_site`; see the `policy` module docs for when
/// to reset it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmaState {
    /// Smoothed value in thousandths of a slot; `None` before the first sample.
    smoothed_milli: Option<u64>,
}

impl EmaState {
    pub fn new() -> EmaState {
        EmaState::default()
    }

    /// Forget the history: the next sample is taken as is.
    pub fn reset(&mut self) {
        self.smoothed_milli = None;
    }

    /// The current smoothed value, rounded half up.
    pub fn value(&self) -> Option<u32> {
        self.smoothed_milli.map(round_milli)
    }

    /// Feeds `raw` and returns the smoothed value, rounded half up:
    /// `s(t) = alpha·raw(t) + (1 − alpha)·s(t−1)`, `s(0) = raw(0)`. The state keeps three
    /// decimals, so a constant input is reached rather than stalled on by rounding.
    pub(crate) fn update(&mut self, raw: u32, alpha_milli: u32) -> u32 {
        let raw_milli = u64::from(raw) * 1000;
        let next = match self.smoothed_milli {
            None => raw_milli,
            Some(prev) => {
                let a = u64::from(alpha_milli.min(1000));
                // Both terms are at most 1000 × (u32::MAX × 1000) < 2^53: no overflow.
                (a * raw_milli + (1000 - a) * prev + 500) / 1000
            }
        };
        self.smoothed_milli = Some(next);
        round_milli(next)
    }
}

fn round_milli(m: u64) -> u32 {
    u32::try_from((m + 500) / 1000).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::policy::config::{BoundsConfig, EmaConfig};

    #[test]
    fn seed_safety_factor_rounds_down() {
        let t = Transforms { safety_milli: 800, ..Transforms::default() };
        assert_eq!(t.safety(500), 400);
        assert_eq!(t.safety(7), 5, "5.6 slots advertise as 5: never over-subscribe");
        assert_eq!(t.safety(u32::MAX), 3_435_973_836);
        assert_eq!(Transforms::default().safety(u32::MAX), u32::MAX);
    }

    #[test]
    fn seed_ema_first_sample_is_raw_then_alpha_0_3() {
        let mut s = EmaState::new();
        assert_eq!(s.value(), None);
        assert_eq!(s.update(100, 300), 100);
        assert_eq!(s.update(200, 300), 130);
        assert_eq!(s.update(200, 300), 151);
        assert_eq!(s.update(50, 300), 121, "0.3·50 + 0.7·151 = 120.7");
        s.reset();
        assert_eq!(s.update(7, 300), 7);
    }

    #[test]
    fn seed_ema_converges_instead_of_stalling_on_rounding() {
        let mut s = EmaState::new();
        s.update(100, 300);
        let mut last = 0;
        for _ in 0..40 {
            last = s.update(101, 300);
        }
        assert_eq!(last, 101);
        let mut s = EmaState::new();
        s.update(u32::MAX, 300);
        assert_eq!(s.update(u32::MAX, 1), u32::MAX);
        assert_eq!(s.update(0, 1000), 0, "alpha 1 follows the input");
    }

    #[test]
    fn yang_transforms_compile_checks() {
        let mut cfg = TransformsConfig { gas_safety_factor: 1.5, ..TransformsConfig::default() };
        assert_eq!(Transforms::compile(&cfg), Err(PolicyError::SafetyFactor(1.5)));
        cfg.gas_safety_factor = f64::NAN;
        assert!(matches!(Transforms::compile(&cfg), Err(PolicyError::SafetyFactor(_))));
        cfg.gas_safety_factor = 0.0;
        cfg.ema = EmaConfig { enabled: true, alpha: 0.0 };
        assert_eq!(Transforms::compile(&cfg), Err(PolicyError::EmaAlpha(0.0)));
        cfg.ema.enabled = false;
        assert_eq!(Transforms::compile(&cfg).unwrap().ema_alpha_milli, None, "alpha is not used when disabled");
        cfg.bounds = vec![BoundsConfig { metric: Metric::ComputingTime, min: Some(10), max: Some(1) }];
        assert_eq!(
            Transforms::compile(&cfg),
            Err(PolicyError::BoundsEmpty { metric: Metric::ComputingTime, min: 10, max: 1 })
        );
        cfg.bounds = vec![BoundsConfig { metric: Metric::SecurityLabel, min: Some(11), max: None }];
        assert_eq!(
            Transforms::compile(&cfg),
            Err(PolicyError::BoundsOutOfRange { metric: Metric::SecurityLabel, min: 11, valid_max: 10 })
        );
        // seed 004 cost and reputation policies: reputation bounds are accepted (site
        // metrics carry the lowest contributing reputation) and checked like the label's.
        cfg.bounds = vec![BoundsConfig { metric: Metric::Reputation, min: None, max: Some(5) }];
        assert!(Transforms::compile(&cfg).is_ok());
        cfg.bounds = vec![BoundsConfig { metric: Metric::Reputation, min: Some(11), max: None }];
        assert_eq!(
            Transforms::compile(&cfg),
            Err(PolicyError::BoundsOutOfRange { metric: Metric::Reputation, min: 11, valid_max: 10 })
        );
        let b = BoundsConfig { metric: Metric::Gas, min: None, max: Some(5) };
        cfg.bounds = vec![b, b];
        assert_eq!(Transforms::compile(&cfg), Err(PolicyError::DuplicateBounds(Metric::Gas)));
    }
}
