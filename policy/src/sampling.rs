//! From transition logits to next configurations: per row, mask the configurations the
//! GPU model cannot take, softmax, keep the top k, renormalise, then sample per GPU.
//!
//! All per-row work happens once in [`TransitionTable::new`] (one softmax and one sort
//! per row); sampling a GPU is then one uniform draw and a scan over at most k entries,
//! so a decision for n GPUs costs O(K² log K + n·k).

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use thiserror::Error;

/// Top-k of the paper (docs/model.md §6).
pub const DEFAULT_TOP_K: usize = 3;

/// How the GPUs of a row are given their next configurations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Draw {
    /// Each GPU draws from its row independently (the paper's).
    #[default]
    Sample,
    /// The GPUs of a row are split among its outcomes in proportion to their
    /// probabilities, rounded by largest remainders, with no randomness: the expected
    /// mix of `Sample` without its noise, which a small cluster cannot average out.
    Apportion,
}

impl Draw {
    /// The name in policy files.
    pub fn as_str(self) -> &'static str {
        match self {
            Draw::Sample => "sample",
            Draw::Apportion => "apportion",
        }
    }

    /// Parses a name written by [`Draw::as_str`].
    pub fn parse(s: &str) -> Option<Draw> {
        match s {
            "sample" => Some(Draw::Sample),
            "apportion" => Some(Draw::Apportion),
            _ => None,
        }
    }
}

/// How rows are cut and when a GPU stays.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Keep the k most likely available configurations of each row (≥ 1).
    pub top_k: usize,
    /// When > 0, a GPU leaves its configuration c for a sampled c' only if
    /// p(c') − p(c) ≥ threshold (renormalised top-k probabilities; p(c) = 0 when c was
    /// cut); otherwise it stays. 0 disables the rule: the sample is always followed.
    pub stay_threshold: f64,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            top_k: DEFAULT_TOP_K,
            stay_threshold: 0.0,
        }
    }
}

/// Inputs that cannot make a transition table, or a GPU outside it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SamplingError {
    /// Logits not K·K.
    #[error("{found} logits, expected K·K = {}", k * k)]
    Logits {
        /// Values given.
        found: usize,
        /// K from the availability mask.
        k: usize,
    },
    /// A NaN or infinite logit.
    #[error("logit [{row}, {col}] is not finite")]
    NotFinite {
        /// Row (current configuration).
        row: usize,
        /// Column (next configuration).
        col: usize,
    },
    /// Every configuration is marked unavailable.
    #[error("no configuration is available on this GPU model")]
    NoneAvailable,
    /// top_k of 0.
    #[error("top_k must be at least 1")]
    TopK,
    /// A negative or NaN threshold.
    #[error("stay threshold {0} must be ≥ 0")]
    Threshold(f64),
    /// Per-configuration counts not of length K.
    #[error("{found} per-configuration counts, expected K = {k}")]
    Counts {
        /// Length given.
        found: usize,
        /// K.
        k: usize,
    },
    /// A GPU in a configuration index ≥ K.
    #[error("configuration index {index} is outside 0..{k}")]
    Configuration {
        /// The index.
        index: usize,
        /// K.
        k: usize,
    },
}

/// One row of the transition matrix after masking, top-k and renormalisation.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionRow {
    /// Kept configurations with renormalised probabilities, most likely first (ties: lower index).
    pub candidates: Vec<(u16, f64)>,
    /// Renormalised probability of staying (0 when staying was cut or is unavailable).
    pub stay: f64,
    /// Cumulative probabilities of `candidates`, for the draw.
    cumulative: Vec<f64>,
    /// The configuration a draw of each candidate leads to, after the stay threshold.
    outcome: Vec<u16>,
}

impl TransitionRow {
    /// The renormalised top-k distribution over all K configurations (0 outside the top k).
    pub fn probabilities(&self, k: usize) -> Vec<f64> {
        let mut p = vec![0.0; k];
        for &(c, q) in &self.candidates {
            p[usize::from(c)] = q;
        }
        p
    }

