//! The per-op conformance suite: every op of the `Backend` traits, every weight format, on the
//! backend under test against `RefBackend<f64>`, with fresh random inputs for each seed.
//! Outputs of the backend under test are poisoned with NaN first, so an element an op forgets to
//! write fails the case. The optional op groups (`moe`, `gdn`) run where the backend has them.

mod deepseek_v4;
mod gdn;
mod moe;

use crate::bounds::{Metric, bound, dot_bound};
use crate::inputs::{Rng, Spread, activations, weight_bytes};
use plumb_backend_ref::RefBackend;
use plumb_core::{
    AttentionOps, Backend, ElementwiseOps, ForwardBatch, FullBackend, GgmlType, HostBytes, KvSpec, LaneView, LinearOps,
    RopeOps, WeightSource,
};

/// One case's outcome.
#[derive(Clone, Debug, serde::Serialize)]
pub struct CaseResult {
    pub op: &'static str,
    /// Weight format, shape or input spread.
    pub variant: String,
    pub metric: Metric,
    pub error: f64,
    pub bound: f64,
    /// Every output element was written (no NaN poison left).
    pub all_written: bool,
    pub pass: bool,
}

impl CaseResult {
    fn new(op: &'static str, variant: String, metric: Metric, error: f64, bound: f64, all_written: bool) -> Self {
        let pass = all_written && error.is_finite() && error <= bound;
        CaseResult { op, variant, metric, error, bound, all_written, pass }
    }
}

/// The suite's backends: the one under test and the float64 truth.
struct Pair<'a, B> {
    b: &'a B,
    r: RefBackend<f64>,
}

impl<B: FullBackend> Pair<'_, B> {
    fn poisoned(&self, rows: usize, cols: usize) -> B::Tensor {
        self.b.upload(&vec![f32::NAN; rows * cols], rows, cols)
    }

    fn weight(
        &self,
        rng: &mut Rng,
        ty: GgmlType,
        rows: usize,
        cols: usize,
    ) -> (B::Weight, <RefBackend<f64> as Backend>::Weight) {
        let bytes = HostBytes::from_vec(weight_bytes(rng, ty, rows, cols));
        let src = WeightSource { name: format!("{ty} {rows}x{cols}"), ty, rows, cols, bytes };
        let w = self.b.load_weight(src.clone()).expect("the backend under test loads every format it claims");
        (w, self.r.load_weight(src).expect("the reference loads every dequantizable format"))
    }

    /// (got, want, all written): the test output against the reference output.
    fn compare(&self, got: &B::Tensor, want: &<RefBackend<f64> as Backend>::Tensor) -> (Vec<f64>, Vec<f64>, bool) {
        let got = self.b.download_f64(got);
        let want = self.r.download_f64(want);
        let written = got.iter().zip(&want).all(|(g, w)| !g.is_nan() || w.is_nan());
        (got, want, written)
    }
}

fn nrms_case<B: FullBackend>(
    p: &Pair<'_, B>,
    op: &'static str,
    variant: String,
    got: &B::Tensor,
    want: &<RefBackend<f64> as Backend>::Tensor,
) -> CaseResult {
    let (g, w, written) = p.compare(got, want);
    let b = bound(op);
    let error = match b.metric {
        Metric::Exact => {
            let differs = g.iter().zip(&w).filter(|(a, b)| **a != (**b as f32) as f64).count();
            differs as f64
        }
        _ => crate::nrms(&g, &w),
    };
    CaseResult::new(op, variant, b.metric, error, b.bound, written)
}

/// Runs every case with inputs drawn from `seed`.
pub fn run_suite<B: FullBackend>(backend: &B, seed: u64) -> Vec<CaseResult> {
    // The reference stores K/V as the backend declares it does; everything else is f64.
    let p = Pair { b: backend, r: RefBackend::new(1).with_kv_store(backend.kv_store()) };
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    linear_cases(&p, &mut rng, &mut out);
    embed_and_gather(&p, &mut rng, &mut out);
    elementwise_cases(&p, &mut rng, &mut out);
    rope_cases(&p, &mut rng, &mut out);
    attention_cases(&p, &mut rng, &mut out);
    moe::moe_cases(&p, &mut rng, &mut out);
    gdn::gdn_cases(&p, &mut rng, &mut out);
    deepseek_v4::deepseek_v4_cases(&p, &mut rng, &mut out);
    out
}

