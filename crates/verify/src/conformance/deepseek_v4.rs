//! Conformance cases of DeepSeek V4's optional op groups (compressed sparse attention,
//! hyper-connections, the scored router), run where the backend under test has them. Chosen ids
//! (the indexer's entries, the router's experts) must equal the reference's exactly, with exact
//! ties built in so the tie rule (lower id first) is checked, not just the ordering.

use super::{CaseResult, Pair, nrms_case};
use crate::bounds::{Metric, dot_bound};
use crate::inputs::{Rng, Spread, activations};
use plumb_core::{
    Backend, CompressedAttentionOps, Compression, FullBackend, GgmlType, HcSpec, HyperConnectionOps, RopeOps,
    ScoredMoeOps,
};

pub(super) fn deepseek_v4_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    if let Some(ops) = p.b.compressed_attention_ops() {
        compressed_cases(p, ops, rng, out);
    }
    if let Some(ops) = p.b.hyper_connection_ops() {
        hyper_cases(p, ops, rng, out);
    }
    if let Some(ops) = p.b.scored_moe_ops() {
        scored_moe_cases(p, ops, rng, out);
    }
}

type Compressed<'a, B> = &'a dyn CompressedAttentionOps<
    Tensor = <B as Backend>::Tensor,
    Weight = <B as Backend>::Weight,
    KvCache = <B as Backend>::KvCache,
>;
type Hyper<'a, B> = &'a dyn HyperConnectionOps<
    Tensor = <B as Backend>::Tensor,
    Weight = <B as Backend>::Weight,
    KvCache = <B as Backend>::KvCache,
>;
type Scored<'a, B> = &'a dyn ScoredMoeOps<
    Tensor = <B as Backend>::Tensor,
    Weight = <B as Backend>::Weight,
    KvCache = <B as Backend>::KvCache,
>;

/// An exact-ids case: how many ids differ from the reference's.
fn ids_case<T: PartialEq>(op: &'static str, variant: String, got: &[T], want: &[T]) -> CaseResult {
    let differ = got.len().abs_diff(want.len()) + got.iter().zip(want).filter(|(a, b)| a != b).count();
    CaseResult::new(op, variant, Metric::Exact, differ as f64, 0.0, true)
}

