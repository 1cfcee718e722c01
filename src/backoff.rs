//! Exponential backoff for a peer the agent connects out to: a C-PS (seed 004, C-PS
//! Failure Handling: retry after 1 s, 2 s, 4 s, 8 s, ... up to 60 s), an HTTPS-notif receiver.

use std::time::Duration;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        let initial = initial.max(Duration::from_millis(1));
        Backoff { initial, max: max.max(initial), next: initial }
    }

    /// The delay before the next attempt after one more failure.
    pub fn fail(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// A success: the next failure starts over at the initial delay.
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_maximum_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
        let seq: Vec<u64> = (0..9).map(|_| b.fail().as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        b.reset();
        assert_eq!(b.fail(), Duration::from_secs(1));
    }
}