fn linear_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let k = 512;
    for ty in GgmlType::DEQUANTIZABLE.into_iter().filter(|t| p.b.supports(*t)) {
        for (num_rows, spread) in [(1, Spread::Normal), (3, Spread::DynamicRange), (70, Spread::Cancelling)] {
            let m = 40;
            let (w, wr) = p.weight(rng, ty, m, k);
            let x = activations(rng, num_rows, k, spread);
            let mut got = p.poisoned(num_rows, m);
            p.b.linear(&p.b.upload(&x, num_rows, k), &w, &mut got);
            // The reference takes the activations as the backend declares its products see them.
            let inputs = p.b.linear_inputs(ty, k);
            let x: Vec<f32> = inputs.apply(&x);
            let mut want = p.r.tensor(num_rows, m);
            p.r.linear(&p.r.upload(&x, num_rows, k), &wr, &mut want);
            // Backward error needs |x|·|w|: the reference's dequantized weights, in float64.
            let wd = p.r.download_f64(&wr);
            let (g, r, written) = p.compare(&got, &want);
            let mut worst = 0f64;
            for n in 0..num_rows {
                for j in 0..m {
                    let scale: f64 = (0..k).map(|i| (x[n * k + i] as f64 * wd[j * k + i]).abs()).sum();
                    let e = (g[n * m + j] - r[n * m + j]).abs() / scale.max(f64::MIN_POSITIVE);
                    worst = worst.max(if e.is_nan() { f64::INFINITY } else { e });
                }
            }
            out.push(CaseResult::new(
                "linear",
                format!("{ty} {num_rows}x{k}·{m}x{k} {spread:?} ({inputs:?} inputs)"),
                Metric::DotBackward,
                worst,
                dot_bound(k),
                written,
            ));
        }
    }
    // linear_multi: three weights of one input, as q/k/v.
    let (w1, r1) = p.weight(rng, GgmlType::Q4_1, 24, 256);
    let (w2, r2) = p.weight(rng, GgmlType::Q8_0, 8, 256);
    let (w3, r3) = p.weight(rng, GgmlType::F16, 16, 256);
    let x = activations(rng, 5, 256, Spread::Normal);
    let xb = p.b.upload(&x, 5, 256);
    let (mut g1, mut g2, mut g3) = (p.poisoned(5, 24), p.poisoned(5, 8), p.poisoned(5, 16));
    p.b.linear_multi(&xb, &[&w1, &w2, &w3], &mut [&mut g1, &mut g2, &mut g3]);
    let types = [GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::F16];
    for (i, (g, w)) in [(&g1, &r1), (&g2, &r2), (&g3, &r3)].into_iter().enumerate() {
        let inputs = p.b.linear_inputs(types[i], 256);
        let xi: Vec<f32> = inputs.apply(&x);
        let mut want = p.r.tensor(5, w.rows);
        p.r.linear(&p.r.upload(&xi, 5, 256), w, &mut want);
        let (gv, wv, written) = p.compare(g, &want);
        let error = crate::nrms(&gv, &wv);
        out.push(CaseResult::new(
            "linear_multi",
            format!("output {i}"),
            Metric::Nrms,
            error,
            64.0 * dot_bound(256),
            written,
        ));
    }
}

fn embed_and_gather<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    for ty in GgmlType::DEQUANTIZABLE.into_iter().filter(|t| p.b.supports(*t)) {
        let (w, wr) = p.weight(rng, ty, 50, 256);
        let ids: Vec<u32> = (0..7).map(|_| rng.below(50) as u32).collect();
        let mut got = p.poisoned(ids.len(), 256);
        p.b.embed(&ids, &w, &mut got);
        let mut want = p.r.tensor(ids.len(), 256);
        p.r.embed(&ids, &wr, &mut want);
        out.push(nrms_case(p, "embed", format!("{ty}"), &got, &want));
    }
    let x = activations(rng, 9, 48, Spread::DynamicRange);
    let rows = [8, 0, 3, 3];
    let mut got = p.poisoned(rows.len(), 48);
    p.b.gather_rows(&p.b.upload(&x, 9, 48), &rows, &mut got);
    let mut want = p.r.tensor(rows.len(), 48);
    p.r.gather_rows(&p.r.upload(&x, 9, 48), &rows, &mut want);
    out.push(nrms_case(p, "gather_rows", "4 of 9 rows".into(), &got, &want));
}

