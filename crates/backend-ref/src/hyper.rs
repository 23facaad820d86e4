//! Hyper-connections (`plumb_core::HyperConnectionOps`) and DeepSeek V4's scored routers and
//! clamped experts (`plumb_core::ScoredMoeOps`) as plain loops, every sum in ascending order.

use crate::{RefBackend, RefFloat, RefTensor, dot};
use plumb_core::{HcSpec, HyperConnectionOps, ScoredMoeOps};
use std::cmp::Ordering;

fn sigmoid<T: RefFloat>(x: T) -> T {
    T::one() / (T::one() + (T::zero() - x).exp())
}

/// torch's softplus (β = 1, threshold 20): x above 20 is returned as is.
fn softplus<T: RefFloat>(x: T) -> T {
    if x > T::from_f64(20.0) { x } else { x.exp().ln_1p() }
}

/// x̂ = x / sqrt(mean(x²) + eps) (unweighted), then m_k = x̂ · fn_k for every row k of fn.
fn normed_mix<T: RefFloat>(x: &[T], fn_w: &RefTensor<T>, eps: f64) -> Vec<T> {
    assert_eq!(fn_w.cols, x.len(), "hyper-connection: fn width");
    let inv = T::one() / (dot(x, x) / T::from_f64(x.len() as f64) + T::from_f64(eps)).sqrt();
    let xn: Vec<T> = x.iter().map(|&v| v * inv).collect();
    (0..fn_w.rows).map(|k| dot(&xn, &fn_w.data[k * fn_w.cols..(k + 1) * fn_w.cols])).collect()
}

/// out = Σ_i weights[i] · stream_i, streams of `hidden` each.
fn collapse<T: RefFloat>(streams: &[T], weights: &[T], out: &mut [T]) {
    let hidden = out.len();
    for (c, o) in out.iter_mut().enumerate() {
        *o = weights.iter().enumerate().fold(T::zero(), |acc, (i, &w)| acc + w * streams[i * hidden + c]);
    }
}

impl<T: RefFloat> HyperConnectionOps for RefBackend<T> {
    fn hc_pre(
        &self,
        streams: &RefTensor<T>,
        fn_w: &RefTensor<T>,
        base: &RefTensor<T>,
        scale: &RefTensor<T>,
        hc: HcSpec,
        post: &mut RefTensor<T>,
        comb: &mut RefTensor<T>,
        collapsed: &mut RefTensor<T>,
    ) {
        let n = hc.num_streams;
        let hidden = collapsed.cols;
        assert_eq!(streams.cols, n * hidden, "hc_pre: streams width");
        assert_eq!((fn_w.rows, base.cols, scale.cols), ((2 + n) * n, (2 + n) * n, 3), "hc_pre: parameter shapes");
        assert_eq!((post.cols, comb.cols), (n, n * n), "hc_pre: output widths");
        let eps = T::from_f64(hc.hc_eps);
        let (s_pre, s_post, s_comb) = (scale.data[0], scale.data[1], scale.data[2]);
        for r in 0..streams.rows {
            let x = &streams.data[r * n * hidden..(r + 1) * n * hidden];
            let m = normed_mix(x, fn_w, hc.norm_eps);
            let pre: Vec<T> = (0..n).map(|i| sigmoid(m[i] * s_pre + base.data[i]) + eps).collect();
            for i in 0..n {
                post.data[r * n + i] = T::from_f64(2.0) * sigmoid(m[n + i] * s_post + base.data[n + i]);
            }
            // Row-wise softmax + eps, then Sinkhorn: columns, then (rows, columns) × (iters − 1).
            let mut c: Vec<T> = (0..n * n).map(|k| m[2 * n + k] * s_comb + base.data[2 * n + k]).collect();
            for row in c.chunks_exact_mut(n) {
                let max = row.iter().copied().fold(row[0], |a, b| if b > a { b } else { a });
                let e: Vec<T> = row.iter().map(|&v| (v - max).exp()).collect();
                let sum = e.iter().fold(T::zero(), |a, &b| a + b);
                for (v, &ev) in row.iter_mut().zip(&e) {
                    *v = ev / sum + eps;
                }
            }
            let normalize_columns = |c: &mut [T]| {
                for j in 0..n {
                    let sum = (0..n).fold(T::zero(), |a, i| a + c[i * n + j]) + eps;
                    for i in 0..n {
                        c[i * n + j] = c[i * n + j] / sum;
                    }
                }
            };
            normalize_columns(&mut c);
            for _ in 1..hc.sinkhorn_iters {
                for row in c.chunks_exact_mut(n) {
                    let sum = row.iter().fold(T::zero(), |a, &b| a + b) + eps;
                    for v in row.iter_mut() {
                        *v = *v / sum;
                    }
                }
                normalize_columns(&mut c);
            }
            comb.data[r * n * n..(r + 1) * n * n].copy_from_slice(&c);
            collapse(x, &pre, &mut collapsed.data[r * hidden..(r + 1) * hidden]);
        }
    }

