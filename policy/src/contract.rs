//! The policy-file contract: tensor names and shapes, and the `metadata_props` that say
//! what a policy was trained for, so that a loader can refuse a policy that does not fit.
//!
//! Input `mean_field` is f32 `[B, D]`, output `transition_logits` is f32 `[B, K, K]`
//! (row = current configuration, column = next). Every metadata value is a string; the
//! feature layout is one JSON object.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::{Draw, Requeued};
use thiserror::Error;

/// Version of this contract; bump it when the meaning of inputs, outputs or keys changes.
pub const CONTRACT_VERSION: u32 = 1;
/// Name of the graph input.
pub const INPUT_NAME: &str = "mean_field";
/// Name of the graph output.
pub const OUTPUT_NAME: &str = "transition_logits";

/// Metadata key: contract version (integer).
pub const KEY_CONTRACT_VERSION: &str = "smartmig.contract_version";
/// Metadata key: GPU model key, e.g. `a100-40gb`.
pub const KEY_GPU_MODEL: &str = "smartmig.gpu_model";
/// Metadata key: ordered configuration names, comma-separated (`c1,c2,…`).
pub const KEY_CONFIGURATIONS: &str = "smartmig.configurations";
/// Metadata key: [`FeatureLayout`] as JSON.
pub const KEY_FEATURE_LAYOUT: &str = "smartmig.feature_layout";
/// Metadata key: input width D (redundant with the layout; checked against it).
pub const KEY_INPUT_DIM: &str = "smartmig.input_dim";
/// Metadata key: decide after this many arrivals and completions (0: interval only).
pub const KEY_DECISION_EVENTS: &str = "smartmig.decision_events";
/// Metadata key: seconds between decisions (0: events only).
pub const KEY_DECISION_INTERVAL_S: &str = "smartmig.decision_interval_s";
/// Metadata key: top-k used when training.
pub const KEY_TOP_K: &str = "smartmig.top_k";
/// Metadata key: training scenario (name or file).
pub const KEY_TRAINING_SCENARIO: &str = "smartmig.training_scenario";
/// Metadata key: training seed.
pub const KEY_TRAINING_SEED: &str = "smartmig.training_seed";
/// Metadata key: repartition semantics trained under (`preempt` or `drain`).
pub const KEY_SEMANTICS: &str = "smartmig.semantics";
/// Metadata key (optional, default `sample`): how the next configurations are drawn from
/// the rows, `sample` or `apportion` ([`crate::Draw`]).
pub const KEY_DRAW: &str = "smartmig.draw";
/// Metadata key (optional): the deployment guard's verdict on validation days, text
/// starting with `passed` or `failed`; a loader refuses a policy that failed.
pub const KEY_GUARD: &str = "smartmig.guard";
/// Metadata key (optional): for an average of trainings (`smartmig policy average`), the
/// trainings it averages, a JSON list of `{"scenario": …, "seed": …}` (files of 2026-12-05
/// hold the text `N trainings of S: seeds a, b, …`); the training keys then hold member 0's.
pub const KEY_AVERAGED_FROM: &str = "smartmig.averaged_from";
/// Metadata key (optional, default `resume`): what a job requeued by a re-layout kept in
/// the simulations the policy was trained and validated on, `resume` or `restart`
/// ([`crate::Requeued`]); files written before the key were all validated under `resume`.
pub const KEY_REQUEUED: &str = "smartmig.requeued";
/// Metadata key (optional, default `false`): whether training and validation numbered
/// device indices as smartmigd does with `[controller.central] padding = true` (`true` or
/// `false`); files written before the key were all trained without padding.
pub const KEY_PADDING: &str = "smartmig.padding";
/// Metadata key (optional, absent: none): for a preempt policy, the `requeue_max_run_s`
/// (seconds) its training and validation held to: a change that would requeue a job
/// running longer waited for it. Files written before the key were validated without one.
pub const KEY_REQUEUE_MAX_RUN_S: &str = "smartmig.requeue_max_run_s";

/// A requeue limit as messages name it: `60 s`, or `none`.
pub fn requeue_limit_text(limit: Option<f64>) -> String {
    limit.map_or("none".to_string(), |s| format!("{s} s"))
}

/// How the time of day enters the features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeOfDay {
    /// Not a feature.
    None,
    /// Two features: sin and cos of 2π·(minute of day)/1440.
    SinCos,
}

impl TimeOfDay {
    /// Number of features it adds.
    pub fn width(self) -> usize {
        match self {
            TimeOfDay::None => 0,
            TimeOfDay::SinCos => 2,
        }
    }
}

/// The order and binning of the `mean_field` features, so that the code computing them
/// and the policy agree. Features are, in order:
/// 1. `configurations` shares: fraction of the model's GPUs in each configuration;
/// 2. for each slice-size group (one group of all jobs when `slice_sizes` is empty, else
///    one per listed size, in order): the waiting jobs' duration histogram
///    (`duration_edges_min`), then their time-to-deadline histogram (`deadline_edges_min`);
/// 3. with `queue_summary`: waiting jobs per GPU, waiting jobs per GPU in each
///    throughput class 1..4, and the busy share of the model's compute slices
///    ([`QUEUE_SUMMARY_WIDTH`] values);
/// 4. the time-of-day encoding.
///
/// Queue counts are per GPU of the cluster, so one policy reads small and large clusters alike.
///
/// Bin edges are finite lower edges in minutes, increasing: bin i is `[e_i, e_{i+1})`, the
/// last bin is `[e_last, ∞)`, and values below `e_0` count in bin 0 — so a histogram
/// has as many bins as edges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureLayout {
    /// Number of configuration-share entries (K).
    pub configurations: usize,
    /// Lower edges of the duration histogram, minutes.
    pub duration_edges_min: Vec<f64>,
    /// Lower edges of the time-to-deadline histogram, minutes.
    pub deadline_edges_min: Vec<f64>,
    /// Slice sizes the histograms are split by; empty: not split.
    pub slice_sizes: Vec<u8>,
    /// Time-of-day encoding.
    pub time_of_day: TimeOfDay,
    /// Whether the queue summary (see the type's doc) is present.
    #[serde(default)]
    pub queue_summary: bool,
}