fn elementwise_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    for (rows, cols, spread) in [(1, 576, Spread::Normal), (13, 100, Spread::DynamicRange), (9, 2048, Spread::Normal)] {
        let x = activations(rng, rows, cols, spread);
        let wv: Vec<f32> = (0..cols).map(|_| (1.0 + 0.1 * rng.normal()) as f32).collect();
        let wbytes = HostBytes::from_vec(wv.iter().flat_map(|v| v.to_le_bytes()).collect());
        let src = WeightSource { name: "norm".into(), ty: GgmlType::F32, rows: 1, cols, bytes: wbytes };
        let (w, wr) = (p.b.load_weight(src.clone()).unwrap(), p.r.load_weight(src).unwrap());
        let mut got = p.poisoned(rows, cols);
        p.b.rms_norm(&p.b.upload(&x, rows, cols), &w, 1e-5, &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.rms_norm(&p.r.upload(&x, rows, cols), &wr, 1e-5, &mut want);
        out.push(nrms_case(p, "rms_norm", format!("{rows}x{cols} {spread:?}"), &got, &want));
    }
    for (rows, heads, d, spread) in [(1, 8, 128, Spread::Normal), (11, 6, 64, Spread::DynamicRange)] {
        let cols = heads * d;
        let x = activations(rng, rows, cols, spread);
        let wv: Vec<f32> = (0..d).map(|_| (1.0 + 0.1 * rng.normal()) as f32).collect();
        let wbytes = HostBytes::from_vec(wv.iter().flat_map(|v| v.to_le_bytes()).collect());
        let src = WeightSource { name: "q_norm".into(), ty: GgmlType::F32, rows: 1, cols: d, bytes: wbytes };
        let (w, wr) = (p.b.load_weight(src.clone()).unwrap(), p.r.load_weight(src).unwrap());
        let mut got = p.poisoned(rows, cols);
        p.b.rms_norm_heads(&p.b.upload(&x, rows, cols), &w, 1e-6, &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.rms_norm_heads(&p.r.upload(&x, rows, cols), &wr, 1e-6, &mut want);
        out.push(nrms_case(p, "rms_norm_heads", format!("{rows}x{heads}x{d} {spread:?}"), &got, &want));
    }
    let a = activations(rng, 6, 100, Spread::DynamicRange);
    let b: Vec<f32> = a.iter().map(|&v| -v * (1.0 + 1e-4 * rng.normal() as f32)).collect();
    let mut got = p.b.upload(&a, 6, 100);
    p.b.add(&mut got, &p.b.upload(&b, 6, 100));
    let mut want = p.r.upload(&a, 6, 100);
    p.r.add(&mut want, &p.r.upload(&b, 6, 100));
    out.push(nrms_case(p, "add", "cancelling 6x100".into(), &got, &want));
    for (rows, cols) in [(1, 64), (5, 40)] {
        let x = activations(rng, rows, cols, Spread::DynamicRange);
        let bias = activations(rng, 1, cols, Spread::Normal);
        let bytes = HostBytes::from_vec(bias.iter().flat_map(|v| v.to_le_bytes()).collect());
        let src = WeightSource { name: "bias".into(), ty: GgmlType::F32, rows: 1, cols, bytes };
        let (w, wr) = (p.b.load_weight(src.clone()).unwrap(), p.r.load_weight(src).unwrap());
        let mut got = p.b.upload(&x, rows, cols);
        p.b.add_bias(&mut got, &w);
        let mut want = p.r.upload(&x, rows, cols);
        p.r.add_bias(&mut want, &wr);
        out.push(nrms_case(p, "add_bias", format!("{rows}x{cols}"), &got, &want));
    }
    for (rows, cols) in [(1, 1536), (7, 37)] {
        let g: Vec<f32> = activations(rng, rows, cols, Spread::Normal).iter().map(|v| v * 6.0).collect();
        let u = activations(rng, rows, cols, Spread::Normal);
        let mut got = p.poisoned(rows, cols);
        p.b.silu_mul(&p.b.upload(&g, rows, cols), &p.b.upload(&u, rows, cols), &mut got);
        let mut want = p.r.tensor(rows, cols);
        p.r.silu_mul(&p.r.upload(&g, rows, cols), &p.r.upload(&u, rows, cols), &mut want);
        out.push(nrms_case(p, "silu_mul", format!("{rows}x{cols}"), &got, &want));
    }
}

fn rope_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let positions: Vec<u32> = vec![0, 1, 17, 511, 4095, 8191];
    let inv_freq: Vec<f64> = (0..32).map(|i| 1.0 / 100_000f64.powf(2.0 * i as f64 / 64.0)).collect();
    let table = p.b.rope_table(&positions, &inv_freq);
    let table_ref = p.r.rope_table(&positions, &inv_freq);
    out.push(nrms_case(p, "rope_table", "6 positions, theta 1e5".into(), &table, &table_ref));
    let (heads, d) = (3, 64);
    let x = activations(rng, positions.len(), heads * d, Spread::Normal);
    let mut got = p.b.upload(&x, positions.len(), heads * d);
    p.b.rope(&mut got, &table, heads, d);
    let mut want = p.r.upload(&x, positions.len(), heads * d);
    p.r.rope(&mut want, &table_ref, heads, d);
    out.push(nrms_case(p, "rope", "3 heads x 64".into(), &got, &want));
    let mut got = p.b.upload(&x, positions.len(), heads * d);
    p.b.rope_rotate_half(&mut got, &table, heads, d);
    let mut want = p.r.upload(&x, positions.len(), heads * d);
    p.r.rope_rotate_half(&mut want, &table_ref, heads, d);
    out.push(nrms_case(p, "rope_rotate_half", "3 heads x 64".into(), &got, &want));
    // Partial rotary (r = 32 of head_dim 64): pairs (i, i + 16), the other 32 dims pass through.
    let partial_ref = p.r.rope_table(&positions, &inv_freq[..16]);
    let partial = p.b.rope_table(&positions, &inv_freq[..16]);
    let mut got = p.b.upload(&x, positions.len(), heads * d);
    p.b.rope_rotate_half(&mut got, &partial, heads, d);
    let mut want = p.r.upload(&x, positions.len(), heads * d);
    p.r.rope_rotate_half(&mut want, &partial_ref, heads, d);
    out.push(nrms_case(p, "rope_rotate_half", "3 heads x 64, rotary 32".into(), &got, &want));
}

