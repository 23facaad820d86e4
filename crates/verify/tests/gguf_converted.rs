//! The tiny Qwen3 of fixtures/qwen3 converted to GGUF by llama.cpp's own `convert_hf_to_gguf.py`
//! (tools/fixtures/convert_gguf.py; F32, F16 and Q8_0 in fixtures/qwen3/gguf) loads in plumb and
//! computes what the safetensors copy computes: the F32 file the very same logits, bit for bit on
//! the CPU, and transformers' float64 logits through the float64 graph; F16 and Q8_0 files differ
//! from them only by the rounding of their weights, and on those weights the CPU agrees with the
//! float64 graph to float32 accuracy. The converter's tokenizer gives transformers' ids.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::{Checkpoint, CheckpointRef};
use plumb_core::{ForwardBatch, FullBackend};
use plumb_verify::nrms;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3").join(rel)
}

fn logits<B: FullBackend + 'static>(path: &Path, b: &B, tokens: &[u32]) -> Vec<f64> {
    let ckpt = Checkpoint::open(path).unwrap();
    let ckpt: CheckpointRef<'_> = ckpt.as_ref();
    assert_eq!(matches!(ckpt, CheckpointRef::Gguf(_)), path.extension().is_some_and(|e| e == "gguf"));
    let model = plumb_models::load_model_with(ckpt, b, None).unwrap();
    let blocks = tokens.len().div_ceil(16);
    let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
    let batch = ForwardBatch::single_lane(tokens, 0, 16, (0..blocks as u32).collect());
    b.download_f64(&model.forward(b, &batch, &mut kv, None))
}

fn prompts() -> Vec<Vec<u32>> {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(fixture("manifest.json")).unwrap()).unwrap();
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    m["prompts"].as_array().unwrap().iter().map(|p| [ids(&p["prompt_ids"]), ids(&p["greedy_f64"])].concat()).collect()
}

/// transformers' float64 logits of prompt `i` (prompt then greedy continuation).
fn transformers_f64(i: usize) -> Vec<f64> {
    let bytes = std::fs::read(fixture(&format!("{i}.logits_f64.bin"))).unwrap();
    bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect()
}

#[test]
fn the_converted_f32_gguf_computes_what_the_safetensors_folder_computes() {
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (hf, gguf) = (fixture("hf"), fixture("gguf/model-f32.gguf"));
    for (i, tokens) in prompts().iter().enumerate() {
        let (cpu_hf, cpu_gguf) = (logits(&hf, &cpu, tokens), logits(&gguf, &cpu, tokens));
        assert!(cpu_hf.iter().all(|v| v.is_finite()));
        let same_bits = cpu_hf.iter().zip(&cpu_gguf).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same_bits, "prompt {i}: the CPU's logits from the GGUF differ from the safetensors'");
        let exact = nrms(&logits(&gguf, &reference, tokens), &transformers_f64(i));
        assert!(exact < 1e-10, "prompt {i}: float64 graph on the GGUF vs transformers float64: {exact:e}");
    }
}

#[test]
fn converted_f16_and_q8_0_ggufs_differ_only_by_their_rounding() {
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    // Bounds: measured 1.0e-3 (F16) and 2.8e-2 (Q8_0) worst over the prompts — each about its
    // format's relative step (2^-11; 2^-8 of a 32-value block's largest) times this random model's
    // gain — with room for 2–4×.
    for (file, bound) in [("gguf/model-f16.gguf", 4e-3), ("gguf/model-q8_0.gguf", 6e-2)] {
        let (mut rounding, mut cpu_vs_ref) = (0f64, 0f64);
        for (i, tokens) in prompts().iter().enumerate() {
            let got_ref = logits(&fixture(file), &reference, tokens);
            let got_cpu = logits(&fixture(file), &cpu, tokens);
            rounding = rounding.max(nrms(&got_ref, &transformers_f64(i)));
            cpu_vs_ref = cpu_vs_ref.max(nrms(&got_cpu, &got_ref));
        }
        eprintln!("{file}: float64 graph vs transformers {rounding:.3e}; cpu vs float64 graph {cpu_vs_ref:.3e}");
        assert!(rounding > 1e-7 && rounding < bound, "{file}: the weights' rounding moved logits by {rounding:e}");
        assert!(cpu_vs_ref < 1e-5, "{file}: cpu vs float64 graph {cpu_vs_ref:e}");
    }
}
