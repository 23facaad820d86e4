//! The checks every hybrid linear-attention fixture (fixtures/qwen3_5, qwen3_5_moe, qwen3_next)
//! goes through, parametrized by the fixture's folder: plumb's float64 graph and CPU backend
//! against transformers' logits at every position, and exact equality on the CPU whatever the
//! step kind — prefill in chunks of 1 (token-by-token decode), 3, 64 or whole; lanes batched ==
//! solo; a lane restarted in a used state slot == a fresh one.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_core::{Backend, ForwardBatch, FullBackend, LaneView};
use plumb_models::CausalLm;
use plumb_verify::nrms;
use serde_json::Value;
use std::path::{Path, PathBuf};

pub const BLOCK: usize = 16;

/// One fixture folder under fixtures/.
#[derive(Clone, Copy, Debug)]
pub struct Fixture(pub &'static str);

impl Fixture {
    pub fn dir(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures").join(self.0)
    }

    pub fn hf(&self) -> PathBuf {
        self.dir().join("hf")
    }

    pub fn manifest(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir().join("manifest.json")).unwrap()).unwrap()
    }

    pub fn vocab(&self) -> usize {
        self.manifest()["vocab_size"].as_u64().unwrap() as usize
    }

    pub fn num_prompts(&self) -> usize {
        self.manifest()["prompts"].as_array().unwrap().len()
    }

    /// Prompt i followed by its float64 greedy continuation, and the prompt's length.
    pub fn sequence(&self, i: usize) -> (Vec<u32>, usize) {
        let m = self.manifest();
        let p = &m["prompts"][i];
        let mut tokens = ids(&p["prompt_ids"]);
        let n_prompt = tokens.len();
        tokens.extend(ids(&p["greedy_f64"]));
        (tokens, n_prompt)
    }

    /// The index of the longest sequence.
    pub fn longest(&self) -> usize {
        (0..self.num_prompts()).max_by_key(|&i| self.sequence(i).0.len()).unwrap()
    }
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
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

pub fn load<B: FullBackend + 'static>(dir: &Path, b: &B) -> Box<dyn CausalLm<B>> {
    plumb_models::load_model_with(&HfCheckpoint::open(dir).unwrap(), b, None).unwrap()
}

/// Logits of every position of `tokens` in one lane (state slot 0), prefilled in steps of
/// `chunk` tokens (`usize::MAX`: one step).
pub fn logits<B: FullBackend>(model: &dyn CausalLm<B>, b: &B, tokens: &[u32], chunk: usize) -> Vec<f64> {
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

/// Bitwise equality of two logit vectors, naming the first differing position.
pub fn assert_same(a: &[f64], b: &[f64], vocab: usize, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    assert!(a.iter().all(|x| x.is_finite()), "{what}: non-finite logits");
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x.to_bits() != y.to_bits()) {
        panic!("{what}: first difference at position {} ({} vs {})", i / vocab, a[i], b[i]);
    }
}

