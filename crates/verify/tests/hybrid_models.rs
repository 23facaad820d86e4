//! The hybrid linear-attention families against transformers and against themselves: the tiny
//! random Qwen3.5 of fixtures/qwen3_5 (three Gated DeltaNet layers, one gated full-attention
//! layer) on plumb's float64 graph and the CPU, at every position of prompts up to 298 tokens
//! (transformers' chunked delta rule over several 64-token chunks); then exact equality on the
//! CPU whatever the step kind: prefill in chunks of 1 (token-by-token decode), 3, 64 or whole,
//! 8 lanes batched == solo, a lane restarted in a used state slot == a fresh one; and the
//! vision-language layout (text model nested, vision tower ignored by name) == the flat one.

#[path = "support/faulty.rs"]
mod faulty;

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_core::{Backend, ForwardBatch, FullBackend, LaneView};
use plumb_models::CausalLm;
use plumb_verify::nrms;
use serde_json::Value;
use std::path::{Path, PathBuf};

const BLOCK: usize = 16;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/qwen3_5")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("manifest.json")).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Prompt i followed by its float64 greedy continuation.
fn sequence(m: &Value, i: usize) -> (Vec<u32>, usize) {
    let p = &m["prompts"][i];
    let mut tokens = ids(&p["prompt_ids"]);
    let n_prompt = tokens.len();
    tokens.extend(ids(&p["greedy_f64"]));
    (tokens, n_prompt)
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

fn load<B: FullBackend + 'static>(dir: &Path, b: &B) -> Box<dyn CausalLm<B>> {
    plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), b, None).unwrap()
}

/// Logits of every position of `tokens` in one lane (state slot 0), prefilled in steps of
/// `chunk` tokens (`usize::MAX`: one step).
fn logits<B: FullBackend>(model: &dyn CausalLm<B>, b: &B, tokens: &[u32], chunk: usize) -> Vec<f64> {
    let blocks = tokens.len().div_ceil(BLOCK);
    let mut kv = b.new_kv_cache(&model.kv_spec(BLOCK, blocks));
    let mut out = Vec::new();
    for (i, part) in tokens.chunks(chunk.min(tokens.len())).enumerate() {
        let start = i * chunk.min(tokens.len());
        let batch = ForwardBatch::single_lane(part, start, BLOCK, (0..blocks as u32).collect());
        out.extend(b.download_f64(&model.forward(b, &batch, &mut kv, None)));
    }
    out
}

#[test]
fn qwen3_5_matches_transformers_float64() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let dir = fixture().join("hf");
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (model_ref, model_cpu) = (load(&dir, &reference), load(&dir, &cpu));
    let (mut ref_worst, mut cpu_worst, mut floor_worst) = (0f64, 0f64, 0f64);
    for (i, p) in m["prompts"].as_array().unwrap().iter().enumerate() {
        let (tokens, n_prompt) = sequence(&m, i);
        let file = |key: &str| fixture().join(p["files"][key]["file"].as_str().unwrap());
        let (want, floor) = (read_floats(&file("logits_f64"), 8), read_floats(&file("logits_f32"), 4));
        let got_ref = logits(model_ref.as_ref(), &reference, &tokens, usize::MAX);
        let got_cpu = logits(model_cpu.as_ref(), &cpu, &tokens, usize::MAX);
        assert_eq!(want.len(), tokens.len() * vocab);
        for pos in 0..tokens.len() {
            let row = pos * vocab..(pos + 1) * vocab;
            ref_worst = ref_worst.max(nrms(&got_ref[row.clone()], &want[row.clone()]));
            cpu_worst = cpu_worst.max(nrms(&got_cpu[row.clone()], &want[row.clone()]));
            floor_worst = floor_worst.max(nrms(&floor[row.clone()], &want[row.clone()]));
            if pos + 1 >= n_prompt && pos + 1 < tokens.len() {
                let best =
                    (0..vocab).fold(0, |b, j| if got_ref[row.start + j] > got_ref[row.start + b] { j } else { b });
                assert_eq!(best as u32, tokens[pos + 1], "prompt {i}: float64 greedy differs at position {pos}");
            }
        }
    }
    eprintln!("qwen3_5: float64 graph {ref_worst:.3e}, cpu {cpu_worst:.3e}, float32 floor {floor_worst:.3e}");
    assert!(ref_worst < 1e-10, "float64 graph vs transformers: {ref_worst:e}");
    assert!(
        cpu_worst.is_finite() && cpu_worst < 4.0 * floor_worst,
        "cpu {cpu_worst:e} vs 4× the floor {floor_worst:e}"
    );
}

