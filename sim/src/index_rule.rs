//! Slurm's device numbering on a node, and the rule smartmigd keeps with it: Slurm keeps a
//! running job's device index (`IDX`) across a re-layout, so on a node with running jobs
//! a change may go ahead only if every busy instance keeps its index (docs/admin-guide.md,
//! "Re-layout on Slurm 22.05"). Slurm numbers a node's devices type by type in the order
//! of the node's `Gres`, and within a type in gres.conf's order.
//!
//! Two numberings are modelled ([`IndexRule`]): `fixed`, what smartmigd writes: types in
//! the order of the node's `Gres` (by name at the start; smartmigd keeps a type's place,
//! drops a type gone and adds a new one after the others, so that a new type moves no index
//! of the types before it), then GPU, then placement start; under drain a change waits
//! for the rule, under preempt the jobs whose index it moves are preempted, as smartmigd does),
//! `assigned`, where the `Gres` type order and gres.conf's order within a type are
//! chosen at each re-layout so that busy devices keep their indices whenever some choice
//! does (not done by smartmigd: it measures what that would be worth), and with padding
//! records, where every type holds a block of fixed size: `padded` (within a type GPU and
//! placement order, as smartmigd wrote gres.conf with padding until 2026-12-06) and
//! `padded-assigned` (each busy device keeps its position within its type where the
//! type's count allows: smartmigd's `[controller.central] padding = true`).

use smartmig_core::mig::device_order::{kept_order, position_within_type};
use smartmig_core::mig::Instance;

use crate::cluster::Cluster;
use crate::scenario::{IndexRule, ResolvedScenario};

/// One device of a node: (GPU, instance).
pub type Device = (u32, Instance);

/// The numbering of every node's devices and the rule that keeps it.
#[derive(Debug, Clone)]
pub struct Numbering {
    rule: IndexRule,
    /// Each model's profiles ranked by name across the scenario's models.
    ranks: Vec<Vec<u16>>,
    gpus_per_node: u32,
    /// `assigned`: each node's devices in index order (from [`Numbering::start`] on).
    nodes: Vec<Vec<Device>>,
    /// `fixed`: each node's types (ranks) in the order of its `Gres`; a type not listed
    /// follows them, by name (where smartmigd adds a new type).
    types: Vec<Vec<u16>>,
    /// Re-layouts made with no numbering that kept every busy index (a drain's switch,
    /// when jobs started on kept instances after the decision).
    pub broken: u64,
}

impl Numbering {
    /// The numbering of `sc`'s nodes under `rule`.
    pub fn new(sc: &ResolvedScenario, rule: IndexRule, gpus_per_node: u32) -> Numbering {
        let mut names: Vec<&str> = sc
            .models
            .iter()
            .flat_map(|m| m.model.profiles.iter().map(|p| p.name.as_str()))
            .collect();
        names.sort_unstable();
        names.dedup();
        let ranks = sc
            .models
            .iter()
            .map(|m| {
                m.model
                    .profiles
                    .iter()
                    .map(|p| {
                        names
                            .binary_search(&p.name.as_str())
                            .map_or(u16::MAX, |i| i as u16)
                    })
                    .collect()
            })
            .collect();
        let nodes = sc.gpus.len().div_ceil(gpus_per_node as usize);
        Numbering {
            rule,
            ranks,
            gpus_per_node,
            nodes: vec![Vec::new(); nodes],
            types: vec![Vec::new(); nodes],
            broken: 0,
        }
    }

    /// Numbers every node's devices in their initial layouts (`fixed` order: the types
    /// of a node's first `Gres` by name).
    pub fn start(&mut self, sc: &ResolvedScenario, cluster: &Cluster) {
        for node in 0..self.nodes.len() as u32 {
            if self.rule == IndexRule::Fixed {
                self.types[node as usize].clear();
                self.retype(sc, cluster, node);
            } else if self.tracks_order() {
                let now = self.node_now(sc, cluster, node);
                self.nodes[node as usize] = self.fixed_order(sc, &now.layouts);
            }
        }
    }

