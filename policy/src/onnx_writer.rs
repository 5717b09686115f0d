//! Writes a policy network and its metadata as an ONNX file, without `protoc`.
//!
//! Graph: `mean_field [B, D]` → (Gemm transB=1 → Tanh)… → Gemm → Reshape `[-1, K, K]` →
//! `transition_logits [B, K, K]`. The batch dimension is symbolic (`batch`); weights are
//! initializers stored little-endian in `raw_data`.

use std::path::Path;

use prost::Message;
use thiserror::Error;

use super::contract::{ContractError, PolicyMetadata, INPUT_NAME, OUTPUT_NAME};
use super::network::{NetworkError, PolicyNetwork};
use super::onnx_proto::{
    AttributeProto, Dimension, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, StringStringEntryProto,
    TensorProto, TensorShapeProto, TensorTypeProto, TypeProto, ValueInfoProto, ATTR_INT, DT_FLOAT, DT_INT64,
};

/// ONNX IR version written (IR 8 goes with opset 17).
pub const IR_VERSION: i64 = 8;
/// Default-domain opset written.
pub const OPSET: i64 = 17;
/// `producer_name` of the files written.
pub const PRODUCER: &str = "smartmig";
/// Name of the symbolic batch dimension.
pub const BATCH_DIM: &str = "batch";

/// Why a policy file could not be written.
#[derive(Debug, Error)]
pub enum WriteError {
    /// The network is malformed.
    #[error("invalid network")]
    Network(#[from] NetworkError),
    /// The metadata is inconsistent.
    #[error("invalid metadata")]
    Contract(#[from] ContractError),
    /// Network and metadata disagree on a size.
    #[error("the network has {what} = {network} but the metadata says {metadata}")]
    Mismatch {
        /// `D` or `K`.
        what: &'static str,
        /// From the network.
        network: usize,
        /// From the metadata.
        metadata: usize,
    },
    /// The file could not be written (it keeps its old content).
    #[error(transparent)]
    Io(#[from] smartmig_core::durable::DurableError),
}

/// Builds the ONNX model for `net` with `meta` in `metadata_props`.
pub fn model_proto(net: &PolicyNetwork, meta: &PolicyMetadata) -> Result<ModelProto, WriteError> {
    let (d, k) = net.validate()?;
    meta.validate()?;
    if d != meta.input_dim() {
        return Err(WriteError::Mismatch {
            what: "D",
            network: d,
            metadata: meta.input_dim(),
        });
    }
    if k != meta.k() {
        return Err(WriteError::Mismatch {
            what: "K",
            network: k,
            metadata: meta.k(),
        });
    }

    let mut nodes = Vec::new();
    let mut initializers = Vec::new();
    let mut cur = INPUT_NAME.to_string();
    let last = net.layers.len() - 1;
    for (i, l) in net.layers.iter().enumerate() {
        let (w, b, z) = (
            format!("layer{i}.weight"),
            format!("layer{i}.bias"),
            format!("layer{i}.linear"),
        );
        initializers.push(f32_tensor(&w, &[l.out_dim, l.in_dim], &l.w));
        initializers.push(f32_tensor(&b, &[l.out_dim], &l.b));
        nodes.push(NodeProto {
            input: vec![cur, w, b],
            output: vec![z.clone()],
            name: Some(format!("layer{i}.gemm")),
            op_type: Some("Gemm".into()),
            // Weights are stored [out, in] like candle's Linear: y = x·Wᵀ + b.
            attribute: vec![AttributeProto {
                name: Some("transB".into()),
                i: Some(1),
                r#type: Some(ATTR_INT),
            }],
            domain: None,
        });
        cur = z;
        if i < last {
            if let Some(op) = net.hidden.onnx_op() {
                let a = format!("layer{i}.{}", op.to_lowercase());
                nodes.push(NodeProto {
                    input: vec![cur],
                    output: vec![a.clone()],
                    name: Some(a.clone()),
                    op_type: Some(op.into()),
                    attribute: Vec::new(),
                    domain: None,
                });
                cur = a;
            }
        }
    }
    let shape_name = "logits_shape".to_string();
    let shape = [-1i64, k as i64, k as i64];
    initializers.push(TensorProto {
        dims: vec![3],
        data_type: Some(DT_INT64),
        name: Some(shape_name.clone()),
        raw_data: Some(shape.iter().flat_map(|v| v.to_le_bytes()).collect()),
    });
    nodes.push(NodeProto {
        input: vec![cur, shape_name],
        output: vec![OUTPUT_NAME.into()],
        name: Some("reshape".into()),
        op_type: Some("Reshape".into()),
        attribute: Vec::new(),
        domain: None,
    });

    let graph = GraphProto {
        node: nodes,
        name: Some(format!("smartmig-policy-{}", meta.gpu_model)),
        initializer: initializers,
        doc_string: Some("Mean-field repartition policy: features → K×K transition logits".into()),
        input: vec![value_info(INPUT_NAME, &[None, Some(d)])],
        output: vec![value_info(OUTPUT_NAME, &[None, Some(k), Some(k)])],
    };
    Ok(ModelProto {
        ir_version: Some(IR_VERSION),
        producer_name: Some(PRODUCER.into()),
        producer_version: Some(env!("CARGO_PKG_VERSION").into()),
        domain: Some("org.smartmig".into()),
        model_version: Some(i64::from(meta.contract_version)),
        doc_string: None,
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(OPSET),
        }],
        metadata_props: meta
            .to_props()
            .into_iter()
            .map(|(key, value)| StringStringEntryProto {
                key: Some(key),
                value: Some(value),
            })
            .collect(),
    })
}

/// The ONNX file's bytes.
pub fn to_bytes(net: &PolicyNetwork, meta: &PolicyMetadata) -> Result<Vec<u8>, WriteError> {
    Ok(model_proto(net, meta)?.encode_to_vec())
}

/// Writes the ONNX file durably (`smartmig_core::durable`), so that a controller never
/// loads a half-written policy.
pub fn write(path: &Path, net: &PolicyNetwork, meta: &PolicyMetadata) -> Result<(), WriteError> {
    let bytes = to_bytes(net, meta)?;
    Ok(smartmig_core::durable::write(path, &bytes)?)
}

fn f32_tensor(name: &str, dims: &[usize], values: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.iter().map(|&d| d as i64).collect(),
        data_type: Some(DT_FLOAT),
        name: Some(name.into()),
        raw_data: Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
    }
}

