//! The tardiness lower bound: a time-indexed MIP on m identical machines (docs/model.md §7),
//! exact for small instances, its LP relaxation for large ones, solved with microlp (a
//! pure-Rust simplex and branch-and-bound solver, so the bound builds with nothing but Rust).
//!
//! What it relaxes: the jobs of [`super::relax`] (linear, on whole machines, preemptive;
//! the module doc of [`super`] shows no simulated schedule does better), then time is cut
//! into slots of length ε and only *how much* of each job runs in each slot is kept.
//!
//! # Formulation
//!
//! Slot s covers [sε, (s+1)ε). Job j (release r_j, deadline d_j, length p_j) has a window
//! of slots a_j..=e_j: a_j is the slot holding r_j; e_j is the slot holding
//! h_j = d_j + L. U is the total tardiness of a feasible schedule (preemptive EDF on
//! the relaxed problem, [`edf_schedule`]); the MIP takes L = U, the LP the largest
//! lateness of that schedule (much shorter windows when many jobs are late).
//! Variables and constraints:
//!
//! - x_{j,s} ∈ [0, min(ε, (s+1)ε − r_j)], s ∈ a_j..=e_j: work of j done in slot s (one
//!   machine at a time, nothing before r_j); z_{j,s} = z_{j,s−1} + x_{j,s} ∈ [0, p_j]: work
//!   done by the end of slot s; per slot Σ_j x_{j,s} ≤ mε (written only for slots where
//!   more than m windows overlap: otherwise it is implied). The LP is solved with y and z
//!   substituted out (`TimeIndexed::completion_lp` shows why its optimum is the same).
//! - y_{j,t} ∈ {0,1}, t ∈ b_j..=e_j, with p_j·y_{j,t} ≤ z_{j,t} (y = 1: finished by the end
//!   of slot t), y non-decreasing in t (MIP only: with continuous y the optimum is
//!   non-decreasing anyway), and y_{j,e_j} = 1 when L ≥ U ("forced"; otherwise a job
//!   may stay unfinished in its window and counts as finishing at (e_j+1)ε). b_j is the
//!   first slot whose end is at or after r_j + p_j; earlier y are 0 and not written.
//! - C_j = ε·Σ_{t ≤ e_j} (1 − y_{j,t}) (the start of the slot j finishes in);
//!   T_j ≥ C_j − d_j, T_j ≥ (r_j + p_j − d_j)⁺; minimise Σ_j T_j. The bound is Σ T_j / n.
//!
//! # Why it is a valid bound (never above the optimum)
//!
//! Take an optimal schedule S of the relaxed problem, with completions C_j. Set z to its
//! cumulative work and y_{j,t} = 1 iff C_j ≤ (t+1)ε. The rate and release limits hold
//! slot by slot, y ≤ z/p holds, and ε·Σ_t (1 − y_{j,t}) = ε·(⌈C_j/ε⌉ − 1) < C_j, so
//! T_j = max(C_j^model − d_j, (r_j + p_j − d_j)⁺, 0) ≤ (C_j − d_j)⁺. Work after e_j is
//! not modelled, which only loosens the capacity rows, and an unfinished job's
//! C_j^model = (e_j+1)ε is below its C_j. Forcing y_{j,e_j} = 1 is safe when L ≥ U:
//! every job of S has T_j ≤ Σ_i T_i(S) ≤ U ≤ L, so C_j ≤ d_j + L = h_j ≤ (e_j+1)ε.
//! So S maps to a feasible point whose objective is at most S's total tardiness, and the
//! model's optimum — or any proven lower bound on it: the LP optimum, or the MIP's dual
//! bound when it stops at the time limit — is a lower bound. No slack has to be
//! subtracted: slot rounding only moves the model's completions *earlier*.
//!
//! # How far below the optimum (the 2nε of docs/model.md §7)
//!
//! Conversely (when completion is forced) an optimal MIP solution, delayed by one slot (so that nothing runs in the
//! slot holding a release) and cut slot by slot with McNaughton's wrap-around, is a real
//! schedule in which each job ends by the end of the slot after the one its y turns 1 in,
//! i.e. by C_j^model + 2ε. So the MIP optimum is within 2nε of the relaxed problem's
//! optimum (2ε in average tardiness); the LP relaxation can be further below.
//!
//! # Slot length
//!
//! ε is chosen so that the number of job-slot cells Σ_j (e_j − a_j + 1) stays within a
//! budget ([`TardinessOptions::max_cells`], [`TardinessOptions::exact_cells`] for the
//! MIP): ε = Σ_j (h_j − r_j) / budget, never below
//! [`MIN_SLOT_MIN`]. It is reported with the bound.
//!
//! # Shortcut
//!
//! If preemptive EDF already reaches the trivial bound Σ_j (r_j + p_j − d_j)⁺ (most often:
//! nobody is late), that is the exact optimum of the relaxed problem and no model is built.