    /// `fixed`: node `node`'s `Gres` after its GPUs changed (call once the changes made
    /// together have all switched): as smartmigd merges it, a type keeps its place while
    /// the node has an instance of it (or a GPU draining to one), a type gone is dropped
    /// and a new one goes after the others, by name.
    pub fn retype(&mut self, sc: &ResolvedScenario, cluster: &Cluster, node: u32) {
        if self.rule != IndexRule::Fixed {
            return;
        }
        let now = self.node_now(sc, cluster, node);
        let mut present: Vec<u16> = after(sc, &now.layouts, &now.pending)
            .iter()
            .chain(&now.layouts)
            .flat_map(|(g, insts)| insts.iter().map(|i| self.rank(sc, *g, i)))
            .collect();
        present.sort_unstable();
        present.dedup();
        let types = &mut self.types[node as usize];
        types.retain(|r| present.binary_search(r).is_ok());
        for r in present {
            if !types.contains(&r) {
                types.push(r);
            }
        }
    }

    /// Whether changes wait for the rule: `fixed` under drain, `assigned` (`fixed` under
    /// preempt preempts the jobs instead: [`Numbering::moved`]).
    pub fn active(&self, preempt: bool) -> bool {
        match self.rule {
            IndexRule::Fixed | IndexRule::Padded | IndexRule::PaddedAssigned => !preempt,
            IndexRule::Assigned => true,
            IndexRule::Off => false,
        }
    }

    /// Whether, under preempt, the jobs whose device index a change moves are preempted.
    pub fn preempts_moved(&self) -> bool {
        matches!(
            self.rule,
            IndexRule::Fixed | IndexRule::Padded | IndexRule::PaddedAssigned
        )
    }

    /// Whether the node's order is remembered between re-layouts (it is chosen at each).
    fn tracks_order(&self) -> bool {
        matches!(self.rule, IndexRule::Assigned | IndexRule::PaddedAssigned)
    }

    /// The busy devices of node `node` whose index `changes` (the node's GPUs,
    /// configurations) would move, in `fixed` numbering.
    pub fn moved(
        &self,
        sc: &ResolvedScenario,
        cluster: &Cluster,
        node: u32,
        changes: &[(u32, u16)],
    ) -> Vec<Device> {
        let now = self.node_now(sc, cluster, node);
        let layouts = after(sc, &now.layouts, changes);
        if self.rule.padded() {
            return self.padded(sc, &now, &layouts).1;
        }
        let order = self.fixed_order(sc, &layouts);
        now.busy
            .iter()
            .filter(|&&(d, i)| order.contains(&d) && order.get(i) != Some(&d))
            .map(|&(d, _)| d)
            .collect()
    }

