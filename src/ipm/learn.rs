//! Learned Load Index weights (seed 000, section 3.2: "the weights ... can be configured or
//! learned by self-adjusting based on user feedbacks").
//!
//! The feedback is a number per application site and measurement interval that says how
//! loaded the site's users found it (`load-feedback` RPC: a response time, a utilisation
//! from the application controller, a complaint rate: any unit, as long as it is one unit
//! throughout). The learner fits `feedback ≈ β1·ToPackets + β2·FromPackets + β3·ToBytes +
//! β4·FromBytes` with every β ≥ 0 by least squares over all samples, older samples weighing
//! `forgetting`^age, and the weights are β / Σβ: between 0 and 1, summing to 1, as the seed
//! requires; the scale Σβ (the feedback's unit per Load Index unit) is dropped.
//!
//! The non-negative least squares has four unknowns, so it is solved exactly: every one of
//! the 15 subsets of counters is solved unconstrained (columns scaled to unit norm first,
//! as packets and bytes differ by orders of magnitude) and the best fit whose coefficients
//! are all positive wins. Only the sufficient statistics (XᵀX, Xᵀy, yᵀy, Σy, the weight sum)
//! are kept: constant memory whatever the number of samples. The fit's quality is R² against
//! the (forgetting-weighted) mean of the feedback.

/// The fitted weights and their quality.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    pub weights: [f64; 4],
    pub r_squared: f64,
}

/// Forgetting-weighted sufficient statistics of the samples so far.
#[derive(Clone, Debug, Default)]
pub struct Learner {
    xtx: [[f64; 4]; 4],
    xty: [f64; 4],
    yty: f64,
    sy: f64,
    n: f64,
    pub samples: u64,
}

impl Learner {
    /// One interval's counters `x` with its feedback `y`.
    pub fn add(&mut self, x: [f64; 4], y: f64, forgetting: f64) {
        if !y.is_finite() || x.iter().any(|v| !v.is_finite()) {
            return;
        }
        let f = forgetting.clamp(0.0, 1.0);
        for r in 0..4 {
            for c in 0..4 {
                self.xtx[r][c] = f * self.xtx[r][c] + x[r] * x[c];
            }
            self.xty[r] = f * self.xty[r] + x[r] * y;
        }
        self.yty = f * self.yty + y * y;
        self.sy = f * self.sy + y;
        self.n = f * self.n + 1.0;
        self.samples += 1;
    }

    /// The best non-negative fit, None while no counter explains anything (no sample, all
    /// counters zero, or every coefficient would be negative).
    pub fn fit(&self) -> Option<Fit> {
        let norm: Vec<f64> = (0..4).map(|k| self.xtx[k][k].sqrt()).collect();
        let usable: Vec<usize> = (0..4).filter(|k| norm[*k] > 0.0 && norm[*k].is_finite()).collect();
        let mut best: Option<([f64; 4], f64)> = None;
        for mask in 1u32..(1 << usable.len()) {
            let idx: Vec<usize> =
                usable.iter().enumerate().filter(|(b, _)| mask & (1 << b) != 0).map(|(_, k)| *k).collect();
            let m = idx.len();
            // Scaled normal equations: A'[i][j] = A[i][j] / (n_i n_j), b'[i] = b[i] / n_i.
            let mut a = vec![vec![0.0; m + 1]; m];
            for (i, &ki) in idx.iter().enumerate() {
                for (j, &kj) in idx.iter().enumerate() {
                    a[i][j] = self.xtx[ki][kj] / (norm[ki] * norm[kj]);
                }
                a[i][m] = self.xty[ki] / norm[ki];
            }
            let Some(z) = solve(a) else { continue };
            if z.iter().any(|v| *v <= 0.0 || !v.is_finite()) {
                continue;
            }
            let mut beta = [0.0; 4];
            for (i, &k) in idx.iter().enumerate() {
                beta[k] = z[i] / norm[k];
            }
            let sse = self.sse(&beta);
            if best.is_none_or(|(_, s)| sse < s) {
                best = Some((beta, sse));
            }
        }
        let (beta, sse) = best?;
        let sum: f64 = beta.iter().sum();
        if sum <= 0.0 || !sum.is_finite() {
            return None;
        }
        let sst = self.yty - self.sy * self.sy / self.n.max(f64::MIN_POSITIVE);
        let r_squared = if sst > 0.0 { (1.0 - sse / sst).clamp(-1e9, 1.0) } else { 1.0 };
        Some(Fit { weights: beta.map(|b| b / sum), r_squared })
    }

