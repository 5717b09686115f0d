//! Policy inference through ONNX Runtime, loaded at run time from a `libonnxruntime.so`.
//!
//! The library is looked for, in order: the path the caller configured
//! (`controller.onnxruntime`), `$ORT_DYLIB_PATH`, the system copy in
//! [`provision::SYSTEM_DIR`] (`smartmig policy fetch-runtime --system`), then the per-user
//! cache filled by [`provision::fetch_runtime`] (`smartmig policy fetch-runtime`). A configured path or
//! `ORT_DYLIB_PATH` that does not exist is an error, not a reason to look further. ONNX
//! Runtime is loaded once per process: later requests get the library already loaded.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::environment::Environment;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef};
use thiserror::Error;

use super::contract::{ContractError, PolicyMetadata, INPUT_NAME, OUTPUT_NAME};
use super::provision::{self, ProvisionError, ORT_VERSION};

/// Environment variable naming the library (also read by `ort` itself).
pub const ORT_DYLIB_ENV: &str = "ORT_DYLIB_PATH";

/// Why ONNX Runtime or a policy could not be loaded or run.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// No library at any of the places looked at.
    #[error("ONNX Runtime library not found (looked at: {}); run `smartmig policy fetch-runtime` to download onnxruntime {ORT_VERSION} from PyPI into your cache (`--system`: into /usr/lib/smartmig for every user and smartmigd), or set ORT_DYLIB_PATH or controller.onnxruntime", looked.join("; "))]
    NotFound {
        /// Each place looked at, with where it came from.
        looked: Vec<String>,
    },
    /// The library exists but does not load or is too old.
    #[error("cannot load ONNX Runtime from {}: {reason}", path.display())]
    Load {
        /// The library.
        path: PathBuf,
        /// ONNX Runtime's or the loader's message.
        reason: String,
    },
    /// Downloading the library failed.
    #[error("cannot provision ONNX Runtime")]
    Provision(#[from] ProvisionError),
    /// The policy file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// ONNX Runtime refused the model (not ONNX, corrupted, unsupported operator).
    #[error("{origin} is not a usable ONNX model: {reason}")]
    Model {
        /// The file, or `<memory>`.
        origin: String,
        /// ONNX Runtime's message.
        reason: String,
    },
    /// The model loads but breaks the contract or does not match what is expected.
    #[error("{origin} does not fit")]
    Contract {
        /// The file, or `<memory>`.
        origin: String,
        /// What differs.
        source: ContractError,
    },
    /// Features of the wrong length.
    #[error("{found} feature values for batch {batch}, expected {batch} × D = {expected}")]
    Input {
        /// Values given.
        found: usize,
        /// Batch size.
        batch: usize,
        /// Values expected.
        expected: usize,
    },
    /// ONNX Runtime failed while running the model.
    #[error("inference failed: {0}")]
    Inference(String),
}

/// A loaded ONNX Runtime library; cheap to clone.
#[derive(Clone)]
pub struct OnnxRuntime {
    env: Environment,
    library: PathBuf,
}

/// The library this process loaded, once it has.
static LOADED: Mutex<Option<OnnxRuntime>> = Mutex::new(None);
/// Held while downloading, so that concurrent first uses fetch once.
static FETCHING: Mutex<()> = Mutex::new(());

impl OnnxRuntime {
    /// Where the library would be loaded from, without loading it.
    pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, RuntimeError> {
        if let Some(p) = explicit {
            return existing(p, "configured path");
        }
        if let Some(p) = std::env::var_os(ORT_DYLIB_ENV).filter(|v| !v.is_empty()) {
            return existing(Path::new(&p), ORT_DYLIB_ENV);
        }
        if let Some(p) = provision::system_library().or_else(provision::cached_library) {
            return Ok(p);
        }
        let system = format!(
            "{} (system)",
            Path::new(provision::SYSTEM_DIR)
                .join(provision::library_file_name())
                .display()
        );
        let cache = provision::cache_dir()
            .map(|d| format!("{} (cache)", d.join(provision::library_file_name()).display()))
            .unwrap_or_else(|e| format!("cache: {e}"));
        Err(RuntimeError::NotFound {
            looked: vec![format!("{ORT_DYLIB_ENV} (unset)"), system, cache],
        })
    }

