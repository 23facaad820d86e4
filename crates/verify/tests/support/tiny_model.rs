//! A tiny Llama-shaped GGUF with random weights, for gate tests that must run in seconds.
#![allow(dead_code)]

use plumb_checkpoint::MetaValue;
use plumb_checkpoint::gguf::writer::GgufWriter;
use plumb_core::GgmlType;
use plumb_verify::inputs::{Rng, weight_bytes};
use std::path::PathBuf;

pub const VOCAB: usize = 96;

/// Optional parts of the tiny model.
#[derive(Clone, Copy, Debug, Default)]
pub struct Extras {
    /// Biases on every attention and MLP projection.
    pub biases: bool,
    /// Llama-3 RoPE scaling as GGUF carries it (`rope_freqs.weight`).
    pub rope_freqs: bool,
    /// An extra tensor no graph reads.
    pub stray_tensor: Option<&'static str>,
    /// Attention heads (default 4: head_dim 16).
    pub heads: Option<u32>,
}

/// Writes the model to a fresh temporary file and returns its path.
pub fn write(seed: u64) -> PathBuf {
    write_with(seed, Extras::default())
}

/// [`write`] with optional parts.
pub fn write_with(seed: u64, extras: Extras) -> PathBuf {
    let (hidden, ffn, layers, heads, kv_heads) = (64u64, 128u64, 2, extras.heads.unwrap_or(4), 2u32);
    let head_dim = hidden / heads as u64;
    let mut rng = Rng::new(seed);
    let mut w = GgufWriter::new();
    w.meta("general.architecture", MetaValue::String("llama".into()))
        .meta("llama.block_count", MetaValue::U32(layers))
        .meta("llama.context_length", MetaValue::U32(256))
        .meta("llama.embedding_length", MetaValue::U32(hidden as u32))
        .meta("llama.feed_forward_length", MetaValue::U32(ffn as u32))
        .meta("llama.attention.head_count", MetaValue::U32(heads))
        .meta("llama.attention.head_count_kv", MetaValue::U32(kv_heads))
        .meta("llama.attention.layer_norm_rms_epsilon", MetaValue::F32(1e-5))
        .meta("llama.rope.freq_base", MetaValue::F32(10000.0))
        .meta("llama.vocab_size", MetaValue::U32(VOCAB as u32));
    let mut quant = |w: &mut GgufWriter, name: &str, ty: GgmlType, cols: u64, rows: u64, scale: f64| {
        let mut bytes = weight_bytes(&mut rng, ty, rows as usize, cols as usize);
        if ty == GgmlType::F32 {
            // Norm weights (rows == 1) sit around 1; matrices are N(0, scale²).
            let center = if rows == 1 { 1.0 } else { 0.0 };
            bytes = (0..rows * cols).flat_map(|_| ((center + scale * rng.normal()) as f32).to_le_bytes()).collect();
        }
        w.tensor(name, &[cols, rows], ty, bytes);
    };
    quant(&mut w, "token_embd.weight", GgmlType::Q8_0, hidden, VOCAB as u64, 0.0);
    for i in 0..layers {
        let p = format!("blk.{i}");
        quant(&mut w, &format!("{p}.attn_norm.weight"), GgmlType::F32, hidden, 1, 0.1);
        // Strong q/k so attention depends on positions (an off-by-one RoPE must show).
        quant(&mut w, &format!("{p}.attn_q.weight"), GgmlType::F32, hidden, hidden, 0.4);
        quant(&mut w, &format!("{p}.attn_k.weight"), GgmlType::F32, hidden, kv_heads as u64 * head_dim, 0.4);
        quant(&mut w, &format!("{p}.attn_v.weight"), GgmlType::Q8_0, hidden, kv_heads as u64 * head_dim, 0.0);
        quant(&mut w, &format!("{p}.attn_output.weight"), GgmlType::Q4_1, hidden, hidden, 0.0);
        quant(&mut w, &format!("{p}.ffn_norm.weight"), GgmlType::F32, hidden, 1, 0.1);
        quant(&mut w, &format!("{p}.ffn_gate.weight"), GgmlType::F16, hidden, ffn, 0.0);
        quant(&mut w, &format!("{p}.ffn_up.weight"), GgmlType::Q4_1, hidden, ffn, 0.0);
        quant(&mut w, &format!("{p}.ffn_down.weight"), GgmlType::Q8_0, ffn, hidden, 0.0);
    }
    quant(&mut w, "output_norm.weight", GgmlType::F32, hidden, 1, 0.1);
    if extras.biases {
        for i in 0..layers {
            let kv = kv_heads as u64 * head_dim;
            for (name, len) in [
                ("attn_q", hidden),
                ("attn_k", kv),
                ("attn_v", kv),
                ("attn_output", hidden),
                ("ffn_gate", ffn),
                ("ffn_up", ffn),
                ("ffn_down", hidden),
            ] {
                let bytes = (0..len).flat_map(|_| ((0.3 * rng.normal()) as f32).to_le_bytes()).collect();
                w.tensor(&format!("blk.{i}.{name}.bias"), &[len], GgmlType::F32, bytes);
            }
        }
    }
    if extras.rope_freqs {
        // Factors as llama.cpp writes Llama-3 scaling: 1 for high frequencies, up to 8 for low.
        let half = head_dim / 2;
        let bytes = (0..half).flat_map(|i| (1.0f32 + 7.0 * i as f32 / (half - 1) as f32).to_le_bytes()).collect();
        w.tensor("rope_freqs.weight", &[half], GgmlType::F32, bytes);
    }
    if let Some(name) = extras.stray_tensor {
        w.tensor(name, &[16], GgmlType::F32, vec![0; 64]);
    }
    let tag = format!("{}{}{}", extras.biases as u8, extras.rope_freqs as u8, extras.heads.unwrap_or(4));
    // One file per call: tests of one process run on parallel threads and delete their files.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!(
        "plumb-tiny-{seed}-{tag}-{}-{}-{call}.gguf",
        std::process::id(),
        extras.stray_tensor.map_or(0, str::len)
    ));
    std::fs::write(&path, w.to_bytes()).unwrap();
    path
}
