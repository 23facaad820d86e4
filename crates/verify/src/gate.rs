//! The whole-model gate for one family on one backend.
//! For each control (a prompt and a number of tokens): the family graph on `RefBackend<f64>`
//! generates greedily — that sequence and its logits are the truth; the same graph on
//! `RefBackend<f32>` is teacher-forced on it (the floor: what float32 arithmetic alone costs);
//! the backend under test is teacher-forced on it in one batch, again in 7-token chunks, and again
//! with every control at once in lanes that join and leave mid-stream (batch invariance, exact),
//! and generates greedily on its own (greedy agreement).
//! The gate passes when every logit and intermediate is finite, the backend's mean and worst
//! per-position NRMS stay within `floor_multiple` × the floor's (plus `abs_allowance` for backends
//! that quantize activations), greedy choices agree except at near-ties (float64 top-2 gap below
//! `near_tie`, or below twice the floor's largest logit move at that position — what a declared
//! bf16 precision can flip; counted and reported), and the chunked and laned logits are
//! bit-identical.

mod runner;

pub use runner::{NonFinite, argmax, first_non_finite, top2_gap};

use plumb_backend_ref::RefBackend;
use plumb_checkpoint::CheckpointRef;
use plumb_core::{Backend, FullBackend, GgmlType, LinearInputs};
use plumb_models::ModelError;
use runner::Runner;

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
    /// A float64 top-2 logit gap below this is a near-tie: any float32 evaluation order may flip
    /// it, so a greedy mismatch there is counted and reported, not failed.
    pub near_tie: f64,
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
    /// Generated tokens agree with the float64 greedy sequence (near-ties allowed).
    pub greedy_agrees: bool,
    /// Teacher-forced positions whose argmax differs from the float64 token at a near-tie.
    pub near_ties: usize,
    /// First generated token that differs, with the float64 top-2 logit gap there.
    pub first_divergence: Option<(usize, f64)>,
    /// Teacher-forced logits in one batch equal those computed in 7-token chunks, bit for bit.
    pub invariant: bool,
    /// The same logits computed beside every other control in shared batches, bit for bit.
    pub lanes_invariant: bool,
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
    pub near_ties: usize,
    pub pass: bool,
    /// What failed, in words.
    pub failures: Vec<String>,
}

