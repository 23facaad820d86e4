//! The hybrid linear-attention families against transformers and against themselves, on the tiny
//! random checkpoints of fixtures/qwen3_5 (dense), fixtures/qwen3_5_moe (experts + gated shared
//! expert) and fixtures/qwen3_next (fused interleaved projections, a dense layer among MoE
//! layers): plumb's float64 graph and the CPU at every position of sequences that cross
//! transformers' 64-token delta-rule chunks; then exact equality on the CPU whatever the step
//! kind: prefill in chunks of 1 (token-by-token decode), 3, 64 or whole, 8 lanes batched == solo,
//! a lane restarted in a used state slot == a fresh one; and the vision-language layouts (text
//! model nested, vision tower ignored by name; Qwen3.5-MoE's experts also fused) == the flat ones.

#[path = "support/faulty.rs"]
mod faulty;
#[path = "support/hybrid.rs"]
mod hybrid;

use hybrid::{Fixture, assert_same, load, logits};
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_core::Backend;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

const QWEN3_5: Fixture = Fixture("qwen3_5");
const QWEN3_5_MOE: Fixture = Fixture("qwen3_5_moe");
const QWEN3_NEXT: Fixture = Fixture("qwen3_next");

#[test]
fn qwen3_5_matches_transformers_float64() {
    hybrid::matches_transformers_float64(QWEN3_5);
}

#[test]
fn qwen3_5_moe_matches_transformers_float64() {
    hybrid::matches_transformers_float64(QWEN3_5_MOE);
}

#[test]
fn qwen3_next_matches_transformers_float64() {
    hybrid::matches_transformers_float64(QWEN3_NEXT);
}

#[test]
fn chunked_prefill_equals_whole_equals_token_by_token_on_the_cpu() {
    for f in [QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT] {
        hybrid::chunked_prefill_equals_whole(f);
    }
}

#[test]
fn eight_lanes_batched_equal_each_lane_alone() {
    for f in [QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT] {
        hybrid::eight_lanes_batched_equal_each_alone(f);
    }
}

#[test]
fn a_restarted_lane_equals_a_fresh_one_and_a_gap_is_refused() {
    for f in [QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT] {
        hybrid::a_restarted_lane_equals_a_fresh_one_and_a_gap_is_refused(f);
    }
}

/// A vision-language architecture and what its copy of a flat fixture holds.
struct VisionLanguage {
    architecture: &'static str,
    model_type: &'static str,
    /// Store the experts as transformers' modules hold them (`experts.gate_up_proj` [E, 2·I, H],
    /// `experts.down_proj` [E, H, I]) instead of one SwiGLU each.
    fuse_experts: bool,
}

/// Fuses `…mlp.experts.{e}.{gate,up,down}_proj.weight` into the two 3-D tensors per layer.
fn fuse_experts(tensors: Vec<(String, Vec<usize>, Vec<u8>)>) -> Vec<(String, Vec<usize>, Vec<u8>)> {
    let mut out = Vec::new();
    // layer prefix → expert → (gate, up, down) with shapes
    type Parts = BTreeMap<usize, [Option<(Vec<usize>, Vec<u8>)>; 3]>;
    let mut experts: BTreeMap<String, Parts> = BTreeMap::new();
    for (name, shape, bytes) in tensors {
        let Some((prefix, rest)) = name.split_once(".experts.") else {
            out.push((name, shape, bytes));
            continue;
        };
        let (e, proj) = rest.split_once('.').unwrap();
        let slot = ["gate_proj.weight", "up_proj.weight", "down_proj.weight"].iter().position(|p| *p == proj).unwrap();
        experts.entry(prefix.to_string()).or_default().entry(e.parse().unwrap()).or_default()[slot] =
            Some((shape, bytes));
    }
    for (prefix, by_expert) in experts {
        let n = by_expert.len();
        let [inter, hidden] = <[usize; 2]>::try_from(by_expert[&0][0].as_ref().unwrap().0.clone()).unwrap();
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        for parts in by_expert.values() {
            gate_up.extend(&parts[0].as_ref().unwrap().1);
            gate_up.extend(&parts[1].as_ref().unwrap().1);
            down.extend(&parts[2].as_ref().unwrap().1);
        }
        out.push((format!("{prefix}.experts.gate_up_proj"), vec![n, 2 * inter, hidden], gate_up));
        out.push((format!("{prefix}.experts.down_proj"), vec![n, hidden, inter], down));
    }
    out
}

