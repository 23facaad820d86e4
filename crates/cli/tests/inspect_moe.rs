//! `plumb inspect` describes a mixture-of-experts checkpoint's experts — count, top-k, expert FFN
//! width, which layers are sparse, parameters and bytes of all experts and of one token's — for a
//! Hugging Face folder (fixtures/qwen3_moe/hf: layer 1 dense) and a llama.cpp-converted GGUF
//! whose experts are stacked per layer (fixtures/qwen3_moe/gguf); a dense model has no section.

#[path = "support/plumb.rs"]
mod support;

use serde_json::Value;
use std::path::PathBuf;
use support::{plumb, text};

fn fixture(rel: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(rel).to_str().unwrap().to_string()
}

fn inspect(path: &str, json: bool) -> String {
    let out = plumb().arg("inspect").arg(path).args(json.then_some("--json")).output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn experts_are_described_for_folders_and_ggufs() {
    // hidden 64, expert FFN 16: gate and up [16, 64], down [64, 16] → 3 × 1024 parameters an expert.
    let per_expert = 3 * 16 * 64;
    // (path, sparse layers, bytes of one expert's three matrices)
    let cases = [
        ("qwen3_moe/hf", vec![0, 2], 4 * per_expert),
        // F32: 4 bytes a value.
        ("qwen3_moe/gguf/model-f32.gguf", vec![0, 1], 4 * per_expert),
        // Q8_0 gate and up: 16 rows of two 34-byte blocks; the 16-wide down stays F16.
        ("qwen3_moe/gguf/model-q8_0.gguf", vec![0, 1], 2 * 16 * 2 * 34 + 2 * 64 * 16),
    ];
    for (rel, sparse, expert_bytes) in cases {
        let r: Value = serde_json::from_str(&inspect(&fixture(rel), true)).unwrap();
        let x = &r["experts"];
        let n = sparse.len() as u64;
        assert_eq!(x["num_experts"], 8, "{rel}");
        assert_eq!(x["experts_per_token"], 2, "{rel}");
        assert_eq!(x["expert_ffn_size"], 16, "{rel}");
        assert_eq!(x["norm_topk_prob"], true, "{rel}");
        assert_eq!(x["sparse_layers"], serde_json::json!(sparse), "{rel}");
        assert_eq!(x["expert_params"], n * 8 * per_expert as u64, "{rel}");
        assert_eq!(x["active_expert_params"], n * 2 * per_expert as u64, "{rel}");
        assert_eq!(x["expert_bytes"], n * 8 * expert_bytes as u64, "{rel}");
        assert_eq!(x["active_expert_bytes"], n * 2 * expert_bytes as u64, "{rel}");
    }
    let table = inspect(&fixture("qwen3_moe/hf"), false);
    for want in ["8 per layer, 2 per token (weights renormalized), FFN size 16", "sparse layers    2 of 3: 0, 2"] {
        assert!(table.contains(want), "{want:?} in {table}");
    }
    let dense: Value = serde_json::from_str(&inspect(&fixture("qwen3/hf"), true)).unwrap();
    assert!(dense.get("experts").is_none());
}