fn attention_cases<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let (heads, kv_heads, d, block) = (6, 2, 64, 4);
    let spec = KvSpec {
        num_layers: 1,
        num_kv_heads: kv_heads,
        head_dim: d,
        block_size: block,
        num_blocks: 16,
        lane_state: plumb_core::LaneStateSpec::NONE,
    };
    // Two lanes with scattered blocks: lane 0 holds 9 positions, lane 1 holds 21.
    let lanes = vec![LaneView { block_table: vec![5, 1, 9] }, LaneView { block_table: vec![2, 14, 0, 7, 11, 3] }];
    let mut history = ForwardBatch { block_size: block, lanes: lanes.clone(), ..Default::default() };
    for (lane, len) in [(0usize, 9usize), (1, 21)] {
        for pos in 0..len {
            history.push_row(lane, 0, pos);
        }
    }
    let n = history.num_rows();
    let k = activations(rng, n, kv_heads * d, Spread::Normal);
    let v = activations(rng, n, kv_heads * d, Spread::DynamicRange);
    let mut kv_b = p.b.new_kv_cache(&spec);
    let mut kv_r = p.r.new_kv_cache(&spec);
    p.b.write_kv(&mut kv_b, 0, &p.b.upload(&k, n, kv_heads * d), &p.b.upload(&v, n, kv_heads * d), &history);
    p.r.write_kv(&mut kv_r, 0, &p.r.upload(&k, n, kv_heads * d), &p.r.upload(&v, n, kv_heads * d), &history);
    // Query rows: a prefill chunk of lane 0 (positions 4..9) and one decode row of lane 1 (20).
    let mut batch = ForwardBatch { block_size: block, lanes, ..Default::default() };
    for (lane, pos) in [(0, 4), (0, 5), (0, 6), (0, 7), (0, 8), (1, 20)] {
        batch.push_row(lane, 0, pos);
    }
    let rows = batch.num_rows();
    let q: Vec<f32> = activations(rng, rows, heads * d, Spread::Normal).iter().map(|v| v * 0.5).collect();
    let mut got = p.poisoned(rows, heads * d);
    p.b.attention(&p.b.upload(&q, rows, heads * d), &kv_b, 0, &batch, heads, 0.125, &mut got);
    let mut want = p.r.tensor(rows, heads * d);
    p.r.attention(&p.r.upload(&q, rows, heads * d), &kv_r, 0, &batch, heads, 0.125, &mut want);
    out.push(nrms_case(p, "attention", "GQA 6/2 heads, 2 lanes, scattered blocks".into(), &got, &want));
    // write_kv is exact: what attention reads back for a one-position context is V itself.
    let mut single = ForwardBatch { block_size: block, lanes: batch.lanes.clone(), ..Default::default() };
    single.push_row(1, 0, 0);
    let ones = vec![0f32; heads * d];
    let mut got = p.poisoned(1, heads * d);
    p.b.attention(&p.b.upload(&ones, 1, heads * d), &kv_b, 0, &single, heads, 1.0, &mut got);
    let store = p.b.kv_store();
    let row0: Vec<f32> = (0..heads)
        .flat_map(|h| v[9 * kv_heads * d + (h / 3) * d..][..d].iter().map(move |&x| store.round(x)))
        .collect();
    let want = p.r.upload(&row0, 1, heads * d);
    out.push(nrms_case(p, "write_kv", "slot round trip".into(), &got, &want));
    long_attention_case(p, rng, out);
}