/// The fixture rewritten as its vision-language checkpoint stores it: the text config nested
/// under `text_config`, the text weights under `model.language_model.`, plus a vision tower and
/// an MTP head, with `extra` added to the tensors.
fn vision_language_copy(f: Fixture, vl: &VisionLanguage, dir: &Path, extra: Option<&str>) {
    let src = f.hf();
    let text: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let config = serde_json::json!({
        "architectures": [vl.architecture], "model_type": vl.model_type,
        "text_config": text, "vision_config": {"depth": 1}, "image_token_id": 300, "video_token_id": 301,
        "vision_start_token_id": 302, "vision_end_token_id": 303, "tie_word_embeddings": false,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    for name in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    let st = plumb_checkpoint::SafetensorsFile::open(src.join("model.safetensors")).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = st
        .tensors()
        .iter()
        .map(|t| (t.name.replacen("model.", "model.language_model.", 1), t.shape.clone(), st.tensor_data(t).to_vec()))
        .collect();
    if vl.fuse_experts {
        tensors = fuse_experts(tensors);
    }
    tensors.push(("model.visual.blocks.0.attn.qkv.weight".into(), vec![2, 2], vec![0u8; 16]));
    tensors.push(("mtp.fc.weight".into(), vec![2, 2], vec![0u8; 16]));
    if let Some(name) = extra {
        tensors.push((name.into(), vec![2], vec![0u8; 8]));
    }
    let (mut header, mut data) = (serde_json::Map::new(), Vec::<u8>::new());
    for (name, shape, bytes) in tensors {
        let begin = data.len();
        data.extend_from_slice(&bytes);
        header.insert(name, serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [begin, data.len()]}));
    }
    let header = Value::Object(header).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

fn vision_language_loads_its_text_model_and_names_what_it_ignores(f: Fixture, vl: VisionLanguage) {
    let cpu = CpuBackend::new(2);
    let (tokens, _) = f.sequence(0);
    let flat = logits(load(&f.hf(), &cpu).as_ref(), &cpu, &tokens, usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    vision_language_copy(f, &vl, dir.path(), None);
    let nested = logits(load(dir.path(), &cpu).as_ref(), &cpu, &tokens, usize::MAX);
    assert_same(&nested, &flat, f.vocab(), &format!("{}: vision-language layout vs flat", f.0));
    // A tensor outside the ignore list is still refused.
    let dir = tempfile::tempdir().unwrap();
    vision_language_copy(f, &vl, dir.path(), Some("model.language_model.layers.0.linear_attn.extra"));
    let Err(err) = plumb_models::load_model_with(&HfCheckpoint::open(dir.path()).unwrap(), &cpu, None) else {
        panic!("an unlisted tensor must be refused");
    };
    assert!(err.to_string().contains("model.language_model.layers.0.linear_attn.extra"), "{err}");
}

#[test]
fn the_vision_language_layout_loads_its_text_model_and_names_what_it_ignores() {
    let vl =
        VisionLanguage { architecture: "Qwen3_5ForConditionalGeneration", model_type: "qwen3_5", fuse_experts: false };
    vision_language_loads_its_text_model_and_names_what_it_ignores(QWEN3_5, vl);
}

#[test]
fn qwen3_5_moe_vision_language_layout_with_fused_experts_equals_the_flat_one() {
    let vl = VisionLanguage {
        architecture: "Qwen3_5MoeForConditionalGeneration",
        model_type: "qwen3_5_moe",
        fuse_experts: true,
    };
    vision_language_loads_its_text_model_and_names_what_it_ignores(QWEN3_5_MOE, vl);
}

#[test]
fn a_backend_without_gated_delta_kernels_is_refused_before_loading() {
    // The test support backend wraps the CPU's op groups but does not offer Gated DeltaNet kernels.
    let b = faulty::Faulty { inner: CpuBackend::new(1), fault: faulty::Fault::None };
    assert!(b.gated_delta_ops().is_none());
    for f in [QWEN3_5, QWEN3_5_MOE, QWEN3_NEXT] {
        let Err(err) = plumb_models::load_model_with(&HfCheckpoint::open(f.hf()).unwrap(), &b, None) else {
            panic!("a backend without Gated DeltaNet kernels must be refused");
        };
        let msg = err.to_string();
        assert!(msg.contains("Gated DeltaNet") && msg.contains(f.0), "{msg}");
    }
}