    /// GPUs to a node.
    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_node
    }

    /// The changes of `changes` (GPU, configuration; sorted by GPU) after which every busy
    /// instance of their nodes keeps its index: GPU by GPU, a change joins its node's
    /// accepted ones only if the indices still hold with it. A drain under way counts as
    /// made; busy instances a change destroys do not count (their jobs are preempted, or
    /// drain before the switch).
    pub fn keep(&self, sc: &ResolvedScenario, cluster: &Cluster, changes: &[(u32, u16)]) -> Vec<(u32, u16)> {
        self.keep_started_before(sc, cluster, changes, f64::INFINITY)
    }

    /// [`Numbering::keep`] for the jobs that started before `since` (minutes) only: the
    /// others may have their indices moved (preempt mode with a run-time limit requeues
    /// them).
    pub fn keep_started_before(
        &self,
        sc: &ResolvedScenario,
        cluster: &Cluster,
        changes: &[(u32, u16)],
        since: f64,
    ) -> Vec<(u32, u16)> {
        let mut kept = Vec::with_capacity(changes.len());
        let mut rest = changes;
        while let Some(&(first, _)) = rest.first() {
            let node = first / self.gpus_per_node;
            let n = rest
                .iter()
                .take_while(|&&(g, _)| g / self.gpus_per_node == node)
                .count();
            let (here, tail) = rest.split_at(n);
            rest = tail;
            let now = self.node_now_since(sc, cluster, node, since);
            if now.busy.is_empty() {
                kept.extend_from_slice(here);
                continue;
            }
            let mut accepted: Vec<(u32, u16)> = Vec::with_capacity(here.len());
            for &change in here {
                accepted.push(change);
                let pending: Vec<(u32, u16)> = now.pending.iter().chain(&accepted).copied().collect();
                if self
                    .renumber(sc, &now, &after(sc, &now.layouts, &pending))
                    .is_none()
                {
                    accepted.pop();
                }
            }
            kept.extend(accepted);
        }
        kept
    }

    /// Records that GPU `g`'s layout has just changed (after [`Cluster`] holds the new
    /// one): `assigned` renumbers its node, keeping every busy index.
    pub fn relaid(&mut self, sc: &ResolvedScenario, cluster: &Cluster, g: u32) {
        if !self.tracks_order() {
            return;
        }
        let node = g / self.gpus_per_node;
        let now = self.node_now(sc, cluster, node);
        let order = match self.renumber(sc, &now, &now.layouts) {
            Some(order) => order,
            None => {
                self.broken += 1;
                self.fixed_order(sc, &now.layouts)
            }
        };
        self.nodes[node as usize] = order;
    }

    /// Node `node` as it is: its GPUs' instances, the drains under way, its busy devices
    /// and their indices now.
    fn node_now(&self, sc: &ResolvedScenario, cluster: &Cluster, node: u32) -> NodeNow {
        self.node_now_since(sc, cluster, node, f64::INFINITY)
    }

    /// [`Numbering::node_now`], counting as busy only the jobs started before `since`.
    fn node_now_since(&self, sc: &ResolvedScenario, cluster: &Cluster, node: u32, since: f64) -> NodeNow {
        let k = self.gpus_per_node;
        let gpus = node * k..((node + 1) * k).min(cluster.gpus.len() as u32);
        let (mut layouts, mut pending, mut busy_devices) = (Vec::new(), Vec::new(), Vec::new());
        for g in gpus {
            let mut insts = Vec::new();
            for id in Cluster::slots(g) {
                let s = &cluster.slices[id as usize];
                if s.compute > 0 {
                    insts.push(s.instance);
                    if s.job.is_some() && s.started < since {
                        busy_devices.push((g, s.instance));
                    }
                }
            }
            layouts.push((g, insts));
            if let Some(t) = cluster.gpus[g as usize].target {
                pending.push((g, t));
            }
        }
        let order = match self.nodes.get(node as usize) {
            Some(o) if !o.is_empty() && self.tracks_order() => o.clone(),
            _ => self.fixed_order(sc, &layouts),
        };
        let busy = busy_devices
            .into_iter()
            .filter_map(|d| order.iter().position(|x| *x == d).map(|i| (d, i)))
            .collect();
        NodeNow {
            layouts,
            pending,
            busy,
            order,
        }
    }

    /// The devices of `layouts` (one node's) in `fixed` order: type (in the node's `Gres`
    /// order under `fixed`, else by name), GPU, placement start.
    fn fixed_order(&self, sc: &ResolvedScenario, layouts: &[(u32, Vec<Instance>)]) -> Vec<Device> {
        let mut devices: Vec<Device> = layouts
            .iter()
            .flat_map(|(g, insts)| insts.iter().map(move |i| (*g, *i)))
            .collect();
        let node = layouts
            .first()
            .map_or(0, |(g, _)| (g / self.gpus_per_node) as usize);
        let listed: &[u16] = match self.rule {
            IndexRule::Fixed => self.types.get(node).map_or(&[], Vec::as_slice),
            _ => &[],
        };
        let place = |r: u16| {
            listed
                .iter()
                .position(|&t| t == r)
                .unwrap_or(listed.len() + usize::from(r))
        };
        devices.sort_by_key(|&(g, i)| (place(self.rank(sc, g, &i)), g, i.start));
        devices
    }

    fn rank(&self, sc: &ResolvedScenario, g: u32, i: &Instance) -> u16 {
        self.ranks[sc.gpus[g as usize].model][i.profile]
    }

    /// A numbering of `layouts` in which every busy device of `now` still there keeps its
    /// index, or None.
    fn renumber(
        &self,
        sc: &ResolvedScenario,
        now: &NodeNow,
        layouts: &[(u32, Vec<Instance>)],
    ) -> Option<Vec<Device>> {
        let exists = |(g, i): Device| layouts.iter().any(|(h, insts)| *h == g && insts.contains(&i));
        let busy: Vec<(Device, usize)> = now.busy.iter().copied().filter(|&(d, _)| exists(d)).collect();
        match self.rule {
            IndexRule::Off => Some(self.fixed_order(sc, layouts)),
            IndexRule::Fixed => {
                let order = self.fixed_order(sc, layouts);
                busy.iter()
                    .all(|&(d, i)| order.get(i) == Some(&d))
                    .then_some(order)
            }
            IndexRule::Assigned => self.assign(sc, layouts, &busy),
            IndexRule::Padded | IndexRule::PaddedAssigned => {
                let (order, moved) = self.padded(sc, now, layouts);
                moved.is_empty().then_some(order)
            }
        }
    }

    /// Padding records: every type is a block of fixed size (padding fills what its
    /// instances leave), so only a device's position within its type counts. `padded`:
    /// positions in GPU and placement order, as smartmigd wrote gres.conf until
    /// 2026-12-06; a busy device keeps its index when as many devices of its type come
    /// before it.
    /// `padded-assigned`: each busy device still there keeps its position if its type's
    /// new count allows, the others take the free positions in GPU and placement order
    /// ([`kept_order`], as smartmigd writes gres.conf with padding). Returns the order (types in name
    /// order) and the busy devices whose position would name another device.
    fn padded(
        &self,
        sc: &ResolvedScenario,
        now: &NodeNow,
        layouts: &[(u32, Vec<Instance>)],
    ) -> (Vec<Device>, Vec<Device>) {
        let fixed = self.fixed_order(sc, layouts);
        let rank_of = |d: &Device| self.rank(sc, d.0, &d.1);
        // Each busy device's position within its type now.
        let position = |k: usize| {
            let r = rank_of(&now.order[k]);
            now.order[..k].iter().filter(|d| rank_of(d) == r).count()
        };
        if self.rule == IndexRule::Padded {
            let moved = now
                .busy
                .iter()
                .filter(|&&(d, k)| {
                    let r = rank_of(&d);
                    let mut same = fixed.iter().filter(|x| rank_of(x) == r);
                    same.position(|x| *x == d).is_some_and(|p| p != position(k))
                })
                .map(|&(d, _)| d)
                .collect();
            return (fixed, moved);
        }
        let busy = |d: &Device| now.busy.iter().any(|(b, _)| b == d);
        let order = kept_order(&now.order, &fixed, rank_of, busy);
        let moved = now
            .busy
            .iter()
            .filter(|&&(d, k)| position_within_type(&order, &d, rank_of).is_some_and(|p| p != position(k)))
            .map(|&(d, _)| d)
            .collect();
        (order, moved)
    }

    /// `assigned`: an order of the types (each a block of consecutive indices) that puts
    /// every busy device's index inside its type's block; within a block the busy devices
    /// take their indices and the others the free ones in GPU and placement order.
    fn assign(
        &self,
        sc: &ResolvedScenario,
        layouts: &[(u32, Vec<Instance>)],
        busy: &[(Device, usize)],
    ) -> Option<Vec<Device>> {
        let order = self.fixed_order(sc, layouts);
        // Types present, with their devices (in fixed order) and busy indices.
        let mut types: Vec<(u16, Vec<Device>, Vec<usize>)> = Vec::new();
        for &(g, i) in &order {
            let r = self.rank(sc, g, &i);
            match types.last_mut() {
                Some(t) if t.0 == r => t.1.push((g, i)),
                _ => types.push((r, vec![(g, i)], Vec::new())),
            }
        }
        for &((g, i), k) in busy {
            let r = self.rank(sc, g, &i);
            types.iter_mut().find(|t| t.0 == r)?.2.push(k);
        }
        let mut blocks = Vec::with_capacity(types.len());
        if types.len() > 31 || !place(&types, 0, 0, &mut blocks, &mut Default::default()) {
            return None;
        }
        let mut out: Vec<Option<Device>> = vec![None; order.len()];
        let mut offset = 0;
        for t in blocks {
            let (_, devices, _) = &types[t];
            let range = offset..offset + devices.len();
            for &(d, k) in busy.iter().filter(|(d, _)| devices.contains(d)) {
                out[k] = Some(d);
            }
            let free: Vec<usize> = range.clone().filter(|&k| out[k].is_none()).collect();
            let idle = devices.iter().filter(|d| !busy.iter().any(|(b, _)| b == *d));
            for (k, d) in free.into_iter().zip(idle) {
                out[k] = Some(*d);
            }
            offset = range.end;
        }
        out.into_iter().collect()
    }
}

