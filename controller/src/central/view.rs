//! The cluster as the central role sees it in one cycle: managed nodes and their GPUs
//! (layouts from the node agents' reports), which instances are busy (Slurm's GresUsed
//! device indices), the jobs on them, and the pending GPU jobs.

use std::collections::{BTreeMap, HashMap};

use smartmig_core::config::Resolved;
use smartmig_core::mig::{identify, Instance, Layout};

use crate::channel::Report;
use crate::slurm::{parse_gres, read_desired, read_report, JobState, SlurmJob, SlurmNode};

/// One MIG GPU of a managed node.
#[derive(Debug, Clone)]
pub struct GpuView {
    /// Node name.
    pub node: String,
    /// GPU index on the node.
    pub index: u32,
    /// Position of the GPU model in `Resolved::models`.
    pub model: usize,
    /// Current layout.
    pub layout: Layout,
    /// Its configuration index, when the layout is one of the model's configurations.
    pub config: Option<usize>,
    /// Busy instances.
    pub busy: Vec<Instance>,
    /// Jobs running on each busy instance (same order as `busy`).
    pub jobs: Vec<Vec<u32>>,
}

/// One managed node.
#[derive(Debug, Clone)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// Slurm record.
    pub slurm: SlurmNode,
    /// Its agent's last report.
    pub report: Report,
    /// Generation of the desired state now in its `Extra` (0: none).
    pub generation: u64,
    /// Positions of its GPUs in [`View::gpus`].
    pub gpus: Vec<usize>,
}

/// One node as parsed in a cycle, and what it was parsed from.
#[derive(Debug)]
struct Parsed {
    comment: Option<String>,
    gres_used: String,
    jobs: Vec<(u32, String)>,
    report: Report,
    gpus: Vec<GpuView>,
}

impl Parsed {
    /// Parses `node`'s report and GPUs (None: the node has no smartmig report; an error
    /// says why a report or the node's GRES could not be read).
    fn read(resolved: &Resolved, node: &SlurmNode, jobs: &[(u32, &str)]) -> Option<Result<Parsed, String>> {
        let report = match read_report(node)? {
            Ok(r) => r,
            Err(e) => return Some(Err(e.to_string())),
        };
        Some(parse_gpus(resolved, node, &report, jobs).map(|gpus| Parsed {
            comment: node.comment.clone(),
            gres_used: node.gres_used.clone(),
            jobs: jobs.iter().map(|&(j, d)| (j, d.to_string())).collect(),
            report,
            gpus,
        }))
    }

    /// Whether `node`'s record and running jobs are what this was parsed from.
    fn matches(&self, node: &SlurmNode, jobs: &[(u32, &str)]) -> bool {
        self.comment == node.comment
            && self.gres_used == node.gres_used
            && self.jobs.len() == jobs.len()
            && self.jobs.iter().zip(jobs).all(|(a, b)| a.0 == b.0 && a.1 == b.1)
    }
}

/// Each managed node's parsed GPUs from the last cycle (see [`View::build`]); nodes
/// absent from a cycle are dropped.
#[derive(Debug, Default)]
pub struct NodeCache {
    nodes: HashMap<String, Parsed>,
}

/// Everything one cycle decides from.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Managed nodes, by name.
    pub nodes: Vec<NodeView>,
    /// Their MIG GPUs, node by node, by index.
    pub gpus: Vec<GpuView>,
    /// Pending GPU jobs.
    pub pending: Vec<SlurmJob>,
    /// Running GPU jobs.
    pub running: Vec<SlurmJob>,
    /// Problems met while reading (node and why); those nodes are left alone.
    pub problems: Vec<(String, String)>,
    /// Highest generation found in any node's `Extra` or `Comment` (an agent re-announces
    /// the generation it answered even when slurmctld lost the `Extra`).
    pub max_generation: u64,
}