    /// Loads ONNX Runtime from the first place [`OnnxRuntime::locate`] finds; never downloads.
    pub fn init(explicit: Option<&Path>) -> Result<OnnxRuntime, RuntimeError> {
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rt) = loaded.as_ref() {
            if let Some(p) = explicit.filter(|p| *p != rt.library) {
                // The C library cannot be unloaded or loaded twice in one process.
                log::warn!(
                    "ONNX Runtime is already loaded from {}; not loading {}",
                    rt.library.display(),
                    p.display()
                );
            }
            return Ok(rt.clone());
        }
        let library = OnnxRuntime::locate(explicit)?;
        disable_telemetry();
        let load = |reason: String| RuntimeError::Load {
            path: library.clone(),
            reason,
        };
        let env = ort::init_from(&library)
            .map_err(|e| load(e.to_string()))?
            .with_name("smartmig")
            .with_telemetry(false)
            .build()
            .map_err(|e| load(e.to_string()))?;
        log::info!("ONNX Runtime loaded from {}", library.display());
        let rt = OnnxRuntime { env, library };
        *loaded = Some(rt.clone());
        Ok(rt)
    }

    /// Like [`OnnxRuntime::init`], but downloads the library into the cache first when
    /// nothing is configured and the cache is empty (see [`provision`]).
    pub fn init_or_fetch(explicit: Option<&Path>) -> Result<OnnxRuntime, RuntimeError> {
        match OnnxRuntime::init(explicit) {
            Err(RuntimeError::NotFound { .. })
                if explicit.is_none() && std::env::var_os(ORT_DYLIB_ENV).is_none_or(|v| v.is_empty()) =>
            {
                let _guard = FETCHING.lock().unwrap_or_else(|p| p.into_inner());
                provision::fetch_runtime()?;
                OnnxRuntime::init(None)
            }
            other => other,
        }
    }

    /// The library file loaded.
    pub fn library(&self) -> &Path {
        &self.library
    }

    /// ONNX Runtime's build description (version, commit).
    pub fn build_info(&self) -> String {
        ort::info().to_string()
    }
}

/// ONNX Runtime's documented telemetry opt-out, read when the library sets up its
/// environment. Without it the official Linux build writes a device id under
/// `~/.cache/Microsoft/DeveloperTools/.onnxruntime/` (and may try to upload events);
/// `with_telemetry(false)` alone comes too late for that.
pub const TELEMETRY_OPT_OUT: &str = "ORT_DISABLE_TELEMETRY";

/// Sets [`TELEMETRY_OPT_OUT`] unless the user set it. Both programs also set it first
/// thing in `main`, before any thread starts; this covers other callers (tests).
pub fn disable_telemetry() {
    if std::env::var_os(TELEMETRY_OPT_OUT).is_none() {
        std::env::set_var(TELEMETRY_OPT_OUT, "1");
    }
}

fn existing(p: &Path, origin: &str) -> Result<PathBuf, RuntimeError> {
    if p.is_file() {
        // Absolute, because `ort` resolves a relative path against the executable's directory.
        Ok(p.canonicalize().unwrap_or_else(|_| p.to_path_buf()))
    } else {
        Err(RuntimeError::NotFound {
            looked: vec![format!("{} ({origin}, no such file)", p.display())],
        })
    }
}

/// One policy loaded into an ONNX Runtime session, checked against the contract.
///
/// Runs take `&mut self`: one `PolicyRuntime` per thread (the controller needs one per
/// GPU model; each decision is one small inference).
pub struct PolicyRuntime {
    session: Session,
    metadata: PolicyMetadata,
    origin: String,
}

impl PolicyRuntime {
    /// Loads `path` with the library [`OnnxRuntime::init`] finds and checks it against `expected`.
    pub fn load(path: &Path, expected: &PolicyMetadata) -> Result<PolicyRuntime, RuntimeError> {
        PolicyRuntime::load_with(&OnnxRuntime::init(None)?, path, expected)
    }

    /// Loads `path` with a given runtime and checks it against `expected`.
    pub fn load_with(
        rt: &OnnxRuntime,
        path: &Path,
        expected: &PolicyMetadata,
    ) -> Result<PolicyRuntime, RuntimeError> {
        let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        PolicyRuntime::from_bytes(rt, &bytes, expected, &path.display().to_string())
    }