/// One lane of 1,100 positions in scattered blocks, head size 128, GQA 8/2: query rows at the
/// edges of the 64-position tiles and of the first 1,024-position split, so every tile and split
/// fold of a kernel is measured against the float64 softmax.
fn long_attention_case<B: FullBackend>(p: &Pair<'_, B>, rng: &mut Rng, out: &mut Vec<CaseResult>) {
    let (heads, kv_heads, d, block, len) = (8, 2, 128, 16, 1100usize);
    let num_blocks = len.div_ceil(block);
    let spec = KvSpec {
        num_layers: 1,
        num_kv_heads: kv_heads,
        head_dim: d,
        block_size: block,
        num_blocks,
        lane_state: plumb_core::LaneStateSpec::NONE,
    };
    let table: Vec<u32> = (0..num_blocks as u32).map(|i| (i * 29) % num_blocks as u32).collect();
    let lanes = vec![LaneView { block_table: table }];
    let mut history = ForwardBatch { block_size: block, lanes: lanes.clone(), ..Default::default() };
    for pos in 0..len {
        history.push_row(0, 0, pos);
    }
    let k = activations(rng, len, kv_heads * d, Spread::Normal);
    let v = activations(rng, len, kv_heads * d, Spread::DynamicRange);
    let mut kv_b = p.b.new_kv_cache(&spec);
    let mut kv_r = p.r.new_kv_cache(&spec);
    p.b.write_kv(&mut kv_b, 0, &p.b.upload(&k, len, kv_heads * d), &p.b.upload(&v, len, kv_heads * d), &history);
    p.r.write_kv(&mut kv_r, 0, &p.r.upload(&k, len, kv_heads * d), &p.r.upload(&v, len, kv_heads * d), &history);
    let mut batch = ForwardBatch { block_size: block, lanes, ..Default::default() };
    for pos in [0, 63, 64, 500, 1023, 1024, 1099] {
        batch.push_row(0, 0, pos);
    }
    let rows = batch.num_rows();
    let q: Vec<f32> = activations(rng, rows, heads * d, Spread::Normal).iter().map(|v| v * 0.3).collect();
    let mut got = p.poisoned(rows, heads * d);
    p.b.attention(&p.b.upload(&q, rows, heads * d), &kv_b, 0, &batch, heads, 0.0884, &mut got);
    let mut want = p.r.tensor(rows, heads * d);
    p.r.attention(&p.r.upload(&q, rows, heads * d), &kv_r, 0, &batch, heads, 0.0884, &mut want);
    out.push(nrms_case(
        p,
        "attention",
        "GQA 8/2 heads x 128, 1,100 positions, tile and split edges".into(),
        &got,
        &want,
    ));
}