/// Places the types of `types` not in `used` (a bit set) as consecutive blocks from
/// index `at`, each block holding its own busy indices and no other type's; `blocks` gets
/// the order found. The position is the sizes of the used types, so a set that failed
/// once (`failed`) fails again: at most 2^types sets are tried.
fn place(
    types: &[(u16, Vec<Device>, Vec<usize>)],
    used: u32,
    at: usize,
    blocks: &mut Vec<usize>,
    failed: &mut std::collections::HashSet<u32>,
) -> bool {
    if used.count_ones() as usize == types.len() {
        return true;
    }
    if failed.contains(&used) {
        return false;
    }
    for t in 0..types.len() {
        if used & (1 << t) != 0 {
            continue;
        }
        let end = at + types[t].1.len();
        let fits = types.iter().enumerate().all(|(u, x)| {
            let inside = |k: &usize| (at..end).contains(k);
            if u == t {
                x.2.iter().all(inside)
            } else {
                used & (1 << u) != 0 || !x.2.iter().any(inside)
            }
        });
        if fits {
            blocks.push(t);
            if place(types, used | 1 << t, end, blocks, failed) {
                return true;
            }
            blocks.pop();
        }
    }
    failed.insert(used);
    false
}

/// A node as it is now.
struct NodeNow {
    /// Each GPU of the node with its instances.
    layouts: Vec<(u32, Vec<Instance>)>,
    /// Configurations GPUs of the node are draining to.
    pending: Vec<(u32, u16)>,
    /// Busy devices with their indices now.
    busy: Vec<(Device, usize)>,
    /// The node's devices in index order now.
    order: Vec<Device>,
}

