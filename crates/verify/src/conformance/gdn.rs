//! Conformance cases of the optional Gated DeltaNet op group, run where the backend under test
//! has it (`Backend::gated_delta_ops`). The two stateful ops run two steps over two lanes (a
//! prefill chunk, then a mix of one decode token and a longer continuation), so the state a step
//! leaves behind is checked through the next step's outputs. Where the backend snapshots lane
//! state (`Backend::lane_state_ops`), the first step also saves a lane's state mid-run and a
//! third step restores it into the other slot and continues from there.

use super::{CaseResult, Pair, nrms_case};
use crate::inputs::{Rng, Spread, activations};
use plumb_backend_ref::RefBackend;
use plumb_core::{
    Backend, ForwardBatch, FullBackend, GatedDeltaOps, GdnHeads, GgmlType, HostBytes, KvSpec, LaneStateOps,
    LaneStateSpec, LaneView, StateSnapshot, WeightSource,
};

type Ops<'a, B> = &'a dyn GatedDeltaOps<
    Tensor = <B as Backend>::Tensor,
    Weight = <B as Backend>::Weight,
    KvCache = <B as Backend>::KvCache,
>;

pub(super) fn gdn_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let Some(ops) = p.b.gated_delta_ops() else { return };
    norm_and_gate_cases(p, ops, rng, out);
    stateful_cases(p, ops, rng, out);
}

/// An f32 vector weight [1, len] on both backends.
fn vector<B: FullBackend>(p: &Pair<'_, B>, name: &str, v: &[f32]) -> (B::Weight, <RefBackend<f64> as Backend>::Weight) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let src = WeightSource {
        name: name.into(),
        ty: GgmlType::F32,
        rows: 1,
        cols: v.len(),
        bytes: HostBytes::from_vec(bytes),
    };
    (p.b.load_weight(src.clone()).expect("vector weight"), p.r.load_weight(src).expect("vector weight"))
}

fn uniform(rng: &mut Rng, n: usize, lo: f64, hi: f64) -> Vec<f32> {
    (0..n).map(|_| (lo + (hi - lo) * rng.uniform()) as f32).collect()
}

