//! Helpers the tests share (unit tests here, integration tests in `tests/`); not part of
//! the agent's interface.

/// xorshift64*: a small deterministic generator, so a randomised test's failing sequence
/// can be replayed from its seed, without a crate for it.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform enough in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
