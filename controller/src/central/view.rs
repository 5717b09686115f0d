//! The cluster as the central role sees it in one cycle: managed nodes and their GPUs
//! (layouts from the node agents' reports), which instances are busy (Slurm's GresUsed
//! device indices), the jobs on them, and the pending GPU jobs.

use std::collections::{BTreeMap, HashMap, HashSet};

use smartmig_core::config::Resolved;
use smartmig_core::mig::layout::display_instance;
use smartmig_core::mig::{identify, GpuModel, Instance, Layout, LayoutError};

use super::Untrusted;
use crate::channel::{parse_device_ref, ChannelError, Report};
use crate::slurm::{parse_gres, read_desired, read_report, GresError, JobState, SlurmJob, SlurmNode};

/// Why a node's GPUs cannot be read from its agent's report and Slurm's record; the node
/// is then left alone.
#[derive(Debug, thiserror::Error)]
pub enum NodeReadError {
    /// The report is not a smartmig message this version reads.
    #[error(transparent)]
    Report(#[from] ChannelError),
    /// The report cannot be trusted (its agent cannot read the GPUs or gres.conf).
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    /// A GRES string of the node or of a job on it does not read.
    #[error(transparent)]
    Gres(#[from] GresError),
    /// A GPU of a model the config does not manage.
    #[error("GPU {gpu}: model `{model}` is not in gpu.models")]
    UnknownModel {
        /// The GPU index.
        gpu: u32,
        /// The model the agent reports.
        model: String,
    },
    /// A layout that does not parse against the catalogue.
    #[error("GPU {gpu}: {error}")]
    BadLayout {
        /// The GPU index.
        gpu: u32,
        /// What is wrong with it.
        error: LayoutError,
    },
    /// A device index Slurm gives that the node's GRES does not have.
    #[error("Slurm device index {index} is beyond the node's GRES {gres}")]
    IndexBeyond {
        /// The index.
        index: u32,
        /// The node's GRES.
        gres: String,
    },
}

/// Slurm's counts of the managed types differ from the agent's layouts (a re-layout is
/// under way), so device indices cannot be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountMismatch {
    /// Different counts of one type.
    #[error("Slurm has {slurm} {gpu_type}, the agent reports {agent}")]
    Differs {
        /// The MIG type.
        gpu_type: String,
        /// Slurm's count.
        slurm: u32,
        /// The agent's.
        agent: usize,
    },
    /// A type the agent reports and Slurm does not have.
    #[error("Slurm has no {0}, the agent reports some")]
    Missing(String),
    /// The agent's gres.conf order does not list the devices it reports (a GPU laid out by
    /// hand since the file was written): [`GresOrder::Unknown`].
    #[error("the agent's gres.conf order does not list the devices it reports")]
    Order,
    /// The node's GRES does not read.
    #[error(transparent)]
    Gres(#[from] GresError),
}

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

impl GpuView {
    /// `node/index`, how the status file and logs name the GPU.
    pub fn key(&self) -> String {
        format!("{}/{}", self.node, self.index)
    }
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
    /// Its devices in the order of its gres.conf block, from the report.
    pub gres_order: GresOrder,
    /// Generation of the desired state now in its `Extra` (0: none).
    pub generation: u64,
    /// Positions of its GPUs in [`View::gpus`].
    pub gpus: Vec<usize>,
    /// Its running jobs that Slurm cannot requeue (interactive, or submitted with
    /// `--no-requeue`).
    pub unrequeueable: Vec<u32>,
    /// Its other running jobs that have run longer than `[controller.central]
    /// requeue_max_run_s`: preempt mode does not requeue them either.
    pub long_running: Vec<u32>,
    /// Its running GPU jobs, whatever they hold: MIG instances, a whole GPU, a padding
    /// record (what a change of the node's GPU count would requeue).
    pub running: Vec<u32>,
}

impl NodeView {
    /// Whether preempt mode must leave job `id` running (it may not requeue it).
    pub fn holds(&self, id: u32) -> bool {
        self.unrequeueable.contains(&id) || self.long_running.contains(&id)
    }

    /// Whether the node runs a job preempt mode may not requeue.
    pub fn holds_any(&self) -> bool {
        !self.unrequeueable.is_empty() || !self.long_running.is_empty()
    }
}

/// One node as parsed in a cycle, and what it was parsed from.
#[derive(Debug)]
struct Parsed {
    comment: Option<String>,
    gres: String,
    gres_used: String,
    jobs: Vec<(u32, String)>,
    report: Report,
    gpus: Vec<GpuView>,
    gres_order: GresOrder,
}

impl Parsed {
    /// Parses `node`'s report and GPUs (None: the node has no smartmig report; an error
    /// says why a report or the node's GRES could not be read).
    fn read(
        resolved: &Resolved,
        node: &SlurmNode,
        jobs: &[(u32, &str)],
    ) -> Option<Result<Parsed, NodeReadError>> {
        let report = match read_report(node)? {
            Ok(r) => r,
            Err(e) => return Some(Err(e.into())),
        };
        if let Err(e) = report.gpu_set() {
            return Some(Err(Untrusted::Unreadable(e).into()));
        }
        Some(
            parse_gpus(resolved, node, &report, jobs).map(|(gpus, gres_order)| Parsed {
                comment: node.comment.clone(),
                gres: node.gres.clone(),
                gres_used: node.gres_used.clone(),
                jobs: jobs.iter().map(|&(j, d)| (j, d.to_string())).collect(),
                report,
                gpus,
                gres_order,
            }),
        )
    }

    /// Whether `node`'s record and running jobs are what this was parsed from.
    fn matches(&self, node: &SlurmNode, jobs: &[(u32, &str)]) -> bool {
        // The node's Gres decides which device each index names.
        self.comment == node.comment
            && self.gres == node.gres
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
    /// The records of the nodes that are not managed (no usable report), by name.
    pub others: HashMap<String, SlurmNode>,
    /// Position in `nodes` of each managed node.
    by_name: HashMap<String, usize>,
    /// When the state was read, Unix seconds.
    pub read_at: f64,
}

/// A device of a node: (position of its GPU among the node's, instance).
pub type NodeDevice = (usize, Instance);

/// The devices of a node whose GPUs have `layouts` (in the node's GPU order), in GPU and
/// layout order.
pub fn node_devices<'a>(layouts: impl IntoIterator<Item = &'a Layout>) -> Vec<NodeDevice> {
    layouts
        .into_iter()
        .enumerate()
        .flat_map(|(p, l)| l.instances().iter().map(move |i| (p, *i)))
        .collect()
}

/// The order of a node's devices in its gres.conf block, as its agent reports it, checked
/// once against the devices the same report lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GresOrder {
    /// GPU and placement order: the report carries no order (the block has no `# device
    /// order:` line, or the node no block).
    Placement,
    /// Each of the node's devices once, in this order.
    Listed(Vec<NodeDevice>),
    /// The recorded order does not list the node's devices (a GPU laid out by hand since
    /// the file was written): Slurm numbers them by lines nobody can place.
    Unknown,
}

impl GresOrder {
    /// The devices in gres.conf's order as [`slurm_index_order`] takes them (empty: GPU
    /// and placement order); Err when the order is unknown.
    pub fn within(&self) -> Result<&[NodeDevice], CountMismatch> {
        match self {
            GresOrder::Placement => Ok(&[]),
            GresOrder::Listed(devices) => Ok(devices),
            GresOrder::Unknown => Err(CountMismatch::Order),
        }
    }
}

/// The order in which Slurm numbers a node's GPU devices (`IDX`), as Slurm reports it:
/// the types in the order of the node's `Gres` (slurmctld numbers them so, whatever order
/// gres.conf lists them in), and the devices of one type in gres.conf's order (verified
/// with slurmd 22.05 and mixed-length type names in the e2e tests; with `AutoDetect=off`
/// slurmd sorts no record). `gres` is the node's `Gres`; `layouts` its GPUs with their
/// instances' type names; `within` its devices in gres.conf's order (GPU position,
/// instance), each of the layouts' devices once ([`GresOrder::within`], or a re-layout's
/// order), or empty for GPU and placement order (how the node agent writes gres.conf
/// without padding). Each index is `(gpu position, instance)`, or None for a device of a
/// type smartmig does not manage (a non-MIG GPU); Err when Slurm's counts of the managed
/// types differ from the layouts (a re-layout under way).
pub fn slurm_index_order(
    gres: &str,
    layouts: &[(&Layout, &[String])],
    within: &[NodeDevice],
) -> Result<Vec<Option<NodeDevice>>, CountMismatch> {
    let mut by_type: BTreeMap<&str, Vec<NodeDevice>> = BTreeMap::new();
    for (g, (layout, names)) in layouts.iter().enumerate() {
        for (i, inst) in layout.instances().iter().enumerate() {
            let name = names.get(i).map_or("", String::as_str);
            by_type.entry(name).or_default().push((g, *inst));
        }
    }
    if !within.is_empty() {
        for devices in by_type.values_mut() {
            devices.sort_by_key(|d| within.iter().position(|w| w == d));
        }
    }
    let mut order = Vec::new();
    for entry in parse_gres(gres, "node Gres")? {
        match by_type.remove(entry.gpu_type.as_str()) {
            Some(insts) if insts.len() == entry.count as usize => order.extend(insts.into_iter().map(Some)),
            Some(insts) => {
                return Err(CountMismatch::Differs {
                    gpu_type: entry.gpu_type,
                    slurm: entry.count,
                    agent: insts.len(),
                })
            }
            None => order.extend((0..entry.count).map(|_| None)),
        }
    }
    match by_type.keys().next() {
        Some(t) => Err(CountMismatch::Missing(t.to_string())),
        None => Ok(order),
    }
}

/// The GRES type (profile name) of each of `layout`'s instances, in its order.
pub fn instance_types(model: &GpuModel, layout: &Layout) -> Vec<String> {
    layout
        .instances()
        .iter()
        .map(|i| model.profiles[i.profile].name.clone())
        .collect()
}

/// The job ids `by_node` holds for `node`, removed from it and sorted.
fn take_sorted(by_node: &mut HashMap<&str, Vec<u32>>, node: &str) -> Vec<u32> {
    let mut ids = by_node.remove(node).unwrap_or_default();
    ids.sort_unstable();
    ids
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
        let mut view = View {
            read_at: crate::central::unix_now(),
            ..View::default()
        };
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
        let mut unrequeueable: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut long_running: HashMap<&str, Vec<u32>> = HashMap::new();
        let mut running_on: HashMap<&str, Vec<u32>> = HashMap::new();
        let max_run = resolved.config.controller.central.requeue_max_run_s;
        let too_long = |j: &SlurmJob| max_run.is_some_and(|m| view.read_at - j.start as f64 > m);
        for j in &running {
            for (n, node) in j.nodes.iter().enumerate() {
                running_on.entry(node.as_str()).or_default().push(j.id);
                if let Some(d) = j.gres_detail.get(n) {
                    on_node.entry(node.as_str()).or_default().push((j.id, d.as_str()));
                }
                if !j.requeueable {
                    unrequeueable.entry(node.as_str()).or_default().push(j.id);
                } else if too_long(j) {
                    long_running.entry(node.as_str()).or_default().push(j.id);
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
                    None => {
                        view.others.insert(node.name.clone(), node);
                        continue;
                    }
                    Some(Err(why)) => {
                        view.problems.push((node.name.clone(), why.to_string()));
                        view.others.insert(node.name.clone(), node);
                        continue;
                    }
                    Some(Ok(p)) => p,
                },
            };
            view.max_generation = view.max_generation.max(parsed.report.generation);
            let start = view.gpus.len();
            view.gpus.extend(parsed.gpus.iter().cloned());
            let name = node.name.clone();
            view.by_name.insert(name.clone(), view.nodes.len());
            view.nodes.push(NodeView {
                name: name.clone(),
                report: parsed.report.clone(),
                gres_order: parsed.gres_order.clone(),
                generation,
                gpus: (start..view.gpus.len()).collect(),
                unrequeueable: take_sorted(&mut unrequeueable, &name),
                long_running: take_sorted(&mut long_running, &name),
                running: take_sorted(&mut running_on, &name),
                slurm: node,
            });
            cache.nodes.insert(name, parsed);
        }
        view.pending = pending;
        view.running = running;
        view
    }