/// Bitwise equality of two logit vectors, naming the first differing position.
fn assert_same(a: &[f64], b: &[f64], vocab: usize, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    assert!(a.iter().all(|x| x.is_finite()), "{what}: non-finite logits");
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()) {
        panic!("{what}: first difference at position {} ({} vs {})", i / vocab, a[i], b[i]);
    }
}

#[test]
fn chunked_prefill_equals_whole_equals_token_by_token_on_the_cpu() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let cpu = CpuBackend::new(2);
    let model = load(&fixture().join("hf"), &cpu);
    // The long prompt: 298 tokens, crossing transformers' 64-token chunks and plumb's KV blocks.
    let (tokens, _) = sequence(&m, 5);
    let whole = logits(model.as_ref(), &cpu, &tokens, usize::MAX);
    for chunk in [1, 3, 64] {
        let got = logits(model.as_ref(), &cpu, &tokens, chunk);
        assert_same(&got, &whole, vocab, &format!("chunks of {chunk} vs whole"));
    }
}

/// Logits of the last row of each lane after prefilling `seqs[i]` in lane i (state slot
/// `slots[i]`, blocks of its own), all lanes in every step, each lane advancing `chunk[i]`
/// tokens per step.
fn batched(
    model: &dyn CausalLm<CpuBackend>,
    b: &CpuBackend,
    seqs: &[Vec<u32>],
    slots: &[u32],
    chunk: &[usize],
) -> Vec<Vec<f64>> {
    let per_lane = seqs.iter().map(|s| s.len().div_ceil(BLOCK)).max().unwrap();
    let n = seqs.len();
    let mut kv = b.new_kv_cache(&model.kv_spec_for_lanes(BLOCK, per_lane * n, n));
    let lanes: Vec<LaneView> =
        (0..n).map(|i| LaneView { block_table: (0..per_lane).map(|j| (i * per_lane + j) as u32).collect() }).collect();
    let mut done = vec![0usize; n];
    let mut out = vec![Vec::new(); n];
    while done.iter().zip(seqs).any(|(d, s)| *d < s.len()) {
        let mut batch =
            ForwardBatch { block_size: BLOCK, lanes: lanes.clone(), state_slots: slots.to_vec(), ..Default::default() };
        let mut owners = Vec::new();
        // Lanes in reverse order, so a lane's rows are not where its index would put them.
        for i in (0..n).rev() {
            let end = (done[i] + chunk[i]).min(seqs[i].len());
            for (pos, &token) in seqs[i].iter().enumerate().take(end).skip(done[i]) {
                batch.push_row(i, token, pos);
                batch.logits_rows.push(batch.num_rows() as u32 - 1);
                owners.push(i);
            }
            done[i] = end;
        }
        let logits = b.download_f64(&model.forward(b, &batch, &mut kv, None));
        let vocab = logits.len() / owners.len();
        for (r, &i) in owners.iter().enumerate() {
            out[i].extend_from_slice(&logits[r * vocab..(r + 1) * vocab]);
        }
    }
    out
}

#[test]
fn eight_lanes_batched_equal_each_lane_alone() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let cpu = CpuBackend::new(2);
    let model = load(&fixture().join("hf"), &cpu);
    let seqs: Vec<Vec<u32>> = (0..8).map(|i| sequence(&m, i % 6).0[i / 6..].to_vec()).collect();
    let slots = [3, 7, 0, 5, 1, 6, 2, 4];
    let chunks = [1, 5, 64, 2, 17, 300, 3, 8];
    let together = batched(model.as_ref(), &cpu, &seqs, &slots, &chunks);
    for (i, seq) in seqs.iter().enumerate() {
        let alone = logits(model.as_ref(), &cpu, seq, usize::MAX);
        assert_same(&together[i], &alone, vocab, &format!("lane {i} batched vs alone"));
    }
}

