//! Manifold-constrained hyper-connections on the CPU (`plumb_core::HyperConnectionOps`). The
//! mixing logits are one `linear` of the unweighted-RMS-normalized streams (the CPU's per-row
//! sum order, fixed by shapes); the sigmoids, the Sinkhorn normalisation and the collapse and
//! re-expansion follow the reference's order of operations (backend-ref's hyper.rs) in float32.
//! Every output row depends on its own row alone.

use crate::{CpuBackend, CpuTensor, CpuWeight, SharedOut};
use plumb_core::{HcSpec, HyperConnectionOps, LinearOps};

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl CpuBackend {
    /// m = x̂ · fnᵀ with x̂ = x / sqrt(mean(x²) + eps) over each whole row (the mean of squares
    /// summed in float64, in order).
    fn normed_mix(&self, x: &CpuTensor, fn_w: &CpuWeight, eps: f64) -> CpuTensor {
        assert_eq!(fn_w.cols, x.cols, "hyper-connection: fn width");
        let cols = x.cols;
        let mut xn = CpuTensor { rows: x.rows, cols, data: vec![0.0; x.data.len()] };
        let shared = SharedOut::new(&mut xn.data);
        self.par_rows(x.rows, &|r| {
            for row in r {
                let v = &x.data[row * cols..(row + 1) * cols];
                let ms = v.iter().fold(0f64, |a, &e| a + e as f64 * e as f64) / cols as f64;
                let inv = (1.0 / (ms + eps).sqrt()) as f32;
                // SAFETY: threads get disjoint rows; `xn` outlives the call.
                let o = unsafe { shared.part(row * cols, cols) };
                for (o, &e) in o.iter_mut().zip(v) {
                    *o = e * inv;
                }
            }
        });
        let mut m = CpuTensor { rows: x.rows, cols: fn_w.rows, data: vec![0.0; x.rows * fn_w.rows] };
        self.linear(&xn, fn_w, &mut m);
        m
    }
}

/// The collapse weights `σ(m_i · scale + base_i) + eps`.
fn pre_weights(m: &[f32], scale: f32, base: &[f32], eps: f32) -> Vec<f32> {
    m.iter().zip(base).map(|(&m, &b)| sigmoid(m * scale + b) + eps).collect()
}

/// out = Σ_i weights[i] · stream_i (i ascending), streams of `out.len()` each.
fn collapse(streams: &[f32], weights: &[f32], out: &mut [f32]) {
    let hidden = out.len();
    out.fill(0.0);
    for (i, &w) in weights.iter().enumerate() {
        for (o, &s) in out.iter_mut().zip(&streams[i * hidden..(i + 1) * hidden]) {
            *o += w * s;
        }
    }
}

/// The row's doubly-stochastic mixing matrix from its logits `c` (n × n, scaled and biased):
/// row-wise softmax + eps, then columns, then (rows, columns) `iters − 1` times, each divided by
/// its sum + eps.
fn sinkhorn(c: &mut [f32], n: usize, iters: usize, eps: f32) {
    for row in c.chunks_exact_mut(n) {
        let max = row.iter().copied().fold(row[0], |a, b| if b > a { b } else { a });
        let mut sum = 0f32;
        for v in row.iter_mut() {
            *v = (*v - max).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v = *v / sum + eps;
        }
    }
    let columns = |c: &mut [f32]| {
        for j in 0..n {
            let sum = (0..n).fold(0f32, |a, i| a + c[i * n + j]) + eps;
            for i in 0..n {
                c[i * n + j] /= sum;
            }
        }
    };
    columns(c);
    for _ in 1..iters {
        for row in c.chunks_exact_mut(n) {
            let sum = row.iter().fold(0f32, |a, &b| a + b) + eps;
            for v in row.iter_mut() {
                *v /= sum;
            }
        }
        columns(c);
    }
}

