//! The whole-model gate for one family on one backend.
//! For each control (a prompt and a number of tokens): the family graph on `RefBackend<f64>`
//! generates greedily — that sequence and its logits are the truth; the same graph on
//! `RefBackend<f32>` is teacher-forced on it (the floor: what float32 arithmetic alone costs);
//! the backend under test is teacher-forced on it in one batch and again in odd chunks (batch
//! invariance, exact), and generates greedily on its own (greedy agreement).
//! The gate passes when the backend's mean and worst per-position NRMS stay within
//! `floor_multiple` × the floor's (plus `abs_allowance` for backends that quantize
//! activations), every control agrees token for token, and the chunked logits are bit-identical.

use plumb_backend_ref::RefBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::{ForwardBatch, FullBackend};
use plumb_models::{CausalLm, ModelError};

/// One greedy control.
#[derive(Clone, Debug)]
pub struct Control {
    pub name: String,
    pub prompt: Vec<u32>,
    pub gen_len: usize,
}

/// The gate's tolerance and why.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct GateBound {
    pub floor_multiple: f64,
    pub abs_allowance: f64,
}

/// Per-control figures.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ControlReport {
    pub name: String,
    pub prompt_len: usize,
    pub gen_len: usize,
    pub nrms_mean: f64,
    pub nrms_max: f64,
    pub nrms_max_position: usize,
    pub floor_mean: f64,
    pub floor_max: f64,
    /// Generated tokens agree with the float64 greedy sequence.
    pub greedy_agrees: bool,
    /// First generated token that differs, with the float64 top-2 logit gap there.
    pub first_divergence: Option<(usize, f64)>,
    /// Teacher-forced logits in one batch equal those computed in 7-token chunks, bit for bit.
    pub invariant: bool,
}

/// The gate's verdict.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GateReport {
    pub backend: String,
    pub bound: GateBound,
    pub controls: Vec<ControlReport>,
    pub nrms_mean: f64,
    pub nrms_worst: f64,
    pub floor_mean: f64,
    pub floor_worst: f64,
    pub pass: bool,
    /// What failed, in words.
    pub failures: Vec<String>,
}

/// A model on a backend with its own KV cache, driven one lane at a time.
struct Runner<'a, B: FullBackend> {
    backend: &'a B,
    model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    block_size: usize,
    max_len: usize,
}

impl<'a, B: FullBackend + 'static> Runner<'a, B> {
    fn new(file: &GgufFile, backend: &'a B, max_len: usize) -> Result<Self, ModelError> {
        let model = plumb_models::load_model_with(file, backend, None)?;
        let block_size = 16;
        let kv = backend.new_kv_cache(&model.kv_spec(block_size, max_len.div_ceil(block_size)));
        Ok(Runner { backend, model, kv, block_size, max_len })
    }

    /// Logits ([rows, vocab] in float64) for `tokens` at positions `start..`, every row.
    fn forward(&mut self, tokens: &[u32], start: usize) -> Vec<f64> {
        assert!(start + tokens.len() <= self.max_len, "control longer than the gate's context");
        let table = (0..self.max_len.div_ceil(self.block_size) as u32).collect();
        let batch = ForwardBatch::single_lane(tokens, start, self.block_size, table);
        let logits = self.model.forward(self.backend, &batch, &mut self.kv, None);
        self.backend.download_f64(&logits)
    }

    /// Teacher-forced logits of `tokens` in chunks of `chunk` rows.
    fn teacher_forced(&mut self, tokens: &[u32], chunk: usize) -> Vec<f64> {
        let mut out = Vec::new();
        for start in (0..tokens.len()).step_by(chunk) {
            out.extend(self.forward(&tokens[start..(start + chunk).min(tokens.len())], start));
        }
        out
    }

    /// Greedy generation: the sequence (prompt + generated) and the logits of every position
    /// whose next token is in the sequence.
    fn greedy(&mut self, prompt: &[u32], gen_len: usize, vocab: usize) -> (Vec<u32>, Vec<f64>) {
        let mut seq = prompt.to_vec();
        let mut logits = self.forward(prompt, 0);
        for _ in 0..gen_len {
            let last = &logits[logits.len() - vocab..];
            let next = argmax(last);
            seq.push(next);
            if seq.len() == prompt.len() + gen_len {
                break;
            }
            let step = self.forward(&[next], seq.len() - 1);
            logits.extend(step);
        }
        (seq, logits)
    }
}

