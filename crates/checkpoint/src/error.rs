//! The one error type of plumb-checkpoint. Every variant names the file part or the key at fault.

use std::path::PathBuf;

/// Why a checkpoint could not be opened, read or fetched.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not a GGUF file (magic bytes {magic:02x?}, expected \"GGUF\")")]
    NotGguf { path: PathBuf, magic: Vec<u8> },
    #[error("GGUF version {0} is not supported (plumb reads versions 2 and 3)")]
    UnsupportedVersion(u32),
    #[error("file is truncated: {what} at byte {offset} needs {need} bytes, but the file has {file_len}")]
    Truncated { what: String, offset: u64, need: u64, file_len: u64 },
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 { what: String, offset: u64 },
    #[error("metadata key `{key}` has unknown value type {type_id}")]
    BadValueType { key: String, type_id: u32 },
    #[error("{what} count {count} is impossible for a file of {file_len} bytes")]
    ImpossibleCount { what: String, count: u64, file_len: u64 },
    #[error("metadata arrays nest deeper than {0} levels")]
    TooDeep(usize),
    #[error("metadata key `{0}` appears twice")]
    DuplicateKey(String),
    #[error("tensor `{0}` appears twice")]
    DuplicateTensor(String),
    #[error("tensor `{name}` has unknown GGML type id {type_id}")]
    UnknownTensorType { name: String, type_id: u32 },
    #[error("tensor `{name}` has type {ty}, whose layout plumb does not know")]
    UnsupportedTensorType { name: String, ty: plumb_core::GgmlType },
    #[error("tensor `{name}` has a bad shape {dims:?}: {why}")]
    BadShape { name: String, dims: Vec<u64>, why: &'static str },
    #[error("tensor `{name}` at data offset {offset} with {size} bytes lies outside the {data_len}-byte data section")]
    TensorOutOfRange { name: String, offset: u64, size: u64, data_len: u64 },
    #[error(
        "the data section starts at byte {data_offset}, past the end of the {file_len}-byte file, yet {num_tensors} tensors are declared"
    )]
    DataPastEnd { data_offset: u64, file_len: u64, num_tensors: usize },
    #[error("tensor `{name}` at data offset {offset} is not aligned to {alignment} bytes")]
    MisalignedTensor { name: String, offset: u64, alignment: u64 },
    #[error("tensors `{first}` and `{second}` overlap in the data section")]
    OverlappingTensors { first: String, second: String },
    #[error("general.alignment is {0}; it must be a non-zero power of two")]
    BadAlignment(u64),
    #[error("metadata key `{0}` is missing")]
    MissingMetadata(String),
    #[error("metadata key `{key}` should be {expected}, found {found}")]
    WrongMetadataType { key: String, expected: &'static str, found: String },
    #[error("metadata key `{key}` has an invalid value: {why}")]
    BadMetadataValue { key: String, why: String },
    #[error("tensor `{0}` is missing")]
    MissingTensor(String),
    #[error("{file}: `{key}` {why}")]
    BadConfig { file: String, key: String, why: String },
    #[error("{path}: {why}")]
    BadSafetensors { path: PathBuf, why: String },
    #[error("unknown preset `{name}` (plumb synth knows: {known})")]
    UnknownPreset { name: String, known: String },
    #[error("{0} is not empty; plumb synth writes into a new or empty folder")]
    OutputNotEmpty(PathBuf),
    #[error("{0}")]
    Source(#[from] crate::source::SourceError),
}

impl CheckpointError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CheckpointError::Io { path: path.into(), source }
    }
}