impl HyperConnectionOps for CpuBackend {
    fn hc_pre(
        &self,
        streams: &CpuTensor,
        fn_w: &CpuWeight,
        base: &CpuWeight,
        scale: &CpuWeight,
        hc: HcSpec,
        post: &mut CpuTensor,
        comb: &mut CpuTensor,
        collapsed: &mut CpuTensor,
    ) {
        let n = hc.num_streams;
        let hidden = collapsed.cols;
        let (base, scale) = (base.vector(), scale.vector());
        assert_eq!(streams.cols, n * hidden, "hc_pre: streams width");
        assert_eq!((fn_w.rows, base.len(), scale.len()), ((2 + n) * n, (2 + n) * n, 3), "hc_pre: parameter shapes");
        assert_eq!((post.cols, comb.cols), (n, n * n), "hc_pre: output widths");
        let rows = streams.rows;
        assert_eq!((post.rows, comb.rows, collapsed.rows), (rows, rows, rows), "hc_pre: output rows");
        let m = self.normed_mix(streams, fn_w, hc.norm_eps);
        let eps = hc.hc_eps as f32;
        let (s_pre, s_post, s_comb) = (scale[0], scale[1], scale[2]);
        let (post_o, comb_o, coll_o) =
            (SharedOut::new(&mut post.data), SharedOut::new(&mut comb.data), SharedOut::new(&mut collapsed.data));
        self.par_rows(rows, &|r| {
            for row in r {
                let m = &m.data[row * m.cols..(row + 1) * m.cols];
                let pre = pre_weights(&m[..n], s_pre, &base[..n], eps);
                // SAFETY: threads get disjoint rows of each output; the outputs outlive the call.
                let (p, c, o) = unsafe {
                    (post_o.part(row * n, n), comb_o.part(row * n * n, n * n), coll_o.part(row * hidden, hidden))
                };
                for (i, p) in p.iter_mut().enumerate() {
                    *p = 2.0 * sigmoid(m[n + i] * s_post + base[n + i]);
                }
                for (k, c) in c.iter_mut().enumerate() {
                    *c = m[2 * n + k] * s_comb + base[2 * n + k];
                }
                sinkhorn(c, n, hc.sinkhorn_iters, eps);
                collapse(&streams.data[row * n * hidden..(row + 1) * n * hidden], &pre, o);
            }
        });
    }

    fn hc_post(&self, streams: &CpuTensor, y: &CpuTensor, post: &CpuTensor, comb: &CpuTensor, out: &mut CpuTensor) {
        let (n, hidden) = (post.cols, y.cols);
        assert_eq!((streams.cols, comb.cols, out.cols), (n * hidden, n * n, n * hidden), "hc_post: shapes");
        assert_eq!((y.rows, post.rows, comb.rows, out.rows), (streams.rows, streams.rows, streams.rows, streams.rows));
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(streams.rows, &|r| {
            let mut mixed = vec![0f32; hidden];
            for row in r {
                let s = &streams.data[row * n * hidden..(row + 1) * n * hidden];
                let yr = &y.data[row * hidden..(row + 1) * hidden];
                for j in 0..n {
                    let weights: Vec<f32> = (0..n).map(|i| comb.data[row * n * n + i * n + j]).collect();
                    collapse(s, &weights, &mut mixed);
                    let p = post.data[row * n + j];
                    // SAFETY: threads get disjoint rows; `out` outlives the call.
                    let o = unsafe { shared.part(row * n * hidden + j * hidden, hidden) };
                    for ((o, &yv), &mv) in o.iter_mut().zip(yr).zip(&mixed) {
                        *o = p * yv + mv;
                    }
                }
            }
        });
    }

    fn hc_head(
        &self,
        streams: &CpuTensor,
        fn_w: &CpuWeight,
        base: &CpuWeight,
        scale: &CpuWeight,
        hc: HcSpec,
        out: &mut CpuTensor,
    ) {
        let (n, hidden) = (hc.num_streams, out.cols);
        let (base, scale) = (base.vector(), scale.vector());
        assert_eq!((streams.cols, fn_w.rows, base.len(), scale.len()), (n * hidden, n, n, 1), "hc_head: shapes");
        let m = self.normed_mix(streams, fn_w, hc.norm_eps);
        let eps = hc.hc_eps as f32;
        let shared = SharedOut::new(&mut out.data);
        self.par_rows(streams.rows, &|r| {
            for row in r {
                let m = &m.data[row * n..(row + 1) * n];
                let pre = pre_weights(m, scale[0], base, eps);
                // SAFETY: threads get disjoint rows; `out` outlives the call.
                let o = unsafe { shared.part(row * hidden, hidden) };
                collapse(&streams.data[row * n * hidden..(row + 1) * n * hidden], &pre, o);
            }
        });
    }
}
