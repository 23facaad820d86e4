//! The mixture-of-experts ops on the CPU: the router's top-k (one pass per row keeping the k best
//! in order) with its softmax in float64, and the weighted combine of expert outputs.
//! Batch invariance: both work on each row alone, the combine summing a row's k slots in slot
//! order with one float32 multiply and one add each (no FMA, so every ISA rounds alike).

use crate::{CpuBackend, CpuTensor, SharedOut};
use plumb_core::{ExpertRow, MoeOps};

/// Whether score `a` ranks above `b`: larger, or NaN over a number (a NaN is chosen, so it reaches
/// the output instead of vanishing). Equal scores do not, so the lower expert index stays ahead.
#[inline]
fn ranks_above(a: f32, b: f32) -> bool {
    a > b || (a.is_nan() && !b.is_nan())
}

/// The `k` best experts of one row's scores, best first, into `top` (cleared first).
fn top_k(scores: &[f32], k: usize, top: &mut Vec<usize>) {
    top.clear();
    for (i, &s) in scores.iter().enumerate() {
        if top.len() == k && !ranks_above(s, scores[top[k - 1]]) {
            continue;
        }
        let at = top.iter().position(|&t| ranks_above(s, scores[t])).unwrap_or(top.len());
        if top.len() == k {
            top.pop();
        }
        top.insert(at, i);
    }
}

impl MoeOps for CpuBackend {
    fn router_topk(&self, logits: &CpuTensor, k: usize, renormalize: bool, weights: &mut CpuTensor) -> Vec<u32> {
        let e = logits.cols;
        assert!((1..=e).contains(&k), "router_topk: k = {k} of {e} experts");
        assert_eq!((weights.rows, weights.cols), (logits.rows, k), "router_topk: weights shape");
        let mut ids = Vec::with_capacity(logits.rows * k);
        let mut top = Vec::with_capacity(k + 1);
        for (row, w) in logits.data.chunks_exact(e).zip(weights.data.chunks_exact_mut(k)) {
            top_k(row, k, &mut top);
            // The softmax in float64 (a few exps per row, next to the experts' matmuls): the
            // weights are then within one float32 rounding of the exact ones.
            let max = row[top[0]] as f64;
            let denom: f64 = if renormalize {
                top.iter().map(|&i| (row[i] as f64 - max).exp()).sum()
            } else {
                row.iter().map(|&s| (s as f64 - max).exp()).sum()
            };
            for (w, &i) in w.iter_mut().zip(&top) {
                *w = ((row[i] as f64 - max).exp() / denom) as f32;
                ids.push(i as u32);
            }
        }
        ids
    }

    fn moe_combine(&self, ys: &[&CpuTensor], src: &[ExpertRow], weights: &CpuTensor, out: &mut CpuTensor) {
        let (k, cols) = (weights.cols, out.cols);
        assert_eq!((weights.rows, src.len()), (out.rows, out.rows * k), "moe_combine: routing shape");
        assert!(ys.iter().all(|y| y.cols == cols), "moe_combine: expert output width");
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(out.rows, &|r| {
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(r.start * cols, r.len() * cols) };
            for (n, o) in r.zip(o.chunks_exact_mut(cols)) {
                o.fill(0.0);
                for j in 0..k {
                    let ExpertRow { group, row } = src[n * k + j];
                    let y = &ys[group as usize].data[row as usize * cols..][..cols];
                    let w = weights.data[n * k + j];
                    for (o, &v) in o.iter_mut().zip(y) {
                        *o += w * v;
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::top_k;

    #[test]
    fn top_k_keeps_the_best_in_order_and_breaks_ties_by_lower_index() {
        let mut top = Vec::new();
        top_k(&[0.5, 2.0, -1.0, 2.0, 3.0, 2.0], 3, &mut top);
        assert_eq!(top, [4, 1, 3]);
        top_k(&[1.0, 1.0, 1.0, 1.0], 2, &mut top);
        assert_eq!(top, [0, 1]);
        top_k(&[-0.0, 0.0, -1.0], 2, &mut top);
        assert_eq!(top, [0, 1], "-0 and +0 tie");
        top_k(&[1.0, f32::NAN, 5.0], 2, &mut top);
        assert_eq!(top, [1, 2], "a NaN ranks first");
    }
}