    /// A managed node.
    pub fn node(&self, name: &str) -> Option<&NodeView> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }

    /// Any node's Slurm record.
    pub fn record(&self, name: &str) -> Option<&SlurmNode> {
        self.node(name)
            .map(|n| &n.slurm)
            .or_else(|| self.others.get(name))
    }

    /// One GPU of a managed node.
    pub fn gpu(&self, node: &str, index: u32) -> Option<&GpuView> {
        self.node(node)?
            .gpus
            .iter()
            .map(|&g| &self.gpus[g])
            .find(|g| g.index == index)
    }

    /// Position in `gpus` of each (node, GPU index).
    pub fn gpu_index(&self) -> HashMap<(&str, u32), usize> {
        self.gpus
            .iter()
            .enumerate()
            .map(|(i, g)| ((g.node.as_str(), g.index), i))
            .collect()
    }

    /// The Slurm types the managed GPUs have with the GPUs at these positions in `gpus`
    /// in the layouts given.
    pub fn types_with(&self, resolved: &Resolved, layouts: &HashMap<usize, &Layout>) -> HashSet<String> {
        let mut out = HashSet::new();
        for (p, g) in self.gpus.iter().enumerate() {
            let model = &resolved.models[g.model].model;
            let layout = layouts.get(&p).copied().unwrap_or(&g.layout);
            out.extend(
                layout
                    .instances()
                    .iter()
                    .map(|i| model.profiles[i.profile].name.clone()),
            );
        }
        out
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
) -> Result<(Vec<GpuView>, GresOrder), NodeReadError> {
    let name = node.name.clone();
    let mut gpus = Vec::new();
    for g in &report.gpus {
        let model = resolved
            .models
            .iter()
            .position(|m| m.model.answers_to(&g.model))
            .ok_or_else(|| NodeReadError::UnknownModel {
                gpu: g.index,
                model: g.model.clone(),
            })?;
        let m = &resolved.models[model];
        let layout = Layout::parse(&m.model, &g.layout)
            .map_err(|error| NodeReadError::BadLayout { gpu: g.index, error })?;
        // One instance listed twice describes no GPU; refused here, every later step may
        // take each listed instance to be one device.
        let instances = layout.instances();
        if let Some(twice) = instances
            .iter()
            .enumerate()
            .find_map(|(k, i)| instances[..k].contains(i).then_some(i))
        {
            let name = display_instance(&m.model, twice);
            return Err(NodeReadError::BadLayout {
                gpu: g.index,
                error: LayoutError::Overlap {
                    first: name.clone(),
                    second: name,
                },
            });
        }
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
        .map(|g| instance_types(&resolved.models[g.model].model, &g.layout))
        .collect();
    let layouts: Vec<(&Layout, &[String])> = gpus
        .iter()
        .zip(&names)
        .map(|(g, n)| (&g.layout, n.as_slice()))
        .collect();
    let within = gres_order(resolved, &gpus, &report.gres_order);
    let order = within
        .within()
        .and_then(|w| slurm_index_order(&node.gres, &layouts, w));
    drop(layouts);
    let type_of = |gpus: &[GpuView], (gi, inst): NodeDevice| -> String {
        let pos = gpus[gi]
            .layout
            .instances()
            .iter()
            .position(|i| *i == inst)
            .unwrap_or(0);
        names[gi][pos].clone()
    };
    // Every instance of `ty` on the node (every instance for an untyped entry): what
    // counts busy when an index cannot be placed.
    let all_of = |gpus: &[GpuView], ty: &str| -> Vec<NodeDevice> {
        let mut all = node_devices(gpus.iter().map(|g| &g.layout));
        all.retain(|&d| ty.is_empty() || type_of(gpus, d) == ty);
        all
    };
    let mark = |gpus: &mut Vec<GpuView>, (g, inst): NodeDevice, job: Option<u32>| {
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
    };
    // (type, device index, job) of every device Slurm says is in use.
    let mut used: Vec<(String, u32, Option<u32>)> = Vec::new();
    for g in parse_gres(&node.gres_used, &format!("node {name} GresUsed"))? {
        used.extend(g.indices.iter().map(|&i| (g.gpu_type.clone(), i, None)));
    }
    for (job, detail) in jobs {
        for g in parse_gres(detail, &format!("job {job} on {name}"))? {
            used.extend(g.indices.iter().map(|&i| (g.gpu_type.clone(), i, Some(*job))));
        }
    }
    for (ty, idx, job) in used {
        let placed = match &order {
            Ok(order) => match order.get(idx as usize) {
                Some(None) => continue, // a device smartmig does not manage
                Some(Some(at)) if ty.is_empty() || type_of(&gpus, *at) == ty => Some(*at),
                Some(Some(_)) => None,
                None => {
                    return Err(NodeReadError::IndexBeyond {
                        index: idx,
                        gres: node.gres.clone(),
                    })
                }
            },
            Err(_) => None,
        };
        match placed {
            Some(at) => mark(&mut gpus, at, job),
            // Slurm keeps a running job's device index across a re-layout, so after one
            // the index may name another type; and while Slurm and the agent disagree on
            // the counts no index can be placed. Which instance of its type the job holds
            // is then unknown: every instance of that type counts as busy (never wrongly
            // idle).
            None => {
                for at in all_of(&gpus, &ty) {
                    mark(&mut gpus, at, job);
                }
            }
        }
    }
    Ok((gpus, within))
}

/// The order of `gpus`' devices a report's `gres_order` gives (`GPU:instance` each):
/// [`GresOrder::Unknown`] unless it names each of their devices exactly once, so that no
/// later step numbers the node by a device it does not have.
fn gres_order(resolved: &Resolved, gpus: &[GpuView], order: &[String]) -> GresOrder {
    if order.is_empty() {
        return GresOrder::Placement;
    }
    let named: Option<Vec<NodeDevice>> = order
        .iter()
        .map(|r| {
            let (index, label) = parse_device_ref(r)?;
            let p = gpus.iter().position(|g| g.index == index)?;
            let model = &resolved.models[gpus[p].model].model;
            let inst = gpus[p]
                .layout
                .instances()
                .iter()
                .find(|i| display_instance(model, i) == label)?;
            Some((p, *inst))
        })
        .collect();
    let mut devices = node_devices(gpus.iter().map(|g| &g.layout));
    devices.sort_unstable();
    match named {
        Some(named) => {
            let mut sorted = named.clone();
            sorted.sort_unstable();
            // The layouts list each instance once (`parse_gpus`): equal sorted lists name
            // each device once.
            if sorted == devices {
                GresOrder::Listed(named)
            } else {
                GresOrder::Unknown
            }
        }
        None => GresOrder::Unknown,
    }
}