    /// Probability that a GPU in this row ends in each configuration, threshold included.
    pub fn outcome_probabilities(&self, k: usize) -> Vec<f64> {
        let mut p = vec![0.0; k];
        for (&(_, q), &o) in self.candidates.iter().zip(&self.outcome) {
            p[usize::from(o)] += q;
        }
        p
    }

    fn draw(&self, rng: &mut ChaCha8Rng) -> u16 {
        let u: f64 = rng.random();
        let j = self
            .cumulative
            .iter()
            .position(|&c| u < c)
            // Rounding can leave the last cumulative value a hair below 1.
            .unwrap_or(self.cumulative.len() - 1);
        self.outcome[j]
    }
}

/// The K rows of one decision, ready for sampling.
#[derive(Debug, Clone, PartialEq)]
pub struct TransitionTable {
    k: usize,
    rows: Vec<TransitionRow>,
}

impl TransitionTable {
    /// Builds the table from `[K, K]` row-major logits (row = current configuration) and
    /// the per-configuration availability of the GPU model (length K).
    pub fn new(
        logits: &[f32],
        available: &[bool],
        config: SamplingConfig,
    ) -> Result<TransitionTable, SamplingError> {
        let k = available.len();
        if logits.len() != k * k {
            return Err(SamplingError::Logits {
                found: logits.len(),
                k,
            });
        }
        if config.top_k == 0 {
            return Err(SamplingError::TopK);
        }
        if config.stay_threshold.is_nan() || config.stay_threshold < 0.0 {
            return Err(SamplingError::Threshold(config.stay_threshold));
        }
        if let Some(i) = logits.iter().position(|l| !l.is_finite()) {
            return Err(SamplingError::NotFinite {
                row: i / k,
                col: i % k,
            });
        }
        let allowed: Vec<usize> = (0..k).filter(|&c| available[c]).collect();
        if allowed.is_empty() {
            return Err(SamplingError::NoneAvailable);
        }
        let rows = logits
            .chunks_exact(k)
            .enumerate()
            .map(|(current, row)| build_row(current, row, &allowed, available[current], config))
            .collect();
        Ok(TransitionTable { k, rows })
    }

    /// Number of configurations K.
    pub fn k(&self) -> usize {
        self.k
    }

    /// The row of GPUs now in configuration `current`.
    pub fn row(&self, current: usize) -> Result<&TransitionRow, SamplingError> {
        self.rows.get(current).ok_or(SamplingError::Configuration {
            index: current,
            k: self.k,
        })
    }

    /// The next configuration of one GPU now in `current`.
    pub fn sample(&self, current: usize, rng: &mut ChaCha8Rng) -> Result<u16, SamplingError> {
        Ok(self.row(current)?.draw(rng))
    }

    /// The next configuration of every GPU, given each GPU's current configuration.
    pub fn sample_gpus(&self, current: &[u16], rng: &mut ChaCha8Rng) -> Result<Vec<u16>, SamplingError> {
        if let Some(&bad) = current.iter().find(|&&c| usize::from(c) >= self.k) {
            return Err(SamplingError::Configuration {
                index: bad.into(),
                k: self.k,
            });
        }
        Ok(current
            .iter()
            .map(|&c| self.rows[usize::from(c)].draw(rng))
            .collect())
    }

