//! plumb-backend-ref: the definition every other backend is held to. Each op is a plain loop,
//! slow on purpose and obviously right (llm.c's reference style), generic over the float type:
//! `RefBackend<f64>` is the truth, `RefBackend<f32>` runs the very same loops in float32, and the
//! distance between the two is the floor a float32 backend is measured against.
//! Weights are dequantized exactly (`plumb_core::dequantize`) and widened to the float type.
//! Only `linear` uses threads, splitting outputs (never a sum) so results do not depend on them.
#![forbid(unsafe_code)]

mod compressed;
mod float;
mod gdn;
mod hyper;
mod moe;

pub use float::RefFloat;

use plumb_core::{
    AttentionOps, Backend, BackendError, CompressedAttentionOps, ElementwiseOps, ForwardBatch, GatedDeltaOps, GgmlType,
    HyperConnectionOps, KvSpec, KvStore, LaneStateOps, LaneStateStore, LinearInputs, LinearOps, MoeOps, RopeOps,
    ScoredMoeOps, Shape, WeightSource, dequantize,
};
use std::collections::HashMap;
use std::marker::PhantomData;

/// [rows, cols] row-major values of type `T`.
#[derive(Clone, Debug, PartialEq)]
pub struct RefTensor<T> {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<T>,
    /// For a weight: how `linear` rounds the activations it multiplies (see
    /// [`RefBackend::with_linear_inputs`]); F32 otherwise.
    pub linear_inputs: LinearInputs,
}

impl<T> Shape for RefTensor<T> {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

/// The paged K/V store: per layer, [num_slots, num_kv_heads · head_dim] for K and for V.
#[derive(Debug)]
pub struct RefKvCache<T> {
    spec: KvSpec,
    k: Vec<Vec<T>>,
    v: Vec<Vec<T>>,
    /// Per-lane state of the linear-attention layers (`KvSpec::lane_state`).
    lane_state: LaneStateStore<T>,
}

/// The reference backend in float type `T`.
#[derive(Debug)]
pub struct RefBackend<T> {
    threads: usize,
    /// Weights (format, K) whose `linear` takes its activations rounded (to bf16 or Q8 blocks):
    /// the declared precision of a backend under test, so `RefBackend<f32>` gives its floor.
    rounded_inputs: HashMap<(GgmlType, usize), LinearInputs>,
    /// The element type `write_kv` rounds K and V to: a backend under test's declared store.
    kv_store: KvStore,
    _float: PhantomData<T>,
}

impl<T: RefFloat> RefBackend<T> {
    /// A backend whose `linear` splits outputs over `threads` threads (results do not depend on it).
    pub fn new(threads: usize) -> Self {
        RefBackend {
            threads: threads.max(1),
            rounded_inputs: HashMap::new(),
            kv_store: KvStore::F32,
            _float: PhantomData,
        }
    }

    /// The same, with K and V stored rounded to `store`, as a backend declares it does
    /// ([`Backend::kv_store`]); `KvStore::F32` keeps them as computed (in `T`).
    pub fn with_kv_store(mut self, store: KvStore) -> Self {
        self.kv_store = store;
        self
    }

    /// The same, with `linear` rounding its activations as given for weights of these
    /// (format, K), as a backend declares it does ([`Backend::linear_inputs`]).
    pub fn with_linear_inputs(mut self, declared: impl IntoIterator<Item = ((GgmlType, usize), LinearInputs)>) -> Self {
        self.rounded_inputs = declared.into_iter().collect();
        self
    }
}

impl<T: RefFloat> Backend for RefBackend<T> {
    type Tensor = RefTensor<T>;
    type Weight = RefTensor<T>;
    type KvCache = RefKvCache<T>;

    fn name(&self) -> String {
        format!("ref ({})", T::NAME)
    }

    fn kind(&self) -> &'static str {
        "ref"
    }

    fn supports(&self, ty: GgmlType) -> bool {
        ty.can_dequantize()
    }