    /// Loads a model from memory; `origin` names it in errors.
    pub fn from_bytes(
        rt: &OnnxRuntime,
        bytes: &[u8],
        expected: &PolicyMetadata,
        origin: &str,
    ) -> Result<PolicyRuntime, RuntimeError> {
        let model_err = |reason: String| RuntimeError::Model {
            origin: origin.to_string(),
            reason,
        };
        let contract = |source: ContractError| RuntimeError::Contract {
            origin: origin.to_string(),
            source,
        };
        // One intra-op thread: the network is tiny and thread hand-offs cost more than they save.
        let session = Session::builder(&rt.env)
            .and_then(|b| Ok(b.with_intra_threads(1)?.with_inter_threads(1)?))
            .and_then(|mut b| b.commit_from_memory(bytes))
            .map_err(|e| model_err(e.to_string()))?;
        let md = session.metadata().map_err(|e| model_err(e.to_string()))?;
        let metadata = PolicyMetadata::from_props(|k| md.custom(k)).map_err(contract)?;
        drop(md);
        metadata.check_against(expected).map_err(contract)?;
        check_io(&session, metadata.input_dim(), metadata.k()).map_err(contract)?;
        Ok(PolicyRuntime {
            session,
            metadata,
            origin: origin.to_string(),
        })
    }

    /// The metadata read from the file.
    pub fn metadata(&self) -> &PolicyMetadata {
        &self.metadata
    }

    /// Where the model came from.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// One decision's logits: `features` has D values; the result K·K, row-major `[K, K]`.
    pub fn infer(&mut self, features: &[f32]) -> Result<Vec<f32>, RuntimeError> {
        self.infer_batch(features, 1)
    }

    /// Logits for a batch: `features` is `[batch, D]`, the result `[batch, K, K]`.
    pub fn infer_batch(&mut self, features: &[f32], batch: usize) -> Result<Vec<f32>, RuntimeError> {
        let (d, k) = (self.metadata.input_dim(), self.metadata.k());
        if features.len() != batch * d || batch == 0 {
            return Err(RuntimeError::Input {
                found: features.len(),
                batch,
                expected: batch * d,
            });
        }
        let fail = |e: ort::Error| RuntimeError::Inference(e.to_string());
        let input = TensorRef::from_array_view(([batch, d], features)).map_err(fail)?;
        let outputs = self
            .session
            .run(ort::inputs![INPUT_NAME => input])
            .map_err(fail)?;
        let value = outputs
            .get(OUTPUT_NAME)
            .ok_or_else(|| RuntimeError::Inference(format!("no output `{OUTPUT_NAME}`")))?;
        let (shape, data) = value.try_extract_tensor::<f32>().map_err(fail)?;
        if shape[..] != [batch as i64, k as i64, k as i64] {
            return Err(RuntimeError::Inference(format!(
                "output shape {:?}, expected [{batch}, {k}, {k}]",
                &shape[..]
            )));
        }
        Ok(data.to_vec())
    }
}

