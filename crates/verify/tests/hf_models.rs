//! Hugging Face model folders (config.json + safetensors, rotate-half RoPE) against transformers'
//! true float64 logits: the tiny random Qwen3 of fixtures/qwen3 (per-head QK RMSNorm, untied head)
//! and the HF copies of fixtures/llama_variants (the same models plumb also reads as llama.cpp
//! GGUF, there with Q/K rows permuted into adjacent pairs). plumb's float64 graph and the CPU
//! backend are compared on every position of every prompt, with the float64 greedy continuation.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_core::{ForwardBatch, FullBackend};
use plumb_verify::nrms;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn logits<B: FullBackend + 'static>(ckpt: &HfCheckpoint, b: &B, tokens: &[u32]) -> Vec<f64> {
    let model = plumb_models::load_model_with(ckpt, b, None).unwrap();
    let blocks = tokens.len().div_ceil(16);
    let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
    let batch = ForwardBatch::single_lane(tokens, 0, 16, (0..blocks as u32).collect());
    b.download_f64(&model.forward(b, &batch, &mut kv, None))
}

fn read_floats(path: &Path, width: usize) -> Vec<f64> {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .chunks_exact(width)
        .map(|b| match width {
            8 => f64::from_le_bytes(b.try_into().unwrap()),
            _ => f32::from_le_bytes(b.try_into().unwrap()) as f64,
        })
        .collect()
}

/// (worst NRMS of plumb's float64 graph, of the CPU, of transformers' float32) over every
/// position of every prompt, asserting the float64 greedy continuation along the way.
fn compare(dir: &Path) -> (f64, f64, f64) {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    let ckpt = HfCheckpoint::open(dir.join("hf")).unwrap();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (mut ref_worst, mut cpu_worst, mut floor_worst) = (0f64, 0f64, 0f64);
    for p in m["prompts"].as_array().unwrap() {
        let mut tokens = ids(&p["prompt_ids"]);
        let n_prompt = tokens.len();
        tokens.extend(ids(&p["greedy_f64"]));
        let file = |key: &str| dir.join(p["files"][key]["file"].as_str().unwrap());
        let (want, floor) = (read_floats(&file("logits_f64"), 8), read_floats(&file("logits_f32"), 4));
        let (got_ref, got_cpu) = (logits(&ckpt, &reference, &tokens), logits(&ckpt, &cpu, &tokens));
        assert_eq!(want.len(), tokens.len() * vocab);
        for pos in 0..tokens.len() {
            let row = pos * vocab..(pos + 1) * vocab;
            ref_worst = ref_worst.max(nrms(&got_ref[row.clone()], &want[row.clone()]));
            cpu_worst = cpu_worst.max(nrms(&got_cpu[row.clone()], &want[row.clone()]));
            floor_worst = floor_worst.max(nrms(&floor[row.clone()], &want[row.clone()]));
            if pos + 1 >= n_prompt && pos + 1 < tokens.len() {
                let best =
                    (0..vocab).fold(0, |b, i| if got_ref[pos * vocab + i] > got_ref[pos * vocab + b] { i } else { b });
                assert_eq!(best as u32, tokens[pos + 1], "{}: float64 greedy differs at position {pos}", dir.display());
            }
        }
    }
    assert!(ref_worst.is_finite() && cpu_worst.is_finite());
    eprintln!("{}: float64 graph {ref_worst:.3e}, cpu {cpu_worst:.3e}, float32 floor {floor_worst:.3e}", dir.display());
    (ref_worst, cpu_worst, floor_worst)
}

#[test]
fn qwen3_folder_matches_transformers_float64() {
    let (reference, cpu, floor) = compare(&fixtures().join("qwen3"));
    assert!(reference < 1e-10, "float64 graph vs transformers: {reference:e}");
    assert!(cpu < 4.0 * floor, "cpu {cpu:e} vs 4× the float32 floor {floor:e}");
}

#[test]
fn llama_folders_match_transformers_float64_in_rotate_half_layout() {
    for model in ["llama3_rope", "llama_bias"] {
        let (reference, cpu, floor) = compare(&fixtures().join("llama_variants").join(model));
        assert!(reference < 1e-10, "{model}: float64 graph vs transformers: {reference:e}");
        assert!(cpu < 4.0 * floor, "{model}: cpu {cpu:e} vs 4× the float32 floor {floor:e}");
    }
}
