//! The GGUF reader on valid files, on each kind of malformed file, and on the default model.

#[path = "support/files.rs"]
mod files;

use plumb_checkpoint::gguf::writer::GgufWriter;
use plumb_checkpoint::{CheckpointError, GgufFile, MetaValue, ModelConfig};
use plumb_core::GgmlType;
use std::io::Write;

fn open_bytes(bytes: &[u8]) -> Result<GgufFile, CheckpointError> {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f.flush().unwrap();
    GgufFile::open(f.path())
}

#[test]
fn reads_every_value_type_and_tensor() {
    let file = open_bytes(&files::tiny_model().to_bytes()).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.get("test.u8"), Some(&MetaValue::U8(7)));
    assert_eq!(file.get("test.i16"), Some(&MetaValue::I16(-300)));
    assert_eq!(file.get_u64("test.u64").unwrap(), 1 << 40);
    assert_eq!(file.get("test.i64").and_then(MetaValue::as_i64), Some(-(1 << 40)));
    assert_eq!(file.get_f64("test.f64").unwrap(), 0.125);
    assert_eq!(file.get("test.bool"), Some(&MetaValue::Bool(true)));
    let nested = file.get_array("test.nested").unwrap();
    assert_eq!(nested[0].as_array().unwrap()[1], MetaValue::U32(2));
    assert_eq!(nested[1].as_array().unwrap()[0].as_str(), Some("é"));
    let q = file.tensor("blk.0.attn_q.weight").unwrap();
    assert_eq!((q.ty, q.shape(), q.size), (GgmlType::Q4_1, vec![64, 64], 64 * 2 * 20));
    let bytes = file.tensor_bytes("blk.0.attn_q.weight").unwrap();
    assert_eq!(bytes[..4], [0, 1, 2, 3]);
    assert_eq!(file.data_offset % file.alignment, 0);
    let config = ModelConfig::from_gguf(&file).unwrap();
    assert_eq!((config.head_dim, config.num_key_value_heads, config.vocab_size), (16, 2, 3));
    assert!(config.tie_word_embeddings);
}

#[test]
fn truncation_anywhere_is_a_clear_error() {
    let bytes = files::tiny_model().to_bytes();
    for cut in (0..bytes.len()).step_by(7) {
        let err = open_bytes(&bytes[..cut]).expect_err("a truncated file must not open");
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                CheckpointError::Truncated { .. }
                    | CheckpointError::NotGguf { .. }
                    | CheckpointError::ImpossibleCount { .. }
                    | CheckpointError::TensorOutOfRange { .. }
                    | CheckpointError::DataPastEnd { .. }
            ),
            "cut at {cut}: {msg}"
        );
    }
}

#[test]
fn wrong_magic_and_version() {
    let mut bytes = files::tiny_model().to_bytes();
    bytes[0] = b'X';
    assert!(open_bytes(&bytes).unwrap_err().to_string().contains("is not a GGUF file"));
    let mut bytes = files::tiny_model().to_bytes();
    bytes[4] = 1;
    assert!(matches!(open_bytes(&bytes), Err(CheckpointError::UnsupportedVersion(1))));
}

#[test]
fn unknown_tensor_type_is_named() {
    let mut w = GgufWriter::new();
    w.tensor_raw("weird.weight", &[32], 99, vec![0; 64]);
    let err = open_bytes(&w.to_bytes()).unwrap_err();
    assert_eq!(err.to_string(), "tensor `weird.weight` has unknown GGML type id 99");
    let mut w = GgufWriter::new();
    w.tensor_raw("iq.weight", &[256], GgmlType::IQ2_XXS.id(), vec![0; 66]);
    assert!(matches!(open_bytes(&w.to_bytes()), Err(CheckpointError::UnsupportedTensorType { .. })));
}

#[test]
fn out_of_range_and_size_mismatch() {
    // Declared shape needs more bytes than the file has.
    let mut w = GgufWriter::new();
    w.tensor("big.weight", &[32, 1000], GgmlType::Q4_0, vec![0; 18]);
    assert!(matches!(open_bytes(&w.to_bytes()), Err(CheckpointError::TensorOutOfRange { .. })));
    // Row length that is not a whole number of blocks.
    let mut w = GgufWriter::new();
    w.tensor("odd.weight", &[33], GgmlType::Q4_0, vec![0; 36]);
    let err = open_bytes(&w.to_bytes()).unwrap_err().to_string();
    assert!(err.contains("not a whole number of quantization blocks"), "{err}");
    // An offset pointing past the end, written by hand into a valid file.
    let mut bytes = files::tiny_model().to_bytes();
    let pos = bytes.windows(18).position(|w| w == b"output_norm.weight").unwrap();
    // name(18) + rank u32 + 1 dim u64 + type u32 → offset field.
    let off_at = pos + 18 + 4 + 8 + 4;
    bytes[off_at..off_at + 8].copy_from_slice(&(1u64 << 20).to_le_bytes());
    let err = open_bytes(&bytes).unwrap_err();
    assert!(matches!(err, CheckpointError::TensorOutOfRange { ref name, .. } if name == "output_norm.weight"), "{err}");
}

