//! The Gated DeltaNet ops as plain loops, token by token in position order — the recurrent form
//! of the delta rule, which is also the order the fast backends must keep (see
//! `plumb_core::GatedDeltaOps`). The lane state lives in the KV cache's `LaneStateStore`.

use crate::{RefBackend, RefFloat, RefKvCache, RefTensor, dot};
use plumb_core::{ForwardBatch, GatedDeltaOps, GdnHeads, LaneStateOps, StatePart, lane_runs};

fn sigmoid<T: RefFloat>(x: T) -> T {
    T::one() / (T::one() + (T::zero() - x).exp())
}

/// torch's softplus (β = 1, threshold 20): x above 20 is returned as is.
fn softplus<T: RefFloat>(x: T) -> T {
    if x > T::from_f64(20.0) { x } else { x.exp().ln_1p() }
}

/// 1 / sqrt(mean(x²) + eps) of one slice.
fn inv_rms<T: RefFloat>(x: &[T], eps: f64) -> T {
    T::one() / (dot(x, x) / T::from_f64(x.len() as f64) + T::from_f64(eps)).sqrt()
}

/// x / sqrt(Σx² + 1e-6), as transformers' `l2norm` in the GDN kernels.
fn l2_normalize<T: RefFloat>(x: &[T], out: &mut [T]) {
    let inv = T::one() / (dot(x, x) + T::from_f64(1e-6)).sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * inv;
    }
}