fn norm_and_gate_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Ops<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    for (rows, width, cols) in [(3, 64, 64), (5, 32, 128), (9, 16, 64)] {
        let x = activations(rng, rows, cols, Spread::DynamicRange);
        let (w, wr) = vector(p, "norm", &uniform(rng, width, -0.5, 0.5));
        let mut got = p.poisoned(rows, cols);
        ops.rms_norm_1p(&p.b.upload(&x, rows, cols), &w, 1e-6, &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.rms_norm_1p(&p.r.upload(&x, rows, cols), &wr, 1e-6, &mut want);
        out.push(nrms_case(p, "rms_norm_1p", format!("{rows}x{cols} by {width}"), &got, &want));

        let z = activations(rng, rows, cols, Spread::Normal);
        let mut got = p.poisoned(rows, cols);
        ops.rms_norm_gated(&p.b.upload(&x, rows, cols), &p.b.upload(&z, rows, cols), &w, 1e-6, &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.rms_norm_gated(&p.r.upload(&x, rows, cols), &p.r.upload(&z, rows, cols), &wr, 1e-6, &mut want);
        out.push(nrms_case(p, "rms_norm_gated", format!("{rows}x{cols} by {width}"), &got, &want));

        for gate_cols in [cols, 1] {
            let gate = activations(rng, rows, gate_cols, Spread::Normal);
            let mut got = p.poisoned(rows, cols);
            ops.sigmoid_mul(&p.b.upload(&x, rows, cols), &p.b.upload(&gate, rows, gate_cols), &mut got);
            let mut want = p.r.tensor(rows, cols);
            p.r.sigmoid_mul(&p.r.upload(&x, rows, cols), &p.r.upload(&gate, rows, gate_cols), &mut want);
            out.push(nrms_case(p, "sigmoid_mul", format!("{rows}x{cols}, gate {gate_cols} cols"), &got, &want));
        }
    }
    let (rows, h) = (7, 8);
    let (a, b) = (activations(rng, rows, h, Spread::Normal), activations(rng, rows, h, Spread::Normal));
    let mut a = a;
    a[3] = 30.0; // softplus's linear branch
    let (a_log, a_log_r) = vector(p, "A_log", &uniform(rng, h, -1.0, 1.5));
    let (dt, dt_r) = vector(p, "dt_bias", &uniform(rng, h, -1.0, 1.0));
    let (mut g, mut beta) = (p.poisoned(rows, h), p.poisoned(rows, h));
    ops.gdn_gates(&p.b.upload(&a, rows, h), &p.b.upload(&b, rows, h), &a_log, &dt, &mut g, &mut beta);
    let (mut gr, mut br) = (p.r.tensor(rows, h), p.r.tensor(rows, h));
    p.r.gdn_gates(&p.r.upload(&a, rows, h), &p.r.upload(&b, rows, h), &a_log_r, &dt_r, &mut gr, &mut br);
    out.push(nrms_case(p, "gdn_gates", format!("g {rows}x{h}"), &g, &gr));
    out.push(nrms_case(p, "gdn_gates", format!("beta {rows}x{h}"), &beta, &br));
}

/// Two steps over two lanes with state slots 1 and 0: step 1 prefills 6 and 3 tokens, step 2
/// continues lane 0 by one token and lane 1 by 5; each step's output is a case. With snapshots,
/// step 1 also saves lane 0's state after 4 tokens into snapshot 0, and a third step continues
/// it from position 4 in slot 0 after a restore.
fn steps(snapshots: bool) -> Vec<ForwardBatch> {
    let lanes = vec![LaneView { block_table: vec![0] }, LaneView { block_table: vec![1] }];
    let mut first =
        ForwardBatch { block_size: 16, lanes: lanes.clone(), state_slots: vec![1, 0], ..Default::default() };
    let mut second = ForwardBatch { block_size: 16, lanes, state_slots: vec![1, 0], ..Default::default() };
    for (lane, range) in [(0, 0..6), (1, 0..3)] {
        for pos in range {
            first.push_row(lane, 0, pos);
        }
    }
    // Lane 1's rows first: a lane's rows need not lead the batch.
    for (lane, range) in [(1, 3..8), (0, 6..7)] {
        for pos in range {
            second.push_row(lane, 0, pos);
        }
    }
    if !snapshots {
        return vec![first, second];
    }
    first.state_snapshots = vec![StateSnapshot { lane: 0, num_tokens: 4, snapshot: 0 }];
    // Slot 0 (lane 1's) after the restore: lane 0's state at 4 tokens.
    let third = ForwardBatch::single_lane(&[0; 3], 4, 16, vec![0]);
    vec![first, second, third]
}

fn stateful_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Ops<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let heads = GdnHeads { num_k_heads: 2, num_v_heads: 4, k_head_dim: 16, v_head_dim: 8 };
    let (c, taps) = (heads.qkv_cols(), 4);
    let lane_state = LaneStateSpec {
        num_layers: 2,
        num_slots: 2,
        conv_floats: (taps - 1) * c,
        recurrent_floats: heads.state_floats(),
        num_snapshots: 1,
    };
    let spec = KvSpec { num_layers: 0, num_kv_heads: 1, head_dim: 16, block_size: 16, num_blocks: 2, lane_state };
    let (mut kv, mut kv_r) = (p.b.new_kv_cache(&spec), p.r.new_kv_cache(&spec));
    let (conv_w, conv_w_r) = vector(p, "conv1d", &uniform(rng, c * taps, -0.6, 0.6));
    let (hv, dv) = (heads.num_v_heads, heads.v_head_dim);
    let snapshots = p.b.lane_state_ops();
    for (step, batch) in steps(snapshots.is_some()).iter().enumerate() {
        if let (2, Some(ls)) = (step, snapshots) {
            ls.restore_lane_state(&mut kv, 0, 0);
            p.r.restore_lane_state(&mut kv_r, 0, 0);
        }
        let n = batch.num_rows();
        let x = activations(rng, n, c, Spread::Normal);
        let mut got = p.poisoned(n, c);
        ops.conv1d_silu(&mut kv, 1, &p.b.upload(&x, n, c), &conv_w, batch, &mut got);
        let mut want = p.r.tensor(n, c);
        p.r.conv1d_silu(&mut kv_r, 1, &p.r.upload(&x, n, c), &conv_w_r, batch, &mut want);
        out.push(nrms_case(p, "conv1d_silu", format!("step {step}: {n} rows, {c} channels, k={taps}"), &got, &want));

        let qkv = activations(rng, n, c, Spread::Normal);
        // Decays e^g in (0.05, 1) and β in (0, 1), as the gates produce.
        let g = uniform(rng, n * hv, -3.0, -0.01);
        let beta = uniform(rng, n * hv, 0.0, 1.0);
        let mut got = p.poisoned(n, hv * dv);
        let (qb, gb, bb) = (p.b.upload(&qkv, n, c), p.b.upload(&g, n, hv), p.b.upload(&beta, n, hv));
        ops.gated_delta_rule(&mut kv, 0, &qb, &gb, &bb, heads, batch, &mut got);
        let mut want = p.r.tensor(n, hv * dv);
        let (qr, gr, br) = (p.r.upload(&qkv, n, c), p.r.upload(&g, n, hv), p.r.upload(&beta, n, hv));
        p.r.gated_delta_rule(&mut kv_r, 0, &qr, &gr, &br, heads, batch, &mut want);
        let variant =
            format!("step {step}: {n} rows, {} k / {hv} v heads, dk {} dv {dv}", heads.num_k_heads, heads.k_head_dim);
        out.push(nrms_case(p, "gated_delta_rule", variant, &got, &want));
    }
}