    fn hc_post(
        &self,
        streams: &RefTensor<T>,
        y: &RefTensor<T>,
        post: &RefTensor<T>,
        comb: &RefTensor<T>,
        out: &mut RefTensor<T>,
    ) {
        let (n, hidden) = (post.cols, y.cols);
        assert_eq!((streams.cols, comb.cols, out.cols), (n * hidden, n * n, n * hidden), "hc_post: shapes");
        for r in 0..streams.rows {
            let s = &streams.data[r * n * hidden..(r + 1) * n * hidden];
            for j in 0..n {
                let p = post.data[r * n + j];
                for c in 0..hidden {
                    let mixed =
                        (0..n).fold(T::zero(), |acc, i| acc + comb.data[r * n * n + i * n + j] * s[i * hidden + c]);
                    out.data[r * n * hidden + j * hidden + c] = p * y.data[r * hidden + c] + mixed;
                }
            }
        }
    }

    fn hc_head(
        &self,
        streams: &RefTensor<T>,
        fn_w: &RefTensor<T>,
        base: &RefTensor<T>,
        scale: &RefTensor<T>,
        hc: HcSpec,
        out: &mut RefTensor<T>,
    ) {
        let (n, hidden) = (hc.num_streams, out.cols);
        assert_eq!((streams.cols, fn_w.rows, base.cols, scale.cols), (n * hidden, n, n, 1), "hc_head: shapes");
        let eps = T::from_f64(hc.hc_eps);
        for r in 0..streams.rows {
            let x = &streams.data[r * n * hidden..(r + 1) * n * hidden];
            let m = normed_mix(x, fn_w, hc.norm_eps);
            let pre: Vec<T> = (0..n).map(|i| sigmoid(m[i] * scale.data[0] + base.data[i]) + eps).collect();
            collapse(x, &pre, &mut out.data[r * hidden..(r + 1) * hidden]);
        }
    }
}

/// Descending order; NaN first (chosen, so it reaches the output).
fn descending<T: RefFloat>(a: T, b: T) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => b.partial_cmp(&a).expect("neither is NaN"),
    }
}

/// `s_e / (Σ s + 1e-20) · scaling` over the chosen experts of one row.
fn route_weights<T: RefFloat>(scores: &[T], chosen: &[usize], scaling: f64, out: &mut [T]) {
    let sum = chosen.iter().fold(T::zero(), |a, &e| a + scores[e]) + T::from_f64(1e-20);
    for (o, &e) in out.iter_mut().zip(chosen) {
        *o = scores[e] / sum * T::from_f64(scaling);
    }
}