#[test]
fn a_restarted_lane_equals_a_fresh_one_and_a_gap_is_refused() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let cpu = CpuBackend::new(2);
    let model = load(&fixture().join("hf"), &cpu);
    let (a, b) = (sequence(&m, 1).0, sequence(&m, 2).0);
    let blocks = a.len().max(b.len()).div_ceil(BLOCK);
    let mut kv = cpu.new_kv_cache(&model.kv_spec(BLOCK, blocks));
    let table: Vec<u32> = (0..blocks as u32).collect();
    // Slot 0 absorbs `a`, then `b` restarts at position 0 in the same slot and blocks (as a
    // preempted request is recomputed): it must equal `b` on a fresh cache.
    model.forward(&cpu, &ForwardBatch::single_lane(&a, 0, BLOCK, table.clone()), &mut kv, None);
    let restarted =
        cpu.download_f64(&model.forward(&cpu, &ForwardBatch::single_lane(&b, 0, BLOCK, table.clone()), &mut kv, None));
    assert_same(&restarted, &logits(model.as_ref(), &cpu, &b, usize::MAX), vocab, "restarted vs fresh");
    // Continuing `b` anywhere but where its state left off is a runner bug, refused loudly.
    let gap = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.forward(&cpu, &ForwardBatch::single_lane(&a[..1], b.len() + 1, BLOCK, table.clone()), &mut kv, None);
    }));
    assert!(gap.is_err(), "a step that skips positions of a lane's state must panic");
}

/// The fixture rewritten as `Qwen3_5ForConditionalGeneration` stores it: the text config nested
/// under `text_config`, the text weights under `model.language_model.`, plus a vision tower and
/// an MTP head, with `extra` added to the tensors.
fn vision_language_copy(dir: &Path, extra: Option<&str>) {
    let src = fixture().join("hf");
    let text: Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    let config = serde_json::json!({
        "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
        "text_config": text, "vision_config": {"depth": 1}, "image_token_id": 300, "video_token_id": 301,
        "vision_start_token_id": 302, "vision_end_token_id": 303, "tie_word_embeddings": false,
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    for name in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(name), dir.join(name)).unwrap();
    }
    let st = plumb_checkpoint::SafetensorsFile::open(src.join("model.safetensors")).unwrap();
    let (mut header, mut data) = (serde_json::Map::new(), Vec::<u8>::new());
    let mut put = |name: String, shape: Vec<usize>, bytes: &[u8]| {
        let begin = data.len();
        data.extend_from_slice(bytes);
        header.insert(name, serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [begin, data.len()]}));
    };
    for t in st.tensors() {
        let name = t.name.replacen("model.", "model.language_model.", 1);
        put(name, t.shape.clone(), st.tensor_data(t));
    }
    put("model.visual.blocks.0.attn.qkv.weight".into(), vec![2, 2], &[0u8; 16]);
    put("mtp.fc.weight".into(), vec![2, 2], &[0u8; 16]);
    if let Some(name) = extra {
        put(name.into(), vec![2], &[0u8; 8]);
    }
    let header = Value::Object(header).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend(header.as_bytes());
    bytes.extend(data);
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

#[test]
fn the_vision_language_layout_loads_its_text_model_and_names_what_it_ignores() {
    let m = manifest();
    let vocab = m["vocab_size"].as_u64().unwrap() as usize;
    let cpu = CpuBackend::new(2);
    let (tokens, _) = sequence(&m, 0);
    let flat = logits(load(&fixture().join("hf"), &cpu).as_ref(), &cpu, &tokens, usize::MAX);
    let dir = tempfile::tempdir().unwrap();
    vision_language_copy(dir.path(), None);
    let nested = logits(load(dir.path(), &cpu).as_ref(), &cpu, &tokens, usize::MAX);
    assert_same(&nested, &flat, vocab, "vision-language layout vs flat");
    // A tensor outside the ignore list is still refused.
    let dir = tempfile::tempdir().unwrap();
    vision_language_copy(dir.path(), Some("model.language_model.layers.0.linear_attn.extra"));
    let Err(err) = plumb_models::load_model_with(&HfCheckpoint::open(dir.path()).unwrap(), &cpu, None) else {
        panic!("an unlisted tensor must be refused");
    };
    assert!(err.to_string().contains("model.language_model.layers.0.linear_attn.extra"), "{err}");
}

#[test]
fn a_backend_without_gated_delta_kernels_is_refused_before_loading() {
    // The test support backend wraps the CPU's op groups but does not offer Gated DeltaNet kernels.
    let b = faulty::Faulty { inner: CpuBackend::new(1), fault: faulty::Fault::None };
    assert!(b.gated_delta_ops().is_none());
    let Err(err) = plumb_models::load_model_with(&HfCheckpoint::open(fixture().join("hf")).unwrap(), &b, None) else {
        panic!("a backend without Gated DeltaNet kernels must be refused");
    };
    let msg = err.to_string();
    assert!(msg.contains("Gated DeltaNet") && msg.contains("qwen3_5"), "{msg}");
}