    /// [`Draw::Apportion`]: the next configuration of every GPU, given each GPU's current
    /// configuration and the order in which GPUs should be the first to move (e.g. the
    /// least busy first; GPUs missing from `order` move last). In each row the GPUs are
    /// split among the outcomes by largest remainders of count × probability (ties: the
    /// more likely outcome); movers are taken in `order`, the most likely target first.
    pub fn apportion(&self, current: &[u16], order: &[usize]) -> Result<Vec<u16>, SamplingError> {
        if let Some(&bad) = current.iter().find(|&&c| usize::from(c) >= self.k) {
            return Err(SamplingError::Configuration {
                index: bad.into(),
                k: self.k,
            });
        }
        let mut rank = vec![usize::MAX; current.len()];
        for (r, &g) in order.iter().enumerate() {
            if let Some(x) = rank.get_mut(g) {
                *x = (*x).min(r);
            }
        }
        let mut next = current.to_vec();
        for (c, row) in self.rows.iter().enumerate() {
            let mut gpus: Vec<usize> = (0..current.len())
                .filter(|&g| usize::from(current[g]) == c)
                .collect();
            if gpus.is_empty() {
                continue;
            }
            gpus.sort_by_key(|&g| (rank[g], g));
            let n = gpus.len();
            // Outcome probabilities (the stay threshold folded in), most likely first.
            let mut outcomes: Vec<(u16, f64)> = Vec::new();
            for (&(_, q), &o) in row.candidates.iter().zip(&row.outcome) {
                match outcomes.iter_mut().find(|(x, _)| *x == o) {
                    Some((_, p)) => *p += q,
                    None => outcomes.push((o, q)),
                }
            }
            let exact: Vec<f64> = outcomes.iter().map(|&(_, q)| q * n as f64).collect();
            let mut counts: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
            let mut by_remainder: Vec<usize> = (0..outcomes.len()).collect();
            by_remainder
                .sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
            let mut left = n.saturating_sub(counts.iter().sum());
            for i in by_remainder {
                if left == 0 {
                    break;
                }
                counts[i] += 1;
                left -= 1;
            }
            // Stayers are the GPUs last in order; movers the first.
            let stay = outcomes
                .iter()
                .position(|&(o, _)| usize::from(o) == c)
                .map_or(0, |i| counts[i]);
            let mut movers = gpus[..n - stay.min(n)].iter();
            for (i, &(o, _)) in outcomes.iter().enumerate() {
                if usize::from(o) == c {
                    continue;
                }
                for &g in movers.by_ref().take(counts[i]) {
                    next[g] = o;
                }
            }
        }
        Ok(next)
    }

    /// Given how many GPUs are in each configuration (length K), the next configuration of
    /// each of them: `result[c]` has `counts[c]` entries, GPU by GPU.
    pub fn sample_counts(
        &self,
        counts: &[usize],
        rng: &mut ChaCha8Rng,
    ) -> Result<Vec<Vec<u16>>, SamplingError> {
        if counts.len() != self.k {
            return Err(SamplingError::Counts {
                found: counts.len(),
                k: self.k,
            });
        }
        Ok(self
            .rows
            .iter()
            .zip(counts)
            .map(|(row, &n)| (0..n).map(|_| row.draw(rng)).collect())
            .collect())
    }
}