fn compressed_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Compressed<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    // Unweighted RMSNorm over 4 slices of 96, rows of every spread.
    for spread in [Spread::Normal, Spread::DynamicRange] {
        let x = activations(rng, 5, 384, spread);
        let mut got = p.poisoned(5, 384);
        ops.rms_norm_unweighted(&p.b.upload(&x, 5, 384), 96, 1e-6, &mut got);
        let mut want = p.r.tensor(5, 384);
        p.r.rms_norm_unweighted(&p.r.upload(&x, 5, 384), 96, 1e-6, &mut want);
        out.push(nrms_case(p, "rms_norm_unweighted", format!("5x384 in slices of 96, {spread:?}"), &got, &want));
    }
    // RoPE on the trailing 16 of each 48-wide head, and its inverse.
    let positions: Vec<u32> = vec![0, 3, 64, 1023, 8191];
    let inv_freq: Vec<f64> = (0..8).map(|i| 1.0 / 10_000f64.powf(2.0 * i as f64 / 16.0)).collect();
    let (table, table_ref) = (p.b.rope_table(&positions, &inv_freq), p.r.rope_table(&positions, &inv_freq));
    let x = activations(rng, positions.len(), 3 * 48, Spread::Normal);
    for inverse in [false, true] {
        let mut got = p.b.upload(&x, positions.len(), 3 * 48);
        ops.rope_tail_interleaved(&mut got, &table, 3, 48, inverse);
        let mut want = p.r.upload(&x, positions.len(), 3 * 48);
        p.r.rope_tail_interleaved(&mut want, &table_ref, 3, 48, inverse);
        let variant = format!("3 heads x 48, rotary 16{}", if inverse { ", inverse" } else { "" });
        out.push(nrms_case(p, "rope_tail_interleaved", variant, &got, &want));
    }
    // Compression: CSA (overlap, with and without the previous window) and HCA.
    let d = 32;
    for (ratio, overlap, prev_window, windows) in [(4, true, false, 5), (4, true, true, 5), (8, false, false, 3)] {
        let series = if overlap { 2 } else { 1 };
        let rows = ratio * windows;
        let kv = activations(rng, rows, series * d, Spread::Normal);
        let gate: Vec<f32> = activations(rng, rows, series * d, Spread::Normal).iter().map(|v| v * 3.0).collect();
        let (ape, ape_r) = p.weight(rng, GgmlType::F32, ratio, series * d);
        let (norm, norm_r) = p.weight(rng, GgmlType::F32, 1, d);
        let c = Compression { ratio, overlap, prev_window };
        let n = c.num_entries(rows);
        let mut got = p.poisoned(n, d);
        let (kv_b, gate_b) = (p.b.upload(&kv, rows, series * d), p.b.upload(&gate, rows, series * d));
        ops.compress_kv(&kv_b, &gate_b, &ape, &norm, 1e-6, c, &mut got);
        let mut want = p.r.tensor(n, d);
        let (kv_r, gate_r) = (p.r.upload(&kv, rows, series * d), p.r.upload(&gate, rows, series * d));
        p.r.compress_kv(&kv_r, &gate_r, &ape_r, &norm_r, 1e-6, c, &mut want);
        let variant = format!(
            "ratio {ratio}, {windows} windows{}{}",
            if overlap { ", overlap" } else { "" },
            if prev_window { ", previous window" } else { "" }
        );
        out.push(nrms_case(p, "compress_kv", variant, &got, &want));
    }
    // The indexer: 2 heads of 16 over 12 entries, some duplicated (exact ties), rows seeing 0..12.
    let (heads, dd, num_entries, top_k) = (2, 16, 12, 4);
    let mut keys = activations(rng, num_entries, dd, Spread::Normal);
    keys.copy_within(0..dd, 5 * dd);
    keys.copy_within(2 * dd..3 * dd, 9 * dd);
    let q = activations(rng, 6, heads * dd, Spread::Normal);
    let w = activations(rng, 6, heads, Spread::Normal);
    let visible = [0u32, 1, 4, 7, 10, 12];
    let got = ops.indexer_topk(
        &p.b.upload(&q, 6, heads * dd),
        &p.b.upload(&keys, num_entries, dd),
        &p.b.upload(&w, 6, heads),
        &visible,
        top_k,
        0.25,
        0.7,
    );
    let want = p.r.indexer_topk(
        &p.r.upload(&q, 6, heads * dd),
        &p.r.upload(&keys, num_entries, dd),
        &p.r.upload(&w, 6, heads),
        &visible,
        top_k,
        0.25,
        0.7,
    );
    out.push(ids_case("indexer_topk", "2 heads x 16, 12 entries with ties, 0..12 visible".into(), &got, &want));
    // Sink attention: 3 heads of 64 over a window of kv rows plus chosen entries.
    let (heads, dd) = (3, 64);
    let kv = activations(rng, 10, dd, Spread::Normal);
    let entries = activations(rng, 5, dd, Spread::Normal);
    let q = activations(rng, 4, heads * dd, Spread::Normal);
    let windows = [(0u32, 1u32), (0, 6), (3, 10), (7, 8)];
    let entry_ids = [-1, -1, 0, -1, 4, 1, 3, 2, -1];
    let entry_ids: Vec<i32> = entry_ids.iter().chain(&[-1, 0, 2]).copied().collect();
    let (sinks, sinks_r) = p.weight(rng, GgmlType::F32, 1, heads);
    let mut got = p.poisoned(4, heads * dd);
    ops.sink_attention(
        &p.b.upload(&q, 4, heads * dd),
        &p.b.upload(&kv, 10, dd),
        &windows,
        &p.b.upload(&entries, 5, dd),
        &entry_ids,
        &sinks,
        0.125,
        &mut got,
    );
    let mut want = p.r.tensor(4, heads * dd);
    p.r.sink_attention(
        &p.r.upload(&q, 4, heads * dd),
        &p.r.upload(&kv, 10, dd),
        &windows,
        &p.r.upload(&entries, 5, dd),
        &entry_ids,
        &sinks_r,
        0.125,
        &mut want,
    );
    out.push(nrms_case(p, "sink_attention", "3 heads x 64, windows and entries".into(), &got, &want));
    paged_rows_case(p, ops, rng, out);
    // Grouped projection: 4 groups of 64 inputs to 32 outputs, in every format the backend has.
    let (groups, k, r) = (4, 64, 32);
    for ty in [GgmlType::F32, GgmlType::BF16, GgmlType::Q8_0].into_iter().filter(|t| p.b.supports(*t)) {
        let (wb, wr) = p.weight(rng, ty, groups * r, k);
        let x = activations(rng, 3, groups * k, Spread::Normal);
        let mut got = p.poisoned(3, groups * r);
        ops.grouped_linear(&p.b.upload(&x, 3, groups * k), &wb, groups, &mut got);
        // The reference takes the activations as the backend declares its products see them.
        let inputs = p.b.linear_inputs(ty, k);
        let xr: Vec<f32> = inputs.apply(&x);
        let mut want = p.r.tensor(3, groups * r);
        p.r.grouped_linear(&p.r.upload(&xr, 3, groups * k), &wr, groups, &mut want);
        let (g, w, written) = p.compare(&got, &want);
        // Backward error per output: |got − want| / Σ_k |x_k · w_jk| over its group.
        let wd = p.r.download_f64(&wr);
        let mut err = 0f64;
        for n in 0..3 {
            for j in 0..groups * r {
                let grp = j / r;
                let scale: f64 = (0..k)
                    .map(|i| (xr[n * groups * k + grp * k + i] as f64 * wd[j * k + i]).abs())
                    .sum::<f64>()
                    .max(f64::MIN_POSITIVE);
                err = err.max((g[n * groups * r + j] - w[n * groups * r + j]).abs() / scale);
            }
        }
        out.push(CaseResult::new(
            "grouped_linear",
            format!("[{ty}] 4 groups of 64 -> 32"),
            Metric::DotBackward,
            err,
            dot_bound(k),
            written,
        ));
    }
}