fn argmax(row: &[f64]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

fn top2_gap(row: &[f64]) -> f64 {
    let (mut a, mut b) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// Runs the gate for the model in `file` on `backend`; `ref_threads` parallelizes the reference.
pub fn run_gate<B: FullBackend + 'static>(
    file: &GgufFile,
    backend: &B,
    controls: &[Control],
    bound: GateBound,
    ref_threads: usize,
) -> Result<GateReport, ModelError> {
    let max_len = controls.iter().map(|c| c.prompt.len() + c.gen_len).max().unwrap_or(1);
    let f64_backend = RefBackend::<f64>::new(ref_threads);
    let f32_backend = RefBackend::<f32>::new(ref_threads);
    let mut truth = Runner::new(file, &f64_backend, max_len)?;
    let vocab = truth.model.config().vocab_size;
    let mut floor = Runner::new(file, &f32_backend, max_len)?;
    let mut test = Runner::new(file, backend, max_len)?;
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    for c in controls {
        let (seq, want) = truth.greedy(&c.prompt, c.gen_len, vocab);
        let inputs = &seq[..seq.len() - 1];
        let floor_logits = floor.teacher_forced(inputs, 256);
        let got = test.teacher_forced(inputs, 256);
        let got_chunked = test.teacher_forced(inputs, 7);
        let invariant = got.iter().zip(&got_chunked).all(|(a, b)| a.to_bits() == b.to_bits());
        let positions = inputs.len();
        let (mut sum, mut max, mut max_pos, mut fsum, mut fmax) = (0.0, 0f64, 0, 0.0, 0f64);
        for p in 0..positions {
            let r = &want[p * vocab..(p + 1) * vocab];
            let e = crate::nrms(&got[p * vocab..(p + 1) * vocab], r);
            let f = crate::nrms(&floor_logits[p * vocab..(p + 1) * vocab], r);
            sum += e;
            fsum += f;
            if e > max {
                (max, max_pos) = (e, p);
            }
            fmax = fmax.max(f);
        }
        let (generated, _) = test.greedy(&c.prompt, c.gen_len, vocab);
        let first_divergence =
            generated[c.prompt.len()..].iter().zip(&seq[c.prompt.len()..]).position(|(a, b)| a != b).map(|i| {
                let p = c.prompt.len() + i - 1;
                (i, top2_gap(&want[p * vocab..(p + 1) * vocab]))
            });
        if !invariant {
            failures.push(format!("{}: batch invariance broken — logits computed in one batch differ from logits computed in 7-token chunks", c.name));
        }
        if let Some((i, gap)) = first_divergence {
            failures.push(format!(
                "{}: greedy continuation diverges from float64 at generated token {i} (float64 top-2 gap {gap:.3e})",
                c.name
            ));
        }
        reports.push(ControlReport {
            name: c.name.clone(),
            prompt_len: c.prompt.len(),
            gen_len: c.gen_len,
            nrms_mean: sum / positions as f64,
            nrms_max: max,
            nrms_max_position: max_pos,
            floor_mean: fsum / positions as f64,
            floor_max: fmax,
            greedy_agrees: first_divergence.is_none(),
            first_divergence,
            invariant,
        });
    }
    let n = reports.len().max(1) as f64;
    let nrms_mean = reports.iter().map(|r| r.nrms_mean).sum::<f64>() / n;
    let floor_mean = reports.iter().map(|r| r.floor_mean).sum::<f64>() / n;
    let nrms_worst = reports.iter().map(|r| r.nrms_max).fold(0.0, f64::max);
    let floor_worst = reports.iter().map(|r| r.floor_max).fold(0.0, f64::max);
    let mean_limit = bound.floor_multiple * floor_mean + bound.abs_allowance;
    let worst_limit = bound.floor_multiple * floor_worst + bound.abs_allowance;
    if nrms_mean > mean_limit {
        failures.push(format!("logits NRMS vs float64 averages {nrms_mean:.3e}, above the bound {mean_limit:.3e} ({}× the float32 floor {floor_mean:.3e})", bound.floor_multiple));
    }
    if nrms_worst > worst_limit {
        let r = reports.iter().find(|r| r.nrms_max == nrms_worst).expect("worst comes from a control");
        failures.push(format!(
            "logits NRMS vs float64 reaches {nrms_worst:.3e} ({} position {}), above the bound {worst_limit:.3e} ({}× the float32 floor's worst {floor_worst:.3e})",
            r.name, r.nrms_max_position, bound.floor_multiple
        ));
    }
    Ok(GateReport {
        backend: backend.name(),
        bound,
        controls: reports,
        nrms_mean,
        nrms_worst,
        floor_mean,
        floor_worst,
        pass: failures.is_empty(),
        failures,
    })
}