fn build_row(
    current: usize,
    logits: &[f32],
    allowed: &[usize],
    can_stay: bool,
    config: SamplingConfig,
) -> TransitionRow {
    // Softmax over the available columns only; f64 so that tiny probabilities keep their order.
    let max = allowed
        .iter()
        .map(|&c| f64::from(logits[c]))
        .fold(f64::NEG_INFINITY, f64::max);
    let mut p: Vec<(usize, f64)> = allowed
        .iter()
        .map(|&c| (c, (f64::from(logits[c]) - max).exp()))
        .collect();
    // Normalising before the cut does not change the kept ratios, so skip it.
    p.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    p.truncate(config.top_k);
    let total: f64 = p.iter().map(|(_, q)| q).sum();
    let candidates: Vec<(u16, f64)> = p.iter().map(|&(c, q)| (c as u16, q / total)).collect();
    let stay = candidates
        .iter()
        .find(|(c, _)| usize::from(*c) == current)
        .map_or(0.0, |&(_, q)| q);
    let mut acc = 0.0;
    let cumulative = candidates
        .iter()
        .map(|&(_, q)| {
            acc += q;
            acc
        })
        .collect();
    let outcome = candidates
        .iter()
        .map(|&(c, q)| {
            let moves = usize::from(c) != current;
            // A GPU never "stays" in a configuration the model cannot take.
            if moves && can_stay && config.stay_threshold > 0.0 && q - stay < config.stay_threshold {
                current as u16
            } else {
                c
            }
        })
        .collect();
    TransitionRow {
        candidates,
        stay,
        cumulative,
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::{any, prop_assert, prop_assert_eq, prop_oneof, proptest, Just};
    use rand::SeedableRng;

    /// Allowed deviation of a binomial count: 5 standard deviations (plus one for p ≈ 0).
    fn tolerance(n: usize, p: f64) -> f64 {
        5.0 * (n as f64 * p * (1.0 - p)).sqrt() + 1.0
    }

    #[test]
    fn rows_are_masked_cut_and_renormalised() {
        // K = 4, row 0 logits ln(4), ln(3), ln(2), ln(1): softmax ∝ 4:3:2:1.
        let l = [4f32.ln(), 3f32.ln(), 2f32.ln(), 0.0];
        let logits: Vec<f32> = l.iter().cycle().take(16).copied().collect();
        let t = TransitionTable::new(&logits, &[true; 4], SamplingConfig::default()).unwrap();
        let p = t.row(0).unwrap().probabilities(4);
        for (a, b) in p.iter().zip([4.0 / 9.0, 3.0 / 9.0, 2.0 / 9.0, 0.0]) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
        // Configuration 0 unavailable: the top 3 of the rest is 3:2:1.
        let t = TransitionTable::new(&logits, &[false, true, true, true], SamplingConfig::default()).unwrap();
        let p = t.row(3).unwrap().probabilities(4);
        for (a, b) in p.iter().zip([0.0, 0.5, 1.0 / 3.0, 1.0 / 6.0]) {
            assert!((a - b).abs() < 1e-6, "{p:?}");
        }
        assert_eq!(t.row(3).unwrap().stay, p[3]);
        assert_eq!(t.row(0).unwrap().stay, 0.0);
    }

    #[test]
    fn apportioning_splits_each_row_by_largest_remainders_and_moves_the_preferred_gpus() {
        // K = 3. Row 0: stay 0.5, to 1 0.3, to 2 0.2 (logits ln of those).
        let mut logits = vec![0f32; 9];
        logits[..3].copy_from_slice(&[0.5f32.ln(), 0.3f32.ln(), 0.2f32.ln()]);
        logits[4] = 5.0; // row 1 stays
        logits[8] = 5.0; // row 2 stays
        let t = TransitionTable::new(&logits, &[true; 3], SamplingConfig::default()).unwrap();
        // Five GPUs in 0: 2.5 stay, 1.5 to 1, 1 to 2 -> remainders .5, .5, 0: the likelier
        // (stay) first: 3 stay, 1 to 1, 1 to 2. Order 4, 3 first: GPU 4 -> 1, GPU 3 -> 2.
        let next = t.apportion(&[0, 0, 0, 0, 0, 1], &[4, 3]).unwrap();
        assert_eq!(next, vec![0, 0, 0, 2, 1, 1]);
        // One GPU: it moves only when a move is likelier than staying.
        assert_eq!(t.apportion(&[0], &[]).unwrap(), vec![0]);
        logits[..3].copy_from_slice(&[0.2f32.ln(), 0.7f32.ln(), 0.1f32.ln()]);
        let t = TransitionTable::new(&logits, &[true; 3], SamplingConfig::default()).unwrap();
        assert_eq!(t.apportion(&[0], &[]).unwrap(), vec![1]);
        assert!(t.apportion(&[3], &[]).is_err());
    }

    #[test]
    fn bad_inputs_are_refused() {
        let cfg = SamplingConfig::default();
        assert_eq!(
            TransitionTable::new(&[0.0; 8], &[true; 3], cfg),
            Err(SamplingError::Logits { found: 8, k: 3 })
        );
        assert_eq!(
            TransitionTable::new(&[0.0; 4], &[false; 2], cfg),
            Err(SamplingError::NoneAvailable)
        );
        let mut nan = [0.0f32; 4];
        nan[3] = f32::NAN;
        assert_eq!(
            TransitionTable::new(&nan, &[true; 2], cfg),
            Err(SamplingError::NotFinite { row: 1, col: 1 })
        );
        let zero_k = SamplingConfig { top_k: 0, ..cfg };
        assert_eq!(
            TransitionTable::new(&[0.0; 4], &[true; 2], zero_k),
            Err(SamplingError::TopK)
        );
        let t = TransitionTable::new(&[0.0; 4], &[true; 2], cfg).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(matches!(
            t.sample_gpus(&[0, 2], &mut rng),
            Err(SamplingError::Configuration { index: 2, .. })
        ));
        assert_eq!(
            t.sample_counts(&[1, 2, 3], &mut rng),
            Err(SamplingError::Counts { found: 3, k: 2 })
        );
    }

    #[test]
    fn draws_follow_the_renormalised_top_k_distribution() {
        let k = 12;
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let logits: Vec<f32> = (0..k * k).map(|_| rng.random_range(-2.0..2.0)).collect();
        let mut available = vec![true; k];
        available[2] = false;
        let t = TransitionTable::new(
            &logits,
            &available,
            SamplingConfig {
                top_k: 4,
                stay_threshold: 0.0,
            },
        )
        .unwrap();
        let n = 200_000;
        for current in [0usize, 5] {
            let mut counts = vec![0usize; k];
            for next in t
                .sample_counts(
                    &{
                        let mut c = vec![0; k];
                        c[current] = n;
                        c
                    },
                    &mut rng,
                )
                .unwrap()[current]
                .iter()
            {
                counts[usize::from(*next)] += 1;
            }
            let p = t.row(current).unwrap().probabilities(k);
            assert_eq!(p.iter().filter(|&&q| q > 0.0).count(), 4);
            for c in 0..k {
                let dev = (counts[c] as f64 - n as f64 * p[c]).abs();
                assert!(
                    dev <= tolerance(n, p[c]),
                    "row {current} col {c}: {} vs {}",
                    counts[c],
                    n as f64 * p[c]
                );
                if p[c] == 0.0 {
                    assert_eq!(counts[c], 0, "col {c} is outside the top k");
                }
            }
        }
    }

    #[test]
    fn stay_threshold_keeps_gpus_unless_the_gain_is_enough() {
        // Row 0 over the top 3: stay 0.3, c1 0.45, c2 0.25 (c3 cut).
        let row0 = [
            0.3f64.ln() as f32,
            0.45f64.ln() as f32,
            0.25f64.ln() as f32,
            -10.0,
        ];
        let logits: Vec<f32> = row0.iter().cycle().take(16).copied().collect();
        let cfg = SamplingConfig {
            top_k: 3,
            stay_threshold: 0.1,
        };
        let t = TransitionTable::new(&logits, &[true; 4], cfg).unwrap();
        let row = t.row(0).unwrap();
        assert!((row.stay - 0.3).abs() < 1e-6);
        // c1 gains 0.15 ≥ 0.1 and may be taken; c2 loses 0.05 and is turned into a stay.
        let expect = [0.55, 0.45, 0.0, 0.0];
        for (a, b) in row.outcome_probabilities(4).iter().zip(expect) {
            assert!((a - b).abs() < 1e-6);
        }
        let n = 100_000;
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let next = t.sample_gpus(&vec![0u16; n], &mut rng).unwrap();
        let count = |c: u16| next.iter().filter(|&&x| x == c).count();
        assert_eq!(count(2), 0);
        assert_eq!(count(3), 0);
        assert!(
            (count(1) as f64 - 0.45 * n as f64).abs() <= tolerance(n, 0.45),
            "{}",
            count(1)
        );
        // Without the rule, c2 is drawn a quarter of the time.
        let free = TransitionTable::new(
            &logits,
            &[true; 4],
            SamplingConfig {
                stay_threshold: 0.0,
                ..cfg
            },
        )
        .unwrap();
        let next = free.sample_gpus(&vec![0u16; n], &mut rng).unwrap();
        let c2 = next.iter().filter(|&&x| x == 2).count();
        assert!((c2 as f64 - 0.25 * n as f64).abs() <= tolerance(n, 0.25), "{c2}");
        // A threshold above every gain freezes the row.
        let frozen = TransitionTable::new(
            &logits,
            &[true; 4],
            SamplingConfig {
                stay_threshold: 0.5,
                ..cfg
            },
        )
        .unwrap();
        assert!(frozen
            .sample_gpus(&vec![0u16; 1000], &mut rng)
            .unwrap()
            .iter()
            .all(|&c| c == 0));
        // A GPU in a configuration the model cannot take is never held there by the rule.
        let cfg = SamplingConfig {
            top_k: 3,
            stay_threshold: 0.9,
        };
        let t = TransitionTable::new(&logits, &[false, true, true, true], cfg).unwrap();
        let next = t.sample_gpus(&vec![0u16; 1000], &mut rng).unwrap();
        assert!(next.iter().all(|&c| c != 0));
    }

    proptest! {
        #[test]
        fn never_picks_an_unavailable_or_cut_configuration(
            k in 2usize..=12,
            seed in any::<u64>(),
            top_k in 1usize..=12,
            mask_bits in any::<u16>(),
            threshold in prop_oneof![Just(0.0f64), 0.0f64..0.5],
        ) {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let logits: Vec<f32> = (0..k * k).map(|_| rng.random_range(-5.0..5.0)).collect();
            let mut available: Vec<bool> = (0..k).map(|i| mask_bits & (1 << i) != 0).collect();
            available[seed as usize % k] = true;
            let cfg = SamplingConfig { top_k, stay_threshold: threshold };
            let t = TransitionTable::new(&logits, &available, cfg).unwrap();
            let current: Vec<u16> = (0..500).map(|i| (i % k) as u16).collect();
            let next = t.sample_gpus(&current, &mut rng).unwrap();
            let n_avail = available.iter().filter(|&&a| a).count();
            for (&c, &n) in current.iter().zip(&next) {
                let row = t.row(c.into()).unwrap();
                prop_assert_eq!(row.candidates.len(), top_k.min(n_avail));
                let kept = row.candidates.iter().any(|&(x, _)| x == n);
                prop_assert!(available[usize::from(n)], "unavailable {} chosen", n);
                // With the threshold rule on, staying is the one choice outside the top k.
                prop_assert!(kept || (threshold > 0.0 && n == c), "{} is not in the top {} of row {}", n, top_k, c);
                // Kept candidates are at least as likely as every cut available one.
                let p = softmax_masked(&logits[usize::from(c) * k..][..k], &available);
                let weakest = row.candidates.iter().map(|&(x, _)| p[usize::from(x)]).fold(f64::INFINITY, f64::min);
                for j in 0..k {
                    if available[j] && !row.candidates.iter().any(|&(x, _)| usize::from(x) == j) {
                        prop_assert!(p[j] <= weakest + 1e-12);
                    }
                }
            }
        }
    }

    fn softmax_masked(row: &[f32], available: &[bool]) -> Vec<f64> {
        let e: Vec<f64> = row
            .iter()
            .zip(available)
            .map(|(&l, &a)| if a { f64::from(l).exp() } else { 0.0 })
            .collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|x| x / s).collect()
    }
}
