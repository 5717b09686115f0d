//! smartmig-policy: the learned mean-field policy, shared by the `smartmig` trainer and
//! evaluator and the `smartmigd` daemon: network weights, the ONNX policy-file contract, the
//! ONNX writer and reader, averaging of several policies into one, inference through ONNX
//! Runtime (and its provisioning), top-k sampling of next configurations, the mean-field
//! features and the job type they are computed from.
//! (Re-exported by `smartmig` as `smartmig::policy`; no simulator, solver or trainer here,
//! so the daemon links none of them.)
//!
//! A decision, for one GPU model:
//! 1. compute the `mean_field` features in the order of [`FeatureLayout`];
//! 2. [`PolicyRuntime::infer`] → K·K transition logits;
//! 3. [`TransitionTable::new`] (mask unavailable configurations, softmax, top-k) and
//!    [`TransitionTable::sample_gpus`] (or [`TransitionTable::apportion`], as the policy
//!    file's `draw` says) → the next configuration of every GPU.

pub mod contract;
pub mod ensemble;
pub mod features;
pub mod job;
pub mod network;
pub mod onnx_proto;
pub mod onnx_reader;
pub mod onnx_writer;
pub mod provision;
pub mod runtime;
pub mod sampling;

pub use contract::{
    requeue_limit_text, ContractError, DecisionInterval, FeatureLayout, FeatureLayoutError, PolicyMetadata,
    Site, TimeOfDay, TrainingRef, Trainings, CONTRACT_VERSION, INPUT_NAME, OUTPUT_NAME,
};
pub use network::{Activation, Dense, NetworkError, PolicyNetwork};
pub use onnx_writer::WriteError;
pub use provision::{fetch_runtime, ProvisionError, ORT_VERSION};
pub use runtime::{OnnxRuntime, PolicyRuntime, RuntimeError};
pub use sampling::{Draw, SamplingConfig, SamplingError, TransitionRow, TransitionTable, DEFAULT_TOP_K};
/// What a requeued job keeps: a policy file records the model it was validated under.
pub use smartmig_core::config::Requeued;

/// The file name of the policy for a GPU model and repartition semantics:
/// `<gpu-key>-<semantics>.onnx`, as `smartmig train` ships them in `onnx/` and
/// `smartmigd` loads them from `policy.models_dir`.
pub fn policy_file_name(gpu_key: &str, semantics: Semantics) -> String {
    format!("{gpu_key}-{}.onnx", semantics.as_str())
}

/// The semantics a controller mode repartitions with (a dry run trials the default, drain).
pub fn mode_semantics(mode: smartmig_core::config::Mode) -> Semantics {
    match mode {
        smartmig_core::config::Mode::Preempt => Semantics::Preempt,
        smartmig_core::config::Mode::Drain | smartmig_core::config::Mode::DryRun => Semantics::Drain,
    }
}

/// Repartition semantics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Semantics {
    /// The paper's: jobs on changed instances are preempted, keep their progress, and pay a penalty.
    #[default]
    Preempt,
    /// Slurm's: a GPU changes only when the instances it must destroy are idle.
    Drain,
}

/// A name that is no [`Semantics`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown semantics `{0}` (preempt or drain)")]
pub struct UnknownSemantics(pub String);

impl std::str::FromStr for Semantics {
    type Err = UnknownSemantics;

    fn from_str(s: &str) -> Result<Semantics, UnknownSemantics> {
        Semantics::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| UnknownSemantics(s.to_string()))
    }
}

impl Semantics {
    /// Every semantics, in the order shown to users.
    pub const ALL: [Semantics; 2] = [Semantics::Preempt, Semantics::Drain];

    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Semantics::Preempt => "preempt",
            Semantics::Drain => "drain",
        }
    }
}
