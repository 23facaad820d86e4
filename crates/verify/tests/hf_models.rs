//! Hugging Face model folders (config.json + safetensors, rotate-half RoPE) against transformers'
//! true float64 logits: the tiny random Qwen3 of fixtures/qwen3 (per-head QK RMSNorm, untied head),
//! the tiny random Qwen3-MoE of fixtures/qwen3_moe (8 experts top-2 in two layers, one dense layer)
//! and the HF copies of fixtures/llama_variants (the same models plumb also reads as llama.cpp
//! GGUF, there with Q/K rows permuted into adjacent pairs). plumb's float64 graph and the CPU
//! backend are compared on every position of every prompt, with the float64 greedy continuation.
//! BF16 and F16 copies of the Qwen3 weights load too and differ only by the weights' rounding;
//! `tie_word_embeddings` decides whether the head is `lm_head` or the token embeddings.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::{HfCheckpoint, SafetensorsFile};
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
fn qwen3_moe_folder_matches_transformers_float64() {
    let (reference, cpu, floor) = compare(&fixtures().join("qwen3_moe"));
    assert!(reference < 1e-10, "float64 graph vs transformers: {reference:e}");
    assert!(cpu < 4.0 * floor, "cpu {cpu:e} vs 4× the float32 floor {floor:e}");
}

/// The worst float64 NRMS against the fixture of the qwen3_moe folder with `edit` applied to its
/// config.json, on the first prompt.
fn qwen3_moe_edited(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> f64 {
    let src = fixtures().join("qwen3_moe");
    let dir = tempfile::tempdir().unwrap();
    for name in ["model.safetensors", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join("hf").join(name), dir.path().join(name)).unwrap();
    }
    let text = std::fs::read_to_string(src.join("hf/config.json")).unwrap();
    let Value::Object(mut config) = serde_json::from_str(&text).unwrap() else { unreachable!() };
    edit(&mut config);
    std::fs::write(dir.path().join("config.json"), Value::Object(config).to_string()).unwrap();
    let m: Value = serde_json::from_str(&std::fs::read_to_string(src.join("manifest.json")).unwrap()).unwrap();
    let p = &m["prompts"][0];
    let mut tokens = ids(&p["prompt_ids"]);
    tokens.extend(ids(&p["greedy_f64"]));
    let want = read_floats(&src.join(p["files"]["logits_f64"]["file"].as_str().unwrap()), 8);
    let got = logits(&HfCheckpoint::open(dir.path()).unwrap(), &RefBackend::<f64>::new(2), &tokens);
    let vocab = want.len() / tokens.len();
    (0..tokens.len())
        .map(|r| nrms(&got[r * vocab..(r + 1) * vocab], &want[r * vocab..(r + 1) * vocab]))
        .fold(0.0, f64::max)
}

#[test]
fn the_qwen3_moe_fixture_tells_the_routing_settings_apart() {
    // The fixture as it is: the float64 graph agrees to rounding.
    assert!(qwen3_moe_edited(|_| {}) < 1e-10);
    // Each wrong routing setting moves the logits far beyond that.
    let wrong: [(&str, Value); 3] =
        [("norm_topk_prob", false.into()), ("num_experts_per_tok", 3.into()), ("num_experts_per_tok", 1.into())];
    for (key, value) in wrong {
        let err = qwen3_moe_edited(|c| drop(c.insert(key.into(), value.clone())));
        eprintln!("{key} = {value}: float64 NRMS {err:.3e}");
        assert!(err > 1e-3, "{key} = {value}: {err:e}");
    }
}

#[test]
fn llama_folders_match_transformers_float64_in_rotate_half_layout() {
    for model in ["llama3_rope", "llama_bias"] {
        let (reference, cpu, floor) = compare(&fixtures().join("llama_variants").join(model));
        assert!(reference < 1e-10, "{model}: float64 graph vs transformers: {reference:e}");
        assert!(cpu < 4.0 * floor, "{model}: cpu {cpu:e} vs 4× the float32 floor {floor:e}");
    }
}

/// One float32 value → its 2-byte little-endian encoding in a half-width format.
type Convert = fn(f32) -> [u8; 2];

/// Writes `dir/model.safetensors` holding `src`'s F32 tensors converted by `convert` to `dtype`.
fn write_converted(src: &SafetensorsFile, dir: &Path, dtype: &str, convert: Convert) {
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = src
        .tensors()
        .iter()
        .map(|t| {
            let bytes =
                src.tensor_data(t).chunks_exact(4).flat_map(|v| convert(f32::from_le_bytes(v.try_into().unwrap())));
            (t.name.clone(), t.shape.clone(), bytes.collect())
        })
        .collect();
    write_safetensors(dir, dtype, &tensors);
}

