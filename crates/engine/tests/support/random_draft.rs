//! A deliberately bad draft model: a small Llama with random weights and the target's own
//! tokenizer (so it is a valid draft for it), written as a GGUF file.
#![allow(dead_code)]

use plumb_checkpoint::gguf::writer::GgufWriter;
use plumb_checkpoint::{GgufFile, MetaValue};
use plumb_core::GgmlType;
use std::path::PathBuf;

/// The tokenizer keys a GGUF carries, copied from the target when present.
const TOKENIZER_KEYS: &[&str] = &[
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.chat_template",
];

/// Writes the draft for `target` (hidden size 64, 2 layers, weights from `seed`) to a fresh file.
pub fn write(target: &GgufFile, seed: u64) -> PathBuf {
    let vocab = target.get_array("tokenizer.ggml.tokens").unwrap().len() as u64;
    // head_dim 32: the CUDA attention kernels take multiples of 32.
    let (hidden, ffn, layers, heads, kv_heads) = (64u64, 128u64, 2u32, 2u32, 1u32);
    let head_dim = hidden / heads as u64;
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("llama.block_count", MetaValue::U32(layers))
        .meta("llama.context_length", MetaValue::U32(8192))
        .meta("llama.embedding_length", MetaValue::U32(hidden as u32))
        .meta("llama.feed_forward_length", MetaValue::U32(ffn as u32))
        .meta("llama.attention.head_count", MetaValue::U32(heads))
        .meta("llama.attention.head_count_kv", MetaValue::U32(kv_heads))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5))
        .meta("llama.rope.freq_base", MetaValue::F32(10000.0))
        .meta("llama.vocab_size", MetaValue::U32(vocab as u32));
    for key in TOKENIZER_KEYS {
        if let Some(v) = target.get(key) {
            w.meta(key, v.clone());
        }
    }
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut f32s = |w: &mut GgufWriter, name: &str, cols: u64, rows: u64, center: f32, scale: f32| {
        let bytes = (0..rows * cols)
            .flat_map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let u = (state >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
                (center + scale * (2.0 * u - 1.0)).to_le_bytes()
            })
            .collect();
        w.tensor(name, &[cols, rows], GgmlType::F32, bytes);
    };
    let s = 1.0 / (hidden as f32).sqrt();
    f32s(&mut w, "token_embd.weight", hidden, vocab, 0.0, 1.0);
    for i in 0..layers {
        let p = format!("blk.{i}");
        f32s(&mut w, &format!("{p}.attn_norm.weight"), hidden, 1, 1.0, 0.1);
        f32s(&mut w, &format!("{p}.attn_q.weight"), hidden, hidden, 0.0, s);
        f32s(&mut w, &format!("{p}.attn_k.weight"), hidden, kv_heads as u64 * head_dim, 0.0, s);
        f32s(&mut w, &format!("{p}.attn_v.weight"), hidden, kv_heads as u64 * head_dim, 0.0, s);
        f32s(&mut w, &format!("{p}.attn_output.weight"), hidden, hidden, 0.0, s);
        f32s(&mut w, &format!("{p}.ffn_norm.weight"), hidden, 1, 1.0, 0.1);
        f32s(&mut w, &format!("{p}.ffn_gate.weight"), hidden, ffn, 0.0, s);
        f32s(&mut w, &format!("{p}.ffn_up.weight"), hidden, ffn, 0.0, s);
        f32s(&mut w, &format!("{p}.ffn_down.weight"), ffn, hidden, 0.0, 1.0 / (ffn as f32).sqrt());
    }
    f32s(&mut w, "output_norm.weight", hidden, 1, 1.0, 0.1);
    // One file per call: tests of one process run on parallel threads.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("plumb-random-draft-{seed}-{}-{call}.gguf", std::process::id()));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}
