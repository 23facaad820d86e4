//! What `plumb inspect` and the load report say about a hybrid linear-attention model's memory
//! (the tiny Qwen3.5 of fixtures/qwen3_5: 3 Gated DeltaNet layers and 1 full-attention layer):
//! KV per token for the attention layer only, a constant lane state per sequence for the
//! others, and whether the prefix cache resumes from state snapshots. crates/engine's
//! hybrid_memory test measures the same figures in the allocations.

#[path = "support/plumb.rs"]
mod support;

use std::path::PathBuf;
use support::{plumb, text};

fn fixture() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_5/hf").display().to_string()
}

#[test]
fn inspect_and_the_load_report_show_kv_for_attention_layers_and_a_constant_lane_state() {
    let out = plumb().args(["inspect", &fixture()]).output().unwrap();
    let report = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // 1 layer × 2 KV heads × 32 × (K, V) × 4 bytes; 3 layers × (3 × 128 + 4 × 16 × 16) × 4 bytes.
    for want in [
        "512 bytes per token (K and V of 1 attention layers, f32)",
        "16.5 KiB per sequence in 3 linear-attention layers, constant in the context length",
    ] {
        assert!(report.contains(want), "{want:?} in {report}");
    }
    let out = plumb().args(["inspect", "--json", &fixture()]).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = &json["memory"];
    assert_eq!(
        [&m["kv_layers"], &m["kv_bytes_per_token"], &m["state_layers"], &m["state_bytes_per_sequence"]],
        [1, 512, 3, 16896]
    );

    let out = plumb()
        .args(["run", "--model", &fixture(), "--raw", "--temperature", "0", "-n", "4", "Hello"])
        .env("PLUMB_EXPERIMENTAL", "qwen3_5")
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    let want = "lane state: 16.5 KiB per lane in 3 linear-attention layers, constant in the context length; \
                KV only for the other 1 layers (512 bytes per token); prefix cache resumes from lane-state snapshots";
    assert!(err.contains(want), "{want:?} in {err}");
}