fn bits_equal(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// Rows per lane per step in the laned run: single rows (decode-like) mixed with prefill chunks.
fn lane_chunk(lane: usize, step: usize) -> usize {
    [5, 64, 1, 17, 3][(lane + step) % 5]
}

/// The (format, K) of the checkpoint's weights for which `backend` declares rounded activations.
fn declared_inputs<B: Backend>(file: &CheckpointRef<'_>, backend: &B) -> Vec<((GgmlType, usize), LinearInputs)> {
    file.weight_names()
        .iter()
        .filter_map(|name| file.weight(name).ok().flatten())
        .map(|w| ((w.ty, w.cols), backend.linear_inputs(w.ty, w.cols)))
        .filter(|&(_, inputs)| inputs != LinearInputs::F32)
        .collect()
}

/// Runs the gate for the model in `file` (a GGUF file or a Hugging Face folder) on `backend`;
/// `ref_threads` parallelizes the reference.
pub fn run_gate<'c, B: FullBackend + 'static>(
    file: impl Into<CheckpointRef<'c>>,
    backend: &B,
    controls: &[Control],
    bound: GateBound,
    ref_threads: usize,
) -> Result<GateReport, ModelError> {
    let file = file.into();
    let max_len = controls.iter().map(|c| c.prompt.len() + c.gen_len).max().unwrap_or(1);
    let f64_backend = RefBackend::<f64>::new(ref_threads);
    // The floor is float32 at the backend's declared precision: weights whose `linear` it says
    // takes rounded (bf16 or Q8) activations take them in the floor too, and K/V are stored as
    // it stores them.
    let declared = declared_inputs(&file, backend);
    let f32_backend =
        RefBackend::<f32>::new(ref_threads).with_linear_inputs(declared).with_kv_store(backend.kv_store());
    let mut truth = Runner::new(file, &f64_backend, max_len, 1)?;
    let vocab = truth.model.config().vocab_size;
    let mut floor = Runner::new(file, &f32_backend, max_len, 1)?;
    let mut test = Runner::new(file, backend, max_len, controls.len().max(1))?;
    let mut reports = Vec::new();
    let mut failures = Vec::new();
    let mut inputs_of = Vec::new();
    let mut solo = Vec::new();
    for c in controls {
        let (seq, want) = truth.greedy(&c.prompt, c.gen_len, vocab);
        let inputs = seq[..seq.len() - 1].to_vec();
        let (floor_logits, _) = floor.teacher_forced(&inputs, 256, false);
        let (got, bad_intermediate) = test.teacher_forced(&inputs, 256, true);
        let invariant = bits_equal(&got, &test.teacher_forced(&inputs, 7, false).0);
        let mut finite = true;
        for (what, logits) in [("float64 reference", &want), ("float32 floor", &floor_logits), ("backend", &got)] {
            if let Some(p) = first_non_finite(logits, vocab) {
                failures.push(format!("{}: {what} logits hold NaN or infinity at position {p}", c.name));
                finite = false;
            }
        }
        if let Some(b) = bad_intermediate {
            let layer = b.layer.map_or(String::new(), |l| format!(" of layer {l}"));
            failures.push(format!(
                "{}: backend intermediate `{}`{layer} holds NaN or infinity at position {}",
                c.name, b.tensor, b.row
            ));
            finite = false;
        }
        let positions = inputs.len();
        let (mut sum, mut max, mut max_pos, mut fsum, mut fmax) = (0.0, 0f64, 0, 0.0, 0f64);
        for p in 0..positions {
            let r = &want[p * vocab..(p + 1) * vocab];
            let e = crate::nrms(&got[p * vocab..(p + 1) * vocab], r);
            let f = crate::nrms(&floor_logits[p * vocab..(p + 1) * vocab], r);
            if finite && !(e.is_finite() && f.is_finite()) {
                failures.push(format!("{}: NRMS at position {p} is not finite (backend {e}, floor {f})", c.name));
                finite = false;
            }
            sum += e;
            fsum += f;
            if e > max || e.is_nan() {
                (max, max_pos) = (e, p);
            }
            fmax = fmax.max(f);
        }
        // A near-tie is a top-2 gap the declared precision itself can close: below `near_tie`,
        // or below twice the largest logit move of the floor (the reference at the backend's
        // declared precision) at that position. For float32 backends the floor moves logits by
        // ~1e-6 and `near_tie` decides; bf16 activations move them by ~1e-2.
        let tie_bound = |p: usize| {
            let row = p * vocab..(p + 1) * vocab;
            let moved =
                floor_logits[row.clone()].iter().zip(&want[row]).map(|(f, w)| (f - w).abs()).fold(0.0, f64::max);
            bound.near_tie.max(2.0 * moved)
        };
        // Teacher-forced greedy choices at every generated position.
        let mut near_ties = 0;
        for p in c.prompt.len() - 1..positions {
            let got_token = argmax(&got[p * vocab..(p + 1) * vocab]);
            if got_token != seq[p + 1] {
                let gap = top2_gap(&want[p * vocab..(p + 1) * vocab]);
                if gap < tie_bound(p) {
                    near_ties += 1;
                } else if finite {
                    failures.push(format!(
                        "{}: teacher-forced argmax at position {p} is token {got_token}, float64 chose {} with a top-2 gap of {gap:.3e} (near-tie bound {:.1e})",
                        c.name,
                        seq[p + 1],
                        tie_bound(p)
                    ));
                }
            }
        }
        let (generated, _) = test.greedy(&c.prompt, c.gen_len, vocab);
        let first_divergence =
            generated[c.prompt.len()..].iter().zip(&seq[c.prompt.len()..]).position(|(a, b)| a != b).map(|i| {
                let p = c.prompt.len() + i - 1;
                (i, top2_gap(&want[p * vocab..(p + 1) * vocab]), tie_bound(p))
            });
        let greedy_agrees = first_divergence.is_none_or(|(_, gap, ties)| gap < ties);
        let first_divergence = first_divergence.map(|(i, gap, _)| (i, gap));
        if !invariant {
            failures.push(format!("{}: batch invariance broken — logits computed in one batch differ from logits computed in 7-token chunks", c.name));
        }
        if let Some((i, gap)) = first_divergence.filter(|_| !greedy_agrees) {
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
            greedy_agrees,
            near_ties,
            first_divergence,
            invariant,
            lanes_invariant: true,
        });
        inputs_of.push(inputs);
        solo.push(got);
    }
    // Every control again, all at once: lanes join one step apart, mix single rows with chunks,
    // and leave when done. Each lane's logits must equal its solo run bit for bit (compared as
    // they come, row block by row block).
    let seqs: Vec<&[u32]> = inputs_of.iter().map(Vec::as_slice).collect();
    let mut seen = vec![0usize; seqs.len()];
    let mut equal = vec![true; seqs.len()];
    test.teacher_forced_lanes(&seqs, lane_chunk, |i, logits| {
        let want = solo[i].get(seen[i]..seen[i] + logits.len());
        equal[i] &= want.is_some_and(|want| bits_equal(want, logits));
        seen[i] += logits.len();
    });
    for (i, r) in reports.iter_mut().enumerate() {
        r.lanes_invariant = equal[i] && seen[i] == solo[i].len();
        if !r.lanes_invariant {
            failures.push(format!(
                "{}: batch invariance broken — logits computed beside other lanes differ from the solo run",
                r.name
            ));
        }
    }
    let n = reports.len().max(1) as f64;
    let nrms_mean = reports.iter().map(|r| r.nrms_mean).sum::<f64>() / n;
    let floor_mean = reports.iter().map(|r| r.floor_mean).sum::<f64>() / n;
    let nrms_worst = reports.iter().map(|r| r.nrms_max).fold(0.0, |a, b| if b.is_nan() { b } else { a.max(b) });
    let floor_worst = reports.iter().map(|r| r.floor_max).fold(0.0, f64::max);
    let near_ties = reports.iter().map(|r| r.near_ties).sum();
    let mean_limit = bound.floor_multiple * floor_mean + bound.abs_allowance;
    let worst_limit = bound.floor_multiple * floor_worst + bound.abs_allowance;
    if !crate::within(nrms_mean, mean_limit) {
        failures.push(format!("logits NRMS vs float64 averages {nrms_mean:.3e}, above the bound {mean_limit:.3e} ({}× the float32 floor {floor_mean:.3e})", bound.floor_multiple));
    }
    if !crate::within(nrms_worst, worst_limit) {
        let r =
            reports.iter().find(|r| r.nrms_max.to_bits() == nrms_worst.to_bits()).expect("worst comes from a control");
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
        near_ties,
        pass: failures.is_empty(),
        failures,
    })
}
