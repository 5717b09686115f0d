//! Reads back the network of a policy file this crate wrote (`onnx_writer`'s graph:
//! `Gemm transB=1 → activation`… → `Gemm` → `Reshape`), so that policies can be combined
//! without their training checkpoints. Graphs of any other shape are refused by name.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

use super::contract::{PolicyMetadata, INPUT_NAME};
use super::network::{Activation, Dense, NetworkError, PolicyNetwork};
use super::onnx_proto::{decode_policy, MetadataError, ModelProto, NodeProto, TensorProto, DT_FLOAT};

/// Why a policy file's network cannot be read back.
#[derive(Debug, Error)]
pub enum ReadError {
    /// Not an ONNX model, or its metadata is not a policy's.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    /// A graph smartmig does not write (another exporter, or a hand-edited file).
    #[error("{} has a graph smartmig did not write: {what}", path.display())]
    Graph {
        /// The file.
        path: PathBuf,
        /// What was found where.
        what: String,
    },
    /// The weights read make no valid network.
    #[error("{} holds an invalid network: {source}", path.display())]
    Network {
        /// The file.
        path: PathBuf,
        /// What the network check found.
        source: NetworkError,
    },
}

/// The network and the metadata of policy file `path` (its `bytes`).
pub fn read_policy(path: &Path, bytes: &[u8]) -> Result<(PolicyNetwork, PolicyMetadata), ReadError> {
    let (model, meta) = decode_policy(path, bytes)?;
    let graph_error = |what: String| ReadError::Graph {
        path: path.to_path_buf(),
        what,
    };
    let net = network(&model).map_err(graph_error)?;
    net.validate().map_err(|source| ReadError::Network {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((net, meta))
}

/// The network of `model`'s graph, or what in the graph is not `onnx_writer`'s shape.
fn network(model: &ModelProto) -> Result<PolicyNetwork, String> {
    let graph = model.graph.as_ref().ok_or("no graph")?;
    let tensors: HashMap<&str, &TensorProto> = graph
        .initializer
        .iter()
        .filter_map(|t| t.name.as_deref().map(|n| (n, t)))
        .collect();
    let mut layers = Vec::new();
    // Per Gemm: whether a Tanh follows it.
    let mut activated: Vec<bool> = Vec::new();
    let mut cur = INPUT_NAME.to_string();
    let mut nodes = graph.node.iter().peekable();
    while let Some(node) = nodes.next() {
        let op = node.op_type.as_deref().unwrap_or("");
        match op {
            "Gemm" => {
                let [x, w, b] = node.input.as_slice() else {
                    return Err(format!(
                        "{} has {} inputs, expected 3",
                        describe(node),
                        node.input.len()
                    ));
                };
                if *x != cur {
                    return Err(format!("{} reads `{x}`, expected `{cur}`", describe(node)));
                }
                let trans_b = node
                    .attribute
                    .iter()
                    .any(|a| a.name.as_deref() == Some("transB") && a.i == Some(1));
                if !trans_b || node.attribute.len() != 1 {
                    return Err(format!("{} has attributes other than transB = 1", describe(node)));
                }
                let (w, dims) = floats(&tensors, w)?;
                let (b, _) = floats(&tensors, b)?;
                let [out_dim, in_dim] = dims.as_slice() else {
                    return Err(format!("{} has a weight of rank {}", describe(node), dims.len()));
                };
                layers.push(Dense {
                    in_dim: *in_dim,
                    out_dim: *out_dim,
                    w,
                    b,
                });
                cur = output(node)?;
                activated.push(false);
            }
            "Tanh" => {
                if node.input.first() != Some(&cur) {
                    return Err(format!("{} does not read `{cur}`", describe(node)));
                }
                cur = output(node)?;
                match activated.last_mut() {
                    Some(a @ false) => *a = true,
                    _ => return Err(format!("{} does not follow a Gemm", describe(node))),
                }
            }
            "Reshape" => {
                if node.input.first() != Some(&cur) || nodes.peek().is_some() {
                    return Err(format!("{} is not the last node reading `{cur}`", describe(node)));
                }
            }
            other => return Err(format!("{} is an unsupported operator `{other}`", describe(node))),
        }
    }
    let Some((last, inner)) = activated.split_last() else {
        return Err("no Gemm layer".into());
    };
    let hidden = match (last, inner.iter().all(|a| *a), inner.iter().any(|a| *a)) {
        (false, true, _) if !inner.is_empty() => Activation::Tanh,
        (false, _, false) => Activation::Identity,
        _ => return Err("Tanh must follow every Gemm but the last, or none".into()),
    };
    Ok(PolicyNetwork { layers, hidden })
}

fn describe(node: &NodeProto) -> String {
    format!("node `{}`", node.name.as_deref().unwrap_or("?"))
}

fn output(node: &NodeProto) -> Result<String, String> {
    node.output
        .first()
        .cloned()
        .ok_or_else(|| format!("{} has no output", describe(node)))
}

/// A float initializer's values and dimensions.
fn floats(tensors: &HashMap<&str, &TensorProto>, name: &str) -> Result<(Vec<f32>, Vec<usize>), String> {
    let t = tensors
        .get(name)
        .ok_or_else(|| format!("`{name}` is not an initializer"))?;
    if t.data_type != Some(DT_FLOAT) {
        return Err(format!("`{name}` is not a float tensor"));
    }
    let raw = t
        .raw_data
        .as_deref()
        .ok_or_else(|| format!("`{name}` keeps its values outside raw_data"))?;
    let dims = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("`{name}` has a negative dimension")))
        .collect::<Result<Vec<_>, _>>()?;
    if raw.len() != 4 * dims.iter().product::<usize>() {
        return Err(format!(
            "`{name}` has {} bytes for dimensions {dims:?}",
            raw.len()
        ));
    }
    let values = raw
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    Ok((values, dims))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::sample_metadata;
    use crate::onnx_writer::{model_proto, to_bytes};
    use prost::Message as _;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn a_written_policy_reads_back_bit_identical() {
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        for hidden in [Activation::Tanh, Activation::Identity] {
            let net = PolicyNetwork::init(&[34, 16, 8, 144], hidden, &mut rng);
            let bytes = to_bytes(&net, &meta).unwrap();
            let (back, back_meta) = read_policy(Path::new("p.onnx"), &bytes).unwrap();
            assert_eq!(back, net);
            assert_eq!(back_meta, meta);
        }
    }

    #[test]
    fn foreign_graphs_and_broken_files_are_refused_by_name() {
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let net = PolicyNetwork::init(&[34, 16, 144], Activation::Tanh, &mut rng);
        let path = Path::new("p.onnx");
        assert!(matches!(
            read_policy(path, b"not a model"),
            Err(ReadError::Metadata(MetadataError::NotOnnx { .. }))
        ));

        let mut model = model_proto(&net, &meta).unwrap();
        let graph = model.graph.as_mut().unwrap();
        graph.node[1].op_type = Some("Relu".into());
        let err = read_policy(path, &model.encode_to_vec()).unwrap_err();
        assert!(err.to_string().contains("unsupported operator `Relu`"), "{err}");

        let mut model = model_proto(&net, &meta).unwrap();
        let graph = model.graph.as_mut().unwrap();
        graph.initializer[0].raw_data.as_mut().unwrap().pop();
        let err = read_policy(path, &model.encode_to_vec()).unwrap_err();
        assert!(err.to_string().contains("`layer0.weight` has"), "{err}");

        let mut model = model_proto(&net, &meta).unwrap();
        model.metadata_props.clear();
        assert!(matches!(
            read_policy(path, &model.encode_to_vec()),
            Err(ReadError::Metadata(MetadataError::Contract { .. }))
        ));
    }
}
