//! The reference workload generator (docs/model.md §2): diurnal Poisson arrivals, job classes
//! by share, 1g processing times from each class's distribution, per-slice times from the
//! class's speed-up curve, and soft deadlines a random factor of the full-GPU time away.
//!
//! Deterministic for a seed: one `ChaCha8Rng` drives everything, drawn in a fixed order
//! (arrival gap, then class, 1g time, deadline factor for each job).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Exp1, StandardNormal};

use super::job::{Job, JobSet};
use crate::scenario::{DurationSpec, WorkloadSpec};

/// Minutes in one arrival-rate segment (the rates are hourly).
const SEGMENT: f64 = 60.0;
/// Minutes in a day.
const DAY: f64 = 1440.0;
/// The standard normal quantile of 0.95: p5 and p95 are μ ∓ 1.645 σ.
const Z95: f64 = 1.645;

/// A class's 1g-time distribution, with the parameters it is sampled with.
#[derive(Debug, Clone, Copy)]
enum Duration {
    Exponential { mean: f64 },
    LogNormal { mu: f64, sigma: f64 },
    Fixed(f64),
}

impl Duration {
    fn new(spec: &DurationSpec) -> Duration {
        match *spec {
            DurationSpec::Exponential { mean } => Duration::Exponential { mean },
            DurationSpec::LognormalRange { p5, p95 } => Duration::LogNormal {
                mu: (p5.ln() + p95.ln()) / 2.0,
                sigma: (p95.ln() - p5.ln()) / (2.0 * Z95),
            },
            DurationSpec::Fixed { value } => Duration::Fixed(value),
        }
    }

    fn sample(self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            Duration::Exponential { mean } => mean * rng.sample::<f64, _>(Exp1),
            Duration::LogNormal { mu, sigma } => (mu + sigma * rng.sample::<f64, _>(StandardNormal)).exp(),
            Duration::Fixed(v) => v,
        }
    }
}

/// One class as the generator samples it.
struct Class {
    duration: Duration,
    speedup: [f64; 5],
    label: u16,
}

/// Cumulative shares of the classes in each hour of the day, each row normalised to end
/// at 1, with the last class of positive share for a draw that rounding leaves past
/// every bound.
struct Mix {
    cumulative: Vec<Vec<f64>>,
    fallback: Vec<usize>,
}

impl Mix {
    fn new(classes: &[crate::scenario::JobClassSpec]) -> Mix {
        let (cumulative, fallback) = (0..24)
            .map(|h| {
                let total: f64 = classes.iter().map(|c| c.share_at(h).max(0.0)).sum();
                let mut acc = 0.0;
                let row: Vec<f64> = classes
                    .iter()
                    .map(|c| {
                        acc += c.share_at(h).max(0.0);
                        acc / total
                    })
                    .collect();
                let last = classes
                    .iter()
                    .rposition(|c| c.share_at(h) > 0.0)
                    .unwrap_or(classes.len() - 1);
                (row, last)
            })
            .unzip();
        Mix { cumulative, fallback }
    }

    /// The class a uniform draw `u` picks in hour `hour`.
    fn pick(&self, hour: usize, u: f64) -> usize {
        let h = hour % 24;
        self.cumulative[h]
            .iter()
            .position(|&c| u < c)
            .unwrap_or(self.fallback[h])
    }
}

