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