/// Features the queue summary adds: waiting, four throughput classes, busy share.
pub const QUEUE_SUMMARY_WIDTH: usize = 6;

/// The bin edges docs/model.md §6 gives (minutes): −100, 0, 0.05, 0.2, 0.5, 1, 5, 10, 20, 30 (, ∞).
pub const PAPER_EDGES_MIN: [f64; 10] = [-100.0, 0.0, 0.05, 0.2, 0.5, 1.0, 5.0, 10.0, 20.0, 30.0];

/// A feature layout no tracker can fill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureLayoutError {
    /// K = 0.
    #[error("configurations must be at least 1")]
    NoConfigurations,
    /// A histogram without bins.
    #[error("{0} is empty")]
    NoEdges(&'static str),
    /// An infinite or NaN edge.
    #[error("{0} has a non-finite edge (the last bin is open already)")]
    NonFiniteEdge(&'static str),
    /// Edges out of order or repeated.
    #[error("{0} is not strictly increasing")]
    NotIncreasing(&'static str),
    /// Repeated or zero slice sizes.
    #[error("slice_sizes must be distinct and positive")]
    SliceSizes,
}

impl FeatureLayout {
    /// The paper's layout for `k` configurations: its bins for both histograms, not split,
    /// sin/cos time of day (D = k + 22).
    pub fn paper(k: usize) -> FeatureLayout {
        FeatureLayout {
            configurations: k,
            duration_edges_min: PAPER_EDGES_MIN.to_vec(),
            deadline_edges_min: PAPER_EDGES_MIN.to_vec(),
            slice_sizes: Vec::new(),
            time_of_day: TimeOfDay::SinCos,
            queue_summary: false,
        }
    }

    /// Number of histogram groups (1 when not split by slice size).
    pub fn groups(&self) -> usize {
        self.slice_sizes.len().max(1)
    }

    /// Input width D.
    pub fn dim(&self) -> usize {
        self.configurations
            + self.groups() * (self.duration_edges_min.len() + self.deadline_edges_min.len())
            + self.queue_summary_width()
            + self.time_of_day.width()
    }

    /// Width of the queue summary (0 when absent).
    pub fn queue_summary_width(&self) -> usize {
        if self.queue_summary {
            QUEUE_SUMMARY_WIDTH
        } else {
            0
        }
    }

    /// Offset of the queue summary.
    pub fn queue_summary_offset(&self) -> usize {
        self.duration_offset(self.groups())
    }

    /// Offset of the duration histogram of group `g` in the feature vector.
    pub fn duration_offset(&self, g: usize) -> usize {
        self.configurations + g * (self.duration_edges_min.len() + self.deadline_edges_min.len())
    }

    /// Offset of the time-to-deadline histogram of group `g` in the feature vector.
    pub fn deadline_offset(&self, g: usize) -> usize {
        self.duration_offset(g) + self.duration_edges_min.len()
    }

    /// Offset of the time-of-day features.
    pub fn time_of_day_offset(&self) -> usize {
        self.queue_summary_offset() + self.queue_summary_width()
    }

    /// The bin of `value` in a histogram with lower `edges` (see the type's doc).
    pub fn bin(edges: &[f64], value: f64) -> usize {
        edges.partition_point(|e| *e <= value).saturating_sub(1)
    }

    /// Checks that the layout is usable: K ≥ 1, edges finite and increasing, sizes distinct.
    pub fn validate(&self) -> Result<(), FeatureLayoutError> {
        if self.configurations == 0 {
            return Err(FeatureLayoutError::NoConfigurations);
        }
        for (name, edges) in [
            ("duration_edges_min", &self.duration_edges_min),
            ("deadline_edges_min", &self.deadline_edges_min),
        ] {
            if edges.is_empty() {
                return Err(FeatureLayoutError::NoEdges(name));
            }
            if edges.iter().any(|e| !e.is_finite()) {
                return Err(FeatureLayoutError::NonFiniteEdge(name));
            }
            if edges.windows(2).any(|w| w[0] >= w[1]) {
                return Err(FeatureLayoutError::NotIncreasing(name));
            }
        }
        let mut sizes = self.slice_sizes.clone();
        sizes.sort_unstable();
        sizes.dedup();
        if sizes.len() != self.slice_sizes.len() || sizes.contains(&0) {
            return Err(FeatureLayoutError::SliceSizes);
        }
        Ok(())
    }

    /// What differs between two layouts, in words (`None` when equal).
    pub fn difference(&self, other: &FeatureLayout) -> Option<String> {
        let d = |a: &dyn fmt::Debug, b: &dyn fmt::Debug| format!("{a:?} vs {b:?}");
        if self.configurations != other.configurations {
            Some(format!(
                "configurations {}",
                d(&self.configurations, &other.configurations)
            ))
        } else if self.duration_edges_min != other.duration_edges_min {
            Some(format!(
                "duration_edges_min {}",
                d(&self.duration_edges_min, &other.duration_edges_min)
            ))
        } else if self.deadline_edges_min != other.deadline_edges_min {
            Some(format!(
                "deadline_edges_min {}",
                d(&self.deadline_edges_min, &other.deadline_edges_min)
            ))
        } else if self.slice_sizes != other.slice_sizes {
            Some(format!(
                "slice_sizes {}",
                d(&self.slice_sizes, &other.slice_sizes)
            ))
        } else if self.queue_summary != other.queue_summary {
            Some(format!(
                "queue_summary {}",
                d(&self.queue_summary, &other.queue_summary)
            ))
        } else if self.time_of_day != other.time_of_day {
            Some(format!(
                "time_of_day {}",
                d(&self.time_of_day, &other.time_of_day)
            ))
        } else {
            None
        }
    }
}

pub use crate::Semantics;

/// When the controller decides: after `events` arrivals and completions and/or every
/// `seconds` (0 disables either).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecisionInterval {
    /// Arrivals and completions between decisions; 0: not event-driven.
    pub events: u32,
    /// Seconds between decisions; 0: not time-driven.
    pub seconds: f64,
}

/// Everything a policy file says about itself, as read from or written to `metadata_props`.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyMetadata {
    /// Contract version ([`CONTRACT_VERSION`] for files this build writes).
    pub contract_version: u32,
    /// GPU model key (`a100-40gb`, …).
    pub gpu_model: String,
    /// Configuration names in action-space order; K is its length.
    pub configurations: Vec<String>,
    /// Order and binning of the input features.
    pub feature_layout: FeatureLayout,
    /// Decision cadence used in training.
    pub decision: DecisionInterval,
    /// Top-k used in training.
    pub top_k: u32,
    /// Training scenario (name or file).
    pub training_scenario: String,
    /// Training seed.
    pub training_seed: u64,
    /// Repartition semantics used in training.
    pub semantics: Semantics,
    /// How next configurations are drawn from the rows.
    pub draw: Draw,
    /// The deployment guard's verdict (`passed: …` / `failed: …`), if validated.
    pub guard: Option<String>,
    /// What a requeued job kept in training and validation.
    pub requeued: Requeued,
    /// Whether training and validation assumed smartmigd's padding records.
    pub padding: bool,
    /// The longest a job requeued in training and validation had run, seconds (preempt;
    /// None: any).
    pub requeue_max_run_s: Option<f64>,
    /// For an average of trainings, which ones (the training fields are member 0's).
    pub averaged_from: Option<Trainings>,
}