use std::time::Instant;

use microlp::{ComparisonOp, OptimizationDirection, Problem, SolutionStatus, SolveOutcome, Variable};
use serde::Serialize;

use super::RelaxedJob;

/// Smallest slot length the automatic choice uses, minutes.
pub const MIN_SLOT_MIN: f64 = 1e-3;

/// Which model to solve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// The MIP with binary y: exact up to 2ε per job; for small instances.
    Exact,
    /// The LP relaxation (y continuous in [0, 1]): weaker, scales.
    Relaxed,
    /// Exact at or below [`TardinessOptions::exact_max_jobs`] jobs, relaxed above.
    #[default]
    Auto,
}

/// Settings of [`tardiness_bound`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TardinessOptions {
    /// Exact, relaxed or automatic.
    pub method: Method,
    /// Wall-clock limit for the solver, seconds (a MIP stopped by it reports its proven bound).
    pub time_limit_s: f64,
    /// Size budget of the MIP: job-slot cells.
    pub exact_cells: usize,
    /// Size budget of the LP: job-slot cells.
    pub max_cells: usize,
    /// [`Method::Auto`] solves the MIP up to this many jobs.
    pub exact_max_jobs: usize,
}

impl Default for TardinessOptions {
    fn default() -> Self {
        TardinessOptions {
            method: Method::Auto,
            time_limit_s: 60.0,
            exact_cells: 400,
            max_cells: 50_000,
            exact_max_jobs: 40,
        }
    }
}

/// A tardiness bound problem.
#[derive(Debug, thiserror::Error)]
pub enum TardinessError {
    /// The solver refused the model or failed while solving it.
    #[error("the solver failed on the {what} ({cells} job-slot cells): {error}")]
    Solver {
        /// `MIP` or `LP`.
        what: &'static str,
        /// Model size.
        cells: usize,
        /// The solver's error.
        error: microlp::Error,
    },
    /// A job has a length, release or deadline that is not a finite number.
    #[error("job {index} has a non-finite time (release {release}, deadline {deadline}, length {length})")]
    BadJob {
        /// Position in the job list.
        index: usize,
        /// Its release.
        release: f64,
        /// Its deadline.
        deadline: f64,
        /// Its length.
        length: f64,
    },
}

/// The tardiness bound and how it was obtained.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct TardinessBound {
    /// Lower bound on the average tardiness of any schedule, minutes per job.
    pub avg_tardiness_min: f64,
    /// `edf-optimal`, `mip`, `mip-dual-bound` (time limit), `lp`, or `trivial` (the
    /// solver stopped without a bound; Σ (r + p − d)⁺ / n is reported).
    pub method: String,
    /// Average tardiness of preemptive EDF on the relaxed problem: the relaxed optimum
    /// lies between the bound and this.
    pub edf_avg_tardiness_min: f64,
    /// Slot length ε, minutes (absent when no model was built).
    pub slot_min: Option<f64>,
    /// Job-slot cells of the model.
    pub cells: usize,
    /// How the solver ended (`optimal`, `time limit`, ...).
    pub status: String,
    /// Seconds spent building and solving the model.
    pub solve_s: f64,
}