impl<T: RefFloat> ScoredMoeOps for RefBackend<T> {
    fn sqrt_softplus_topk(
        &self,
        logits: &RefTensor<T>,
        bias: &RefTensor<T>,
        k: usize,
        scaling: f64,
        weights: &mut RefTensor<T>,
    ) -> Vec<u32> {
        let e = logits.cols;
        assert!((1..=e).contains(&k) && bias.cols == e, "sqrt_softplus_topk: k = {k} of {e} experts");
        assert_eq!((weights.rows, weights.cols), (logits.rows, k), "sqrt_softplus_topk: weights shape");
        let mut ids = Vec::with_capacity(logits.rows * k);
        for r in 0..logits.rows {
            let scores: Vec<T> = logits.data[r * e..(r + 1) * e].iter().map(|&l| softplus(l).sqrt()).collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|&a, &b| descending(scores[a] + bias.data[a], scores[b] + bias.data[b]));
            route_weights(&scores, &order[..k], scaling, &mut weights.data[r * k..(r + 1) * k]);
            ids.extend(order[..k].iter().map(|&x| x as u32));
        }
        ids
    }

    fn hash_route_weights(&self, logits: &RefTensor<T>, ids: &[u32], scaling: f64, weights: &mut RefTensor<T>) {
        let (e, k) = (logits.cols, weights.cols);
        assert_eq!((ids.len(), weights.rows), (logits.rows * k, logits.rows), "hash_route_weights: shapes");
        for r in 0..logits.rows {
            let scores: Vec<T> = logits.data[r * e..(r + 1) * e].iter().map(|&l| softplus(l).sqrt()).collect();
            let chosen: Vec<usize> = ids[r * k..(r + 1) * k].iter().map(|&x| x as usize).collect();
            assert!(chosen.iter().all(|&x| x < e), "hash_route_weights: expert id out of range");
            route_weights(&scores, &chosen, scaling, &mut weights.data[r * k..(r + 1) * k]);
        }
    }

    fn clamped_swiglu(&self, gate: &RefTensor<T>, up: &RefTensor<T>, limit: f64, out: &mut RefTensor<T>) {
        assert_eq!((gate.data.len(), up.data.len()), (out.data.len(), out.data.len()), "clamped_swiglu: shapes");
        let (hi, lo) = (T::from_f64(limit), T::from_f64(-limit));
        for ((o, &g), &u) in out.data.iter_mut().zip(&gate.data).zip(&up.data) {
            // A NaN stays NaN (comparisons with it are false), as torch's clamp keeps it.
            let g = if g > hi { hi } else { g };
            let u = if u > hi {
                hi
            } else if u < lo {
                lo
            } else {
                u
            };
            *o = g * sigmoid(g) * u;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_core::{Backend, LinearInputs};

    fn t(rows: usize, cols: usize, data: Vec<f64>) -> RefTensor<f64> {
        RefTensor { rows, cols, data, linear_inputs: LinearInputs::F32 }
    }

    #[test]
    fn hc_pre_gives_a_doubly_stochastic_mix_and_post_re_expands() {
        let b = RefBackend::<f64>::new(1);
        let (n, hidden) = (3, 2);
        let hc = HcSpec { num_streams: n, sinkhorn_iters: 30, hc_eps: 0.0, norm_eps: 1e-6 };
        let rows = (2 + n) * n;
        let fn_w = t(rows, n * hidden, (0..rows * n * hidden).map(|i| ((i * 7 % 11) as f64 - 5.0) / 7.0).collect());
        let base = t(1, rows, (0..rows).map(|i| (i as f64 - 7.0) / 9.0).collect());
        let scale = t(1, 3, vec![0.5, 1.0, 1.5]);
        let streams = t(1, n * hidden, vec![1.0, -2.0, 0.5, 3.0, -1.0, 0.25]);
        let (mut post, mut comb, mut collapsed) = (b.tensor(1, n), b.tensor(1, n * n), b.tensor(1, hidden));
        b.hc_pre(&streams, &fn_w, &base, &scale, hc, &mut post, &mut comb, &mut collapsed);
        for i in 0..n {
            let row: f64 = (0..n).map(|j| comb.data[i * n + j]).sum();
            let col: f64 = (0..n).map(|j| comb.data[j * n + i]).sum();
            assert!((row - 1.0).abs() < 1e-9 && (col - 1.0).abs() < 1e-12, "row {row}, column {col}");
            assert!(post.data[i] > 0.0 && post.data[i] < 2.0);
        }
        // With y = 0, post-mixing is comb-mixing alone: a doubly-stochastic mix keeps the sum
        // of the streams.
        let mut out = b.tensor(1, n * hidden);
        b.hc_post(&streams, &b.tensor(1, hidden), &post, &comb, &mut out);
        for c in 0..hidden {
            let before: f64 = (0..n).map(|i| streams.data[i * hidden + c]).sum();
            let after: f64 = (0..n).map(|i| out.data[i * hidden + c]).sum();
            assert!((before - after).abs() < 1e-9, "{before} vs {after}");
        }
        // The head with fn = 0 and base = 0 weighs every stream by σ(0) + eps = 0.5.
        let mut head = b.tensor(1, hidden);
        let hc = HcSpec { hc_eps: 0.25, ..hc };
        b.hc_head(
            &streams,
            &t(n, n * hidden, vec![0.0; n * n * hidden]),
            &t(1, n, vec![0.0; n]),
            &t(1, 1, vec![1.0]),
            hc,
            &mut head,
        );
        assert_eq!(head.data, [0.75 * (1.0 + 0.5 - 1.0), 0.75 * (-2.0 + 3.0 + 0.25)]);
    }

    #[test]
    fn routers_choose_by_biased_scores_and_weigh_by_plain_ones() {
        let b = RefBackend::<f64>::new(1);
        let logits = t(1, 4, vec![0.0, 1.0, 1.0, -2.0]);
        let s = |x: f64| x.exp().ln_1p().sqrt();
        // Bias lifts expert 3 over all; experts 1 and 2 tie, so 1 (the lower id) comes next.
        let bias = t(1, 4, vec![0.0, 0.0, 0.0, 5.0]);
        let mut w = b.tensor(1, 2);
        let ids = b.sqrt_softplus_topk(&logits, &bias, 2, 1.5, &mut w);
        assert_eq!(ids, [3, 1]);
        let sum = s(-2.0) + s(1.0);
        assert!((w.data[0] - s(-2.0) / sum * 1.5).abs() < 1e-15 && (w.data[1] - s(1.0) / sum * 1.5).abs() < 1e-15);
        let mut h = b.tensor(1, 2);
        b.hash_route_weights(&logits, &[3, 1], 1.5, &mut h);
        assert_eq!(h.data, w.data);
        let mut out = b.tensor(1, 3);
        b.clamped_swiglu(&t(1, 3, vec![12.0, -1.0, 0.5]), &t(1, 3, vec![1.0, -20.0, 3.0]), 10.0, &mut out);
        let silu = |x: f64| x / (1.0 + (-x).exp());
        let want = [silu(10.0), silu(-1.0) * -10.0, silu(0.5) * 3.0];
        assert!(out.data.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-14), "{:?} vs {want:?}", out.data);
    }
}
