//! Llama checkpoints converted by llama.cpp's own converter (fixtures/llama_variants): Llama-3 RoPE
//! scaling carried as the GGUF `rope_freqs` tensor, and attention/MLP biases (q/k biases permuted
//! like their weights). plumb's float64 graph and the CPU backend must match transformers' true
//! float64 logits on every position of every prompt, and the float64 greedy continuation.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::{ForwardBatch, FullBackend};
use plumb_verify::nrms;
use serde_json::Value;
use std::path::PathBuf;

fn dir(model: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/llama_variants").join(model)
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn logits<B: FullBackend + 'static>(file: &GgufFile, b: &B, tokens: &[u32]) -> Vec<f64> {
    let model = plumb_models::load_model_with(file, b, None).unwrap();
    let blocks = tokens.len().div_ceil(16);
    let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
    let batch = ForwardBatch::single_lane(tokens, 0, 16, (0..blocks as u32).collect());
    b.download_f64(&model.forward(b, &batch, &mut kv, None))
}

/// (worst NRMS of plumb's float64 graph, worst NRMS of the CPU, worst float32 floor) over every
/// position of every prompt, asserting the float64 greedy continuation along the way.
fn compare(model: &str) -> (f64, f64, f64) {
    let m: Value = serde_json::from_str(&std::fs::read_to_string(dir(model).join("manifest.json")).unwrap()).unwrap();
    let file = GgufFile::open(dir(model).join(m["gguf"]["file"].as_str().unwrap())).unwrap();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (mut ref_worst, mut cpu_worst, mut floor_worst) = (0f64, 0f64, 0f64);
    for p in m["prompts"].as_array().unwrap() {
        let mut tokens = ids(&p["prompt_ids"]);
        let n_prompt = tokens.len();
        tokens.extend(ids(&p["greedy_f64"]));
        let read = |key: &str, width: usize| -> Vec<f64> {
            let bytes = std::fs::read(dir(model).join(p["files"][key]["file"].as_str().unwrap())).unwrap();
            bytes
                .chunks_exact(width)
                .map(|b| {
                    if width == 8 {
                        f64::from_le_bytes(b.try_into().unwrap())
                    } else {
                        f32::from_le_bytes(b.try_into().unwrap()) as f64
                    }
                })
                .collect()
        };
        let (want, floor) = (read("logits_f64", 8), read("logits_f32", 4));
        let (got_ref, got_cpu) = (logits(&file, &reference, &tokens), logits(&file, &cpu, &tokens));
        assert_eq!(want.len(), tokens.len() * vocab);
        for pos in 0..tokens.len() {
            let row = pos * vocab..(pos + 1) * vocab;
            ref_worst = ref_worst.max(nrms(&got_ref[row.clone()], &want[row.clone()]));
            cpu_worst = cpu_worst.max(nrms(&got_cpu[row.clone()], &want[row.clone()]));
            floor_worst = floor_worst.max(nrms(&floor[row.clone()], &want[row.clone()]));
            if pos + 1 >= n_prompt && pos + 1 < tokens.len() {
                let best =
                    (0..vocab).fold(0, |b, i| if got_ref[pos * vocab + i] > got_ref[pos * vocab + b] { i } else { b });
                assert_eq!(best as u32, tokens[pos + 1], "{model}: float64 greedy differs at position {pos}");
            }
        }
    }
    assert!(ref_worst.is_finite() && cpu_worst.is_finite());
    eprintln!(
        "{model}: float64 graph {ref_worst:.3e}, cpu {cpu_worst:.3e}, transformers float32 floor {floor_worst:.3e}"
    );
    (ref_worst, cpu_worst, floor_worst)
}

#[test]
fn llama3_rope_scaling_from_gguf_rope_freqs_matches_transformers() {
    let (reference, cpu, floor) = compare("llama3_rope");
    // The GGUF stores the factors in float32 (2.44225955 for 2.44225939 in float64): one
    // frequency off by 6.6e-8 relative. Transformers itself, in float64 with the GGUF's float32
    // factors, lands at 1.2654e-6 worst NRMS from its own float64 fixture (measured with the
    // fixture venv); plumb's float64 graph gives the same 1.2654e-6. The format's rounding is
    // the whole difference, so the bound sits just above it.
    assert!(reference < 1.5e-6, "float64 graph vs transformers: {reference:e}");
    assert!(cpu < 4.0 * floor, "cpu {cpu:e} vs 4× the float32 floor {floor:e}");
}

#[test]
fn llama_biases_match_transformers() {
    let (reference, cpu, floor) = compare("llama_bias");
    // Float32 weights read exactly: float64 against float64, only the order of sums differs
    // (and eps is stored as float32 in the GGUF). Measured 4.8e-12: this random model's gain
    // (projections at 2/√fan_in) amplifies rounding more than the default model's (2.8e-14).
    // A modelling mistake shows as 1e-3 or more (a q/k bias not permuted like its weight: 0.51).
    assert!(reference < 1e-10, "float64 graph vs transformers: {reference:e}");
    assert!(cpu < 4.0 * floor, "cpu {cpu:e} vs 4× the float32 floor {floor:e}");
}