    fn kv_store(&self) -> KvStore {
        self.kv_store
    }

    fn load_weight(&self, src: WeightSource) -> Result<RefTensor<T>, BackendError> {
        let mut f = vec![0f32; src.rows * src.cols];
        dequantize(src.ty, &src.bytes, &mut f)
            .map_err(|e| BackendError::BadWeight { name: src.name.clone(), why: e.to_string() })?;
        let linear_inputs = self.rounded_inputs.get(&(src.ty, src.cols)).copied().unwrap_or(LinearInputs::F32);
        let data = f.into_iter().map(|x| T::from_f64(x as f64)).collect();
        Ok(RefTensor { rows: src.rows, cols: src.cols, data, linear_inputs })
    }

    fn tensor(&self, rows: usize, cols: usize) -> RefTensor<T> {
        RefTensor { rows, cols, data: vec![T::zero(); rows * cols], linear_inputs: LinearInputs::F32 }
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> RefTensor<T> {
        assert_eq!(data.len(), rows * cols);
        let data = data.iter().map(|&x| T::from_f64(x as f64)).collect();
        RefTensor { rows, cols, data, linear_inputs: LinearInputs::F32 }
    }

    fn download(&self, t: &RefTensor<T>) -> Vec<f32> {
        t.data.iter().map(|x| x.to_f64() as f32).collect()
    }

    fn download_f64(&self, t: &RefTensor<T>) -> Vec<f64> {
        t.data.iter().map(|x| x.to_f64()).collect()
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> RefKvCache<T> {
        let per_layer = spec.num_blocks * spec.block_size * spec.num_kv_heads * spec.head_dim;
        RefKvCache {
            spec: *spec,
            k: (0..spec.num_layers).map(|_| vec![T::zero(); per_layer]).collect(),
            v: (0..spec.num_layers).map(|_| vec![T::zero(); per_layer]).collect(),
            lane_state: LaneStateStore::new(&spec.lane_state),
        }
    }

    fn moe_ops(&self) -> Option<&dyn MoeOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>> {
        Some(self)
    }

    fn gated_delta_ops(
        &self,
    ) -> Option<&dyn GatedDeltaOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>> {
        Some(self)
    }

    fn lane_state_ops(
        &self,
    ) -> Option<&dyn LaneStateOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>> {
        Some(self)
    }

    fn compressed_attention_ops(
        &self,
    ) -> Option<&dyn CompressedAttentionOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>>
    {
        Some(self)
    }

    fn hyper_connection_ops(
        &self,
    ) -> Option<&dyn HyperConnectionOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>> {
        Some(self)
    }

    fn scored_moe_ops(
        &self,
    ) -> Option<&dyn ScoredMoeOps<Tensor = RefTensor<T>, Weight = RefTensor<T>, KvCache = RefKvCache<T>>> {
        Some(self)
    }
}

/// `out[n·width + j] = Σ_i x[n][i] · w[j][i]`, every sum in order over i exactly as [`dot`]
/// adds it, so the figures equal the untiled loop bit for bit. Blocks of 64 activation rows stay
/// in cache while the weight rows stream past once per block, and tiles of 4 rows × 2 columns keep
/// eight independent sums in flight: the float64 head of a 248k vocabulary over a 600-token
/// control is otherwise a memory-bound sweep of the whole matrix per row.
fn dots_tiled<T: RefFloat>(x: &[T], w: &[T], k: usize, out: &mut [T]) {
    if k == 0 {
        return;
    }
    let (rows, width) = (x.len() / k, w.len() / k);
    for n0 in (0..rows).step_by(64) {
        let n1 = (n0 + 64).min(rows);
        let quads = n0 + (n1 - n0) / 4 * 4;
        let mut j = 0;
        while j < width {
            let pair = j + 1 < width;
            let w0 = &w[j * k..][..k];
            let w1 = if pair { &w[(j + 1) * k..][..k] } else { w0 };
            for n in (n0..quads).step_by(4) {
                let xs = [&x[n * k..][..k], &x[(n + 1) * k..][..k], &x[(n + 2) * k..][..k], &x[(n + 3) * k..][..k]];
                let mut s = [T::zero(); 8];
                for i in 0..k {
                    let (a, b) = (w0[i], w1[i]);
                    for (r, xr) in xs.iter().enumerate() {
                        let v = xr[i];
                        s[2 * r] = s[2 * r] + v * a;
                        s[2 * r + 1] = s[2 * r + 1] + v * b;
                    }
                }
                for r in 0..4 {
                    out[(n + r) * width + j] = s[2 * r];
                    if pair {
                        out[(n + r) * width + j + 1] = s[2 * r + 1];
                    }
                }
            }
            for n in quads..n1 {
                out[n * width + j] = dot(&x[n * k..][..k], w0);
                if pair {
                    out[n * width + j + 1] = dot(&x[n * k..][..k], w1);
                }
            }
            j += 2;
        }
    }
}

/// Σ_k a[k] · b[k], in order.
fn dot<T: RefFloat>(a: &[T], b: &[T]) -> T {
    let mut s = T::zero();
    for (&x, &y) in a.iter().zip(b) {
        s = s + x * y;
    }
    s
}

impl<T: RefFloat> LinearOps for RefBackend<T> {
    fn linear(&self, x: &RefTensor<T>, w: &RefTensor<T>, out: &mut RefTensor<T>) {
        assert_eq!((x.cols, out.rows, out.cols), (w.cols, x.rows, w.rows), "linear: shape mismatch");
        let (m, k) = (w.rows, w.cols);
        let rounded: Vec<T>;
        let x_data = match w.linear_inputs {
            LinearInputs::F32 => &x.data,
            inputs => {
                // Whole rows at a time: a Q8 block never spans two rows (K is a multiple of 32).
                let x32: Vec<f32> = x.data.iter().map(|v| v.to_f64() as f32).collect();
                rounded = inputs.apply_f64(&x32).into_iter().map(T::from_f64).collect();
                &rounded
            }
        };
        let chunk = m.div_ceil(self.threads);
        // Each thread computes whole output columns m0..m1 for every row; nothing is shared.
        let parts: Vec<Vec<T>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..m)
                .step_by(chunk.max(1))
                .map(|m0| {
                    let m1 = (m0 + chunk).min(m);
                    scope.spawn(move || {
                        let width = m1 - m0;
                        let mut part = vec![T::zero(); x.rows * width];
                        dots_tiled(x_data, &w.data[m0 * k..m1 * k], k, &mut part);
                        part
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("reference linear thread")).collect()
        });
        for (p, part) in parts.iter().enumerate() {
            let (m0, width) = (p * chunk, part.len() / x.rows.max(1));
            for n in 0..x.rows {
                out.data[n * m + m0..n * m + m0 + width].copy_from_slice(&part[n * width..(n + 1) * width]);
            }
        }
    }

    fn embed(&self, ids: &[u32], table: &RefTensor<T>, out: &mut RefTensor<T>) {
        assert_eq!((out.rows, out.cols), (ids.len(), table.cols), "embed: shape mismatch");
        for (n, &id) in ids.iter().enumerate() {
            let c = table.cols;
            out.data[n * c..(n + 1) * c].copy_from_slice(&table.data[id as usize * c..(id as usize + 1) * c]);
        }
    }

    fn gather_rows(&self, x: &RefTensor<T>, rows: &[u32], out: &mut RefTensor<T>) {
        let c = x.cols;
        for (i, &r) in rows.iter().enumerate() {
            out.data[i * c..(i + 1) * c].copy_from_slice(&x.data[r as usize * c..(r as usize + 1) * c]);
        }
    }
}

impl<T: RefFloat> ElementwiseOps for RefBackend<T> {
    fn rms_norm(&self, x: &RefTensor<T>, weight: &RefTensor<T>, eps: f32, out: &mut RefTensor<T>) {
        let c = x.cols;
        assert_eq!(weight.data.len(), c, "rms_norm: weight length");
        for n in 0..x.rows {
            let row = &x.data[n * c..(n + 1) * c];
            let mean = dot(row, row) / T::from_f64(c as f64);
            let inv = T::one() / (mean + T::from_f64(eps as f64)).sqrt();
            for ((o, &v), &w) in out.data[n * c..(n + 1) * c].iter_mut().zip(row).zip(&weight.data) {
                *o = v * inv * w;
            }
        }
    }

    fn rms_norm_heads(&self, x: &RefTensor<T>, weight: &RefTensor<T>, eps: f32, out: &mut RefTensor<T>) {
        let d = weight.data.len();
        assert!(d > 0 && x.cols.is_multiple_of(d), "rms_norm_heads: head_dim {d} does not divide {}", x.cols);
        assert_eq!((out.rows, out.cols), (x.rows, x.cols), "rms_norm_heads: shape mismatch");
        for (row, o) in x.data.chunks_exact(d).zip(out.data.chunks_exact_mut(d)) {
            let mean = dot(row, row) / T::from_f64(d as f64);
            let inv = T::one() / (mean + T::from_f64(eps as f64)).sqrt();
            for ((o, &v), &w) in o.iter_mut().zip(row).zip(&weight.data) {
                *o = v * inv * w;
            }
        }
    }

    fn add(&self, acc: &mut RefTensor<T>, x: &RefTensor<T>) {
        for (a, &b) in acc.data.iter_mut().zip(&x.data) {
            *a = *a + b;
        }
    }

    fn add_bias(&self, x: &mut RefTensor<T>, bias: &RefTensor<T>) {
        let c = x.cols;
        assert_eq!(bias.data.len(), c, "add_bias: bias length");
        for row in x.data.chunks_exact_mut(c.max(1)) {
            for (a, &b) in row.iter_mut().zip(&bias.data) {
                *a = *a + b;
            }
        }
    }

    fn silu_mul(&self, gate: &RefTensor<T>, up: &RefTensor<T>, out: &mut RefTensor<T>) {
        for ((o, &g), &u) in out.data.iter_mut().zip(&gate.data).zip(&up.data) {
            *o = g / (T::one() + (T::zero() - g).exp()) * u;
        }
    }
}

impl<T: RefFloat> RopeOps for RefBackend<T> {
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> RefTensor<T> {
        let half = inv_freq.len();
        let mut t = self.tensor(positions.len(), 2 * half);
        for (n, &p) in positions.iter().enumerate() {
            for (i, &f) in inv_freq.iter().enumerate() {
                let angle = p as f64 * f;
                t.data[n * 2 * half + i] = T::from_f64(angle.cos());
                t.data[n * 2 * half + half + i] = T::from_f64(angle.sin());
            }
        }
        t
    }

    fn rope(&self, x: &mut RefTensor<T>, table: &RefTensor<T>, num_heads: usize, head_dim: usize) {
        let half = table.cols / 2;
        for n in 0..x.rows {
            for h in 0..num_heads {
                for i in 0..half {
                    let (c, s) = (table.data[n * 2 * half + i], table.data[n * 2 * half + half + i]);
                    let at = n * x.cols + h * head_dim + 2 * i;
                    let (x0, x1) = (x.data[at], x.data[at + 1]);
                    x.data[at] = x0 * c - x1 * s;
                    x.data[at + 1] = x0 * s + x1 * c;
                }
            }
        }
    }

    fn rope_rotate_half(&self, x: &mut RefTensor<T>, table: &RefTensor<T>, num_heads: usize, head_dim: usize) {
        let half = table.cols / 2;
        assert!(2 * half <= head_dim, "rope_rotate_half: the table rotates more dims than a head has");
        for n in 0..x.rows {
            for h in 0..num_heads {
                for i in 0..half {
                    let (c, s) = (table.data[n * 2 * half + i], table.data[n * 2 * half + half + i]);
                    let at = n * x.cols + h * head_dim + i;
                    let (x0, x1) = (x.data[at], x.data[at + half]);
                    x.data[at] = x0 * c - x1 * s;
                    x.data[at + half] = x1 * c + x0 * s;
                }
            }
        }
    }
}

impl<T: RefFloat> AttentionOps for RefBackend<T> {
    fn write_kv(&self, kv: &mut RefKvCache<T>, layer: usize, k: &RefTensor<T>, v: &RefTensor<T>, batch: &ForwardBatch) {
        let len = kv.spec.num_kv_heads * kv.spec.head_dim;
        // A declared 16-bit store keeps each value's rounding of its f32 form, as a device does.
        let store = |x: T| match self.kv_store {
            KvStore::F32 => x,
            s => T::from_f64(s.round(x.to_f64() as f32) as f64),
        };
        for (r, &slot) in batch.slot_mapping.iter().enumerate() {
            let at = slot as usize * len;
            for (dst, &x) in kv.k[layer][at..at + len].iter_mut().zip(&k.data[r * len..(r + 1) * len]) {
                *dst = store(x);
            }
            for (dst, &x) in kv.v[layer][at..at + len].iter_mut().zip(&v.data[r * len..(r + 1) * len]) {
                *dst = store(x);
            }
        }
    }

    fn attention(
        &self,
        q: &RefTensor<T>,
        kv: &RefKvCache<T>,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f64,
        out: &mut RefTensor<T>,
    ) {
        let (d, kvh) = (kv.spec.head_dim, kv.spec.num_kv_heads);
        let scale = T::from_f64(scale);
        for row in 0..batch.num_rows() {
            let lane = batch.row_lane[row] as usize;
            let ctx = batch.positions[row] as usize + 1;
            for h in 0..num_heads {
                let g = h / (num_heads / kvh);
                let qh = &q.data[(row * num_heads + h) * d..][..d];
                let at = |p: usize| (batch.slot(lane, p) * kvh + g) * d;
                let scores: Vec<T> = (0..ctx).map(|p| dot(qh, &kv.k[layer][at(p)..at(p) + d]) * scale).collect();
                let max = scores.iter().copied().fold(scores[0], |m, s| if s > m { s } else { m });
                let exps: Vec<T> = scores.iter().map(|&s| (s - max).exp()).collect();
                let sum = exps.iter().copied().fold(T::zero(), |a, e| a + e);
                let oh = &mut out.data[(row * num_heads + h) * d..][..d];
                oh.fill(T::zero());
                for (p, &e) in exps.iter().enumerate() {
                    let w = e / sum;
                    for (o, &v) in oh.iter_mut().zip(&kv.v[layer][at(p)..at(p) + d]) {
                        *o = *o + w * v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{dot, dots_tiled};

    /// The tiled sweep adds every sum in the same order as `dot`: equal bits, for ragged row
    /// and column counts around the tile and block sizes.
    #[test]
    fn tiled_dots_equal_plain_dots_bit_for_bit() {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        };
        for &(rows, width, k) in &[(1, 1, 1), (3, 5, 7), (4, 2, 9), (7, 3, 33), (67, 5, 17), (130, 4, 3), (9, 0, 4)] {
            let x: Vec<f64> = (0..rows * k).map(|_| next()).collect();
            let w: Vec<f64> = (0..width * k).map(|_| next()).collect();
            let mut out = vec![f64::NAN; rows * width];
            dots_tiled(&x, &w, k, &mut out);
            for n in 0..rows {
                for j in 0..width {
                    let want = dot(&x[n * k..(n + 1) * k], &w[j * k..(j + 1) * k]);
                    assert_eq!(
                        out[n * width + j].to_bits(),
                        want.to_bits(),
                        "rows {rows} width {width} k {k} at ({n}, {j})"
                    );
                }
            }
        }
    }
}