    /// Σ (y − βx)² from the statistics.
    fn sse(&self, beta: &[f64; 4]) -> f64 {
        let mut q = 0.0;
        for r in 0..4 {
            for c in 0..4 {
                q += beta[r] * self.xtx[r][c] * beta[c];
            }
        }
        let cross: f64 = (0..4).map(|k| beta[k] * self.xty[k]).sum();
        (self.yty - 2.0 * cross + q).max(0.0)
    }
}

/// Gaussian elimination with partial pivoting on an augmented m × (m+1) matrix; None when
/// singular.
fn solve(mut a: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let m = a.len();
    for col in 0..m {
        let p = (col..m).max_by(|x, y| a[*x][col].abs().total_cmp(&a[*y][col].abs()))?;
        if a[p][col].abs() < 1e-12 {
            return None;
        }
        a.swap(col, p);
        let pivot = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot[col];
                for (x, p) in row.iter_mut().zip(&pivot).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    Some((0..m).map(|i| a[i][m] / a[i][i]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<[f64; 4]> {
        (0..12u32)
            .map(|k| {
                let k = f64::from(k);
                [
                    10.0 + k,
                    8.0 + (k * 7.0) % 5.0,
                    1000.0 * ((k % 3.0) + 1.0) + 37.0 * k,
                    4000.0 + 250.0 * ((k * 3.0) % 7.0),
                ]
            })
            .collect()
    }

    #[test]
    fn seed000_3_2_learns_the_counter_the_feedback_follows() {
        let mut l = Learner::default();
        for x in samples() {
            l.add(x, 2.0 * x[2], 1.0);
        }
        let f = l.fit().unwrap();
        for (got, want) in f.weights.iter().zip([0.0, 0.0, 1.0, 0.0]) {
            assert!((got - want).abs() < 1e-9, "{f:?}");
        }
        assert!(f.r_squared > 0.999_999, "{f:?}");
    }

    #[test]
    fn seed000_3_2_learned_weights_mix_and_stay_on_the_simplex() {
        let mut l = Learner::default();
        // feedback = 30·ToPackets + 0.01·FromBytes: β = (30, 0, 0, 0.01).
        for x in samples() {
            l.add(x, 30.0 * x[0] + 0.01 * x[3], 1.0);
        }
        let f = l.fit().unwrap();
        let want = [30.0 / 30.01, 0.0, 0.0, 0.01 / 30.01];
        for (got, w) in f.weights.iter().zip(want) {
            assert!((got - w).abs() < 1e-9, "{f:?}");
        }
        assert!((f.weights.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        // A feedback that falls as traffic rises cannot be a non-negative mix: no fit.
        let mut l = Learner::default();
        for x in samples() {
            l.add(x, 1e6 - x[2], 1.0);
        }
        assert!(l.fit().is_none_or(|f| f.r_squared < 0.5));
        assert!(Learner::default().fit().is_none());
    }

    #[test]
    fn seed000_3_2_forgetting_follows_a_change() {
        let mut l = Learner::default();
        for x in samples() {
            l.add(x, x[2], 0.5);
        }
        for _ in 0..4 {
            for x in samples() {
                l.add(x, x[0], 0.5);
            }
        }
        assert!(l.fit().unwrap().weights[0] > 0.99, "{:?}", l.fit());
    }
}
