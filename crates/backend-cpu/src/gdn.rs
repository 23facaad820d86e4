//! Gated DeltaNet on the CPU: the recurrence token by token in position order, exactly the
//! reference's order of operations (`plumb_backend_ref`'s gdn.rs), in float32.
//!
//! Why token by token: the chunked (WY / triangular-solve) form other engines use for prefill
//! rounds differently from the one-token recurrence they use for decode, so a token's output
//! would depend on whether it arrived in a prefill chunk, in which chunk, or as a decode step.
//! Here every step kind runs the same per-token update, and each output element's sums run over
//! the key dimension in ascending order; the inner loops run across the value dimension, where
//! lanes are independent, so vectorizing them reorders no sum. Hence chunked == whole ==
//! token-by-token == resumed, bit for bit. Heads run on separate threads: each owns its state.

use crate::{CpuBackend, CpuKvCache, CpuTensor, CpuWeight, SharedOut, elementwise, pool};
use plumb_core::{ForwardBatch, GatedDeltaOps, GdnHeads, LaneStateOps, StatePart, lane_runs};

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// torch's softplus (β = 1, threshold 20).
fn softplus(x: f32) -> f32 {
    if x > 20.0 { x } else { x.exp().ln_1p() }
}

/// x / sqrt(Σx² + 1e-6), the sum in ascending order.
fn l2_normalize(x: &[f32], out: &mut [f32]) {
    let mut sum = 0f32;
    for &v in x {
        sum += v * v;
    }
    let inv = 1.0 / (sum + 1e-6).sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = v * inv;
    }
}

/// One value head's delta-rule step. s: [dk, dv]; q is already scaled.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn delta_step(s: &mut [f32], q: &[f32], k: &[f32], v: &[f32], decay: f32, beta: f32, mem: &mut [f32], o: &mut [f32]) {
    let dv = v.len();
    for x in s.iter_mut() {
        *x *= decay;
    }
    mem.fill(0.0);
    for (i, &ki) in k.iter().enumerate() {
        for (m, &sij) in mem.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
            *m += sij * ki;
        }
    }
    for (m, &vj) in mem.iter_mut().zip(v) {
        *m = (vj - *m) * beta;
    }
    for (i, &ki) in k.iter().enumerate() {
        for (sij, &uj) in s[i * dv..(i + 1) * dv].iter_mut().zip(mem.iter()) {
            *sij += ki * uj;
        }
    }
    o.fill(0.0);
    for (i, &qi) in q.iter().enumerate() {
        for (oj, &sij) in o.iter_mut().zip(&s[i * dv..(i + 1) * dv]) {
            *oj += sij * qi;
        }
    }
}