#[test]
fn zero_size_tensor_with_data_offset_past_the_end_is_an_error() {
    let mut w = GgufWriter::new();
    w.meta("general.alignment", MetaValue::U32(4096));
    w.tensor("empty.weight", &[0], GgmlType::F32, vec![]);
    let mut bytes = w.to_bytes();
    // Cut the padding: the aligned data offset now lies past the end of the file.
    let header_end = bytes.windows(12).position(|x| x == b"empty.weight").unwrap() + 12 + 4 + 8 + 4 + 8;
    bytes.truncate(header_end);
    let err = open_bytes(&bytes).expect_err("refused").to_string();
    assert!(err.contains("past the end of the"), "{err}");
}

#[test]
fn misaligned_overlapping_and_duplicate() {
    let mut bytes = files::tiny_model().to_bytes();
    let pos = bytes.windows(18).position(|w| w == b"output_norm.weight").unwrap();
    let off_at = pos + 18 + 4 + 8 + 4;
    let old = u64::from_le_bytes(bytes[off_at..off_at + 8].try_into().unwrap());
    bytes[off_at..off_at + 8].copy_from_slice(&(old + 1).to_le_bytes());
    assert!(matches!(open_bytes(&bytes), Err(CheckpointError::MisalignedTensor { .. })));
    bytes[off_at..off_at + 8].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(open_bytes(&bytes), Err(CheckpointError::OverlappingTensors { .. })));
    let mut w = GgufWriter::new();
    w.meta("a", MetaValue::U8(1)).meta("a", MetaValue::U8(2));
    assert!(matches!(open_bytes(&w.to_bytes()), Err(CheckpointError::DuplicateKey(k)) if k == "a"));
}

#[test]
fn impossible_counts_do_not_allocate() {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(u64::MAX.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    assert!(matches!(open_bytes(&bytes), Err(CheckpointError::ImpossibleCount { .. })));
    let mut w = GgufWriter::new();
    w.meta("x", MetaValue::Array { elem_type: 4, items: vec![] });
    let mut bytes = w.to_bytes();
    // Array length field sits after key(8+1) + type(4) + elem type(4) at offset 24.
    bytes[24 + 9 + 4 + 4..24 + 9 + 4 + 4 + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(matches!(open_bytes(&bytes), Err(CheckpointError::ImpossibleCount { .. })));
}

#[test]
fn missing_metadata_is_named() {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()));
    let file = open_bytes(&w.to_bytes()).unwrap();
    let err = ModelConfig::from_gguf(&file).unwrap_err();
    assert_eq!(err.to_string(), "metadata key `llama.attention.head_count` is missing");
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::U32(3));
    let file = open_bytes(&w.to_bytes()).unwrap();
    let err = ModelConfig::from_gguf(&file).unwrap_err().to_string();
    assert_eq!(err, "metadata key `general.architecture` should be a string, found u32");
}

/// Bytes of `path`'s mappings that are resident in this process (from /proc/self/smaps).
fn mapped_rss(path: &std::path::Path) -> u64 {
    let path = path.canonicalize().unwrap().display().to_string();
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut in_file = false;
    let mut total = 0;
    for line in smaps.lines() {
        if line.contains('-') && line.split_whitespace().count() >= 5 && !line.ends_with(" kB") {
            in_file = line.ends_with(&path);
        } else if in_file && line.starts_with("Rss:") {
            total += line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024;
        }
    }
    total
}

#[test]
fn default_model_opens_without_reading_its_weights() {
    let path = files::default_model();
    let file = GgufFile::open(&path).unwrap();
    let resident = mapped_rss(&path);
    let config = ModelConfig::from_gguf(&file).unwrap();
    assert_eq!(config.architecture, "LlamaForCausalLM");
    assert_eq!((config.num_hidden_layers, config.hidden_size, config.vocab_size), (30, 576, 49152));
    assert_eq!(file.tensors.len(), 272);
    assert_eq!(file.tensor("token_embd.weight").unwrap().ty, GgmlType::Q8_0);
    // Parsing touches the header (about 1.7 MB of vocabulary and merges); the 96 MB of tensor
    // data must stay untouched.
    assert!(resident > 0, "the mapping of {} was not found in smaps", path.display());
    assert!(resident < file.data_offset + (1 << 20), "{resident} bytes of the mapping are resident");
}