/// Completion times of preemptive EDF on `m` identical machines: at every release and
/// completion the (up to) m available jobs with the earliest deadlines run, each on
/// one machine. A feasible schedule of the relaxed problem, so an upper bound.
pub fn edf_schedule(jobs: &[RelaxedJob], m: usize) -> Vec<f64> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    /// Heap key: deadline, then index.
    struct Key(f64, usize);
    impl PartialEq for Key {
        fn eq(&self, o: &Self) -> bool {
            self.cmp(o).is_eq()
        }
    }
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Key {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0).then(self.1.cmp(&o.1))
        }
    }
    let n = jobs.len();
    let mut done = vec![f64::NAN; n];
    if m == 0 {
        return done;
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| jobs[a].release.total_cmp(&jobs[b].release));
    let mut rem: Vec<f64> = jobs.iter().map(|j| j.length).collect();
    let mut ready: BinaryHeap<Reverse<Key>> = BinaryHeap::new();
    let mut next = 0;
    let mut t = 0.0_f64;
    let mut running: Vec<usize> = Vec::with_capacity(m);
    while next < n || !ready.is_empty() {
        if ready.is_empty() {
            t = t.max(jobs[order[next]].release);
        }
        while next < n && jobs[order[next]].release <= t {
            let j = order[next];
            ready.push(Reverse(Key(jobs[j].deadline, j)));
            next += 1;
        }
        running.clear();
        while running.len() < m {
            match ready.pop() {
                Some(Reverse(Key(_, j))) => running.push(j),
                None => break,
            }
        }
        let mut dt = running.iter().map(|&j| rem[j]).fold(f64::INFINITY, f64::min);
        if next < n {
            dt = dt.min(jobs[order[next]].release - t);
        }
        t += dt;
        for &j in &running {
            rem[j] -= dt;
            // Lengths are positive, so a job within rounding of zero is the one that set dt.
            if rem[j] <= 1e-12 * jobs[j].length.max(1.0) {
                done[j] = t;
            } else {
                ready.push(Reverse(Key(jobs[j].deadline, j)));
            }
        }
    }
    done
}

/// Lower bound on the average tardiness of `jobs` on `m` machines (see the module doc for
/// the model, why it is valid and how the slot length is chosen).
pub fn tardiness_bound(
    jobs: &[RelaxedJob],
    m: usize,
    opts: &TardinessOptions,
) -> Result<TardinessBound, TardinessError> {
    let start = Instant::now();
    for (index, j) in jobs.iter().enumerate() {
        if !(j.release.is_finite() && j.deadline.is_finite() && j.length.is_finite()) {
            return Err(TardinessError::BadJob {
                index,
                release: j.release,
                deadline: j.deadline,
                length: j.length,
            });
        }
    }
    let n = jobs.len();
    let trivial: f64 = jobs
        .iter()
        .map(|j| (j.release + j.length - j.deadline).max(0.0))
        .sum();
    let edf_late: Vec<f64> = edf_schedule(jobs, m)
        .iter()
        .zip(jobs)
        .map(|(c, j)| (c - j.deadline).max(0.0))
        .collect();
    let edf_total: f64 = edf_late.iter().sum();
    let edf_max = edf_late.iter().copied().fold(0.0, f64::max);
    let per_job = |total: f64| if n == 0 { 0.0 } else { total / n as f64 };
    let mut out = TardinessBound {
        avg_tardiness_min: per_job(trivial),
        method: "edf-optimal".into(),
        edf_avg_tardiness_min: per_job(edf_total),
        slot_min: None,
        cells: 0,
        status: "not needed".into(),
        solve_s: 0.0,
    };
    // EDF reaching the trivial bound proves both optimal (up to rounding in EDF's sums).
    if n == 0 || m == 0 || edf_total <= trivial + 1e-9 * (1.0 + trivial) {
        if m == 0 && n > 0 {
            out.method = "trivial".into();
        }
        out.solve_s = start.elapsed().as_secs_f64();
        return Ok(out);
    }
    let exact = match opts.method {
        Method::Exact => true,
        Method::Relaxed => false,
        Method::Auto => n <= opts.exact_max_jobs,
    };
    let budget = if exact { opts.exact_cells } else { opts.max_cells }.max(n);
    // The MIP's windows reach EDF's total tardiness past each deadline, so completion can
    // be forced and the 2ε-per-job guarantee holds. The LP's reach EDF's largest lateness
    // (far shorter on a congested day, hence finer slots); completion is then forced
    // only when that is provably safe (lookahead ≥ EDF's total tardiness).
    let lookahead = if exact { edf_total } else { edf_max };
    let force = lookahead >= edf_total;
    let span: f64 = jobs.iter().map(|j| j.deadline + lookahead - j.release).sum();
    let eps = (span / budget as f64).max(MIN_SLOT_MIN);
    let model = TimeIndexed::build(jobs, m, eps, lookahead, force, exact);
    out.slot_min = Some(eps);
    out.cells = model.cells;
    let what = if exact { "MIP" } else { "LP" };
    let cells = model.cells;
    let fail = |error| TardinessError::Solver { what, cells, error };
    let mut problem = model.problem;
    problem.set_time_limit(std::time::Duration::from_secs_f64(opts.time_limit_s.max(0.01)));
    let outcome = problem.solve().map_err(fail)?;
    out.status = format!("{:?}", outcome.termination_reason());
    // A proven bound whether or not the search finished (an incumbent's objective is
    // not one when a MIP stops early); for an LP solved to optimality it is its optimum.
    let proven = outcome.stats().best_bound.filter(|b| b.is_finite());
    let bound = match (&outcome, exact) {
        (SolveOutcome::Solution(s), false) if s.status() == SolutionStatus::Optimal => {
            out.method = "lp".into();
            Some(s.objective())
        }
        (SolveOutcome::Solution(s), true) if s.status() == SolutionStatus::Optimal => {
            out.method = "mip".into();
            Some(s.objective())
        }
        (_, true) if proven.is_some() => {
            out.method = "mip-dual-bound".into();
            proven
        }
        _ => None,
    };
    match bound {
        Some(b) => out.avg_tardiness_min = per_job(b.max(trivial)),
        None => out.method = "trivial".into(),
    }
    out.solve_s = start.elapsed().as_secs_f64();
    Ok(out)
}