impl GatedDeltaOps for CpuBackend {
    fn rms_norm_1p(&self, x: &CpuTensor, weight: &CpuWeight, eps: f64, out: &mut CpuTensor) {
        let w = weight.vector();
        assert!(!w.is_empty() && x.cols.is_multiple_of(w.len()), "rms_norm_1p `{}`: shape mismatch", weight.name);
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "rms_norm_1p `{}`: shape mismatch", weight.name);
        // (1 + w) rounded to float32 once, as transformers computes it.
        let one_plus: Vec<f32> = w.iter().map(|&v| 1.0 + v).collect();
        elementwise::rms_norm_rows(self.isa, &x.data, &one_plus, eps as f32, &mut out.data);
    }

    fn rms_norm_gated(&self, x: &CpuTensor, z: &CpuTensor, weight: &CpuWeight, eps: f64, out: &mut CpuTensor) {
        let w = weight.vector();
        assert!(!w.is_empty() && x.cols.is_multiple_of(w.len()), "rms_norm_gated `{}`: shape mismatch", weight.name);
        assert_eq!((z.rows, z.cols, out.rows, out.cols), (x.rows, x.cols, x.rows, x.cols), "rms_norm_gated: shapes");
        elementwise::rms_norm_rows(self.isa, &x.data, w, eps as f32, &mut out.data);
        for (o, &g) in out.data.iter_mut().zip(&z.data) {
            *o *= g * sigmoid(g);
        }
    }

    fn sigmoid_mul(&self, x: &CpuTensor, gate: &CpuTensor, out: &mut CpuTensor) {
        assert!(gate.rows == x.rows && (gate.cols == x.cols || gate.cols == 1), "sigmoid_mul: gate shape");
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "sigmoid_mul: shape mismatch");
        let cols = x.cols.max(1);
        for (r, (o, xr)) in out.data.chunks_exact_mut(cols).zip(x.data.chunks_exact(cols)).enumerate() {
            let gr = &gate.data[r * gate.cols..(r + 1) * gate.cols];
            for (j, (o, &v)) in o.iter_mut().zip(xr).enumerate() {
                *o = v * sigmoid(gr[if gate.cols == 1 { 0 } else { j }]);
            }
        }
    }

    fn gdn_gates(
        &self,
        a: &CpuTensor,
        b: &CpuTensor,
        a_log: &CpuWeight,
        dt_bias: &CpuWeight,
        g: &mut CpuTensor,
        beta: &mut CpuTensor,
    ) {
        let (a_log, dt_bias) = (a_log.vector(), dt_bias.vector());
        let h = a_log.len();
        assert!(dt_bias.len() == h && a.cols == h && b.cols == h && g.cols == h && beta.cols == h, "gdn_gates");
        for i in 0..a.data.len() {
            let head = i % h;
            g.data[i] = -(a_log[head].exp() * softplus(a.data[i] + dt_bias[head]));
            beta.data[i] = sigmoid(b.data[i]);
        }
    }

    fn conv1d_silu(
        &self,
        kv: &mut CpuKvCache,
        layer: usize,
        x: &CpuTensor,
        weight: &CpuWeight,
        batch: &ForwardBatch,
        out: &mut CpuTensor,
    ) {
        let w = weight.vector();
        let c = x.cols;
        assert!(c > 0 && w.len().is_multiple_of(c), "conv1d_silu `{}`: {} taps for {c} channels", weight.name, w.len());
        let taps = w.len() / c;
        assert_eq!(kv.lane_state.spec.conv_floats, (taps - 1) * c, "conv1d_silu: conv state size");
        for run in lane_runs(batch) {
            let state = kv.lane_state.take(StatePart::Conv, layer, run.slot, run.first_pos, run.rows.len());
            let mut window: Vec<f32> = state.to_vec();
            for &r in &run.rows {
                window.extend_from_slice(&x.data[r * c..(r + 1) * c]);
            }
            for (t, &r) in run.rows.iter().enumerate() {
                let o = &mut out.data[r * c..(r + 1) * c];
                for (ch, o) in o.iter_mut().enumerate() {
                    let mut acc = 0f32;
                    for j in 0..taps {
                        acc += w[ch * taps + j] * window[(t + j) * c + ch];
                    }
                    *o = acc * sigmoid(acc);
                }
            }
            state.copy_from_slice(&window[window.len() - (taps - 1) * c..]);
            kv.lane_state.finish_run(StatePart::Conv, layer, &run);
        }
    }

    fn gated_delta_rule(
        &self,
        kv: &mut CpuKvCache,
        layer: usize,
        qkv: &CpuTensor,
        g: &CpuTensor,
        beta: &CpuTensor,
        heads: GdnHeads,
        batch: &ForwardBatch,
        out: &mut CpuTensor,
    ) {
        let GdnHeads { num_k_heads: hk, num_v_heads: hv, k_head_dim: dk, v_head_dim: dv } = heads;
        assert!(hk > 0 && hv.is_multiple_of(hk), "gated_delta_rule: {hv} value heads for {hk} key heads");
        assert_eq!(qkv.cols, heads.qkv_cols(), "gated_delta_rule: qkv width");
        assert_eq!((g.cols, beta.cols, out.cols), (hv, hv, hv * dv), "gated_delta_rule: shapes");
        assert_eq!(kv.lane_state.spec.recurrent_floats, heads.state_floats(), "gated_delta_rule: state size");
        let scale = 1.0 / (dk as f32).sqrt();
        let cols = qkv.cols;
        let out_shared = SharedOut::new(&mut out.data);
        for run in lane_runs(batch) {
            let state = kv.lane_state.take(StatePart::Recurrent, layer, run.slot, run.first_pos, run.rows.len());
            let state_shared = SharedOut::new(state);
            let rows = &run.rows;
            self.pool.run(&|t, nt| {
                let (mut q, mut k, mut mem) = (vec![0f32; dk], vec![0f32; dk], vec![0f32; dv]);
                for h in pool::split_range(hv, t, nt, 1) {
                    // SAFETY: each head's state and output columns belong to one thread; both
                    // buffers outlive `run`.
                    let s = unsafe { state_shared.part(h * dk * dv, dk * dv) };
                    let kh = h / (hv / hk);
                    for &r in rows {
                        let row = &qkv.data[r * cols..(r + 1) * cols];
                        l2_normalize(&row[kh * dk..(kh + 1) * dk], &mut q);
                        for qi in q.iter_mut() {
                            *qi *= scale;
                        }
                        l2_normalize(&row[(hk + kh) * dk..(hk + kh + 1) * dk], &mut k);
                        let v = &row[2 * hk * dk + h * dv..2 * hk * dk + (h + 1) * dv];
                        let decay = g.data[r * hv + h].exp();
                        // SAFETY: as above (row r, head h's columns).
                        let o = unsafe { out_shared.part(r * hv * dv + h * dv, dv) };
                        delta_step(s, &q, &k, v, decay, beta.data[r * hv + h], &mut mem, o);
                    }
                }
            });
            kv.lane_state.finish_run(StatePart::Recurrent, layer, &run);
        }
    }
}

impl LaneStateOps for CpuBackend {
    fn save_lane_state(&self, kv: &mut CpuKvCache, slot: usize, snapshot: usize) {
        kv.lane_state.save(slot, snapshot);
    }

    fn restore_lane_state(&self, kv: &mut CpuKvCache, snapshot: usize, slot: usize) {
        kv.lane_state.restore(snapshot, slot);
    }
}