/// Paged rows: two fields written at scattered slots across K/V planes and KV layers (a
/// 40-wide field from column 5 of 16-wide heads), read back: each value exactly as the
/// backend's KV store rounds it, the neighbouring field untouched. Bits compared, NaN fails.
fn paged_rows_case<B: FullBackend>(p: &Pair<'_, B>, ops: Compressed<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let spec = plumb_core::KvSpec {
        num_layers: 4,
        num_kv_heads: 1,
        head_dim: 16,
        block_size: 4,
        num_blocks: 3,
        lane_state: plumb_core::LaneStateSpec::NONE,
    };
    let mut kv = p.b.new_kv_cache(&spec);
    let slots = [9u32, 0, 5, 11];
    let (a, x) = (activations(rng, 4, 5, Spread::DynamicRange), activations(rng, 4, 40, Spread::DynamicRange));
    ops.write_paged_rows(&mut kv, 1, 0, &slots, &p.b.upload(&a, 4, 5));
    ops.write_paged_rows(&mut kv, 1, 5, &slots, &p.b.upload(&x, 4, 40));
    let store = p.b.kv_store();
    let mut differ = 0;
    for (col, width, src) in [(0, 5, &a), (5, 40, &x)] {
        let mut got = p.poisoned(4, width);
        ops.read_paged_rows(&kv, 1, col, &slots, &mut got);
        let got = p.b.download(&got);
        differ += got.iter().zip(src.iter()).filter(|(g, v)| g.to_bits() != store.round(**v).to_bits()).count();
    }
    out.push(CaseResult::new(
        "paged_rows",
        format!("4 rows of 5 + 40 across planes, {} store", store.name()),
        Metric::Exact,
        differ as f64,
        0.0,
        true,
    ));
}

fn hyper_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Hyper<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let (n, hidden, rows) = (4, 64, 5);
    let hc = HcSpec { num_streams: n, sinkhorn_iters: 20, hc_eps: 1e-6, norm_eps: 1e-6 };
    let streams = activations(rng, rows, n * hidden, Spread::Normal);
    let mix = (2 + n) * n;
    let (fn_w, fn_r) = p.weight(rng, GgmlType::F32, mix, n * hidden);
    let (base, base_r) = p.weight(rng, GgmlType::F32, 1, mix);
    let (scale, scale_r) = p.weight(rng, GgmlType::F32, 1, 3);
    let s_b = p.b.upload(&streams, rows, n * hidden);
    let s_r = p.r.upload(&streams, rows, n * hidden);
    let (mut post, mut comb, mut coll) = (p.poisoned(rows, n), p.poisoned(rows, n * n), p.poisoned(rows, hidden));
    ops.hc_pre(&s_b, &fn_w, &base, &scale, hc, &mut post, &mut comb, &mut coll);
    let (mut post_r, mut comb_r, mut coll_r) = (p.r.tensor(rows, n), p.r.tensor(rows, n * n), p.r.tensor(rows, hidden));
    p.r.hc_pre(&s_r, &fn_r, &base_r, &scale_r, hc, &mut post_r, &mut comb_r, &mut coll_r);
    out.push(nrms_case(p, "hc_pre", "4 streams x 64: post".into(), &post, &post_r));
    out.push(nrms_case(p, "hc_pre", "4 streams x 64: Sinkhorn mix (20 iterations)".into(), &comb, &comb_r));
    out.push(nrms_case(p, "hc_pre", "4 streams x 64: collapsed input".into(), &coll, &coll_r));
    // Re-expansion from the same rows' post and mix (the reference's, fed to both).
    let y = activations(rng, rows, hidden, Spread::Normal);
    let (post_v, comb_v) = (p.r.download_f64(&post_r), p.r.download_f64(&comb_r));
    let (post_v, comb_v): (Vec<f32>, Vec<f32>) =
        (post_v.iter().map(|&v| v as f32).collect(), comb_v.iter().map(|&v| v as f32).collect());
    let mut got = p.poisoned(rows, n * hidden);
    ops.hc_post(
        &s_b,
        &p.b.upload(&y, rows, hidden),
        &p.b.upload(&post_v, rows, n),
        &p.b.upload(&comb_v, rows, n * n),
        &mut got,
    );
    let mut want = p.r.tensor(rows, n * hidden);
    p.r.hc_post(
        &s_r,
        &p.r.upload(&y, rows, hidden),
        &p.r.upload(&post_v, rows, n),
        &p.r.upload(&comb_v, rows, n * n),
        &mut want,
    );
    out.push(nrms_case(p, "hc_post", "4 streams x 64".into(), &got, &want));
    let (fn_h, fn_hr) = p.weight(rng, GgmlType::F32, n, n * hidden);
    let (base_h, base_hr) = p.weight(rng, GgmlType::F32, 1, n);
    let (scale_h, scale_hr) = p.weight(rng, GgmlType::F32, 1, 1);
    let mut got = p.poisoned(rows, hidden);
    ops.hc_head(&s_b, &fn_h, &base_h, &scale_h, hc, &mut got);
    let mut want = p.r.tensor(rows, hidden);
    p.r.hc_head(&s_r, &fn_hr, &base_hr, &scale_hr, hc, &mut want);
    out.push(nrms_case(p, "hc_head", "4 streams x 64".into(), &got, &want));
}