/// The time-indexed model of the module doc, ready for the solver.
struct TimeIndexed {
    problem: Problem,
    cells: usize,
}

/// One job's window of slots: a (holds the release), b (first slot the job can end in),
/// e (holds d_j + lookahead), and the work it may do in each slot.
struct Window {
    a: usize,
    b: usize,
    e: usize,
}

/// One job's part of the model, for the completion rows: the job, its window, its work
/// variables x_{j,s} (slots a..=e), its T_j, the slot length, and whether it must finish
/// inside its window.
#[derive(Clone, Copy)]
struct Completion<'a> {
    j: &'a RelaxedJob,
    w: &'a Window,
    xs: &'a [Variable],
    t_col: Variable,
    eps: f64,
    force: bool,
}

impl TimeIndexed {
    fn build(
        jobs: &[RelaxedJob],
        m: usize,
        eps: f64,
        lookahead: f64,
        force: bool,
        integer: bool,
    ) -> TimeIndexed {
        // Rounding errs on the side of validity: a window may start a slot early and end a
        // slot late, a completion may be allowed a slot early; each only loosens the model.
        const TOL: f64 = 1e-9;
        let slot_of_end = |t: f64| ((t / eps) + TOL).ceil().max(1.0) as usize - 1;
        let mut pb = Problem::new(OptimizationDirection::Minimize);
        let mut cells = 0;
        // Per slot: the work variables x_{j,s} of the jobs whose window holds it.
        let mut capacity: Vec<Vec<(Variable, f64)>> = Vec::new();
        for j in jobs {
            let a = ((j.release / eps) - TOL).floor().max(0.0) as usize;
            let e = slot_of_end(j.deadline + lookahead).max(a);
            let b = ((((j.release + j.length) / eps) - TOL).ceil().max(1.0) as usize - 1).clamp(a, e);
            if capacity.len() <= e {
                capacity.resize_with(e + 1, Vec::new);
            }
            cells += e - a + 1;
            // T_j, cost 1, never below the job's own lateness at full speed.
            let t_col = pb.add_var(1.0, ((j.release + j.length - j.deadline).max(0.0), f64::INFINITY));
            let w = Window { a, b, e };
            let xs: Vec<Variable> = (a..=e)
                .map(|s| {
                    let slot_cap = eps.min((s + 1) as f64 * eps - j.release).max(0.0);
                    let x = pb.add_var(0.0, (0.0, slot_cap));
                    capacity[s].push((x, 1.0));
                    x
                })
                .collect();
            let c = Completion {
                j,
                w: &w,
                xs: &xs,
                t_col,
                eps,
                force,
            };
            if integer {
                Self::completion_mip(&mut pb, &c);
            } else {
                Self::completion_lp(&mut pb, &c);
            }
        }
        let machine_time = m as f64 * eps;
        for row in capacity {
            // With at most m windows the row cannot bind: each x is at most ε.
            if row.len() > m {
                pb.add_constraint(row, ComparisonOp::Le, machine_time);
            }
        }
        TimeIndexed { problem: pb, cells }
    }