/// The order in which Slurm numbers a node's GPU devices (`IDX`): the node agent writes
/// gres.conf one line per instance, GPU by GPU and by placement start; Slurm's GPU plugin
/// sorts those records by type name, keeping file order within a type (verified against
/// slurmd 22.05 in the e2e test). Returns `(gpu position in the node's list, instance)`.
pub fn slurm_index_order(layouts: &[(&Layout, &[String])]) -> Vec<(usize, Instance)> {
    let mut all: Vec<(String, usize, Instance)> = Vec::new();
    for (g, (layout, names)) in layouts.iter().enumerate() {
        for (i, inst) in layout.instances().iter().enumerate() {
            all.push((names.get(i).cloned().unwrap_or_default(), g, *inst));
        }
    }
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all.into_iter().map(|(_, g, i)| (g, i)).collect()
}

impl View {
    /// Builds the view from Slurm's nodes and jobs; nodes without a readable report from
    /// a smartmig agent are not managed (listed in `problems` when they carry a broken one).
    /// `cache` carries each node's parsed GPUs from one cycle to the next: a node whose
    /// report, GRES in use and running jobs are unchanged is not parsed again.
    pub fn build(
        resolved: &Resolved,
        nodes: Vec<SlurmNode>,
        jobs: Vec<SlurmJob>,
        cache: &mut NodeCache,
    ) -> View {
        let mut view = View::default();
        // The queue can be long: keep its records in place, copy out the few running.
        let running: Vec<SlurmJob> = jobs
            .iter()
            .filter(|j| j.state == JobState::Running)
            .cloned()
            .collect();
        let mut pending = jobs;
        pending.retain(|j| j.state == JobState::Pending);
        // Running jobs by node: (job id, the node's gres detail).
        let mut on_node: HashMap<&str, Vec<(u32, &str)>> = HashMap::new();
        for j in &running {
            for (n, node) in j.nodes.iter().enumerate() {
                if let Some(d) = j.gres_detail.get(n) {
                    on_node.entry(node.as_str()).or_default().push((j.id, d.as_str()));
                }
            }
        }
        let mut previous = std::mem::take(&mut cache.nodes);
        for node in nodes {
            let generation = read_desired(&node)
                .and_then(Result::ok)
                .map_or(0, |d| d.generation);
            view.max_generation = view.max_generation.max(generation);
            let jobs = on_node.get(node.name.as_str()).map_or(&[][..], Vec::as_slice);
            let parsed = match previous.remove(&node.name) {
                Some(hit) if hit.matches(&node, jobs) => hit,
                _ => match Parsed::read(resolved, &node, jobs) {
                    None => continue,
                    Some(Err(why)) => {
                        view.problems.push((node.name.clone(), why));
                        continue;
                    }
                    Some(Ok(p)) => p,
                },
            };
            view.max_generation = view.max_generation.max(parsed.report.generation);
            let start = view.gpus.len();
            view.gpus.extend(parsed.gpus.iter().cloned());
            let name = node.name.clone();
            view.nodes.push(NodeView {
                name: name.clone(),
                report: parsed.report.clone(),
                generation,
                gpus: (start..view.gpus.len()).collect(),
                slurm: node,
            });
            cache.nodes.insert(name, parsed);
        }
        view.pending = pending;
        view.running = running;
        view
    }

    /// Position in `gpus` of each (node, GPU index).
    pub fn gpu_index(&self) -> HashMap<(&str, u32), usize> {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, g)| ((g.node.as_str(), g.index), i))
            .collect()
    }

    /// Instances per Slurm type over all managed GPUs: (total, idle).
    pub fn type_counts(&self, resolved: &Resolved) -> BTreeMap<String, (u32, u32)> {
        let mut out: BTreeMap<String, (u32, u32)> = BTreeMap::new();
        for g in &self.gpus {
            let model = &resolved.models[g.model].model;
            for i in g.layout.instances() {
                let e = out.entry(model.profiles[i.profile].name.clone()).or_default();
                e.0 += 1;
                if !g.busy.contains(i) {
                    e.1 += 1;
                }
            }
        }
        out
    }
}