/// `layouts` with `changes` (GPU, configuration) made.
fn after(
    sc: &ResolvedScenario,
    layouts: &[(u32, Vec<Instance>)],
    changes: &[(u32, u16)],
) -> Vec<(u32, Vec<Instance>)> {
    layouts
        .iter()
        .map(|(g, insts)| {
            let insts = match changes.iter().rev().find(|c| c.0 == *g) {
                Some(&(_, c)) => sc.models[sc.gpus[*g as usize].model].configurations[c as usize]
                    .layout
                    .instances()
                    .to_vec(),
                None => insts.clone(),
            };
            (*g, insts)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{JobId, Slice, SLOTS};
    use crate::scenario::Scenario;
    use crate::sched::Scheduler;
    use smartmig_core::mig::Layout;

    /// Two A100-40GBs on one node under `rule`.
    fn scenario(rule: &str) -> ResolvedScenario {
        let text = "version = 1\nname = \"t\"\n[cluster]\ngpus = [{ model = \"a100-40gb\", count = 2 }]\n\
                    [workload]\nsource = \"trace\"\ntrace = \"none\"\nformat = \"jobs\"\n";
        Scenario::parse(text, "test", &[format!("repartition.index_rule=\"{rule}\"")]).unwrap()
    }

    /// GPU `g` of `cluster` in `layout`, with a job on each instance in `busy`.
    fn lay(sc: &ResolvedScenario, cluster: &mut Cluster, g: u32, layout: &str, busy: &[&str]) {
        let m = &sc.models[0].model;
        let layout = Layout::parse(m, layout).unwrap();
        let busy = Layout::parse(m, &busy.join(" ")).unwrap();
        for (k, id) in Cluster::slots(g).enumerate() {
            let inst = layout.instances().get(k).copied();
            cluster.slices[id as usize] = Slice {
                gpu: g,
                compute: inst.map_or(0, |i| m.profiles[i.profile].compute),
                instance: inst.unwrap_or(Instance { start: 0, profile: 0 }),
                job: inst
                    .filter(|i| busy.instances().contains(i))
                    .map(|_| JobId::of(k)),
                started: 0.0,
                epoch: 0,
                ready: true,
                draining: false,
            };
        }
        assert!(layout.instances().len() <= SLOTS);
    }

    fn config(sc: &ResolvedScenario, name: &str) -> u16 {
        sc.models[0]
            .configurations
            .iter()
            .position(|c| c.name == name)
            .unwrap() as u16
    }

    /// Both GPUs in c2, a job on GPU 0's 3g.20gb@4 (index 0: 3g.20gb sorts before 4g.20gb).
    fn busy_node(rule: &str) -> (ResolvedScenario, Cluster, Numbering) {
        let sc = scenario(rule);
        let mut cluster = Cluster::new(&sc, Scheduler::Edf.gpu_order());
        lay(&sc, &mut cluster, 0, "4g.20gb@0 3g.20gb@4", &["3g.20gb@4"]);
        lay(&sc, &mut cluster, 1, "4g.20gb@0 3g.20gb@4", &[]);
        let mut numbering = Numbering::new(&sc, sc.scenario.repartition.index_rule, 8);
        numbering.start(&sc, &cluster);
        (sc, cluster, numbering)
    }

    #[test]
    fn fixed_numbering_refuses_a_new_instance_before_the_busy_one_and_keeps_one_after_it() {
        let (sc, cluster, n) = busy_node("fixed");
        let c5 = config(&sc, "c5");
        // GPU 0 to c5 puts its new 3g.20gb@0 at index 0; GPU 1's 3g.20gb come after.
        assert_eq!(n.keep(&sc, &cluster, &[(0, c5), (1, c5)]), vec![(1, c5)]);
        let (sc, cluster, n) = busy_node("off");
        assert_eq!(n.keep(&sc, &cluster, &[(0, c5), (1, c5)]), vec![(0, c5), (1, c5)]);
    }

    #[test]
    fn assigned_numbering_keeps_the_busy_index_by_ordering_within_the_type() {
        let (sc, mut cluster, mut n) = busy_node("assigned");
        let c5 = config(&sc, "c5");
        assert_eq!(n.keep(&sc, &cluster, &[(0, c5), (1, c5)]), vec![(0, c5), (1, c5)]);
        // Made: the job's 3g.20gb@4 keeps index 0, the new 3g.20gb follow it.
        lay(&sc, &mut cluster, 0, "3g.20gb@0 3g.20gb@4", &["3g.20gb@4"]);
        n.relaid(&sc, &cluster, 0);
        let m = &sc.models[0].model;
        let at = |k: usize| {
            let (g, i) = n.nodes[0][k];
            format!("{g}:{}", smartmig_core::mig::layout::display_instance(m, &i))
        };
        assert_eq!(
            (0..4).map(at).collect::<Vec<_>>(),
            ["0:3g.20gb@4", "0:3g.20gb@0", "1:3g.20gb@4", "1:4g.20gb@0"]
        );
        assert_eq!(n.broken, 0);
    }

    #[test]
    fn padded_numbering_lets_other_types_change_and_keeps_a_busy_position_within_its_type() {
        // The job on GPU 0's 3g.20gb@4 (first 3g.20gb). GPU 0 to c5 adds a 3g.20gb@0 before
        // it in placement order: `fixed` and `padded` (GPU and placement order within a type)
        // refuse; `padded-assigned` keeps the job's device first and puts the new one next.
        for (rule, kept) in [("fixed", false), ("padded", false), ("padded-assigned", true)] {
            let (sc, cluster, n) = busy_node(rule);
            let c5 = config(&sc, "c5");
            let got = n.keep(&sc, &cluster, &[(0, c5), (1, c5)]);
            let want = if kept {
                vec![(0, c5), (1, c5)]
            } else {
                vec![(1, c5)]
            };
            assert_eq!(got, want, "{rule}");
        }
        let (sc, _, _) = busy_node("padded");
        let c5 = config(&sc, "c5");
        // A job on GPU 0's 4g.20gb@0 (4g.20gb sorts after 3g.20gb): GPU 1 to c5 gives the
        // node a third 3g.20gb, which moves the 4g.20gb's index in `fixed` numbering only.
        for (rule, kept) in [("fixed", false), ("padded", true), ("padded-assigned", true)] {
            let (sc, mut cluster, n) = busy_node(rule);
            lay(&sc, &mut cluster, 0, "4g.20gb@0 3g.20gb@4", &["4g.20gb@0"]);
            let got = n.keep(&sc, &cluster, &[(1, c5)]);
            assert_eq!(!got.is_empty(), kept, "{rule}: {got:?}");
        }
    }

    #[test]
    fn fixed_numbering_keeps_the_nodes_type_order_drops_a_type_gone_and_adds_a_new_one_last() {
        let sc = scenario("fixed");
        let (c2, c5) = (config(&sc, "c2"), config(&sc, "c5"));
        let m = &sc.models[0].model;
        let types = |n: &Numbering| -> Vec<&str> {
            let name = |r: u16| {
                (0..m.profiles.len())
                    .find(|&p| n.ranks[0][p] == r)
                    .map(|p| m.profiles[p].name.as_str())
            };
            n.types[0].iter().filter_map(|&r| name(r)).collect()
        };
        // Both GPUs whole, a job on GPU 0's 7g.40gb (index 0). GPU 1 to c2 adds 3g.20gb and
        // 4g.20gb after 7g.40gb (by name they would sort before it and take index 0).
        let mut cluster = Cluster::new(&sc, Scheduler::Edf.gpu_order());
        lay(&sc, &mut cluster, 0, "7g.40gb@0", &["7g.40gb@0"]);
        lay(&sc, &mut cluster, 1, "7g.40gb@0", &[]);
        let mut n = Numbering::new(&sc, sc.scenario.repartition.index_rule, 8);
        n.start(&sc, &cluster);
        assert_eq!(types(&n), ["7g.40gb"]);
        assert_eq!(n.keep(&sc, &cluster, &[(1, c2)]), vec![(1, c2)]);
        lay(&sc, &mut cluster, 1, "4g.20gb@0 3g.20gb@4", &[]);
        n.retype(&sc, &cluster, 0);
        assert_eq!(types(&n), ["7g.40gb", "3g.20gb", "4g.20gb"]);
        // A job on GPU 1's 4g.20gb (index 2). GPU 0 to c5 drops 7g.40gb and adds two
        // 3g.20gb: the job's index would be 3, so the change waits; to c2 it would be 3 too.
        lay(&sc, &mut cluster, 0, "7g.40gb@0", &[]);
        lay(&sc, &mut cluster, 1, "4g.20gb@0 3g.20gb@4", &["4g.20gb@0"]);
        assert!(n.keep(&sc, &cluster, &[(0, c5)]).is_empty());
        assert!(n.keep(&sc, &cluster, &[(0, c2)]).is_empty());
        // Made on an idle node, and back: 7g.40gb is gone from the `Gres`, then new again.
        lay(&sc, &mut cluster, 0, "3g.20gb@0 3g.20gb@4", &[]);
        n.retype(&sc, &cluster, 0);
        assert_eq!(types(&n), ["3g.20gb", "4g.20gb"]);
        lay(&sc, &mut cluster, 0, "7g.40gb@0", &[]);
        n.retype(&sc, &cluster, 0);
        assert_eq!(types(&n), ["3g.20gb", "4g.20gb", "7g.40gb"]);
    }

    #[test]
    fn no_numbering_keeps_a_busy_index_beyond_the_new_device_count() {
        for rule in ["fixed", "assigned", "padded", "padded-assigned"] {
            let (sc, mut cluster, n) = busy_node(rule);
            // The job on GPU 1's 4g.20gb@0 (index 3); GPU 0 to c1 leaves 3 devices.
            lay(&sc, &mut cluster, 0, "4g.20gb@0 3g.20gb@4", &[]);
            lay(&sc, &mut cluster, 1, "4g.20gb@0 3g.20gb@4", &["4g.20gb@0"]);
            assert!(
                n.keep(&sc, &cluster, &[(0, config(&sc, "c1"))]).is_empty(),
                "{rule}"
            );
        }
    }
}