    /// The MIP's completion rows: z_{j,s} = z_{j,s−1} + x_{j,s} ∈ [0, p_j], binary y_{j,t}
    /// non-decreasing with p_j·y_{j,t} ≤ z_{j,t}, and T_j + ε·Σ_{t ≥ b} y_t ≥ ε·(e + 1) − d_j
    /// (C_j = ε·Σ_{t ≤ e} (1 − y_t), y_t = 0 for t < b).
    fn completion_mip(pb: &mut Problem, c: &Completion<'_>) {
        use ComparisonOp::{Eq, Ge, Le};
        let Completion {
            j,
            w,
            xs,
            t_col,
            eps,
            force,
        } = *c;
        let mut t_row: Vec<(Variable, f64)> = vec![(t_col, 1.0)];
        let mut z_prev: Option<Variable> = None;
        let mut y_prev: Option<Variable> = None;
        for (s, &x) in (w.a..=w.e).zip(xs) {
            let z = pb.add_var(0.0, (0.0, j.length));
            match z_prev {
                None => pb.add_constraint([(z, 1.0), (x, -1.0)], Eq, 0.0),
                Some(p) => pb.add_constraint([(z, 1.0), (p, -1.0), (x, -1.0)], Eq, 0.0),
            }
            if s >= w.b {
                // y_{j,e} = 1 when forced: the job ends inside its window (module doc).
                let y = if force && s == w.e {
                    pb.add_var(0.0, (1.0, 1.0))
                } else {
                    pb.add_binary_var(0.0)
                };
                pb.add_constraint([(y, j.length), (z, -1.0)], Le, 0.0);
                if let Some(yp) = y_prev {
                    pb.add_constraint([(yp, 1.0), (y, -1.0)], Le, 0.0);
                }
                y_prev = Some(y);
                t_row.push((y, eps));
            }
            z_prev = Some(z);
        }
        pb.add_constraint(t_row, Ge, (w.e + 1) as f64 * eps - j.deadline);
    }