fn scored_moe_cases<B: FullBackend>(p: &Pair<'_, B>, ops: Scored<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let (rows, experts, k) = (6, 64, 6);
    let mut logits = activations(rng, rows, experts, Spread::Normal);
    for r in 0..rows {
        // Exact ties: duplicated logits give equal scores on both sides (bias is zero there).
        let row = &mut logits[r * experts..(r + 1) * experts];
        let (a, b) = (rng.below(experts), rng.below(experts));
        row[b] = row[a];
    }
    let mut bias_v = vec![0f32; experts];
    for e in (0..experts).step_by(3) {
        bias_v[e] = (rng.normal() * 0.1) as f32;
    }
    let bias_bytes: Vec<u8> = bias_v.iter().flat_map(|v| v.to_le_bytes()).collect();
    let src = plumb_core::WeightSource {
        name: "router bias".into(),
        ty: GgmlType::F32,
        rows: 1,
        cols: experts,
        bytes: plumb_core::HostBytes::from_vec(bias_bytes),
    };
    let bias = p.b.load_weight(src.clone()).expect("an f32 vector loads");
    let bias_r = p.r.load_weight(src).expect("an f32 vector loads");
    let mut got_w = p.poisoned(rows, k);
    let got = ops.sqrt_softplus_topk(&p.b.upload(&logits, rows, experts), &bias, k, 2.5, &mut got_w);
    let mut want_w = p.r.tensor(rows, k);
    let want = p.r.sqrt_softplus_topk(&p.r.upload(&logits, rows, experts), &bias_r, k, 2.5, &mut want_w);
    out.push(ids_case("sqrt_softplus_topk", format!("ids {rows}x{experts} top-{k}, with ties"), &got, &want));
    out.push(nrms_case(p, "sqrt_softplus_topk", format!("weights {rows}x{experts} top-{k}"), &got_w, &want_w));
    let ids: Vec<u32> = (0..rows * k).map(|i| ((i * 7 + 3) % experts) as u32).collect();
    let mut got_w = p.poisoned(rows, k);
    ops.hash_route_weights(&p.b.upload(&logits, rows, experts), &ids, 1.5, &mut got_w);
    let mut want_w = p.r.tensor(rows, k);
    p.r.hash_route_weights(&p.r.upload(&logits, rows, experts), &ids, 1.5, &mut want_w);
    out.push(nrms_case(p, "hash_route_weights", format!("{rows}x{experts}, {k} given experts"), &got_w, &want_w));
    let g: Vec<f32> = activations(rng, 9, 100, Spread::Normal).iter().map(|v| v * 6.0).collect();
    let u: Vec<f32> = activations(rng, 9, 100, Spread::Normal).iter().map(|v| v * 6.0).collect();
    let mut got = p.poisoned(9, 100);
    ops.clamped_swiglu(&p.b.upload(&g, 9, 100), &p.b.upload(&u, 9, 100), 7.0, &mut got);
    let mut want = p.r.tensor(9, 100);
    p.r.clamped_swiglu(&p.r.upload(&g, 9, 100), &p.r.upload(&u, 9, 100), 7.0, &mut want);
    out.push(nrms_case(p, "clamped_swiglu", "9x100, limit 7, values past it".into(), &got, &want));
}
