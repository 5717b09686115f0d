//! The discrete-event core: arrivals, completions, repartitions, in (time, sequence) order.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use smartmig_core::mig::{Instance, Plan};

use super::cluster::{Cluster, JobId, Slice};
use super::features::FeatureTracker;
use super::gate::Gate;
use super::metrics::{RunResult, Sample, SeriesRecorder};
use crate::decision::{DecisionView, Repartitioner};
use crate::energy::EnergyMeter;
use crate::index_rule::Numbering;
use crate::scenario::{DrainHold, NodeRule, Requeued, ResolvedScenario, Semantics};
use crate::sched::{PickContext, Scheduler};
use crate::workload::Job;

/// Options of one run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The scheduling heuristic.
    pub scheduler: Scheduler,
    /// Preempt or drain.
    pub semantics: Semantics,
    /// Seed of the run's RNG (recorded in the result).
    pub seed: u64,
    /// Record a time series every this many minutes (None: no series).
    pub sample_every: Option<f64>,
}

impl RunOptions {
    /// A run with `scheduler` under the scenario's semantics, without a time series.
    pub fn of(sc: &ResolvedScenario, scheduler: Scheduler, seed: u64) -> RunOptions {
        RunOptions {
            scheduler,
            semantics: sc.scenario.repartition.semantics,
            seed,
            sample_every: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Event {
    /// The job on a slot finishes, unless the slot's epoch moved on.
    Completion { slot: u32, epoch: u32 },
    /// A newly created instance becomes usable.
    SliceReady { slot: u32, epoch: u32 },
    /// The repartition policy asked to decide.
    Wakeup,
    /// Record a time-series sample.
    Sample,
}

#[derive(Debug)]
struct Timed {
    t: f64,
    seq: u64,
    ev: Event,
}

impl PartialEq for Timed {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Timed {
    fn cmp(&self, o: &Self) -> Ordering {
        self.t.total_cmp(&o.t).then(self.seq.cmp(&o.seq))
    }
}

/// A waiting job: ordered by the scheduler's key, then id.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    class: u8,
    deadline: f64,
    job: JobId,
}
impl PartialEq for Waiting {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Waiting {
    fn cmp(&self, o: &Self) -> Ordering {
        self.class
            .cmp(&o.class)
            .then(self.deadline.total_cmp(&o.deadline))
            .then(self.job.cmp(&o.job))
    }
}

/// One simulation run over a job list.
pub struct Simulation<'a> {
    sc: &'a ResolvedScenario,
    jobs: &'a [Job],
    opts: RunOptions,
    cluster: Cluster,
    power: Vec<Vec<f64>>,
    events: BinaryHeap<Reverse<Timed>>,
    seq: u64,
    queue: BinaryHeap<Reverse<Waiting>>,
    /// Fraction of each job's work left.
    rem: Vec<f64>,
    next_arrival: usize,
    running: usize,
    rng: ChaCha8Rng,
    meter: EnergyMeter,
    now: f64,
    // Accounting.
    tardiness_sum: f64,
    completed: usize,
    makespan: f64,
    repartitions: u64,
    relayout_batches: u64,
    preemptions: u64,
    event_count: u64,
    events_since_decision: u32,
    busy_slices: u32,
    busy_integral: f64,
    config_integral: Vec<Vec<f64>>,
    last_acc_t: f64,
    series: Option<SeriesRecorder>,
    /// Busy compute slices per GPU model.
    busy_by_model: Vec<u32>,
    /// Queue statistics for policies that read the mean field.
    features: Option<FeatureTracker>,
    /// Lateness accrued so far and the deadlines still to pass (for policies that learn).
    lateness: Option<Lateness>,
    /// The daemon's limits on re-layouts.
    gate: Gate,
    /// GPUs with a target they have not switched to yet.
    switching: usize,
    /// Per node drained whole (no new job anywhere on it): until it is idle (Slurm 22.05,
    /// its instance count changes), or until its changing instances are (`drain_hold =
    /// "node"`).
    node_hold: Vec<Option<NodeHold>>,
    /// Slurm's device numbering on each node and the index rule.
    numbering: Numbering,
    /// smartmigd's drain (nothing held): Slurm starts jobs on what an event frees before
    /// the policy sees it, so a change finds idle only what no waiting job could take.
    slurm_first: bool,
}

/// How long a drained node stays drained.
#[derive(Debug, Clone, Copy, PartialEq)]
enum NodeHold {
    /// Until no job runs on it (its GPU count changes under Slurm 22.05's rule).
    UntilIdle,
    /// Until each of its GPUs with a target has switched.
    UntilChanged,
}

/// Tardiness as it accrues: ∫ (jobs past their deadline and not done) dt, which at the
/// end equals Σ max(C − d, 0), but tells a learning policy *when* lateness happens.
#[derive(Debug, Default)]
struct Lateness {
    /// Deadlines of arrived jobs not yet passed: (deadline, job).
    upcoming: BinaryHeap<Reverse<(OrdF64, JobId)>>,
    late_now: u32,
    accrued: f64,
    last_t: f64,
}

/// An f64 with a total order, for heaps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF64(f64);
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> Ordering {
        self.0.total_cmp(&o.0)
    }
}

impl Lateness {
    /// Accrues lateness up to `t`, counting jobs whose deadline passes on the way.
    fn advance(&mut self, t: f64, rem: &[f64]) {
        while let Some(&Reverse((OrdF64(d), j))) = self.upcoming.peek() {
            if d > t {
                break;
            }
            self.upcoming.pop();
            self.accrued += f64::from(self.late_now) * (d - self.last_t).max(0.0);
            self.last_t = self.last_t.max(d);
            if rem[j.index()] > 0.0 {
                self.late_now += 1;
            }
        }
        self.accrued += f64::from(self.late_now) * (t - self.last_t).max(0.0);
        self.last_t = self.last_t.max(t);
    }
}

impl<'a> Simulation<'a> {
    /// Prepares a run; `jobs` must be sorted by release.
    pub fn new(sc: &'a ResolvedScenario, jobs: &'a [Job], opts: RunOptions) -> Simulation<'a> {
        let power: Vec<Vec<f64>> = sc.models.iter().map(|m| m.model.power_w.clone()).collect();
        let idle: f64 = sc.gpus.iter().map(|g| power[g.model][0]).sum();
        let config_integral = sc
            .models
            .iter()
            .map(|m| vec![0.0; m.configurations.len()])
            .collect();
        let series = opts.sample_every.map(|dt| SeriesRecorder::new(dt, sc));
        let gate = Gate::new(
            &sc.scenario.repartition,
            sc.scenario.cluster.gpus_per_node,
            sc.gpus.len(),
        );
        let nodes = sc.gpus.len().div_ceil(gate.gpus_per_node() as usize);
        let numbering = Numbering::new(sc, sc.scenario.repartition.index_rule, gate.gpus_per_node());
        Simulation {
            sc,
            jobs,
            cluster: Cluster::new(sc, opts.scheduler.gpu_order()),
            power,
            events: BinaryHeap::new(),
            seq: 0,
            queue: BinaryHeap::new(),
            rem: vec![1.0; jobs.len()],
            next_arrival: 0,
            running: 0,
            rng: ChaCha8Rng::seed_from_u64(opts.seed),
            meter: EnergyMeter::new(idle),
            now: 0.0,
            tardiness_sum: 0.0,
            completed: 0,
            makespan: 0.0,
            repartitions: 0,
            relayout_batches: 0,
            preemptions: 0,
            event_count: 0,
            events_since_decision: 0,
            busy_slices: 0,
            busy_integral: 0.0,
            config_integral,
            last_acc_t: 0.0,
            series,
            busy_by_model: vec![0; sc.models.len()],
            features: None,
            lateness: None,
            gate,
            switching: 0,
            node_hold: vec![None; nodes],
            numbering,
            slurm_first: opts.semantics == Semantics::Drain
                && sc.scenario.repartition.drain_hold == DrainHold::None,
            opts,
        }
    }

    fn push(&mut self, t: f64, ev: Event) {
        self.seq += 1;
        self.events.push(Reverse(Timed { t, seq: self.seq, ev }));
    }

    /// Accumulates time integrals (busy slices, configuration time) up to `now`.
    fn accumulate(&mut self) {
        let dt = self.now - self.last_acc_t;
        if dt > 0.0 {
            self.busy_integral += f64::from(self.busy_slices) * dt;
            for (m, counts) in self.cluster.config_counts.iter().enumerate() {
                for (c, &n) in counts.iter().enumerate() {
                    if n > 0 {
                        self.config_integral[m][c] += f64::from(n) * dt;
                    }
                }
            }
            self.last_acc_t = self.now;
        }
    }

    /// Runs to the last completion with `policy` deciding layouts.
    pub fn run(mut self, policy: &mut dyn Repartitioner) -> RunResult {
        if let Some(layout) = policy.feature_layout() {
            let horizon = self.jobs.iter().map(|j| j.deadline).fold(0.0, f64::max);
            match FeatureTracker::new(layout, horizon) {
                Ok(t) => self.features = Some(t),
                // The policy then decides without features and keeps layouts (it logs).
                Err(e) => log::error!("{e}"),
            }
            self.lateness = Some(Lateness::default());
        }
        let initial = policy.initial_layout(self.sc);
        for (g, &c) in initial.iter().enumerate() {
            self.install(g as u32, c, true);
        }
        self.numbering.start(self.sc, &self.cluster);
        if let Some(t) = policy.next_wakeup(0.0) {
            self.push(t, Event::Wakeup);
        }
        if self.opts.sample_every.is_some() {
            self.push(0.0, Event::Sample);
        }
        let every = policy.every_events();
        loop {
            let next_ev = self.events.peek().map(|Reverse(e)| e.t);
            let next_arr = self.jobs.get(self.next_arrival).map(|j| j.release);
            let take_event = match (next_ev, next_arr) {
                (None, None) => break,
                (Some(te), Some(ta)) => te <= ta,
                (Some(_), None) => true,
                (None, Some(_)) => false,
            };
            if take_event {
                let Some(Reverse(Timed { t, ev, .. })) = self.events.pop() else {
                    break;
                };
                if self.work_done() && matches!(ev, Event::Wakeup | Event::Sample) {
                    break;
                }
                self.advance(t);
                match ev {
                    Event::Completion { slot, epoch } => {
                        if self.cluster.slices[slot as usize].epoch == epoch
                            && self.cluster.slices[slot as usize].job.is_some()
                        {
                            self.complete(slot);
                            if self.slurm_first {
                                self.schedule();
                            }
                            self.count_event(every, policy);
                        }
                    }
                    Event::SliceReady { slot, epoch } => {
                        let s = &mut self.cluster.slices[slot as usize];
                        if s.epoch == epoch && s.compute > 0 {
                            s.ready = true;
                            let g = s.gpu;
                            self.cluster.refresh(g);
                        }
                    }
                    Event::Wakeup => {
                        self.decide(policy);
                        if let Some(t) = policy.next_wakeup(self.now) {
                            self.push(t, Event::Wakeup);
                        }
                    }
                    Event::Sample => {
                        self.sample();
                        if let Some(dt) = self.opts.sample_every {
                            self.push(self.now + dt, Event::Sample);
                        }
                    }
                }
            } else {
                let j = self.next_arrival;
                self.next_arrival += 1;
                self.advance(self.jobs[j].release);
                if let Some(l) = self.lateness.as_mut() {
                    l.upcoming
                        .push(Reverse((OrdF64(self.jobs[j].deadline), JobId::of(j))));
                }
                self.enqueue(JobId::of(j));
                if let Some(r) = self.series.as_mut() {
                    r.arrival();
                }
                if self.slurm_first {
                    self.schedule();
                }
                self.count_event(every, policy);
            }
            self.schedule();
        }
        self.advance(self.makespan.max(self.now));
        self.finish(policy.name())
    }

    fn work_done(&self) -> bool {
        self.next_arrival >= self.jobs.len() && self.queue.is_empty() && self.running == 0
    }

    fn advance(&mut self, t: f64) {
        if t > self.now {
            self.now = t;
        }
        self.accumulate();
        if let Some(l) = self.lateness.as_mut() {
            l.advance(self.now, &self.rem);
        }
    }

    fn count_event(&mut self, every: Option<u32>, policy: &mut dyn Repartitioner) {
        self.event_count += 1;
        if let Some(n) = every {
            self.events_since_decision += 1;
            if self.events_since_decision >= n.max(1) {
                self.events_since_decision = 0;
                self.decide(policy);
            }
        }
    }

    fn decide(&mut self, policy: &mut dyn Repartitioner) {
        let changes = {
            let view = DecisionView {
                now: self.now,
                cluster: &self.cluster,
                features: self.features.as_ref(),
                busy_by_model: &self.busy_by_model,
                energy_wmin: self.meter.energy_wmin(),
                lateness_min: self.lateness.as_ref().map_or(self.tardiness_sum, |l| l.accrued),
                gpus_per_node: self.gate.gpus_per_node(),
                scenario: self.sc,
            };
            policy.decide(&view, &mut self.rng)
        };
        let sc = self.sc;
        let gpus = &self.cluster.gpus;
        // A configuration the GPU's model cannot take is never proposed.
        let changes: Vec<(u32, u16)> = changes
            .into_iter()
            .filter(|&(g, c)| {
                let model = gpus[g as usize].model as usize;
                sc.models[model].configurations[c as usize].is_available()
            })
            .collect();
        let free = |g: u32| {
            let gpu = &gpus[g as usize];
            gpu.target.is_none().then_some(gpu.config)
        };
        // The daemon's device-index rule, on the proposals and again on the batch (the
        // gate may hold back part of a node's changes).
        let (numbering, cluster) = (&self.numbering, &self.cluster);
        let preempt = self.opts.semantics == Semantics::Preempt;
        let cap = sc.scenario.repartition.requeue_max_run_s.filter(|_| preempt);
        // The jobs whose indices must hold: every one where the rule makes changes wait;
        // under preempt with a run-time limit, those older than it (the younger ones are
        // requeued with the jobs on destroyed instances).
        let since = match cap {
            Some(cap) if numbering.preempts_moved() => Some(self.now - cap / 60.0),
            _ if numbering.active(preempt) => Some(f64::INFINITY),
            _ => None,
        };
        let keep = |changes: Vec<(u32, u16)>| {
            let Some(since) = since else {
                return changes;
            };
            let mut proposed: Vec<(u32, u16)> = changes
                .into_iter()
                .filter(|&(g, c)| free(g).is_some_and(|cur| cur != c))
                .collect();
            proposed.sort_unstable();
            numbering.keep_started_before(sc, cluster, &proposed, since)
        };
        // smartmigd's drain: only changes whose instances are idle now, then the node rules
        // (the index rule, then the count rule), before the limits and again after them.
        let when_idle = self.slurm_first;
        let changes = if when_idle {
            self.count_kept(keep(self.idle_only(changes)))
        } else if let Some(cap) = cap {
            self.count_kept_before(keep(self.young_only(changes, cap / 60.0)), self.now - cap / 60.0)
        } else {
            keep(changes)
        };
        let batch = self.gate.offer(self.now, &changes, free, self.switching == 0);
        let batch = keep(batch);
        let batch = match cap {
            _ if when_idle => self.count_kept(batch),
            Some(cap) => self.count_kept_before(batch, self.now - cap / 60.0),
            None => batch,
        };
        if batch.is_empty() {
            return;
        }
        self.relayout_batches += 1;
        match self.opts.semantics {
            Semantics::Preempt => {
                if self.numbering.preempts_moved() {
                    self.preempt_moved(&batch);
                }
                self.preempt_count_changed(&batch);
                self.install_all(&batch);
            }
            Semantics::Drain if when_idle => self.install_all(&batch),
            Semantics::Drain => self.start_drain(&batch),
        }
    }

    /// Switches every GPU of `batch` at once, then records each node's new `Gres` order.
    fn install_all(&mut self, batch: &[(u32, u16)]) {
        for &(g, c) in batch {
            self.install(g, c, false);
        }
        let mut nodes: Vec<u32> = batch.iter().map(|&(g, _)| self.gate.node_of(g)).collect();
        nodes.dedup();
        for node in nodes {
            self.numbering.retype(self.sc, &self.cluster, node);
        }
    }

    /// The changes of `changes` that destroy no busy instance (smartmigd's drain mode
    /// leaves the others for a later decision).
    fn idle_only(&self, changes: Vec<(u32, u16)>) -> Vec<(u32, u16)> {
        self.young_only(changes, f64::NEG_INFINITY)
    }

    /// The changes of `changes` that stop no job running longer than `max_run` minutes.
    fn young_only(&self, changes: Vec<(u32, u16)>, max_run: f64) -> Vec<(u32, u16)> {
        let sc = self.sc;
        changes
            .into_iter()
            .filter(|&(g, c)| {
                let model = self.cluster.gpus[g as usize].model as usize;
                let target = &sc.models[model].configurations[c as usize].layout;
                self.cluster.busy_destroyed_before(g, target, self.now - max_run) == 0
            })
            .collect()
    }

    /// Slurm 22.05's node rule as smartmigd keeps it in drain mode: the changes of a node
    /// with running jobs go ahead only if together they keep its GPU-instance count
    /// (padding records keep it whatever the changes).
    fn count_kept(&self, changes: Vec<(u32, u16)>) -> Vec<(u32, u16)> {
        self.count_kept_before(changes, f64::INFINITY)
    }

    /// [`Simulation::count_kept`], counting only the jobs started before `since` as running
    /// (preempt mode with a run-time limit requeues the others).
    fn count_kept_before(&self, changes: Vec<(u32, u16)>, since: f64) -> Vec<(u32, u16)> {
        let counted = self.count_changed(&changes);
        changes
            .into_iter()
            .filter(|&(g, _)| {
                let node = self.gate.node_of(g);
                !counted.contains(&node) || self.node_idle_before(node, since)
            })
            .collect()
    }

    /// The nodes whose GPU-instance count `changes` alter, where Slurm's node rule applies
    /// (Slurm 22.05's and later, without padding records).
    fn count_changed(&self, changes: &[(u32, u16)]) -> Vec<u32> {
        let rep = &self.sc.scenario.repartition;
        if rep.node_rule != NodeRule::Slurm2205 || rep.index_rule.padded() {
            return Vec::new();
        }
        let count = |g: u32, c: u16| {
            let model = self.cluster.gpus[g as usize].model as usize;
            self.sc.models[model].configurations[c as usize].sizes.len() as i64
        };
        let mut delta: std::collections::BTreeMap<u32, i64> = std::collections::BTreeMap::new();
        for &(g, c) in changes {
            let now = self.cluster.gpus[g as usize].config;
            *delta.entry(self.gate.node_of(g)).or_default() += count(g, c) - count(g, now);
        }
        delta
            .into_iter()
            .filter(|&(_, d)| d != 0)
            .map(|(n, _)| n)
            .collect()
    }

    /// Preempt: Slurm requeues every running job of a node whose GPU count the batch
    /// changes (at the node's registration), whichever instance it runs on.
    fn preempt_count_changed(&mut self, batch: &[(u32, u16)]) {
        for node in self.count_changed(batch) {
            for g in self.node_gpus(node) {
                let busy: Vec<u32> = Cluster::slots(g)
                    .filter(|&id| self.cluster.slices[id as usize].job.is_some())
                    .collect();
                for id in busy {
                    self.preempt(id);
                }
                self.cluster.refresh(g);
            }
        }
    }

    /// Preempt, `fixed` numbering: preempts the jobs whose device index the batch would
    /// move (smartmigd requeues them).
    fn preempt_moved(&mut self, batch: &[(u32, u16)]) {
        let per_node = self.numbering.gpus_per_node();
        let mut rest = batch;
        while let Some(&(first, _)) = rest.first() {
            let n = rest
                .iter()
                .take_while(|&&(g, _)| g / per_node == first / per_node)
                .count();
            let (here, tail) = rest.split_at(n);
            rest = tail;
            for (g, inst) in self
                .numbering
                .moved(self.sc, &self.cluster, first / per_node, here)
            {
                let slot = Cluster::slots(g).find(|&id| {
                    let s = &self.cluster.slices[id as usize];
                    s.compute > 0 && s.instance == inst && s.job.is_some()
                });
                if let Some(id) = slot {
                    self.preempt(id);
                    self.cluster.refresh(g);
                }
            }
        }
    }

    fn enqueue(&mut self, j: JobId) {
        let job = &self.jobs[j.index()];
        if let Some(f) = self.features.as_mut() {
            f.enqueue(job, self.rem[j.index()]);
        }
        let (class, deadline) = self.opts.scheduler.queue_key(job);
        self.queue.push(Reverse(Waiting {
            class,
            deadline,
            job: j,
        }));
    }

    /// Starts waiting jobs while slices are free.
    fn schedule(&mut self) {
        while self.cluster.free_count() > 0 {
            let Some(&Reverse(w)) = self.queue.peek() else {
                break;
            };
            let job = &self.jobs[w.job.index()];
            let ctx = PickContext {
                power: &self.power,
                energy_weight: self.sc.scenario.objective.energy_weight,
            };
            let Some(slot) = self.opts.scheduler.pick(
                &self.cluster,
                &ctx,
                job,
                self.rem[w.job.index()],
                self.now,
                &mut self.rng,
            ) else {
                break;
            };
            self.queue.pop();
            if let Some(f) = self.features.as_mut() {
                f.dequeue(job, self.rem[w.job.index()]);
            }
            self.start(w.job, slot);
        }
    }

    fn set_busy(&mut self, g: u32, delta: i32) {
        let gpu = &mut self.cluster.gpus[g as usize];
        let p = &self.power[gpu.model as usize];
        let top = p.len() - 1;
        let before = p[usize::from(gpu.busy).min(top)];
        gpu.busy = u8::try_from(i32::from(gpu.busy) + delta).expect("a GPU's busy slices stay in 0..=7");
        let after = p[usize::from(gpu.busy).min(top)];
        let model = gpu.model as usize;
        self.meter.change(self.now, after - before);
        let moved = |n: u32| {
            n.checked_add_signed(delta)
                .expect("busy slice counts stay non-negative")
        };
        self.busy_by_model[model] = moved(self.busy_by_model[model]);
        self.busy_slices = moved(self.busy_slices);
    }

    fn start(&mut self, j: JobId, slot: u32) {
        let s = &mut self.cluster.slices[slot as usize];
        s.job = Some(j);
        s.started = self.now;
        s.epoch = s.epoch.wrapping_add(1);
        let (g, compute, epoch) = (s.gpu, s.compute, s.epoch);
        let dur = self.rem[j.index()] * self.jobs[j.index()].time_on(compute);
        self.running += 1;
        self.set_busy(g, i32::from(compute));
        self.push(self.now + dur, Event::Completion { slot, epoch });
        self.cluster.refresh(g);
    }

    fn complete(&mut self, slot: u32) {
        let s = &mut self.cluster.slices[slot as usize];
        let j = s.job.take().expect("a completion's slot runs a job").index();
        s.epoch = s.epoch.wrapping_add(1);
        let (g, compute) = (s.gpu, s.compute);
        self.rem[j] = 0.0;
        self.running -= 1;
        self.completed += 1;
        self.tardiness_sum += (self.now - self.jobs[j].deadline).max(0.0);
        if let Some(l) = self.lateness.as_mut() {
            // Its deadline was counted when `advance` reached it (d <= now).
            if self.jobs[j].deadline <= self.now {
                l.late_now -= 1;
            }
        }
        self.makespan = self.makespan.max(self.now);
        self.set_busy(g, -i32::from(compute));
        let node = self.gate.node_of(g);
        match self.node_hold[node as usize] {
            Some(NodeHold::UntilIdle) => self.try_switch_node(node),
            Some(NodeHold::UntilChanged) => {
                if self.cluster.gpus[g as usize].target.is_some() {
                    self.try_switch(g);
                }
                self.release_if_changed(node);
            }
            None if self.cluster.gpus[g as usize].target.is_some() => self.try_switch(g),
            None => {}
        }
        self.cluster.refresh(g);
    }

    /// `drain_hold = "node"`: resumes node `node` once none of its GPUs waits to switch.
    fn release_if_changed(&mut self, node: u32) {
        let gpus = self.node_gpus(node);
        if gpus
            .clone()
            .any(|g| self.cluster.gpus[g as usize].target.is_some())
        {
            return;
        }
        self.node_hold[node as usize] = None;
        for g in gpus {
            for id in Cluster::slots(g) {
                self.cluster.slices[id as usize].draining = false;
            }
            self.cluster.refresh(g);
        }
    }

    /// Stops the job on `slot`, keeping its progress, and queues it again.
    fn preempt(&mut self, slot: u32) {
        let s = &mut self.cluster.slices[slot as usize];
        let id = s.job.take().expect("a preempted slot runs a job");
        let j = id.index();
        let done = (self.now - s.started) / self.jobs[j].time_on(s.compute);
        s.epoch = s.epoch.wrapping_add(1);
        let (g, compute) = (s.gpu, s.compute);
        if self.sc.scenario.repartition.requeued == Requeued::Resume {
            self.rem[j] = (self.rem[j] - done).max(1e-12);
        }
        self.running -= 1;
        self.preemptions += 1;
        self.set_busy(g, -i32::from(compute));
        self.enqueue(id);
    }

    /// Drain with a hold (`drain_hold` other than `none`): points the batch's GPUs at their
    /// new configurations. What the hold covers takes no new jobs (the changing instances,
    /// their types or the node); under Slurm 22.05's rule a node whose instance count
    /// changes takes none anywhere. Each GPU (or held node) switches once what must stop
    /// is idle.
    fn start_drain(&mut self, batch: &[(u32, u16)]) {
        let sc = self.sc;
        for &(g, c) in batch {
            let gpu = &mut self.cluster.gpus[g as usize];
            let model = gpu.model as usize;
            gpu.target = Some(c);
            self.switching += 1;
            let target = &sc.models[model].configurations[c as usize].layout;
            for id in Cluster::slots(g) {
                let s = &mut self.cluster.slices[id as usize];
                s.draining = s.compute > 0 && !target.contains(&s.instance);
            }
        }
        let mut nodes: Vec<u32> = batch.iter().map(|&(g, _)| self.gate.node_of(g)).collect();
        nodes.dedup();
        let rep = &sc.scenario.repartition;
        for node in nodes {
            // Padding records keep the node's GPU count: no node drains whole.
            let padded = rep.index_rule.padded();
            let hold = if !padded && rep.node_rule == NodeRule::Slurm2205 && self.instance_count_changes(node)
            {
                Some(NodeHold::UntilIdle)
            } else if matches!(rep.drain_hold, DrainHold::Node | DrainHold::Type) {
                Some(NodeHold::UntilChanged)
            } else {
                None
            };
            if let Some(hold) = hold {
                self.node_hold[node as usize] = Some(hold);
                // What takes no new job: the node, or (type hold) every instance of a type
                // a change on it destroys.
                let held = (hold == NodeHold::UntilChanged && rep.drain_hold == DrainHold::Type)
                    .then(|| self.destroyed_profiles(node));
                for g in self.node_gpus(node) {
                    for id in Cluster::slots(g) {
                        let s = &mut self.cluster.slices[id as usize];
                        let here = held.as_ref().is_none_or(|p| p.contains(&s.instance.profile));
                        s.draining = s.compute > 0 && (s.draining || here);
                    }
                }
                match hold {
                    NodeHold::UntilIdle => self.try_switch_node(node),
                    NodeHold::UntilChanged => {
                        for g in self.node_gpus(node) {
                            if self.cluster.gpus[g as usize].target.is_some() {
                                self.try_switch(g);
                            }
                        }
                        self.release_if_changed(node);
                    }
                }
            } else {
                for g in self.node_gpus(node) {
                    if self.cluster.gpus[g as usize].target.is_some() {
                        self.try_switch(g);
                    }
                }
            }
            for g in self.node_gpus(node) {
                self.cluster.refresh(g);
            }
        }
    }

    /// The profiles of the instances that node `node`'s pending changes destroy.
    fn destroyed_profiles(&self, node: u32) -> Vec<usize> {
        let mut out = Vec::new();
        for g in self.node_gpus(node) {
            let gpu = &self.cluster.gpus[g as usize];
            let Some(c) = gpu.target else { continue };
            let target = &self.sc.models[gpu.model as usize].configurations[c as usize].layout;
            for id in Cluster::slots(g) {
                let s = &self.cluster.slices[id as usize];
                if s.compute > 0 && !target.contains(&s.instance) && !out.contains(&s.instance.profile) {
                    out.push(s.instance.profile);
                }
            }
        }
        out
    }

    /// Whether no job runs on node `node`.
    fn node_idle(&self, node: u32) -> bool {
        self.node_idle_before(node, f64::INFINITY)
    }

    /// Whether no job that started before `since` runs on the node.
    fn node_idle_before(&self, node: u32, since: f64) -> bool {
        self.node_gpus(node).all(|g| {
            Cluster::slots(g).all(|id| {
                let s = &self.cluster.slices[id as usize];
                s.job.is_none() || s.started >= since
            })
        })
    }

    /// GPUs of a node.
    fn node_gpus(&self, node: u32) -> std::ops::Range<u32> {
        let k = self.gate.gpus_per_node();
        let n = self.cluster.gpus.len() as u32;
        (node * k).min(n)..((node + 1) * k).min(n)
    }

    /// Whether the node's GPU instances, counted over its GPUs, change in number when
    /// every pending target is reached (what Slurm 22.05 sees as a node's GPU count).
    fn instance_count_changes(&self, node: u32) -> bool {
        let count = |g: u32, c: u16| {
            let gpu = &self.cluster.gpus[g as usize];
            self.sc.models[gpu.model as usize].configurations[c as usize]
                .sizes
                .len()
        };
        let (before, after) = self.node_gpus(node).fold((0, 0), |(b, a), g| {
            let gpu = &self.cluster.gpus[g as usize];
            (
                b + count(g, gpu.config),
                a + count(g, gpu.target.unwrap_or(gpu.config)),
            )
        });
        before != after
    }

    /// Drain: switches GPU `g` to its target once nothing the target destroys is busy.
    fn try_switch(&mut self, g: u32) {
        let Some(c) = self.cluster.gpus[g as usize].target else {
            return;
        };
        let model = self.cluster.gpus[g as usize].model as usize;
        let target = &self.sc.models[model].configurations[c as usize].layout;
        if self.cluster.busy_destroyed(g, target) == 0 {
            self.install(g, c, false);
            let node = self.gate.node_of(g);
            self.numbering.retype(self.sc, &self.cluster, node);
        }
    }

    /// Drain, held node: switches every GPU of the node with a target once no job runs
    /// anywhere on it, and lets the node take jobs again.
    fn try_switch_node(&mut self, node: u32) {
        if !self.node_idle(node) {
            return;
        }
        let gpus = self.node_gpus(node);
        self.node_hold[node as usize] = None;
        for g in gpus {
            if let Some(c) = self.cluster.gpus[g as usize].target {
                self.install(g, c, false);
            }
            for id in Cluster::slots(g) {
                self.cluster.slices[id as usize].draining = false;
            }
            self.cluster.refresh(g);
        }
        self.numbering.retype(self.sc, &self.cluster, node);
    }

    /// Puts GPU `g` in configuration `c`: kept instances keep their slots and jobs;
    /// destroyed ones preempt their jobs; created ones become ready after the
    /// repartition cost (none at time 0).
    fn install(&mut self, g: u32, c: u16, initial: bool) {
        let gi = g as usize;
        let sc = self.sc;
        let model = self.cluster.gpus[gi].model as usize;
        let cm = &sc.models[model];
        let target = &cm.configurations[c as usize].layout;
        if !initial {
            let current: Vec<Instance> = Cluster::slots(g)
                .map(|id| &self.cluster.slices[id as usize])
                .filter(|s| s.compute > 0)
                .map(|s| s.instance)
                .collect();
            let from = smartmig_core::mig::Layout::new(current);
            // Both layouts are configurations the scenario resolved as available; a
            // failure here would be a catalogue bug, so the GPU keeps its layout.
            let Ok(plan) = Plan::between(&cm.model, sc.scenario.cluster.driver, &from, target) else {
                log::error!(
                    "no transition plan on GPU {g} to {}",
                    cm.configurations[c as usize].name
                );
                return;
            };
            if plan.is_empty() {
                self.clear_target(g);
                return;
            }
            for id in Cluster::slots(g) {
                let s = self.cluster.slices[id as usize];
                if s.compute > 0 && plan.destroy.contains(&s.instance) {
                    if s.job.is_some() {
                        self.preempt(id);
                    }
                    let s = &mut self.cluster.slices[id as usize];
                    s.compute = 0;
                    s.ready = false;
                    s.draining = false;
                    s.epoch = s.epoch.wrapping_add(1);
                }
            }
            self.repartitions += 1;
        }
        let delay = match self.opts.semantics {
            Semantics::Preempt => sc.scenario.repartition.penalty_s / 60.0,
            Semantics::Drain => sc.scenario.repartition.reconfigure_s / 60.0,
        };
        for inst in target.instances() {
            let exists = Cluster::slots(g).any(|id| {
                let s = &self.cluster.slices[id as usize];
                s.compute > 0 && s.instance == *inst
            });
            if exists {
                continue;
            }
            let Some(id) = Cluster::slots(g).find(|&id| self.cluster.slices[id as usize].compute == 0) else {
                continue;
            };
            let compute = cm.model.profiles[inst.profile].compute;
            let s = &mut self.cluster.slices[id as usize];
            *s = Slice {
                gpu: g,
                compute,
                instance: *inst,
                job: None,
                started: 0.0,
                epoch: s.epoch.wrapping_add(1),
                ready: initial || delay <= 0.0,
                draining: false,
            };
            if !s.ready {
                let epoch = s.epoch;
                self.push(self.now + delay, Event::SliceReady { slot: id, epoch });
            }
        }
        let gpu = &mut self.cluster.gpus[gi];
        let counts = &mut self.cluster.config_counts[model];
        if !initial {
            counts[gpu.config as usize] -= 1;
        }
        counts[c as usize] += 1;
        gpu.config = c;
        self.clear_target(g);
        let gpu = &mut self.cluster.gpus[gi];
        gpu.rank = self.opts.scheduler.gpu_rank(&cm.configurations[c as usize].sizes);
        self.cluster.refresh(g);
        if !initial {
            self.numbering.relaid(sc, &self.cluster, g);
        }
    }

    /// Forgets GPU `g`'s pending target (it switched, or needs no change).
    fn clear_target(&mut self, g: u32) {
        if self.cluster.gpus[g as usize].target.take().is_some() {
            self.switching -= 1;
        }
    }

    fn sample(&mut self) {
        let busy = self.busy_slices;
        let waiting = self.queue.len();
        if let Some(r) = self.series.as_mut() {
            r.record(
                Sample {
                    t: self.now,
                    busy_slices: busy,
                    waiting,
                },
                &self.cluster.config_counts,
            );
        }
    }

    fn finish(self, policy: String) -> RunResult {
        if self.numbering.broken > 0 {
            log::debug!(
                "{policy}: {} switch(es) found no numbering that kept every busy index",
                self.numbering.broken
            );
        }
        let n = self.jobs.len();
        let horizon = self.makespan.max(1e-12);
        let config_share = self
            .sc
            .models
            .iter()
            .zip(&self.config_integral)
            .flat_map(|(m, row)| {
                let total: f64 = row.iter().sum::<f64>().max(1e-12);
                let prefix = if self.sc.models.len() > 1 {
                    format!("{}/", m.model.key)
                } else {
                    String::new()
                };
                m.configurations
                    .iter()
                    .zip(row)
                    .map(move |(c, v)| (format!("{prefix}{}", c.name), v / total))
            })
            .collect();
        RunResult {
            policy,
            scheduler: self.opts.scheduler,
            semantics: self.opts.semantics,
            seed: self.opts.seed,
            jobs: n,
            completed: self.completed,
            energy_wmin: self.meter.energy_wmin(),
            avg_tardiness_min: if n == 0 {
                0.0
            } else {
                self.tardiness_sum / n as f64
            },
            makespan_min: self.makespan,
            repartitions: self.repartitions,
            relayout_batches: self.relayout_batches,
            mean_full_gpu_min: crate::metrics::mean_full_gpu_min(self.jobs),
            preemptions: self.preemptions,
            utilisation: self.busy_integral / (f64::from(self.sc.total_slices()) * horizon),
            config_share,
            events: self.event_count,
            series: self.series.map(SeriesRecorder::finish),
        }
    }
}