/// Generates the jobs of a generator workload for `seed`.
///
/// `spec` must have passed scenario resolution (24 non-negative hourly rates, positive
/// days and multiplier, classes with a positive total share, 1 ≤ lo ≤ hi); the
/// generator asserts the parts it would otherwise misuse.
pub fn generate(spec: &WorkloadSpec, seed: u64) -> JobSet {
    assert!(
        !spec.hourly_rates.is_empty(),
        "generate: hourly_rates is empty (scenario resolution requires 24)"
    );
    assert!(
        (0..24).all(|h| spec.classes.iter().map(|c| c.share_at(h).max(0.0)).sum::<f64>() > 0.0),
        "generate: an hour has no class with a positive share (scenario resolution requires one)"
    );

    let mut set = JobSet::default();
    let classes: Vec<Class> = spec
        .classes
        .iter()
        .map(|c| Class {
            duration: Duration::new(&c.duration),
            speedup: c.speedup,
            label: set.class_index(&c.name),
        })
        .collect();
    let mix = Mix::new(&spec.classes);
    let [lo, hi] = spec.deadline_factor;

    let end = spec.days * DAY;
    let rate = |segment: usize| spec.hourly_rates[segment % spec.hourly_rates.len()] * spec.multiplier;
    let segments = (end / SEGMENT).ceil() as usize;
    // Reserve the expected count plus six standard deviations: one allocation, in practice.
    let expected: f64 = (0..segments)
        .map(|s| rate(s) * (end.min((s + 1) as f64 * SEGMENT) - s as f64 * SEGMENT))
        .sum();
    set.jobs
        .reserve((expected + 6.0 * expected.sqrt() + 16.0) as usize);

    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for s in 0..segments {
        let lambda = rate(s);
        if lambda.is_nan() || lambda <= 0.0 {
            continue;
        }
        let stop = end.min((s + 1) as f64 * SEGMENT);
        // The rate is constant within the segment, and exponential gaps are memoryless,
        // so restarting at each segment's start gives the exact piecewise Poisson process.
        let mut t = s as f64 * SEGMENT;
        loop {
            t += rng.sample::<f64, _>(Exp1) / lambda;
            if t >= stop {
                break;
            }
            let u: f64 = rng.random();
            let c = mix.pick(s, u);
            let class = &classes[c];
            // An exponential draw can be exactly 0 (odds near 2^-53); a job needs a
            // positive time, and nothing else of the distribution changes.
            let p1 = class.duration.sample(&mut rng).max(f64::MIN_POSITIVE);
            let times = class.speedup.map(|s| p1 / s);
            let factor = lo + (hi - lo) * rng.random::<f64>();
            set.jobs.push(Job {
                id: set.jobs.len() as u32,
                release: t,
                deadline: t + factor * times[4],
                times,
                class: class.label,
            });
        }
    }
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{JobClassSpec, Scenario};

    /// The reference scenario's workload (20× the base rates, one day).
    fn reference() -> WorkloadSpec {
        Scenario::reference(&[]).unwrap().scenario.workload
    }

    /// Asserts |x − mean| ≤ 5 standard deviations (a false alarm about once in 1.7 M).
    fn within_5_sigma(what: &str, x: f64, mean: f64, sd: f64) {
        assert!(
            (x - mean).abs() <= 5.0 * sd,
            "{what}: {x} is more than 5σ (σ = {sd}) from {mean}"
        );
    }

    /// Expected arrivals over the whole spec (integral of the rate).
    fn expected_count(spec: &WorkloadSpec) -> f64 {
        let full_days = spec.days.floor();
        let per_day: f64 = spec.hourly_rates.iter().sum::<f64>() * SEGMENT * spec.multiplier;
        let rest_min = (spec.days - full_days) * DAY;
        let rest: f64 = spec
            .hourly_rates
            .iter()
            .enumerate()
            .map(|(h, r)| r * spec.multiplier * (rest_min - h as f64 * SEGMENT).clamp(0.0, SEGMENT))
            .sum();
        per_day * full_days + rest
    }

    #[test]
    fn the_same_seed_gives_the_same_jobs() {
        let spec = reference();
        assert_eq!(generate(&spec, 7), generate(&spec, 7));
    }

    #[test]
    fn different_seeds_give_different_jobs() {
        let spec = reference();
        let (a, b) = (generate(&spec, 1), generate(&spec, 2));
        assert_ne!(a.jobs, b.jobs);
        assert_eq!(a.classes, b.classes);
    }

    #[test]
    fn ids_are_positions_releases_sorted_and_every_job_valid() {
        let set = generate(&reference(), 3);
        assert_eq!(
            set.classes,
            ["bert-infer", "resnet-infer", "bert-train", "resnet-train"]
        );
        for (i, j) in set.jobs.iter().enumerate() {
            assert_eq!(j.id as usize, i);
            j.check().unwrap();
        }
        assert!(set.jobs.windows(2).all(|w| w[0].release <= w[1].release));
        let mut normalised = set.clone();
        normalised.normalise();
        assert_eq!(normalised, set);
    }

    #[test]
    fn a_20x_day_has_about_4150_jobs_over_several_seeds() {
        let spec = reference();
        let mean = expected_count(&spec);
        // docs/model.md's "about 4,150 jobs a day at 20×".
        assert!((mean - 4150.0).abs() < 20.0, "{mean}");
        let seeds = 8;
        let mut total = 0.0;
        for seed in 0..seeds {
            let n = generate(&spec, seed).jobs.len() as f64;
            // A Poisson count's variance equals its mean.
            within_5_sigma(&format!("seed {seed}"), n, mean, mean.sqrt());
            total += n;
        }
        let s = seeds as f64;
        within_5_sigma("total", total, s * mean, (s * mean).sqrt());
    }

    #[test]
    fn arrivals_follow_the_hourly_rates() {
        let mut spec = reference();
        spec.days = 7.0;
        let set = generate(&spec, 11);
        let mut per_hour = [0.0f64; 24];
        for j in &set.jobs {
            per_hour[((j.release / SEGMENT) as usize) % 24] += 1.0;
        }
        for (h, n) in per_hour.iter().enumerate() {
            let mean = spec.hourly_rates[h] * spec.multiplier * SEGMENT * spec.days;
            within_5_sigma(&format!("hour {h}"), *n, mean, mean.sqrt());
        }
    }

    #[test]
    fn a_zero_rate_hour_gets_no_job_and_a_partial_day_stops_at_its_end() {
        let mut spec = reference();
        spec.hourly_rates = vec![0.0; 24];
        spec.hourly_rates[3] = 1.0;
        spec.hourly_rates[13] = 1.0;
        spec.days = 0.5;
        let set = generate(&spec, 5);
        assert!(!set.jobs.is_empty());
        // Hour 13 starts at 780 min, past the half day: only hour 3 can have jobs.
        assert!(set.jobs.iter().all(|j| (180.0..240.0).contains(&j.release)));
        let mean = expected_count(&spec);
        // One hour at 1 job/min × the multiplier.
        assert!((mean - 60.0 * spec.multiplier).abs() < 1e-9, "{mean}");
        within_5_sigma("count", set.jobs.len() as f64, mean, mean.sqrt());
    }

    /// Jobs of all seeds in `seeds` on a week, pooled.
    fn week_of_jobs(seeds: std::ops::Range<u64>) -> (WorkloadSpec, Vec<(String, Job)>) {
        let mut spec = reference();
        spec.days = 7.0;
        let mut jobs = Vec::new();
        for seed in seeds {
            let set = generate(&spec, seed);
            jobs.extend(
                set.jobs
                    .iter()
                    .map(|j| (set.classes[j.class as usize].clone(), *j)),
            );
        }
        (spec, jobs)
    }

    fn class_spec<'a>(spec: &'a WorkloadSpec, name: &str) -> &'a JobClassSpec {
        spec.classes.iter().find(|c| c.name == name).unwrap()
    }

    #[test]
    fn classes_arrive_in_proportion_to_their_shares() {
        let (spec, jobs) = week_of_jobs(0..2);
        let n = jobs.len() as f64;
        let total: f64 = spec.classes.iter().map(|c| c.share).sum();
        for c in &spec.classes {
            let p = c.share / total;
            let k = jobs.iter().filter(|(l, _)| *l == c.name).count() as f64;
            // Given n arrivals, a class's count is Binomial(n, p).
            within_5_sigma(&c.name, k, n * p, (n * p * (1.0 - p)).sqrt());
        }
    }

    #[test]
    fn hourly_shares_move_the_mix_hour_by_hour() {
        let mut spec = reference();
        // Inference only in the morning, training only in the afternoon.
        let half = |morning: f64| -> Option<Vec<f64>> {
            Some(
                (0..24)
                    .map(|h| if h < 12 { morning } else { 1.0 - morning })
                    .collect(),
            )
        };
        for c in &mut spec.classes {
            c.hourly_share = half(if c.name.ends_with("infer") { 1.0 } else { 0.0 });
        }
        let set = generate(&spec, 9);
        assert!(set.jobs.len() > 1000);
        for j in &set.jobs {
            let label = &set.classes[usize::from(j.class)];
            let morning = j.release < 720.0;
            assert_eq!(label.ends_with("infer"), morning, "{label} at {}", j.release);
        }
        // Without hourly shares the draws are those of the daily shares, seed for seed.
        let mut same = reference();
        for c in &mut same.classes {
            c.hourly_share = Some(vec![c.share; 24]);
        }
        assert_eq!(generate(&same, 3), generate(&reference(), 3));
    }

    #[test]
    fn inference_1g_times_are_exponential_with_the_given_mean() {
        let (spec, jobs) = week_of_jobs(0..2);
        for name in ["bert-infer", "resnet-infer"] {
            let DurationSpec::Exponential { mean } = class_spec(&spec, name).duration else {
                panic!("{name} is not exponential in the reference scenario");
            };
            let t: Vec<f64> = jobs
                .iter()
                .filter(|(l, _)| l == name)
                .map(|(_, j)| j.times[0])
                .collect();
            let n = t.len() as f64;
            let m = t.iter().sum::<f64>() / n;
            // An exponential's standard deviation equals its mean.
            within_5_sigma(name, m, mean, mean / n.sqrt());
            // P(X > mean) = 1/e for an exponential, whatever the mean.
            let above = t.iter().filter(|x| **x > mean).count() as f64;
            let p = (-1.0f64).exp();
            within_5_sigma(
                &format!("{name} above mean"),
                above,
                n * p,
                (n * p * (1.0 - p)).sqrt(),
            );
        }
    }

    #[test]
    fn ninety_percent_of_training_times_fall_between_p5_and_p95() {
        let (spec, jobs) = week_of_jobs(0..2);
        for name in ["bert-train", "resnet-train"] {
            let DurationSpec::LognormalRange { p5, p95 } = class_spec(&spec, name).duration else {
                panic!("{name} is not lognormal-range in the reference scenario");
            };
            let t: Vec<f64> = jobs
                .iter()
                .filter(|(l, _)| l == name)
                .map(|(_, j)| j.times[0])
                .collect();
            let n = t.len() as f64;
            let inside = t.iter().filter(|x| (p5..=p95).contains(*x)).count() as f64;
            within_5_sigma(name, inside, 0.9 * n, (n * 0.9 * 0.1).sqrt());
            // The median of the log-normal is the geometric mean of p5 and p95.
            let below = t.iter().filter(|x| **x < (p5 * p95).sqrt()).count() as f64;
            within_5_sigma(&format!("{name} median"), below, 0.5 * n, (n * 0.25).sqrt());
        }
    }

    #[test]
    fn slice_times_follow_each_class_speedup() {
        let (spec, jobs) = week_of_jobs(0..1);
        for (label, j) in &jobs {
            let s = class_spec(&spec, label).speedup;
            for (t, speedup) in j.times.iter().zip(s) {
                let want = j.times[0] / speedup;
                assert!((t - want).abs() <= 1e-12 * want, "{label} {j:?}");
            }
        }
    }

    #[test]
    fn deadlines_are_a_uniform_factor_of_the_full_gpu_time_after_release() {
        let (spec, jobs) = week_of_jobs(0..1);
        let [lo, hi] = spec.deadline_factor;
        for (_, j) in &jobs {
            // deadline = release + f·t7 is rounded once near `deadline`: allow that much.
            let eps = 1e-12 * j.deadline;
            let (min, max) = (j.release + lo * j.times[4], j.release + hi * j.times[4]);
            assert!(j.deadline >= min - eps && j.deadline <= max + eps, "{j:?}");
        }
        let factors: Vec<f64> = jobs
            .iter()
            .map(|(_, j)| (j.deadline - j.release) / j.times[4])
            .collect();
        let n = factors.len() as f64;
        let mean = factors.iter().sum::<f64>() / n;
        let sd = (hi - lo) / 12f64.sqrt();
        within_5_sigma("deadline factor", mean, (lo + hi) / 2.0, sd / n.sqrt());
        let low_half = factors.iter().filter(|f| **f < (lo + hi) / 2.0).count() as f64;
        within_5_sigma("factors below the middle", low_half, n / 2.0, (n / 4.0).sqrt());
    }

    #[test]
    fn a_fixed_duration_is_exact_and_a_zero_share_class_never_appears() {
        let mut spec = reference();
        spec.classes[0].duration = DurationSpec::Fixed { value: 12.5 };
        spec.classes[1].share = 0.0;
        let set = generate(&spec, 9);
        assert!(set.jobs.iter().any(|j| j.class == 0));
        assert!(set
            .jobs
            .iter()
            .filter(|j| j.class == 0)
            .all(|j| j.times[0] == 12.5));
        assert!(set.jobs.iter().all(|j| j.class != 1));
    }

    /// Release-mode timing of the scale the generator must handle:
    /// `cargo test --release --lib generates_a_1024_gpu_week -- --ignored --nocapture`.
    #[test]
    #[ignore = "timing; run in release"]
    fn generates_a_1024_gpu_week_quickly() {
        let mut spec = reference();
        spec.days = 7.0;
        // 8 GPUs at 20× → 1,024 GPUs at 2,560×.
        spec.multiplier = 2560.0;
        let start = std::time::Instant::now();
        let set = generate(&spec, 1);
        let took = start.elapsed();
        let mean = expected_count(&spec);
        println!("{} jobs in {:.3} s", set.jobs.len(), took.as_secs_f64());
        within_5_sigma("count", set.jobs.len() as f64, mean, mean.sqrt());
        // One allocation: a regrowth would have doubled the reserved capacity.
        assert!((set.jobs.capacity() as f64) < mean + 7.0 * mean.sqrt() + 16.0);
    }
}
