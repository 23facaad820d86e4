//! The mixture-of-experts ops as plain loops: a full stable sort of each row's scores for the
//! top-k, a textbook softmax, and the slot-by-slot weighted sum.

use crate::{RefBackend, RefFloat, RefTensor};
use plumb_core::{ExpertRow, MoeOps};
use std::cmp::Ordering;

/// Descending score order; NaN ranks first (so a NaN is chosen and shows in the output).
fn descending<T: RefFloat>(a: T, b: T) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        // -0 and +0 compare equal, so they tie like any other equal scores.
        (false, false) => b.partial_cmp(&a).expect("neither is NaN"),
    }
}

impl<T: RefFloat> MoeOps for RefBackend<T> {
    fn router_topk(&self, logits: &RefTensor<T>, k: usize, renormalize: bool, weights: &mut RefTensor<T>) -> Vec<u32> {
        let e = logits.cols;
        assert!((1..=e).contains(&k), "router_topk: k = {k} of {e} experts");
        assert_eq!((weights.rows, weights.cols), (logits.rows, k), "router_topk: weights shape");
        let mut ids = Vec::with_capacity(logits.rows * k);
        for n in 0..logits.rows {
            let row = &logits.data[n * e..(n + 1) * e];
            let mut order: Vec<usize> = (0..e).collect();
            // A stable sort: equal scores keep ascending expert order, so the lower index wins ties.
            order.sort_by(|&a, &b| descending(row[a], row[b]));
            let chosen = &order[..k];
            // Softmax with the largest score subtracted; over every expert, or over the chosen.
            let max = row[chosen[0]];
            let denom_over: Vec<usize> = if renormalize { chosen.to_vec() } else { (0..e).collect() };
            let denom = denom_over.iter().fold(T::zero(), |s, &i| s + (row[i] - max).exp());
            for (j, &i) in chosen.iter().enumerate() {
                weights.data[n * k + j] = (row[i] - max).exp() / denom;
                ids.push(i as u32);
            }
        }
        ids
    }

    fn moe_combine(&self, ys: &[&RefTensor<T>], src: &[ExpertRow], weights: &RefTensor<T>, out: &mut RefTensor<T>) {
        let (k, c) = (weights.cols, out.cols);
        assert_eq!((weights.rows, src.len()), (out.rows, out.rows * k), "moe_combine: routing shape");
        for n in 0..out.rows {
            let o = &mut out.data[n * c..(n + 1) * c];
            o.fill(T::zero());
            for j in 0..k {
                let ExpertRow { group, row } = src[n * k + j];
                let y = ys[group as usize];
                assert_eq!(y.cols, c, "moe_combine: expert output width");
                let w = weights.data[n * k + j];
                for (o, &v) in o.iter_mut().zip(&y.data[row as usize * c..(row as usize + 1) * c]) {
                    *o = *o + w * v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::{Backend, LinearInputs};

    fn route(scores: &[f64], k: usize, renormalize: bool) -> (Vec<u32>, Vec<f64>) {
        let b = RefBackend::<f64>::new(1);
        let logits = RefTensor { rows: 1, cols: scores.len(), data: scores.to_vec(), linear_inputs: LinearInputs::F32 };
        let mut w = b.tensor(1, k);
        let ids = b.router_topk(&logits, k, renormalize, &mut w);
        (ids, w.data)
    }

    #[test]
    fn ties_go_to_the_lower_expert_index_and_nan_ranks_first() {
        assert_eq!(route(&[0.5, 2.0, -1.0, 2.0, 3.0, 2.0], 3, false).0, [4, 1, 3]);
        assert_eq!(route(&[1.0, 1.0, 1.0, 1.0], 2, true).0, [0, 1]);
        assert_eq!(route(&[-0.0, 0.0, -1.0], 2, true).0, [0, 1]);
        let (ids, w) = route(&[1.0, f64::NAN, 5.0], 2, true);
        assert_eq!(ids, [1, 2]);
        assert!(w.iter().all(|x| x.is_nan()), "a NaN score reaches the weights: {w:?}");
    }

    #[test]
    fn weights_are_the_softmax_over_all_experts_or_over_the_chosen() {
        let scores = [0.0, 1.0, 2.0_f64.ln() + 1.0, -3.0];
        // exp-proportional: e^0, e^1, 2e^1, e^-3.
        let total = 1.0 + std::f64::consts::E * 3.0 + (-3.0f64).exp();
        let (ids, w) = route(&scores, 2, false);
        assert_eq!(ids, [2, 1]);
        assert!(
            (w[0] - 2.0 * std::f64::consts::E / total).abs() < 1e-15
                && (w[1] - std::f64::consts::E / total).abs() < 1e-15
        );
        let (_, w) = route(&scores, 2, true);
        assert!((w[0] - 2.0 / 3.0).abs() < 1e-15 && (w[1] - 1.0 / 3.0).abs() < 1e-15, "{w:?}");
    }
}