/// A node's GPUs from its agent's report, with the busy instances (Slurm's GresUsed
/// device indices) and the jobs on them (`jobs`: running jobs and their GRES detail on
/// this node).
fn parse_gpus(
    resolved: &Resolved,
    node: &SlurmNode,
    report: &Report,
    jobs: &[(u32, &str)],
) -> Result<Vec<GpuView>, String> {
    let name = node.name.clone();
    let mut gpus = Vec::new();
    for g in &report.gpus {
        let model = resolved
            .models
            .iter()
            .position(|m| m.model.answers_to(&g.model))
            .ok_or_else(|| format!("GPU {}: model `{}` is not in gpu.models", g.index, g.model))?;
        let m = &resolved.models[model];
        let layout = Layout::parse(&m.model, &g.layout).map_err(|e| format!("GPU {}: {e}", g.index))?;
        gpus.push(GpuView {
            node: name.clone(),
            index: g.index,
            model,
            config: identify(&m.configurations, &m.model, &layout),
            layout,
            busy: Vec::new(),
            jobs: Vec::new(),
        });
    }
    gpus.sort_by_key(|g| g.index);
    let names: Vec<Vec<String>> = gpus
        .iter()
        .map(|g| {
            let model = &resolved.models[g.model].model;
            g.layout
                .instances()
                .iter()
                .map(|i| model.profiles[i.profile].name.clone())
                .collect()
        })
        .collect();
    let order = slurm_index_order(
        &gpus
            .iter()
            .zip(&names)
            .map(|(g, n)| (&g.layout, n.as_slice()))
            .collect::<Vec<_>>(),
    );
    let mark = |gpus: &mut Vec<GpuView>, idx: u32, job: Option<u32>| -> Result<(), String> {
        let &(g, inst) = order
            .get(idx as usize)
            .ok_or_else(|| format!("Slurm device index {idx} is beyond the reported layouts"))?;
        let gpu = &mut gpus[g];
        let pos = match gpu.busy.iter().position(|b| *b == inst) {
            Some(p) => p,
            None => {
                gpu.busy.push(inst);
                gpu.jobs.push(Vec::new());
                gpu.busy.len() - 1
            }
        };
        if let Some(j) = job {
            gpu.jobs[pos].push(j);
        }
        Ok(())
    };
    for used in parse_gres(&node.gres_used, &format!("node {name} GresUsed"))? {
        for idx in used.indices {
            mark(&mut gpus, idx, None)?;
        }
    }
    for (job, detail) in jobs {
        let gres = parse_gres(detail, &format!("job {job} on {name}"))?;
        for g in &gres {
            for &idx in &g.indices {
                let named = order.get(idx as usize).map(|&(gi, inst)| {
                    names[gi][gpus[gi]
                        .layout
                        .instances()
                        .iter()
                        .position(|i| *i == inst)
                        .unwrap_or(0)]
                    .as_str()
                });
                if g.gpu_type.is_empty() || named == Some(g.gpu_type.as_str()) {
                    mark(&mut gpus, idx, Some(*job))?;
                    continue;
                }
                // Slurm keeps a running job's device index across a re-layout, so after
                // one the index may name another type. Which instance of its type the job
                // holds is then unknown: every instance of that type on the node counts
                // as busy (never wrongly idle).
                for (p, &(gi, inst)) in order.iter().enumerate() {
                    let pos = gpus[gi]
                        .layout
                        .instances()
                        .iter()
                        .position(|i| *i == inst)
                        .unwrap_or(0);
                    if names[gi][pos] == g.gpu_type {
                        mark(&mut gpus, p as u32, Some(*job))?;
                    }
                }
            }
        }
    }
    Ok(gpus)
}