/// The float64 graph within 1e-10 of transformers' float64 logits at every position (and its
/// greedy choices equal to transformers' on the continuations), and the CPU within 4× the
/// float32 floor (transformers' float32 vs its float64).
pub fn matches_transformers_float64(f: Fixture) {
    let m = f.manifest();
    let vocab = f.vocab();
    let (reference, cpu) = (RefBackend::<f64>::new(2), CpuBackend::new(2));
    let (model_ref, model_cpu) = (load(&f.hf(), &reference), load(&f.hf(), &cpu));
    let (mut ref_worst, mut cpu_worst, mut floor_worst) = (0f64, 0f64, 0f64);
    for (i, p) in m["prompts"].as_array().unwrap().iter().enumerate() {
        let (tokens, n_prompt) = f.sequence(i);
        let file = |key: &str| f.dir().join(p["files"][key]["file"].as_str().unwrap());
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
    eprintln!("{}: float64 graph {ref_worst:.3e}, cpu {cpu_worst:.3e}, float32 floor {floor_worst:.3e}", f.0);
    assert!(ref_worst < 1e-10, "{}: float64 graph vs transformers: {ref_worst:e}", f.0);
    assert!(
        cpu_worst.is_finite() && cpu_worst < 4.0 * floor_worst,
        "{}: cpu {cpu_worst:e} vs 4× the floor {floor_worst:e}",
        f.0
    );
}

/// The longest sequence prefilled in chunks of 1 (token-by-token decode: the logits at position
/// i come from a one-token step after the first i), 3 and 64 equals one whole prefill, bit for bit.
pub fn chunked_prefill_equals_whole(f: Fixture) {
    let cpu = CpuBackend::new(2);
    let model = load(&f.hf(), &cpu);
    let (tokens, _) = f.sequence(f.longest());
    assert!(tokens.len() > 128, "{}: the long sequence must cross several 64-token chunks", f.0);
    let whole = logits(model.as_ref(), &cpu, &tokens, usize::MAX);
    for chunk in [1, 3, 64] {
        let got = logits(model.as_ref(), &cpu, &tokens, chunk);
        assert_same(&got, &whole, f.vocab(), &format!("{}: chunks of {chunk} vs whole", f.0));
    }
}

/// Logits of the rows of each lane after prefilling `seqs[i]` in lane i (state slot
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

/// Eight lanes (the fixture's sequences, shifted), in shuffled state slots, each advancing its
/// own chunk size per step, equal each lane computed alone.
pub fn eight_lanes_batched_equal_each_alone(f: Fixture) {
    let cpu = CpuBackend::new(2);
    let model = load(&f.hf(), &cpu);
    let n = f.num_prompts();
    let seqs: Vec<Vec<u32>> = (0..8).map(|i| f.sequence(i % n).0[i / n..].to_vec()).collect();
    let slots = [3, 7, 0, 5, 1, 6, 2, 4];
    let chunks = [1, 5, 64, 2, 17, 300, 3, 8];
    let together = batched(model.as_ref(), &cpu, &seqs, &slots, &chunks);
    for (i, seq) in seqs.iter().enumerate() {
        let alone = logits(model.as_ref(), &cpu, seq, usize::MAX);
        assert_same(&together[i], &alone, f.vocab(), &format!("{}: lane {i} batched vs alone", f.0));
    }
}

/// A sequence restarted at position 0 in a state slot and blocks another one used (as a
/// preempted request is recomputed) equals it on a fresh cache; continuing a lane anywhere but
/// where its state left off panics.
pub fn a_restarted_lane_equals_a_fresh_one_and_a_gap_is_refused(f: Fixture) {
    let cpu = CpuBackend::new(2);
    let model = load(&f.hf(), &cpu);
    let n = f.num_prompts();
    let (a, b) = (f.sequence(1 % n).0, f.sequence(0).0);
    let blocks = a.len().max(b.len()).div_ceil(BLOCK);
    let mut kv = cpu.new_kv_cache(&model.kv_spec(BLOCK, blocks));
    let table: Vec<u32> = (0..blocks as u32).collect();
    model.forward(&cpu, &ForwardBatch::single_lane(&a, 0, BLOCK, table.clone()), &mut kv, None);
    let restarted =
        cpu.download_f64(&model.forward(&cpu, &ForwardBatch::single_lane(&b, 0, BLOCK, table.clone()), &mut kv, None));
    let fresh = logits(model.as_ref(), &cpu, &b, usize::MAX);
    assert_same(&restarted, &fresh, f.vocab(), &format!("{}: restarted vs fresh", f.0));
    let gap = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        model.forward(&cpu, &ForwardBatch::single_lane(&a[..1], b.len() + 1, BLOCK, table.clone()), &mut kv, None);
    }));
    assert!(gap.is_err(), "{}: a step that skips positions of a lane's state must panic", f.0);
}
