//! A tiny Qwen3-MoE (fixtures/qwen3_moe/gguf/hf: `plumb synth`, every layer sparse, because
//! llama.cpp's qwen3moe has no dense layers) converted to GGUF by llama.cpp's own
//! `convert_hf_to_gguf.py` (F32 and Q8_0) loads in plumb — the router from `ffn_gate_inp`, each
//! expert's matrices cut from the stacked `ffn_{gate,up,down}_exps` tensors — and computes what
//! the safetensors folder computes: the F32 file the very same logits on the CPU, the Q8_0 file
//! logits that differ only by the rounding of its weights. With 8 experts, top-2 and 40-token
//! prompts, every expert gets rows, so every cut is read.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::{Checkpoint, CheckpointRef};
use plumb_core::{ForwardBatch, FullBackend, GgmlType};
use plumb_verify::nrms;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_moe/gguf").join(rel)
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

/// Prompts of 1, 7 and 40 tokens (ids spread over the 384-token vocabulary; the converted
/// tokenizer's ids are checked in plumb-engine's tokenizer_fixtures).
fn prompts() -> Vec<Vec<u32>> {
    [1u32, 7, 40].iter().map(|&n| (0..n).map(|i| (i * 97 + n * 13 + 5) % 384).collect()).collect()
}

#[test]
fn the_converted_f32_gguf_computes_what_the_safetensors_folder_computes() {
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (hf, gguf) = (fixture("hf"), fixture("model-f32.gguf"));
    for (i, tokens) in prompts().iter().enumerate() {
        let (cpu_hf, cpu_gguf) = (logits(&hf, &cpu, tokens), logits(&gguf, &cpu, tokens));
        assert!(cpu_hf.iter().all(|v| v.is_finite()) && cpu_hf.len() == tokens.len() * 384);
        let same_bits = cpu_hf.iter().zip(&cpu_gguf).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same_bits, "prompt {i}: the CPU's logits from the GGUF differ from the safetensors'");
        let exact = nrms(&logits(&gguf, &reference, tokens), &logits(&hf, &reference, tokens));
        assert!(exact == 0.0, "prompt {i}: float64 graph, GGUF vs safetensors: {exact:e}");
    }
}

#[test]
fn the_converted_q8_0_gguf_differs_only_by_its_rounding() {
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let file = fixture("model-q8_0.gguf");
    let (mut rounding, mut cpu_vs_ref) = (0f64, 0f64);
    for tokens in prompts() {
        let got_ref = logits(&file, &reference, &tokens);
        rounding = rounding.max(nrms(&got_ref, &logits(&fixture("hf"), &reference, &tokens)));
        cpu_vs_ref = cpu_vs_ref.max(nrms(&logits(&file, &cpu, &tokens), &got_ref));
    }
    eprintln!("Q8_0: float64 graph vs safetensors {rounding:.3e}; cpu vs float64 graph {cpu_vs_ref:.3e}");
    // Bound: measured 9.4e-2, above the dense Qwen3's 2.8e-2 for the same format, probably because
    // routing is discrete: a rounding that reorders two close router scores sends a row to another
    // expert. That the experts themselves are read right is `every_expert_matrix_is_its_own_slice`.
    assert!(rounding > 1e-7 && rounding < 0.2, "the weights' rounding moved logits by {rounding:e}");
    assert!(cpu_vs_ref < 1e-5, "cpu vs float64 graph {cpu_vs_ref:e}");
}

/// Each expert's matrix read from the stacked GGUF tensors equals the folder's matrix of the same
/// name: exactly from the F32 file, within the format's rounding from the Q8_0 file (half a step
/// of a 32-value block's largest / 127, plus up to 127 · 2^-11 steps because the step itself is
/// stored as F16); a slice of another expert is off by hundreds of steps.
#[test]
fn every_expert_matrix_is_its_own_slice() {
    let hf = Checkpoint::open(fixture("hf")).unwrap();
    let values = |ckpt: CheckpointRef<'_>, name: &str| {
        let v = ckpt.weight(name).unwrap().unwrap_or_else(|| panic!("{name} is missing"));
        let mut out = vec![0f32; v.rows * v.cols];
        plumb_core::dequantize(v.ty, v.data, &mut out).unwrap();
        (v.ty, (v.rows, v.cols), out)
    };
    for file in ["model-f32.gguf", "model-q8_0.gguf"] {
        let gguf = Checkpoint::open(fixture(file)).unwrap();
        let names = gguf.as_ref().weight_names();
        let experts: Vec<&String> = names.iter().filter(|n| n.contains(".mlp.experts.")).collect();
        assert_eq!(experts.len(), 2 * 8 * 3, "{file}: 2 layers × 8 experts × gate, up, down");
        let mut sorted_hf = hf.as_ref().weight_names();
        let mut sorted_gguf = names.clone();
        sorted_hf.sort();
        sorted_gguf.sort();
        assert_eq!(sorted_gguf, sorted_hf, "{file}: the same tensors by Hugging Face name");
        for name in experts {
            let (_, shape, want) = values(hf.as_ref(), name);
            let (ty, got_shape, got) = values(gguf.as_ref(), name);
            assert_eq!(got_shape, shape, "{file}: {name}");
            for (block, (g, w)) in got.chunks(32).zip(want.chunks(32)).enumerate() {
                let step = match ty {
                    GgmlType::Q8_0 => w.iter().fold(0f32, |m, x| m.max(x.abs())) / 127.0,
                    GgmlType::F16 => w.iter().fold(0f32, |m, x| m.max(x.abs())) * 2f32.powi(-10),
                    _ => 0.0,
                };
                let worst = g.iter().zip(w).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
                assert!(worst <= step * 0.57 + 1e-7, "{file}: {name} block {block}: off by {worst} ({ty:?})");
            }
        }
    }
}
