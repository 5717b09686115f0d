//! The few ONNX protobuf messages a policy file needs, declared with `prost` so that no
//! `protoc` is needed. Field numbers follow `onnx/onnx.proto` (IR version 8); fields we
//! never write are left out, and decoding skips them.

// Field docs would repeat onnx.proto; the message docs point there.
#![allow(missing_docs)]

/// `TensorProto.DataType.FLOAT`.
pub const DT_FLOAT: i32 = 1;
/// `TensorProto.DataType.INT64`.
pub const DT_INT64: i32 = 7;
/// `AttributeProto.AttributeType.INT`.
pub const ATTR_INT: i32 = 2;

/// `onnx.ModelProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ModelProto {
    #[prost(int64, optional, tag = "1")]
    pub ir_version: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub producer_name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub producer_version: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "5")]
    pub model_version: Option<i64>,
    #[prost(string, optional, tag = "6")]
    pub doc_string: Option<String>,
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// `onnx.OperatorSetIdProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OperatorSetIdProto {
    #[prost(string, optional, tag = "1")]
    pub domain: Option<String>,
    #[prost(int64, optional, tag = "2")]
    pub version: Option<i64>,
}

/// `onnx.StringStringEntryProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringStringEntryProto {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
}

/// `onnx.GraphProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GraphProto {
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    #[prost(string, optional, tag = "10")]
    pub doc_string: Option<String>,
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
}

/// `onnx.NodeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeProto {
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    #[prost(string, optional, tag = "3")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub op_type: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    #[prost(string, optional, tag = "7")]
    pub domain: Option<String>,
}

/// `onnx.AttributeProto` (scalar int attributes only).
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    #[prost(int32, optional, tag = "20")]
    pub r#type: Option<i32>,
}

/// `onnx.TensorProto` (data in `raw_data`, little-endian).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorProto {
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    #[prost(int32, optional, tag = "2")]
    pub data_type: Option<i32>,
    #[prost(string, optional, tag = "8")]
    pub name: Option<String>,
    #[prost(bytes = "vec", optional, tag = "9")]
    pub raw_data: Option<Vec<u8>>,
}

/// `onnx.ValueInfoProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueInfoProto {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
}

/// `onnx.TypeProto` (tensor types only: the `value` oneof's field 1).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeProto {
    #[prost(message, optional, tag = "1")]
    pub tensor_type: Option<TensorTypeProto>,
}

/// `onnx.TypeProto.Tensor`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorTypeProto {
    #[prost(int32, optional, tag = "1")]
    pub elem_type: Option<i32>,
    #[prost(message, optional, tag = "2")]
    pub shape: Option<TensorShapeProto>,
}

/// `onnx.TensorShapeProto`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TensorShapeProto {
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<Dimension>,
}

/// `onnx.TensorShapeProto.Dimension`: set exactly one of the two (a oneof in onnx.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Dimension {
    #[prost(int64, optional, tag = "1")]
    pub dim_value: Option<i64>,
    #[prost(string, optional, tag = "2")]
    pub dim_param: Option<String>,
}

/// Why a file's policy metadata cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// Not an ONNX model at all.
    #[error("{} is not an ONNX model: {source}", path.display())]
    NotOnnx {
        /// The file.
        path: std::path::PathBuf,
        /// The protobuf error.
        source: prost::DecodeError,
    },
    /// An ONNX model whose metadata is not a smartmig policy's.
    #[error("{} breaks the policy contract: {source}", path.display())]
    Contract {
        /// The file.
        path: std::path::PathBuf,
        /// What the contract check found.
        source: crate::ContractError,
    },
}

/// The contract metadata of policy file `path` (its `bytes`), read without ONNX Runtime.
pub fn read_metadata(path: &std::path::Path, bytes: &[u8]) -> Result<crate::PolicyMetadata, MetadataError> {
    decode_policy(path, bytes).map(|(_, meta)| meta)
}

/// The decoded model of policy file `path` (its `bytes`) and its contract metadata.
pub fn decode_policy(
    path: &std::path::Path,
    bytes: &[u8],
) -> Result<(ModelProto, crate::PolicyMetadata), MetadataError> {
    use prost::Message as _;
    let model = ModelProto::decode(bytes).map_err(|source| MetadataError::NotOnnx {
        path: path.to_path_buf(),
        source,
    })?;
    let meta = crate::PolicyMetadata::from_pairs(&model.metadata_pairs()).map_err(|source| {
        MetadataError::Contract {
            path: path.to_path_buf(),
            source,
        }
    })?;
    Ok((model, meta))
}

impl ModelProto {
    /// The `metadata_props` as `(key, value)` pairs.
    pub fn metadata_pairs(&self) -> Vec<(String, String)> {
        self.metadata_props
            .iter()
            .map(|e| {
                (
                    e.key.clone().unwrap_or_default(),
                    e.value.clone().unwrap_or_default(),
                )
            })
            .collect()
    }
}
