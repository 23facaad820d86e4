//! What a checkpoint holds must be what the graph uses: biases and RoPE frequency factors are
//! consumed (and pass the gate), a stray tensor is refused by name, and a head size the backend
//! cannot run is refused at load, not mid-step.

#[path = "support/tiny_model.rs"]
mod tiny_model;

use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::{Backend, ForwardBatch};
use plumb_verify::gate::{Control, GateBound, run_gate};
use tiny_model::Extras;

const BOUND: GateBound = GateBound { floor_multiple: 4.0, abs_allowance: 0.0, near_tie: 1e-3 };

fn controls() -> Vec<Control> {
    (0..2)
        .map(|i| Control { name: format!("control {i}"), prompt: vec![1 + i, 5, 9, 3 * i + 7], gen_len: 40 })
        .collect()
}

fn logits(path: &std::path::Path) -> Vec<f32> {
    let file = GgufFile::open(path).unwrap();
    let b = CpuBackend::new(1);
    let model = plumb_models::load_model(&file, &b).unwrap();
    let mut kv = b.new_kv_cache(&model.kv_spec(16, 4));
    let tokens: Vec<u32> = (0..40).map(|i| (i * 7 % 90) as u32).collect();
    let batch = ForwardBatch::single_lane(&tokens, 0, 16, (0..4).collect());
    b.download(&model.forward(&b, &batch, &mut kv, None))
}

#[test]
fn biases_are_used_and_pass_the_gate() {
    let plain = tiny_model::write(21);
    let biased = tiny_model::write_with(21, Extras { biases: true, ..Extras::default() });
    assert_ne!(logits(&plain), logits(&biased), "biases must change the output");
    let report = run_gate(&GgufFile::open(&biased).unwrap(), &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    assert!(report.pass, "{:#?}", report.failures);
    for p in [plain, biased] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn rope_frequency_factors_are_used_and_pass_the_gate() {
    let plain = tiny_model::write(22);
    let scaled = tiny_model::write_with(22, Extras { rope_freqs: true, ..Extras::default() });
    assert_ne!(logits(&plain), logits(&scaled), "rope_freqs must change the output");
    let report = run_gate(&GgufFile::open(&scaled).unwrap(), &CpuBackend::new(1), &controls(), BOUND, 1).unwrap();
    assert!(report.pass, "{:#?}", report.failures);
    for p in [plain, scaled] {
        std::fs::remove_file(p).unwrap();
    }
}

#[test]
fn a_tensor_the_graph_does_not_use_is_a_load_error_naming_it() {
    let path =
        tiny_model::write_with(23, Extras { stray_tensor: Some("blk.0.attn_sinks.weight"), ..Extras::default() });
    let file = GgufFile::open(&path).unwrap();
    let err = plumb_models::load_model(&file, &CpuBackend::new(1)).err().expect("refused").to_string();
    assert!(err.contains("does not use") && err.contains("blk.0.attn_sinks.weight"), "{err}");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_head_size_the_backend_cannot_run_is_refused_at_load() {
    // 64 / 8 heads = head_dim 8, below the CPU kernel's 16-lane width.
    let path = tiny_model::write_with(24, Extras { heads: Some(8), ..Extras::default() });
    let file = GgufFile::open(&path).unwrap();
    let err = plumb_models::load_model(&file, &CpuBackend::new(1)).err().expect("refused").to_string();
    assert!(err.contains("cannot run attention heads of 8 dimensions"), "{err}");
    std::fs::remove_file(path).unwrap();
}