/// A float tensor value-info; `None` dimensions are the symbolic batch.
fn value_info(name: &str, dims: &[Option<usize>]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            tensor_type: Some(TensorTypeProto {
                elem_type: Some(DT_FLOAT),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| match d {
                            Some(v) => Dimension {
                                dim_value: Some(*v as i64),
                                dim_param: None,
                            },
                            None => Dimension {
                                dim_value: None,
                                dim_param: Some(BATCH_DIM.into()),
                            },
                        })
                        .collect(),
                }),
            }),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::sample_metadata;
    use crate::network::Activation;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn the_graph_has_the_contract_shape_and_round_trips_through_protobuf() {
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let net = PolicyNetwork::init(&[34, 64, 64, 144], Activation::Tanh, &mut rng);
        let bytes = to_bytes(&net, &meta).unwrap();
        let model = ModelProto::decode(bytes.as_slice()).unwrap();
        assert_eq!(PolicyMetadata::from_pairs(&model.metadata_pairs()), Ok(meta));
        let g = model.graph.unwrap();
        let ops: Vec<&str> = g.node.iter().filter_map(|n| n.op_type.as_deref()).collect();
        assert_eq!(ops, ["Gemm", "Tanh", "Gemm", "Tanh", "Gemm", "Reshape"]);
        assert_eq!(g.input[0].name.as_deref(), Some(INPUT_NAME));
        assert_eq!(g.output[0].name.as_deref(), Some(OUTPUT_NAME));
        // First weight matrix: [64, 34] floats, bit-exact little-endian.
        let w0 = &g.initializer[0];
        assert_eq!(w0.dims, [64, 34]);
        let raw = w0.raw_data.as_ref().unwrap();
        assert_eq!(raw.len(), 64 * 34 * 4);
        assert_eq!(
            f32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]),
            net.layers[0].w[1]
        );
    }

    #[test]
    fn network_and_metadata_must_agree() {
        let meta = sample_metadata();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let wrong_d = PolicyNetwork::init(&[30, 8, 144], Activation::Tanh, &mut rng);
        assert!(matches!(
            to_bytes(&wrong_d, &meta),
            Err(WriteError::Mismatch {
                what: "D",
                network: 30,
                metadata: 34
            })
        ));
        let wrong_k = PolicyNetwork::init(&[34, 8, 121], Activation::Tanh, &mut rng);
        assert!(matches!(
            to_bytes(&wrong_k, &meta),
            Err(WriteError::Mismatch {
                what: "K",
                network: 11,
                metadata: 12
            })
        ));
        let dir = std::env::temp_dir().join(format!("smartmig-no-such-dir-{}", std::process::id()));
        let net = PolicyNetwork::init(&[34, 8, 144], Activation::Tanh, &mut rng);
        assert!(matches!(
            write(&dir.join("p.onnx"), &net, &meta),
            Err(WriteError::Io(_))
        ));
    }
}
