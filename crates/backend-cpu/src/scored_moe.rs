//! DeepSeek V4's scored router and clamped experts on the CPU (`plumb_core::ScoredMoeOps`): the
//! reference's order of operations (backend-ref's hyper.rs) in float32, each row alone. Scores
//! `sqrt(softplus(l))` rank by `score + bias` with a stable sort, so ties go to the lower expert
//! id whatever else is in the batch; the weights are the chosen scores over their sum.

use crate::{CpuBackend, CpuTensor, CpuWeight, SharedOut, elementwise};
use plumb_core::ScoredMoeOps;
use std::cmp::Ordering;

/// torch's softplus (β = 1, threshold 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// Descending order; NaN first (chosen, so it reaches the output instead of being dropped).
pub(crate) fn descending(a: f32, b: f32) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => b.partial_cmp(&a).expect("neither is NaN"),
    }
}

/// `s_e / (Σ s + 1e-20) · scaling` over the chosen experts of one row, the sum in choice order.
fn route_weights(scores: &[f32], chosen: &[usize], scaling: f32, out: &mut [f32]) {
    let sum = chosen.iter().fold(0f32, |a, &e| a + scores[e]) + 1e-20;
    for (o, &e) in out.iter_mut().zip(chosen) {
        *o = scores[e] / sum * scaling;
    }
}

impl ScoredMoeOps for CpuBackend {
    fn sqrt_softplus_topk(
        &self,
        logits: &CpuTensor,
        bias: &CpuWeight,
        k: usize,
        scaling: f64,
        weights: &mut CpuTensor,
    ) -> Vec<u32> {
        let e = logits.cols;
        let bias = bias.vector();
        assert!((1..=e).contains(&k) && bias.len() == e, "sqrt_softplus_topk: k = {k} of {e} experts");
        assert_eq!((weights.rows, weights.cols), (logits.rows, k), "sqrt_softplus_topk: weights shape");
        let mut ids = Vec::with_capacity(logits.rows * k);
        let (mut scores, mut order) = (vec![0f32; e], Vec::with_capacity(e));
        for (r, row) in logits.data.chunks_exact(e).enumerate() {
            for (s, &l) in scores.iter_mut().zip(row) {
                *s = softplus(l).sqrt();
            }
            order.clear();
            order.extend(0..e);
            order.sort_by(|&a, &b| descending(scores[a] + bias[a], scores[b] + bias[b]));
            route_weights(&scores, &order[..k], scaling as f32, &mut weights.data[r * k..(r + 1) * k]);
            ids.extend(order[..k].iter().map(|&x| x as u32));
        }
        ids
    }

    fn hash_route_weights(&self, logits: &CpuTensor, ids: &[u32], scaling: f64, weights: &mut CpuTensor) {
        let (e, k) = (logits.cols, weights.cols);
        assert_eq!((ids.len(), weights.rows), (logits.rows * k, logits.rows), "hash_route_weights: shapes");
        let mut scores = vec![0f32; e];
        for (r, row) in logits.data.chunks_exact(e).enumerate() {
            for (s, &l) in scores.iter_mut().zip(row) {
                *s = softplus(l).sqrt();
            }
            let chosen: Vec<usize> = ids[r * k..(r + 1) * k].iter().map(|&x| x as usize).collect();
            assert!(chosen.iter().all(|&x| x < e), "hash_route_weights: expert id out of range");
            route_weights(&scores, &chosen, scaling as f32, &mut weights.data[r * k..(r + 1) * k]);
        }
    }

    fn clamped_swiglu(&self, gate: &CpuTensor, up: &CpuTensor, limit: f64, out: &mut CpuTensor) {
        let n = out.data.len();
        assert_eq!((gate.data.len(), up.data.len()), (n, n), "clamped_swiglu: shapes");
        let limit = limit as f32;
        let cols = out.cols.max(1);
        let shared = SharedOut::new(&mut out.data);
        let isa = self.isa;
        self.par_rows(out.rows, &|r| {
            let (at, len) = (r.start * cols, r.len() * cols);
            // A NaN stays NaN (`min`/`clamp` would drop it; comparisons with it are false).
            let g: Vec<f32> = gate.data[at..at + len].iter().map(|&g| if g > limit { limit } else { g }).collect();
            let u: Vec<f32> = up.data[at..at + len]
                .iter()
                .map(|&u| {
                    if u > limit {
                        limit
                    } else if u < -limit {
                        -limit
                    } else {
                        u
                    }
                })
                .collect();
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(at, len) };
            elementwise::silu_mul(isa, &g, &u, o);
        });
    }
}