    /// The LP's completion rows, with y and z substituted out. With y continuous the
    /// optimum takes y_t = z_t/p_j (a larger y only lowers T_j, and z ≤ p keeps y ≤ 1),
    /// and z_t = Σ_{s ≤ t} x_s, so ε·Σ_{t ≥ b} y_t = (ε/p_j)·Σ_s x_s·(e − max(s, b) + 1):
    /// one row per job instead of two per cell, the same optimum. Σ_s x_s ≤ p_j (= p_j
    /// when forced) stands for z ≤ p_j.
    fn completion_lp(pb: &mut Problem, c: &Completion<'_>) {
        use ComparisonOp::{Eq, Ge, Le};
        let Completion {
            j,
            w,
            xs,
            t_col,
            eps,
            force,
        } = *c;
        let mut t_row: Vec<(Variable, f64)> = vec![(t_col, 1.0)];
        t_row.extend(
            (w.a..=w.e)
                .zip(xs)
                .map(|(s, &x)| (x, eps / j.length * (w.e - s.max(w.b) + 1) as f64)),
        );
        pb.add_constraint(t_row, Ge, (w.e + 1) as f64 * eps - j.deadline);
        let work: Vec<(Variable, f64)> = xs.iter().map(|&x| (x, 1.0)).collect();
        pb.add_constraint(work, if force { Eq } else { Le }, j.length);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rj(release: f64, deadline: f64, length: f64) -> RelaxedJob {
        RelaxedJob {
            release,
            deadline,
            length,
        }
    }

    #[test]
    fn edf_runs_the_earliest_deadlines_and_preempts_for_a_more_urgent_arrival() {
        // One machine: A (0, d 10, p 4) starts; B (1, d 2, p 1) preempts it at 1 and ends
        // at 2; A resumes and ends at 5.
        let c = edf_schedule(&[rj(0.0, 10.0, 4.0), rj(1.0, 2.0, 1.0)], 1);
        assert!((c[0] - 5.0).abs() < 1e-12 && (c[1] - 2.0).abs() < 1e-12, "{c:?}");
    }

    /// Least total tardiness on one machine by brute force: for a fixed completion order,
    /// preemptive priority scheduling in that order finishes every job as early as any
    /// schedule with that order can, so the best of all orders is optimal.
    fn brute_force_one_machine(jobs: &[RelaxedJob]) -> f64 {
        fn permutations(k: usize, perm: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
            if k == perm.len() {
                out.push(perm.clone());
                return;
            }
            for i in k..perm.len() {
                perm.swap(k, i);
                permutations(k + 1, perm, out);
                perm.swap(k, i);
            }
        }
        let mut all = Vec::new();
        permutations(0, &mut (0..jobs.len()).collect(), &mut all);
        all.iter()
            .map(|order| {
                let mut ranked = jobs.to_vec();
                for (rank, &j) in order.iter().enumerate() {
                    ranked[j].deadline = rank as f64;
                }
                edf_schedule(&ranked, 1)
                    .iter()
                    .zip(jobs)
                    .map(|(c, j)| (c - j.deadline).max(0.0))
                    .sum::<f64>()
            })
            .fold(f64::INFINITY, f64::min)
    }

    #[test]
    fn two_jobs_due_together_on_one_machine_make_one_of_them_late_by_its_length() {
        // Each alone is on time; together one ends at 4, 2 late: average 1. The MIP finds
        // it within 2ε per job, never above.
        let jobs = [rj(0.0, 2.0, 2.0), rj(0.0, 2.0, 2.0)];
        let opts = TardinessOptions {
            method: Method::Exact,
            exact_cells: 120,
            ..TardinessOptions::default()
        };
        let b = tardiness_bound(&jobs, 1, &opts).unwrap();
        let eps = b.slot_min.unwrap();
        assert_eq!(b.method, "mip");
        assert!(b.avg_tardiness_min <= 1.0 + 1e-6, "{b:?}");
        assert!(b.avg_tardiness_min >= 1.0 - 2.0 * eps - 1e-6, "{b:?}");
        assert!((b.edf_avg_tardiness_min - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_day_where_edf_is_on_time_needs_no_model_and_its_bound_is_zero() {
        let jobs = [rj(0.0, 3.0, 2.0), rj(0.0, 5.0, 2.0), rj(1.0, 4.0, 1.0)];
        let b = tardiness_bound(&jobs, 2, &TardinessOptions::default()).unwrap();
        assert_eq!(
            (b.method.as_str(), b.avg_tardiness_min, b.cells),
            ("edf-optimal", 0.0, 0)
        );
    }

    #[test]
    fn the_mip_is_within_two_slots_per_job_of_a_brute_force_optimum_and_the_lp_is_below_it() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let mut solved = 0;
        // Coarse slots keep the MIP small enough for a debug test run; the 2nε check
        // below uses whatever ε the budget gives.
        let exact = TardinessOptions {
            method: Method::Exact,
            exact_cells: 120,
            time_limit_s: 20.0,
            ..TardinessOptions::default()
        };
        for _ in 0..16 {
            let n = rng.random_range(2..=4);
            let jobs: Vec<RelaxedJob> = (0..n)
                .map(|_| {
                    let release = rng.random_range(0..4) as f64;
                    let length = rng.random_range(1..8) as f64 * 0.5;
                    let slack = rng.random_range(0..6) as f64 * 0.5;
                    rj(release, release + length + slack - 0.5, length)
                })
                .collect();
            let opt = brute_force_one_machine(&jobs);
            let b = tardiness_bound(&jobs, 1, &exact).unwrap();
            let total = b.avg_tardiness_min * n as f64;
            assert!(
                total <= opt + 1e-6,
                "{jobs:?}: bound {total} above the optimum {opt}"
            );
            if let Some(eps) = b.slot_min {
                assert_eq!(b.method, "mip", "{b:?}");
                solved += 1;
                assert!(
                    opt <= total + 2.0 * n as f64 * eps + 1e-6,
                    "{jobs:?}: optimum {opt} more than 2nε above the MIP {total} (ε {eps})"
                );
            } else {
                assert!(
                    (total - opt).abs() < 1e-9,
                    "{jobs:?}: EDF said {total}, optimum {opt}"
                );
            }
            let relaxed = TardinessOptions {
                method: Method::Relaxed,
                max_cells: 400,
                ..TardinessOptions::default()
            };
            let lp = tardiness_bound(&jobs, 1, &relaxed).unwrap();
            assert!(
                lp.avg_tardiness_min * n as f64 <= opt + 1e-6,
                "{jobs:?}: LP {lp:?} above {opt}"
            );
        }
        // The instances must exercise the MIP, not only the EDF shortcut.
        assert!(solved >= 3, "only {solved} instances needed the MIP");
    }
}