/// Writes `dir/model.safetensors` holding (name, shape, bytes) tensors, all of `dtype`.
fn write_safetensors(dir: &Path, dtype: &str, tensors: &[(String, Vec<usize>, Vec<u8>)]) {
    let (mut header, mut data) = (serde_json::Map::new(), Vec::<u8>::new());
    for (name, shape, bytes) in tensors {
        let begin = data.len();
        data.extend(bytes);
        let entry = serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [begin, data.len()]});
        header.insert(name.clone(), entry);
    }
    let header = serde_json::Value::Object(header).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

#[test]
fn bf16_and_f16_weights_load_and_differ_only_by_rounding() {
    let f32_dir = fixtures().join("qwen3/hf");
    let src = SafetensorsFile::open(f32_dir.join("model.safetensors")).unwrap();
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("qwen3/manifest.json")).unwrap()).unwrap();
    let tokens = ids(&m["prompts"][0]["prompt_ids"]);
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let exact = logits(&HfCheckpoint::open(&f32_dir).unwrap(), &reference, &tokens);
    // Bounds: measured 1.2e-2 (BF16) and 1.3e-3 (F16) — about 6× each format's unit roundoff
    // (2^-9, 2^-12), this random model's gain — with room for 2.5–3×.
    let formats: [(&str, Convert, f64); 2] = [
        ("BF16", |v| half::bf16::from_f32(v).to_le_bytes(), 3e-2),
        ("F16", |v| half::f16::from_f32(v).to_le_bytes(), 4e-3),
    ];
    for (dtype, convert, bound) in formats {
        let dir = tempfile::tempdir().unwrap();
        for name in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
            std::fs::copy(f32_dir.join(name), dir.path().join(name)).unwrap();
        }
        write_converted(&src, dir.path(), dtype, convert);
        let ckpt = HfCheckpoint::open(dir.path()).unwrap();
        let (got_ref, got_cpu) = (logits(&ckpt, &reference, &tokens), logits(&ckpt, &cpu, &tokens));
        let rounding = nrms(&got_ref, &exact);
        let cpu_vs_ref = nrms(&got_cpu, &got_ref);
        eprintln!("{dtype}: float64 graph vs F32 weights {rounding:.3e}; cpu vs float64 graph {cpu_vs_ref:.3e}");
        // The weights did change, by their format's rounding, and the CPU computes with them as
        // the float64 graph does, to float32 accuracy.
        assert!(rounding > 1e-6 && rounding < bound, "{dtype}: {rounding:e}");
        assert!(cpu_vs_ref < 1e-5, "{dtype}: cpu vs float64 graph {cpu_vs_ref:e}");
    }
}

/// A copy of the Qwen3 fixture folder with `tie_word_embeddings` set as given and its weights
/// with `lm_head.weight` (a copy of the token embeddings) kept or dropped.
fn tied_variant(tie: bool, keep_lm_head: bool) -> tempfile::TempDir {
    let src_dir = fixtures().join("qwen3/hf");
    let src = SafetensorsFile::open(src_dir.join("model.safetensors")).unwrap();
    let embed = src.tensor_data(src.tensor("model.embed_tokens.weight").unwrap()).to_vec();
    let tensors: Vec<(String, Vec<usize>, Vec<u8>)> = src
        .tensors()
        .iter()
        .filter(|t| keep_lm_head || t.name != "lm_head.weight")
        .map(|t| {
            let bytes = if t.name == "lm_head.weight" { embed.clone() } else { src.tensor_data(t).to_vec() };
            (t.name.clone(), t.shape.clone(), bytes)
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(src_dir.join("config.json")).unwrap();
    let config = config.replace("\"tie_word_embeddings\": false", &format!("\"tie_word_embeddings\": {tie}"));
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    write_safetensors(dir.path(), "F32", &tensors);
    dir
}

#[test]
fn a_tied_head_is_the_token_embeddings_and_a_stray_lm_head_is_refused() {
    let reference = RefBackend::<f64>::new(2);
    let tokens = [5, 77, 300, 12, 9];
    // Untied with lm_head = embed_tokens must equal tied without lm_head, bit for bit.
    let untied = logits(&HfCheckpoint::open(tied_variant(false, true).path()).unwrap(), &reference, &tokens);
    let tied = logits(&HfCheckpoint::open(tied_variant(true, false).path()).unwrap(), &reference, &tokens);
    assert_eq!(untied, tied);
    let stray = tied_variant(true, true);
    let err = plumb_models::load_model_with(&HfCheckpoint::open(stray.path()).unwrap(), &reference, None)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("lm_head.weight"), "{err}");
    let missing = tied_variant(false, false);
    let err = plumb_models::load_model_with(&HfCheckpoint::open(missing.path()).unwrap(), &reference, None)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("`lm_head.weight` is missing"), "{err}");
}