/// The graph has exactly the contract's input and output, with D and K of the metadata.
fn check_io(session: &Session, d: usize, k: usize) -> Result<(), ContractError> {
    let check = |what: &'static str, outlets: &[ort::value::Outlet], name: &str, dims: &[usize]| {
        let err = |reason: String| ContractError::Graph { what, reason };
        let [o] = outlets else {
            return Err(err(format!("expected one, found {}", outlets.len())));
        };
        if o.name() != name {
            return Err(err(format!("named `{}`, expected `{name}`", o.name())));
        }
        if o.dtype().tensor_type() != Some(TensorElementType::Float32) {
            return Err(err(format!("`{name}` is {:?}, expected f32", o.dtype())));
        }
        let shape = o.dtype().tensor_shape().map(|s| s.to_vec()).unwrap_or_default();
        // The first dimension is the batch: symbolic (-1) or any fixed size.
        let fits = shape.len() == dims.len() + 1 && shape[1..].iter().zip(dims).all(|(s, d)| *s == *d as i64);
        if !fits {
            return Err(err(format!(
                "`{name}` has shape {shape:?}, expected [batch, {}]",
                dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
            )));
        }
        Ok(())
    };
    check("input", session.inputs(), INPUT_NAME, &[d])?;
    check("output", session.outputs(), OUTPUT_NAME, &[k, k])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::sample_metadata;
    use crate::contract::{FeatureLayout, TimeOfDay, KEY_FEATURE_LAYOUT, KEY_INPUT_DIM};
    use crate::network::{Activation, PolicyNetwork};
    use crate::onnx_proto::ModelProto;
    use crate::onnx_writer;
    use prost::Message;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// The real ONNX Runtime, provisioned into the cache on first use. Tests that need it
    /// fail (never skip) when it cannot be obtained.
    fn ort() -> OnnxRuntime {
        OnnxRuntime::init_or_fetch(None).unwrap_or_else(|e| {
            let chain: Vec<String> =
                std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .map(|e| e.to_string())
                    .collect();
            panic!("ONNX Runtime is required: {}", chain.join(": "))
        })
    }

    fn metadata_for(k: usize, edges: usize, slice_sizes: Vec<u8>, time_of_day: TimeOfDay) -> PolicyMetadata {
        let mut m = sample_metadata();
        m.configurations = (1..=k).map(|i| format!("c{i}")).collect();
        m.top_k = m.top_k.min(k as u32);
        m.feature_layout = FeatureLayout {
            configurations: k,
            duration_edges_min: (0..edges).map(|i| i as f64).collect(),
            deadline_edges_min: (0..edges + 1).map(|i| i as f64 * 2.0 - 1.0).collect(),
            slice_sizes,
            time_of_day,
            queue_summary: false,
        };
        m
    }

    #[test]
    fn onnx_runtime_gives_the_rust_forward_pass_logits() {
        let rt = ort();
        let cases: [(PolicyMetadata, &[usize], Activation); 5] = [
            (sample_metadata(), &[64, 64], Activation::Tanh),
            (
                metadata_for(2, 1, vec![], TimeOfDay::None),
                &[8],
                Activation::Tanh,
            ),
            (
                metadata_for(12, 10, vec![1, 2, 3, 4, 7], TimeOfDay::SinCos),
                &[32],
                Activation::Tanh,
            ),
            (
                metadata_for(3, 2, vec![], TimeOfDay::SinCos),
                &[],
                Activation::Tanh,
            ),
            (
                metadata_for(7, 4, vec![1, 7], TimeOfDay::None),
                &[16, 9],
                Activation::Identity,
            ),
        ];
        let mut rng = ChaCha8Rng::seed_from_u64(2026);
        for (meta, hidden, act) in cases {
            let (d, k) = (meta.input_dim(), meta.k());
            let dims: Vec<usize> = std::iter::once(d)
                .chain(hidden.iter().copied())
                .chain([k * k])
                .collect();
            let mut net = PolicyNetwork::init(&dims, act, &mut rng);
            for l in &mut net.layers {
                // Non-zero biases, so a bias mix-up would show.
                l.b.iter_mut().for_each(|b| *b = rng.random_range(-0.5..0.5));
            }
            let bytes = onnx_writer::to_bytes(&net, &meta).unwrap();
            let mut policy = PolicyRuntime::from_bytes(&rt, &bytes, &meta, "test").unwrap();
            assert_eq!(policy.metadata(), &meta);
            for batch in [1usize, 7, 64] {
                let x: Vec<f32> = (0..batch * d).map(|_| rng.random_range(-1.0..1.0)).collect();
                let want = net.forward(&x, batch).unwrap();
                let got = policy.infer_batch(&x, batch).unwrap();
                assert_eq!(got.len(), batch * k * k);
                let diff = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0f32, f32::max);
                assert!(diff < 1e-5, "dims {dims:?} batch {batch}: max |Δ| = {diff}");
            }
            let one: Vec<f32> = (0..d).map(|_| rng.random_range(-1.0..1.0)).collect();
            let diff = policy
                .infer(&one)
                .unwrap()
                .iter()
                .zip(net.forward(&one, 1).unwrap())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(diff < 1e-5, "single decision: {diff}");
        }
    }

    #[test]
    fn a_policy_file_loads_from_disk_and_checks_its_input_length() {
        let rt = ort();
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let net = PolicyNetwork::init(&[34, 16, 144], Activation::Tanh, &mut rng);
        let path = std::env::temp_dir().join(format!("smartmig-policy-{}.onnx", std::process::id()));
        onnx_writer::write(&path, &net, &meta).unwrap();
        let loaded = PolicyRuntime::load_with(&rt, &path, &meta);
        let _ = std::fs::remove_file(&path);
        let mut policy = loaded.unwrap();
        assert!(policy.origin().ends_with(".onnx"));
        assert!(matches!(
            policy.infer(&[0.0; 33]),
            Err(RuntimeError::Input {
                found: 33,
                batch: 1,
                expected: 34
            })
        ));
        assert!(matches!(
            policy.infer_batch(&[], 0),
            Err(RuntimeError::Input { .. })
        ));
        let missing = PolicyRuntime::load_with(&rt, Path::new("/nonexistent/p.onnx"), &meta);
        assert!(matches!(missing, Err(RuntimeError::Io { .. })));
    }

    #[test]
    fn mismatched_or_corrupted_policies_are_refused_with_the_reason() {
        let rt = ort();
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let net = PolicyNetwork::init(&[34, 16, 144], Activation::Tanh, &mut rng);
        let bytes = onnx_writer::to_bytes(&net, &meta).unwrap();
        let refuse = |bytes: &[u8], expected: &PolicyMetadata| -> RuntimeError {
            match PolicyRuntime::from_bytes(&rt, bytes, expected, "p.onnx") {
                Ok(_) => panic!("accepted"),
                Err(e) => e,
            }
        };
        let contract = |e: RuntimeError| match e {
            RuntimeError::Contract { source, .. } => source,
            other => panic!("expected a contract error, got {other}"),
        };

        // Wrong K: the site runs a GPU model with 11 configurations.
        let mut k11 = metadata_for(11, 10, vec![], TimeOfDay::SinCos);
        k11.feature_layout = FeatureLayout::paper(11);
        assert_eq!(
            contract(refuse(&bytes, &k11)),
            ContractError::ConfigurationCount {
                found: 12,
                expected: 11
            }
        );
        // Wrong GPU model.
        let h100 = PolicyMetadata {
            gpu_model: "h100-80gb".into(),
            ..meta.clone()
        };
        assert!(matches!(
            contract(refuse(&bytes, &h100)),
            ContractError::GpuModel { .. }
        ));
        // Wrong feature layout (the site splits histograms by slice size: D = 114).
        let mut split = meta.clone();
        split.feature_layout.slice_sizes = vec![1, 2, 3, 4, 7];
        let err = contract(refuse(&bytes, &split));
        assert!(
            matches!(
                err,
                ContractError::FeatureLayout {
                    found_dim: 34,
                    expected_dim: 114,
                    ..
                }
            ),
            "{err}"
        );

        // Corrupted files: truncated, bytes flipped, not ONNX at all.
        let truncated = refuse(&bytes[..bytes.len() / 2], &meta);
        assert!(matches!(truncated, RuntimeError::Model { .. }), "{truncated}");
        let mut flipped = bytes.clone();
        for b in flipped.iter_mut().take(64) {
            *b ^= 0xa5;
        }
        assert!(matches!(
            refuse(&flipped, &meta),
            RuntimeError::Model { .. } | RuntimeError::Contract { .. }
        ));
        let garbage = refuse(b"this is not an onnx file", &meta);
        assert!(garbage.to_string().contains("p.onnx"), "{garbage}");

        // A valid model without our metadata.
        let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
        model.metadata_props.clear();
        let err = contract(refuse(&model.encode_to_vec(), &meta));
        assert!(matches!(err, ContractError::MissingKey { .. }), "{err}");

        // Metadata that lies about the graph: it claims another layout than the weights take.
        let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
        for e in &mut model.metadata_props {
            match e.key.as_deref() {
                Some(KEY_FEATURE_LAYOUT) => e.value = serde_json::to_string(&split.feature_layout).ok(),
                Some(KEY_INPUT_DIM) => e.value = Some(split.input_dim().to_string()),
                _ => {}
            }
        }
        let err = contract(refuse(&model.encode_to_vec(), &split));
        assert!(matches!(err, ContractError::Graph { what: "input", .. }), "{err}");
    }

    #[test]
    fn a_missing_library_is_a_typed_error_naming_the_path_and_the_fix() {
        let err = OnnxRuntime::locate(Some(Path::new("/nonexistent/libonnxruntime.so"))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("/nonexistent/libonnxruntime.so"), "{text}");
        assert!(text.contains("smartmig policy fetch-runtime"), "{text}");
    }
}