impl<T: RefFloat> GatedDeltaOps for RefBackend<T> {
    fn rms_norm_1p(&self, x: &RefTensor<T>, weight: &RefTensor<T>, eps: f64, out: &mut RefTensor<T>) {
        let d = weight.data.len();
        assert!(d > 0 && x.cols.is_multiple_of(d), "rms_norm_1p: width {d} does not divide {}", x.cols);
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "rms_norm_1p: shape mismatch");
        for (row, o) in x.data.chunks_exact(d).zip(out.data.chunks_exact_mut(d)) {
            let inv = inv_rms(row, eps);
            for ((o, &v), &w) in o.iter_mut().zip(row).zip(&weight.data) {
                *o = v * inv * (T::one() + w);
            }
        }
    }

    fn rms_norm_gated(
        &self,
        x: &RefTensor<T>,
        z: &RefTensor<T>,
        weight: &RefTensor<T>,
        eps: f64,
        out: &mut RefTensor<T>,
    ) {
        let d = weight.data.len();
        assert!(d > 0 && x.cols.is_multiple_of(d), "rms_norm_gated: width {d} does not divide {}", x.cols);
        assert_eq!((z.rows, z.cols, out.rows, out.cols), (x.rows, x.cols, x.rows, x.cols), "rms_norm_gated: shapes");
        let slices = x.data.chunks_exact(d).zip(z.data.chunks_exact(d)).zip(out.data.chunks_exact_mut(d));
        for ((row, zr), o) in slices {
            let inv = inv_rms(row, eps);
            for (((o, &v), &w), &g) in o.iter_mut().zip(row).zip(&weight.data).zip(zr) {
                *o = v * inv * w * (g * sigmoid(g));
            }
        }
    }

    fn sigmoid_mul(&self, x: &RefTensor<T>, gate: &RefTensor<T>, out: &mut RefTensor<T>) {
        assert!(gate.rows == x.rows && (gate.cols == x.cols || gate.cols == 1), "sigmoid_mul: gate shape");
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "sigmoid_mul: shape mismatch");
        for (i, (o, &v)) in out.data.iter_mut().zip(&x.data).enumerate() {
            let g = if gate.cols == 1 { gate.data[i / x.cols.max(1)] } else { gate.data[i] };
            *o = v * sigmoid(g);
        }
    }

    fn gdn_gates(
        &self,
        a: &RefTensor<T>,
        b: &RefTensor<T>,
        a_log: &RefTensor<T>,
        dt_bias: &RefTensor<T>,
        g: &mut RefTensor<T>,
        beta: &mut RefTensor<T>,
    ) {
        let h = a_log.data.len();
        assert!(dt_bias.data.len() == h && a.cols == h && b.cols == h && g.cols == h && beta.cols == h, "gdn_gates");
        for i in 0..a.data.len() {
            let head = i % h;
            g.data[i] = T::zero() - a_log.data[head].exp() * softplus(a.data[i] + dt_bias.data[head]);
            beta.data[i] = sigmoid(b.data[i]);
        }
    }

    fn conv1d_silu(
        &self,
        kv: &mut RefKvCache<T>,
        layer: usize,
        x: &RefTensor<T>,
        weight: &RefTensor<T>,
        batch: &ForwardBatch,
        out: &mut RefTensor<T>,
    ) {
        let c = x.cols;
        assert!(
            c > 0 && weight.data.len().is_multiple_of(c),
            "conv1d_silu: weight of {} for {c} channels",
            weight.data.len()
        );
        let taps = weight.data.len() / c;
        assert_eq!(kv.lane_state.spec.conv_floats, (taps - 1) * c, "conv1d_silu: conv state size");
        for run in lane_runs(batch) {
            let state = kv.lane_state.take(StatePart::Conv, layer, run.slot, run.first_pos, run.rows.len());
            // The window: the K − 1 previous inputs, then this step's rows, each [C].
            let mut window: Vec<T> = state.to_vec();
            for &r in &run.rows {
                window.extend_from_slice(&x.data[r * c..(r + 1) * c]);
            }
            for (t, &r) in run.rows.iter().enumerate() {
                for ch in 0..c {
                    let mut acc = T::zero();
                    for j in 0..taps {
                        acc = acc + weight.data[ch * taps + j] * window[(t + j) * c + ch];
                    }
                    out.data[r * c + ch] = acc * sigmoid(acc);
                }
            }
            state.copy_from_slice(&window[window.len() - (taps - 1) * c..]);
            kv.lane_state.finish_run(StatePart::Conv, layer, &run);
        }
    }

    fn gated_delta_rule(
        &self,
        kv: &mut RefKvCache<T>,
        layer: usize,
        qkv: &RefTensor<T>,
        g: &RefTensor<T>,
        beta: &RefTensor<T>,
        heads: GdnHeads,
        batch: &ForwardBatch,
        out: &mut RefTensor<T>,
    ) {
        let GdnHeads { num_k_heads: hk, num_v_heads: hv, k_head_dim: dk, v_head_dim: dv } = heads;
        assert!(hk > 0 && hv.is_multiple_of(hk), "gated_delta_rule: {hv} value heads for {hk} key heads");
        assert_eq!(qkv.cols, heads.qkv_cols(), "gated_delta_rule: qkv width");
        assert_eq!((g.cols, beta.cols, out.cols), (hv, hv, hv * dv), "gated_delta_rule: shapes");
        assert_eq!(kv.lane_state.spec.recurrent_floats, heads.state_floats(), "gated_delta_rule: state size");
        let scale = T::one() / T::from_f64(dk as f64).sqrt();
        let (mut q, mut k, mut u) = (vec![T::zero(); dk], vec![T::zero(); dk], vec![T::zero(); dv]);
        for run in lane_runs(batch) {
            let state = kv.lane_state.take(StatePart::Recurrent, layer, run.slot, run.first_pos, run.rows.len());
            for &r in &run.rows {
                let row = &qkv.data[r * qkv.cols..(r + 1) * qkv.cols];
                for h in 0..hv {
                    let kh = h / (hv / hk);
                    l2_normalize(&row[kh * dk..(kh + 1) * dk], &mut q);
                    l2_normalize(&row[(hk + kh) * dk..(hk + kh + 1) * dk], &mut k);
                    let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
                    let s = &mut state[h * dk * dv..(h + 1) * dk * dv];
                    let decay = g.data[r * hv + h].exp();
                    let b = beta.data[r * hv + h];
                    for x in s.iter_mut() {
                        *x = *x * decay;
                    }
                    // u = β·(v − Sᵀk), each sum over i in ascending order.
                    for (j, uj) in u.iter_mut().enumerate() {
                        let mut kv_mem = T::zero();
                        for i in 0..dk {
                            kv_mem = kv_mem + s[i * dv + j] * k[i];
                        }
                        *uj = (v[j] - kv_mem) * b;
                    }
                    for i in 0..dk {
                        for j in 0..dv {
                            s[i * dv + j] = s[i * dv + j] + k[i] * u[j];
                        }
                    }
                    let o = &mut out.data[r * hv * dv + h * dv..r * hv * dv + (h + 1) * dv];
                    for (j, oj) in o.iter_mut().enumerate() {
                        let mut acc = T::zero();
                        for i in 0..dk {
                            acc = acc + s[i * dv + j] * (q[i] * scale);
                        }
                        *oj = acc;
                    }
                }
            }
            kv.lane_state.finish_run(StatePart::Recurrent, layer, &run);
        }
    }
}

impl<T: RefFloat> LaneStateOps for RefBackend<T> {
    fn save_lane_state(&self, kv: &mut RefKvCache<T>, slot: usize, snapshot: usize) {
        kv.lane_state.save(slot, snapshot);
    }

    fn restore_lane_state(&self, kv: &mut RefKvCache<T>, snapshot: usize, slot: usize) {
        kv.lane_state.restore(snapshot, slot);
    }
}
