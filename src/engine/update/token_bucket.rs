//! The token bucket limiting advertisements (seed 004, Policy Engine, update control: token
//! bucket algorithm to limit update rate). Exact integer arithmetic: with the rate in
//! thousandths of a token per second and the level in 10⁻¹² tokens, one nanosecond adds
//! exactly `rate_milli` units, so no refill ever rounds and the time the next token is there
//! is exact — a timer set for it never wakes to an empty bucket.

use std::time::Duration;

use tokio::time::Instant;

use super::config::TokenBucketConfig;

/// One token, in units of 10⁻¹² token.
const TOKEN: u128 = 1_000_000_000_000;

#[derive(Clone, Debug)]
pub struct TokenBucket {
    /// Units added per nanosecond (= thousandths of a token per second).
    rate: u128,
    capacity: u128,
    level: u128,
    /// When `level` was last brought up to date.
    at: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(config: TokenBucketConfig, now: Instant) -> TokenBucket {
        let capacity = u128::from(config.burst.max(1)) * TOKEN;
        TokenBucket { rate: u128::from(config.rate_milli.max(1)), capacity, level: capacity, at: now }
    }

    /// Adds what accrued since the last refill.
    pub fn refill(&mut self, now: Instant) {
        if now > self.at {
            let accrued = now.duration_since(self.at).as_nanos().saturating_mul(self.rate);
            self.level = self.level.saturating_add(accrued).min(self.capacity);
            self.at = now;
        }
    }

    /// Takes a token if there is one (call `refill` first).
    pub fn try_take(&mut self) -> bool {
        if self.level >= TOKEN {
            self.level -= TOKEN;
            true
        } else {
            false
        }
    }

    /// The earliest time a token is there.
    pub fn available_at(&self) -> Instant {
        if self.level >= TOKEN {
            return self.at;
        }
        let nanos = (TOKEN - self.level).div_ceil(self.rate);
        self.at + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Whole tokens left (for the operational state).
    pub fn tokens(&self) -> u32 {
        u32::try_from(self.level / TOKEN).unwrap_or(u32::MAX)
    }

    /// New rate and depth; tokens above the new depth are dropped.
    pub fn reconfigure(&mut self, config: TokenBucketConfig, now: Instant) {
        self.refill(now);
        self.rate = u128::from(config.rate_milli.max(1));
        self.capacity = u128::from(config.burst.max(1)) * TOKEN;
        self.level = self.level.min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_token_bucket_limits_a_burst_then_refills_at_the_rate() {
        let t0 = Instant::now();
        // 0.5 updates/s, burst 3.
        let mut b = TokenBucket::new(TokenBucketConfig { rate_milli: 500, burst: 3 }, t0);
        assert!(b.try_take() && b.try_take() && b.try_take());
        assert!(!b.try_take());
        assert_eq!(b.available_at(), t0 + Duration::from_secs(2));
        b.refill(t0 + Duration::from_millis(1999));
        assert!(!b.try_take());
        b.refill(b.available_at());
        assert!(b.try_take(), "the token is there exactly when announced");
        // Never more than the burst, however long it rests.
        b.refill(t0 + Duration::from_secs(3600));
        assert_eq!(b.tokens(), 3);
    }

    #[test]
    fn slowest_yang_rate_is_exact() {
        // rate 0.001/s: one token every 1000 s, even when refilled every microsecond.
        let t0 = Instant::now();
        let mut b = TokenBucket::new(TokenBucketConfig { rate_milli: 1, burst: 1 }, t0);
        assert!(b.try_take());
        assert_eq!(b.available_at(), t0 + Duration::from_secs(1000));
        for us in 1..1000 {
            b.refill(t0 + Duration::from_micros(us));
        }
        assert_eq!(b.available_at(), t0 + Duration::from_secs(1000));
    }

    #[test]
    fn reconfigure_clamps_to_the_new_depth() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(TokenBucketConfig { rate_milli: 1000, burst: 10 }, t0);
        b.reconfigure(TokenBucketConfig { rate_milli: 1000, burst: 2 }, t0);
        assert_eq!(b.tokens(), 2);
    }
}