/// What a site's smartmigd does that a policy's validation must have assumed
/// ([`PolicyMetadata::refusal`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Site {
    /// What its requeued jobs keep (`[controller.central] requeued`).
    pub requeued: Requeued,
    /// Whether it writes padding records (`[controller.central] padding`).
    pub padding: bool,
    /// The longest a job it requeues may have run, seconds (`[controller.central]
    /// requeue_max_run_s`; None: any).
    pub requeue_max_run_s: Option<f64>,
}

/// One training of a policy: its scenario and seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrainingRef {
    /// Training scenario (name or file).
    pub scenario: String,
    /// Training seed.
    pub seed: u64,
}

/// The trainings an average holds, in the order of its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Trainings(pub Vec<TrainingRef>);

impl Trainings {
    /// The value of [`KEY_AVERAGED_FROM`].
    fn to_value(&self) -> String {
        // Serialising strings and integers cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads [`KEY_AVERAGED_FROM`]: the JSON list, or the text the first averages were
    /// written with, `N trainings of S: seeds a, b, …`.
    fn parse(text: &str) -> Result<Trainings, String> {
        let list = if text.trim_start().starts_with('[') {
            serde_json::from_str::<Vec<TrainingRef>>(text).map_err(|e| e.to_string())?
        } else {
            Self::parse_text(text).ok_or(
                "expected a JSON list of {\"scenario\", \"seed\"} or `N trainings of S: seeds a, b, …`",
            )?
        };
        if list.len() < 2 {
            return Err(format!(
                "an average holds at least two trainings, this names {}",
                list.len()
            ));
        }
        Ok(Trainings(list))
    }

    fn parse_text(text: &str) -> Option<Vec<TrainingRef>> {
        let (count, rest) = text.split_once(" trainings of ")?;
        let (scenario, seeds) = rest.rsplit_once(": seeds ")?;
        let list = seeds
            .split(", ")
            .map(|seed| {
                Some(TrainingRef {
                    scenario: scenario.to_string(),
                    seed: seed.parse().ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        (count.parse::<usize>().ok()? == list.len()).then_some(list)
    }
}

impl fmt::Display for Trainings {
    /// `3 trainings of S: seeds 0, 1, 2`, or `2 trainings: S seed 0; T seed 7` when their
    /// scenarios differ.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = &self.0;
        let Some(first) = list.first() else {
            return write!(f, "no trainings");
        };
        if list.iter().all(|t| t.scenario == first.scenario) {
            let seeds: Vec<String> = list.iter().map(|t| t.seed.to_string()).collect();
            write!(
                f,
                "{} trainings of {}: seeds {}",
                list.len(),
                first.scenario,
                seeds.join(", ")
            )
        } else {
            let each: Vec<String> = list
                .iter()
                .map(|t| format!("{} seed {}", t.scenario, t.seed))
                .collect();
            write!(f, "{} trainings: {}", list.len(), each.join("; "))
        }
    }
}

/// Why a policy's metadata is unreadable or does not match what the loader expects.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ContractError {
    /// A required key is absent.
    #[error("metadata key `{key}` is missing")]
    MissingKey {
        /// The key.
        key: &'static str,
    },
    /// A key whose value cannot be read.
    #[error("metadata key `{key}` = {value:?} is invalid: {reason}")]
    BadValue {
        /// The key.
        key: &'static str,
        /// The value found.
        value: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A contract version this build does not read, or different from the expected one.
    #[error("contract version {found} does not match the expected {expected}")]
    ContractVersion {
        /// In the file.
        found: u32,
        /// Expected.
        expected: u32,
    },
    /// Trained for another GPU model.
    #[error("GPU model `{found}` does not match the expected `{expected}`")]
    GpuModel {
        /// In the file.
        found: String,
        /// Expected.
        expected: String,
    },
    /// Another number of configurations (K).
    #[error("K = {found} configurations does not match the expected K = {expected}")]
    ConfigurationCount {
        /// In the file.
        found: usize,
        /// Expected.
        expected: usize,
    },
    /// Same K, other names or order.
    #[error("configuration list [{found}] does not match the expected [{expected}]")]
    Configurations {
        /// In the file, comma-separated.
        found: String,
        /// Expected, comma-separated.
        expected: String,
    },
    /// Another feature layout (and usually another D).
    #[error(
        "feature layout (D = {found_dim}) does not match the expected one (D = {expected_dim}): {difference}"
    )]
    FeatureLayout {
        /// D of the file's layout.
        found_dim: usize,
        /// D of the expected layout.
        expected_dim: usize,
        /// The first field that differs.
        difference: String,
    },
    /// The graph's inputs or outputs disagree with the contract or the metadata.
    #[error("graph {what}: {reason}")]
    Graph {
        /// `input` or `output`.
        what: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl PolicyMetadata {
    /// Metadata for a policy over `configurations` of `gpu_model` under this build's
    /// contract: smartmig's feature layout, the paper's cadence (every 5 events, top-3),
    /// sampled draws, no guard verdict; other fields by struct update.
    pub fn new(
        gpu_model: impl Into<String>,
        configurations: Vec<String>,
        semantics: Semantics,
        requeued: Requeued,
    ) -> PolicyMetadata {
        PolicyMetadata {
            contract_version: CONTRACT_VERSION,
            gpu_model: gpu_model.into(),
            feature_layout: crate::features::layout(configurations.len()),
            configurations,
            decision: DecisionInterval {
                events: 5,
                seconds: 0.0,
            },
            top_k: 3,
            training_scenario: String::new(),
            training_seed: 0,
            semantics,
            draw: Draw::Sample,
            guard: None,
            requeued,
            padding: false,
            requeue_max_run_s: None,
            averaged_from: None,
        }
    }

    /// Number of configurations K.
    pub fn k(&self) -> usize {
        self.configurations.len()
    }

    /// Input width D.
    pub fn input_dim(&self) -> usize {
        self.feature_layout.dim()
    }

    /// Internal consistency: K ≥ 1, distinct names, layout valid and of K shares, 1 ≤ top_k.
    pub fn validate(&self) -> Result<(), ContractError> {
        let names = self.configurations.join(",");
        if self.configurations.is_empty()
            || self
                .configurations
                .iter()
                .any(|c| c.is_empty() || c.contains(','))
        {
            return Err(bad(
                KEY_CONFIGURATIONS,
                &names,
                "names must be non-empty and comma-free",
            ));
        }
        let mut sorted = self.configurations.clone();
        sorted.sort();
        sorted.dedup();
        if sorted.len() != self.configurations.len() {
            return Err(bad(KEY_CONFIGURATIONS, &names, "names repeat"));
        }
        let layout_json = || serde_json::to_string(&self.feature_layout).unwrap_or_default();
        self.feature_layout
            .validate()
            .map_err(|reason| bad(KEY_FEATURE_LAYOUT, &layout_json(), &reason.to_string()))?;
        if self.feature_layout.configurations != self.k() {
            return Err(bad(
                KEY_FEATURE_LAYOUT,
                &layout_json(),
                &format!(
                    "{} configuration shares for K = {}",
                    self.feature_layout.configurations,
                    self.k()
                ),
            ));
        }
        if self.top_k == 0 {
            return Err(bad(KEY_TOP_K, "0", "must be at least 1"));
        }
        if !(self.decision.seconds.is_finite() && self.decision.seconds >= 0.0) {
            return Err(bad(
                KEY_DECISION_INTERVAL_S,
                &self.decision.seconds.to_string(),
                "must be finite and ≥ 0",
            ));
        }
        Ok(())
    }

    /// The `metadata_props` entries, in a fixed order.
    pub fn to_props(&self) -> Vec<(String, String)> {
        let layout = serde_json::to_string(&self.feature_layout)
            // Serialising plain numbers, strings and enums cannot fail.
            .unwrap_or_default();
        [
            (KEY_CONTRACT_VERSION, self.contract_version.to_string()),
            (KEY_GPU_MODEL, self.gpu_model.clone()),
            (KEY_CONFIGURATIONS, self.configurations.join(",")),
            (KEY_FEATURE_LAYOUT, layout),
            (KEY_INPUT_DIM, self.input_dim().to_string()),
            (KEY_DECISION_EVENTS, self.decision.events.to_string()),
            (KEY_DECISION_INTERVAL_S, self.decision.seconds.to_string()),
            (KEY_TOP_K, self.top_k.to_string()),
            (KEY_TRAINING_SCENARIO, self.training_scenario.clone()),
            (KEY_TRAINING_SEED, self.training_seed.to_string()),
            (KEY_SEMANTICS, self.semantics.as_str().to_string()),
            (KEY_DRAW, self.draw.as_str().to_string()),
            (KEY_REQUEUED, self.requeued.as_str().to_string()),
            (KEY_PADDING, self.padding.to_string()),
        ]
        .into_iter()
        .chain(self.guard.clone().map(|g| (KEY_GUARD, g)))
        .chain(
            self.requeue_max_run_s
                .map(|s| (KEY_REQUEUE_MAX_RUN_S, s.to_string())),
        )
        .chain(
            self.averaged_from
                .as_ref()
                .map(|t| (KEY_AVERAGED_FROM, t.to_value())),
        )
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Reads the metadata through a key lookup (ONNX Runtime's custom metadata, or a list
    /// of pairs), then checks its internal consistency.
    pub fn from_props(get: impl Fn(&str) -> Option<String>) -> Result<PolicyMetadata, ContractError> {
        let req = |key: &'static str| get(key).ok_or(ContractError::MissingKey { key });
        let contract_version = parse(KEY_CONTRACT_VERSION, req(KEY_CONTRACT_VERSION)?)?;
        if contract_version != CONTRACT_VERSION {
            // Refuse before reading keys whose meaning may have changed.
            return Err(ContractError::ContractVersion {
                found: contract_version,
                expected: CONTRACT_VERSION,
            });
        }
        let layout_text = req(KEY_FEATURE_LAYOUT)?;
        let feature_layout: FeatureLayout = serde_json::from_str(&layout_text)
            .map_err(|e| bad(KEY_FEATURE_LAYOUT, &layout_text, &e.to_string()))?;
        let configurations: Vec<String> = req(KEY_CONFIGURATIONS)?
            .split(',')
            .map(|s| s.trim().to_string())
            .collect();
        let semantics_text = req(KEY_SEMANTICS)?;
        let semantics = match semantics_text.as_str() {
            "preempt" => Semantics::Preempt,
            "drain" => Semantics::Drain,
            _ => {
                return Err(bad(
                    KEY_SEMANTICS,
                    &semantics_text,
                    "expected `preempt` or `drain`",
                ))
            }
        };
        let meta = PolicyMetadata {
            contract_version,
            gpu_model: req(KEY_GPU_MODEL)?,
            configurations,
            feature_layout,
            decision: DecisionInterval {
                events: parse(KEY_DECISION_EVENTS, req(KEY_DECISION_EVENTS)?)?,
                seconds: parse(KEY_DECISION_INTERVAL_S, req(KEY_DECISION_INTERVAL_S)?)?,
            },
            top_k: parse(KEY_TOP_K, req(KEY_TOP_K)?)?,
            training_scenario: req(KEY_TRAINING_SCENARIO)?,
            training_seed: parse(KEY_TRAINING_SEED, req(KEY_TRAINING_SEED)?)?,
            semantics,
            draw: match get(KEY_DRAW) {
                None => Draw::Sample,
                Some(text) => Draw::parse(text.trim())
                    .ok_or_else(|| bad(KEY_DRAW, &text, "expected `sample` or `apportion`"))?,
            },
            guard: get(KEY_GUARD),
            averaged_from: get(KEY_AVERAGED_FROM)
                .map(|text| Trainings::parse(&text).map_err(|why| bad(KEY_AVERAGED_FROM, &text, &why)))
                .transpose()?,
            requeued: match get(KEY_REQUEUED) {
                None => Requeued::Resume,
                Some(text) => Requeued::parse(text.trim())
                    .ok_or_else(|| bad(KEY_REQUEUED, &text, "expected `resume` or `restart`"))?,
            },
            padding: match get(KEY_PADDING) {
                None => false,
                Some(text) => text
                    .trim()
                    .parse()
                    .map_err(|_| bad(KEY_PADDING, &text, "expected `true` or `false`"))?,
            },
            requeue_max_run_s: get(KEY_REQUEUE_MAX_RUN_S)
                .map(|text| {
                    text.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| bad(KEY_REQUEUE_MAX_RUN_S, &text, "expected seconds ≥ 0"))
                })
                .transpose()?,
        };
        meta.validate()?;
        let dim_text = req(KEY_INPUT_DIM)?;
        let dim: usize = parse(KEY_INPUT_DIM, dim_text.clone())?;
        if dim != meta.input_dim() {
            return Err(bad(
                KEY_INPUT_DIM,
                &dim_text,
                &format!("the feature layout gives D = {}", meta.input_dim()),
            ));
        }
        Ok(meta)
    }

    /// Reads the metadata from `(key, value)` pairs.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<PolicyMetadata, ContractError> {
        PolicyMetadata::from_props(|key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    }

    /// Why the policy must not be deployed: its guard verdict, when it failed.
    pub fn guard_failed(&self) -> Option<&str> {
        self.guard.as_deref().filter(|g| g.starts_with("failed"))
    }

    /// Why the policy must not run at `site`: its guard failed; or it repartitions by
    /// requeueing and was validated where requeued jobs resume while the site's start over
    /// (such a policy requeues far too often for jobs that lose their work), or where they
    /// start over but only jobs younger than a `requeue_max_run_s` the site does not keep
    /// were requeued (the site would throw away work its validation never lost); or it was
    /// validated with padding records the site does not write (without them, most of the
    /// changes it counts on wait for idle nodes).
    pub fn refusal(&self, site: Site) -> Option<String> {
        if let Some(why) = self.guard_failed() {
            return Some(format!("its deployment guard {why}"));
        }
        if self.semantics == Semantics::Preempt
            && self.requeued == Requeued::Resume
            && site.requeued == Requeued::Restart
        {
            return Some(
                "it was validated where requeued jobs resume from a checkpoint, and \
                 controller.central.requeued = \"restart\" says this site's jobs start over \
                 (set requeued = \"resume\" if they checkpoint, use a policy trained with \
                 --set repartition.requeued=restart, or run drain mode)"
                    .to_string(),
            );
        }
        if let (Semantics::Preempt, Requeued::Restart, Some(held)) =
            (self.semantics, site.requeued, self.requeue_max_run_s)
        {
            if site.requeue_max_run_s.is_none_or(|s| s > held) {
                let site_cap = site
                    .requeue_max_run_s
                    .map_or("unset".to_string(), |s| format!("{s} s"));
                return Some(format!(
                    "it was validated requeueing only jobs that had run at most \
                     requeue_max_run_s = {held} s, and this site's jobs start over with \
                     controller.central.requeue_max_run_s {site_cap}: it would requeue jobs \
                     whose work its validation never lost (set requeue_max_run_s = {held} or \
                     less, or use a policy trained with this site's limit)"
                ));
            }
        }
        (self.padding && !site.padding).then(|| {
            "it was validated with padding records, and [controller.central] padding = false \
             (set padding = true, or use a policy trained without padding)"
                .to_string()
        })
    }

    /// Whether a policy with this metadata can serve where `expected` is configured.
    ///
    /// Checks, in order: contract version, GPU model, K, configuration list, feature layout.
    /// Decision cadence, top-k, training scenario, seed and semantics are informational: a
    /// site may run a policy with other settings than it was trained with.
    pub fn check_against(&self, expected: &PolicyMetadata) -> Result<(), ContractError> {
        if self.contract_version != expected.contract_version {
            return Err(ContractError::ContractVersion {
                found: self.contract_version,
                expected: expected.contract_version,
            });
        }
        if self.gpu_model != expected.gpu_model {
            return Err(ContractError::GpuModel {
                found: self.gpu_model.clone(),
                expected: expected.gpu_model.clone(),
            });
        }
        if self.k() != expected.k() {
            return Err(ContractError::ConfigurationCount {
                found: self.k(),
                expected: expected.k(),
            });
        }
        if self.configurations != expected.configurations {
            return Err(ContractError::Configurations {
                found: self.configurations.join(","),
                expected: expected.configurations.join(","),
            });
        }
        if let Some(difference) = self.feature_layout.difference(&expected.feature_layout) {
            return Err(ContractError::FeatureLayout {
                found_dim: self.input_dim(),
                expected_dim: expected.input_dim(),
                difference,
            });
        }
        Ok(())
    }
}

fn bad(key: &'static str, value: &str, reason: &str) -> ContractError {
    ContractError::BadValue {
        key,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

fn parse<T: std::str::FromStr>(key: &'static str, value: String) -> Result<T, ContractError>
where
    T::Err: fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| ContractError::BadValue {
        key,
        reason: e.to_string(),
        value,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A metadata record for an A100 policy with the paper's layout.
    pub(crate) fn sample_metadata() -> PolicyMetadata {
        let configurations: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
        PolicyMetadata {
            contract_version: CONTRACT_VERSION,
            gpu_model: "a100-40gb".into(),
            feature_layout: FeatureLayout::paper(configurations.len()),
            configurations,
            decision: DecisionInterval {
                events: 5,
                seconds: 60.0,
            },
            top_k: 3,
            training_scenario: "etc/scenarios/paper-a100x8.toml".into(),
            training_seed: 42,
            semantics: Semantics::Preempt,
            draw: Draw::Sample,
            guard: None,
            requeued: Requeued::Resume,
            padding: false,
            requeue_max_run_s: None,
            averaged_from: None,
        }
    }

    /// A site whose requeued jobs keep `requeued`, without padding.
    fn site(requeued: Requeued) -> Site {
        Site {
            requeued,
            padding: false,
            requeue_max_run_s: None,
        }
    }

    #[test]
    fn paper_layout_has_d_34_and_offsets_tile_the_vector() {
        let l = FeatureLayout::paper(12);
        assert_eq!(l.dim(), 12 + 10 + 10 + 2);
        assert_eq!(l.duration_offset(0), 12);
        assert_eq!(l.deadline_offset(0), 22);
        assert_eq!(l.time_of_day_offset(), 32);
        let split = FeatureLayout {
            slice_sizes: vec![1, 2, 3, 4, 7],
            ..l
        };
        assert_eq!(split.dim(), 12 + 5 * 20 + 2);
        assert_eq!(split.time_of_day_offset() + 2, split.dim());
    }

    #[test]
    fn bins_follow_the_lower_edge_convention() {
        let e = PAPER_EDGES_MIN;
        assert_eq!(FeatureLayout::bin(&e, -500.0), 0);
        assert_eq!(FeatureLayout::bin(&e, -100.0), 0);
        assert_eq!(FeatureLayout::bin(&e, 0.0), 1);
        assert_eq!(FeatureLayout::bin(&e, 0.1), 2);
        assert_eq!(FeatureLayout::bin(&e, 30.0), 9);
        assert_eq!(FeatureLayout::bin(&e, 1e9), 9);
    }

    #[test]
    fn props_round_trip() {
        let m = sample_metadata();
        let props = m.to_props();
        assert_eq!(PolicyMetadata::from_pairs(&props), Ok(m.clone()));
        let drain = PolicyMetadata {
            semantics: Semantics::Drain,
            draw: Draw::Apportion,
            guard: Some("failed: -0.3% ± 0.2% over static-best".into()),
            requeued: Requeued::Restart,
            padding: true,
            requeue_max_run_s: Some(60.0),
            averaged_from: Some(Trainings(
                [("paper.toml", 0), ("paper; night.toml", 1)]
                    .map(|(scenario, seed)| TrainingRef {
                        scenario: scenario.into(),
                        seed,
                    })
                    .to_vec(),
            )),
            ..m.clone()
        };
        assert_eq!(PolicyMetadata::from_pairs(&drain.to_props()), Ok(drain.clone()));
        assert_eq!(
            drain.guard_failed(),
            Some("failed: -0.3% ± 0.2% over static-best")
        );
        // Files written before the optional keys read as sampled, unvalidated, and
        // trained where requeued jobs resume (the only model then).
        let old: Vec<(String, String)> = drain
            .to_props()
            .into_iter()
            .filter(|(k, _)| {
                ![
                    KEY_DRAW,
                    KEY_GUARD,
                    KEY_REQUEUED,
                    KEY_PADDING,
                    KEY_REQUEUE_MAX_RUN_S,
                    KEY_AVERAGED_FROM,
                ]
                .contains(&k.as_str())
            })
            .collect();
        let read = PolicyMetadata::from_pairs(&old).unwrap();
        assert_eq!(
            (
                read.draw,
                read.guard_failed(),
                read.requeued,
                read.padding,
                read.requeue_max_run_s,
                read.averaged_from.clone()
            ),
            (Draw::Sample, None, Requeued::Resume, false, None, None)
        );
        // The first averages named their trainings as text.
        let first_average = [(
            KEY_AVERAGED_FROM.to_string(),
            "3 trainings of paper.toml: seeds 0, 1, 2".to_string(),
        )];
        let read = PolicyMetadata::from_pairs(&[m.to_props(), first_average.to_vec()].concat()).unwrap();
        let seeds: Vec<u64> = read
            .averaged_from
            .iter()
            .flat_map(|t| t.0.iter().map(|t| t.seed))
            .collect();
        assert_eq!(seeds, [0, 1, 2]);
        for (text, why) in [
            (
                "3 trainings of paper.toml: seeds 0, 1",
                "or `N trainings of S: seeds a, b, …`",
            ),
            (r#"[{"scenario": "paper.toml", "seed": -1}]"#, "invalid value"),
            (r#"[{"scenario": "paper.toml", "seed": 1}]"#, "names 1"),
        ] {
            let pairs = [
                m.to_props(),
                vec![(KEY_AVERAGED_FROM.to_string(), text.to_string())],
            ]
            .concat();
            let e = PolicyMetadata::from_pairs(&pairs).unwrap_err().to_string();
            assert!(
                e.contains("smartmig.averaged_from") && e.contains(why),
                "{text}: {e}"
            );
        }
        for (key, value, expected) in [
            (KEY_REQUEUED, "checkpoint", "`resume` or `restart`"),
            (KEY_PADDING, "on", "`true` or `false`"),
            (KEY_REQUEUE_MAX_RUN_S, "-1", "seconds ≥ 0"),
            (KEY_REQUEUE_MAX_RUN_S, "a minute", "seconds ≥ 0"),
        ] {
            let mut bad_value = m.to_props();
            bad_value.retain(|(k, _)| k != key);
            bad_value.push((key.into(), value.into()));
            let e = PolicyMetadata::from_pairs(&bad_value).unwrap_err().to_string();
            assert!(e.contains(key) && e.contains(expected), "{e}");
        }
    }

    #[test]
    fn a_preempt_policy_validated_where_jobs_resume_is_refused_where_they_restart() {
        let resumed = sample_metadata();
        assert_eq!(resumed.refusal(site(Requeued::Resume)), None);
        let why = resumed.refusal(site(Requeued::Restart)).unwrap_or_default();
        assert!(why.contains("requeued = \"restart\""), "{why}");
        // Trained where jobs restart, it runs at either site; a drain policy requeues nothing.
        let restarted = PolicyMetadata {
            requeued: Requeued::Restart,
            ..resumed.clone()
        };
        assert_eq!(restarted.refusal(site(Requeued::Restart)), None);
        let drain = PolicyMetadata {
            semantics: Semantics::Drain,
            ..resumed.clone()
        };
        assert_eq!(drain.refusal(site(Requeued::Restart)), None);
        // A failed guard refuses it everywhere, and says so first.
        let failed = PolicyMetadata {
            guard: Some("failed: -1.0% ± 0.5%".into()),
            ..drain
        };
        assert_eq!(
            failed.refusal(site(Requeued::Resume)).as_deref(),
            Some("its deployment guard failed: -1.0% ± 0.5%")
        );
    }

    #[test]
    fn a_preempt_policy_validated_with_a_requeue_limit_runs_where_jobs_restart_only_under_that_limit() {
        let limited = PolicyMetadata {
            requeued: Requeued::Restart,
            requeue_max_run_s: Some(60.0),
            ..sample_metadata()
        };
        let at = |requeued, cap| Site {
            requeue_max_run_s: cap,
            ..site(requeued)
        };
        let why = limited.refusal(at(Requeued::Restart, None)).unwrap_or_default();
        assert!(
            why.contains("requeue_max_run_s = 60 s") && why.contains("requeue_max_run_s unset"),
            "{why}"
        );
        let why = limited
            .refusal(at(Requeued::Restart, Some(300.0)))
            .unwrap_or_default();
        assert!(why.contains("requeue_max_run_s 300 s"), "{why}");
        // The same limit or a tighter one requeues only work its validation could lose.
        assert_eq!(limited.refusal(at(Requeued::Restart, Some(60.0))), None);
        assert_eq!(limited.refusal(at(Requeued::Restart, Some(30.0))), None);
        // Where jobs resume a requeue loses no work, and a drain policy requeues nothing.
        assert_eq!(limited.refusal(at(Requeued::Resume, None)), None);
        let drain = PolicyMetadata {
            semantics: Semantics::Drain,
            ..limited.clone()
        };
        assert_eq!(drain.refusal(at(Requeued::Restart, None)), None);
    }

    #[test]
    fn a_policy_validated_with_padding_runs_only_where_smartmigd_writes_padding() {
        let padded = PolicyMetadata {
            semantics: Semantics::Drain,
            padding: true,
            ..sample_metadata()
        };
        let why = padded.refusal(site(Requeued::Restart)).unwrap_or_default();
        assert!(why.contains("padding = false"), "{why}");
        let padding_site = Site {
            padding: true,
            ..site(Requeued::Restart)
        };
        assert_eq!(padded.refusal(padding_site), None);
        // One validated without padding runs at a padding site too (padding only lets
        // more changes through).
        let unpadded = PolicyMetadata {
            padding: false,
            ..padded
        };
        assert_eq!(unpadded.refusal(padding_site), None);
    }

    #[test]
    fn unreadable_metadata_names_the_key() {
        let m = sample_metadata();
        let without = |key: &str| -> Vec<(String, String)> {
            m.to_props().into_iter().filter(|(k, _)| k != key).collect()
        };
        assert_eq!(
            PolicyMetadata::from_pairs(&without(KEY_GPU_MODEL)),
            Err(ContractError::MissingKey { key: KEY_GPU_MODEL })
        );
        let with = |key: &str, value: &str| -> Vec<(String, String)> {
            let mut p = without(key);
            p.push((key.to_string(), value.to_string()));
            p
        };
        let err = PolicyMetadata::from_pairs(&with(KEY_TOP_K, "three")).unwrap_err();
        assert!(
            matches!(err, ContractError::BadValue { key: KEY_TOP_K, .. }),
            "{err}"
        );
        let err =
            PolicyMetadata::from_pairs(&with(KEY_FEATURE_LAYOUT, "{\"configurations\":12}")).unwrap_err();
        assert!(
            matches!(
                err,
                ContractError::BadValue {
                    key: KEY_FEATURE_LAYOUT,
                    ..
                }
            ),
            "{err}"
        );
        let err = PolicyMetadata::from_pairs(&with(KEY_INPUT_DIM, "30")).unwrap_err();
        assert!(err.to_string().contains("D = 34"), "{err}");
        let err = PolicyMetadata::from_pairs(&with(KEY_CONTRACT_VERSION, "2")).unwrap_err();
        assert_eq!(
            err,
            ContractError::ContractVersion {
                found: 2,
                expected: CONTRACT_VERSION
            }
        );
        let err = PolicyMetadata::from_pairs(&with(
            KEY_CONFIGURATIONS,
            "c1,c2,c2,c4,c5,c6,c7,c8,c9,c10,c11,c12",
        ))
        .unwrap_err();
        assert!(err.to_string().contains("repeat"), "{err}");
    }

    #[test]
    fn check_against_names_the_field_that_differs() {
        let want = sample_metadata();
        assert_eq!(want.check_against(&want), Ok(()));
        // Informational fields do not matter.
        let other_training = PolicyMetadata {
            top_k: 5,
            training_seed: 1,
            semantics: Semantics::Drain,
            ..want.clone()
        };
        assert_eq!(other_training.check_against(&want), Ok(()));

        let v2 = PolicyMetadata {
            contract_version: 2,
            ..want.clone()
        };
        assert!(matches!(
            v2.check_against(&want),
            Err(ContractError::ContractVersion { found: 2, .. })
        ));

        let h100 = PolicyMetadata {
            gpu_model: "h100-80gb".into(),
            ..want.clone()
        };
        let err = h100.check_against(&want).unwrap_err();
        assert!(
            err.to_string().contains("h100-80gb") && err.to_string().contains("a100-40gb"),
            "{err}"
        );

        let mut k11 = want.clone();
        k11.configurations.pop();
        k11.feature_layout.configurations = 11;
        assert_eq!(
            k11.check_against(&want),
            Err(ContractError::ConfigurationCount {
                found: 11,
                expected: 12
            })
        );

        let mut swapped = want.clone();
        swapped.configurations.swap(0, 1);
        assert!(matches!(
            swapped.check_against(&want),
            Err(ContractError::Configurations { .. })
        ));

        let mut split = want.clone();
        split.feature_layout.slice_sizes = vec![1, 2, 3, 4, 7];
        let err = split.check_against(&want).unwrap_err();
        assert!(
            matches!(&err, ContractError::FeatureLayout { found_dim: 114, expected_dim: 34, difference } if difference.starts_with("slice_sizes")),
            "{err}"
        );
        let mut rebinned = want.clone();
        rebinned.feature_layout.deadline_edges_min[3] = 0.25;
        let err = rebinned.check_against(&want).unwrap_err();
        assert!(err.to_string().contains("deadline_edges_min"), "{err}");
    }

    #[test]
    fn invalid_layouts_are_refused() {
        let mut m = sample_metadata();
        m.feature_layout.duration_edges_min[2] = -5.0;
        assert!(m.validate().unwrap_err().to_string().contains("increasing"));
        let mut m = sample_metadata();
        m.feature_layout.configurations = 7;
        assert!(m.validate().is_err());
        let mut m = sample_metadata();
        m.top_k = 0;
        assert!(matches!(
            m.validate(),
            Err(ContractError::BadValue { key: KEY_TOP_K, .. })
        ));
    }
}
