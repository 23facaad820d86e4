//! plumb-backend-cpu: the CPU backend. SIMD kernels chosen at run time (AVX-512, AVX2, scalar —
//! bit-identical to each other by construction, see `simd`), a persistent thread pool over all
//! cores, weights computed straight from the memory-mapped checkpoint in their own format.
//! Invariant (DESIGN.md principle 2): every output row's reduction order is fixed by shapes alone.

mod aligned;
mod attention;
mod compressed;
mod dequant;
mod elementwise;
mod fused;
mod gdn;
mod hyper;
mod kv_cache;
mod linear;
mod moe;
mod pool;
mod q8;
mod q8_rows;
mod q8_weight;
mod scored_moe;
pub mod simd;
mod weights;

pub use kv_cache::CpuKvCache;
pub use pool::Pool;
pub use simd::{Isa, IsaKind};

use plumb_core::{
    AttentionOps, Backend, BackendError, CompressedAttentionOps, ElementwiseOps, ForwardBatch, GatedDeltaOps, GgmlType,
    HostBytes, HyperConnectionOps, KvSpec, KvStore, LaneStateOps, LinearInputs, LinearOps, MoeOps, RopeOps,
    ScoredMoeOps, Shape, WeightSource,
};

/// One output buffer handed to several pool threads that each write their own elements. No
/// thread ever holds a `&mut` over the whole buffer (overlapping `&mut` would be undefined
/// behaviour even without overlapping writes); each borrows only the part it writes, through
/// [`SharedOut::part`], whose contract is that no two live parts overlap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SharedOut {
    ptr: *mut f32,
    len: usize,
}
// SAFETY: a `SharedOut` is only a pointer and a length; every access goes through `part`, whose
// contract makes concurrent parts disjoint, and the owner waits in `Pool::run` while threads use it.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    pub fn new(out: &mut [f32]) -> Self {
        SharedOut { ptr: out.as_mut_ptr(), len: out.len() }
    }

    /// Elements `at..at + len` (bounds-checked).
    ///
    /// # Safety
    /// The buffer given to `new` must outlive the returned slice, and no other live slice from
    /// this `SharedOut` (on any thread) may overlap it.
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    pub unsafe fn part<'a>(&self, at: usize, len: usize) -> &'a mut [f32] {
        assert!(at.checked_add(len).is_some_and(|end| end <= self.len), "output part {at}+{len} of {}", self.len);
        // SAFETY: in bounds (checked above); disjointness and lifetime are the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }
}

/// An activation tensor: [rows, cols] f32, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuTensor {
    pub rows: usize,
    pub cols: usize,
    pub data: Vec<f32>,
}

impl Shape for CpuTensor {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

/// A weight in its checkpoint format, read in place.
#[derive(Debug)]
pub struct CpuWeight {
    pub name: String,
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub(crate) bytes: HostBytes,
    pub(crate) row_bytes: usize,
    /// Vectors (norm weights) are kept dequantized.
    dense: Option<Vec<f32>>,
    /// The weight repacked for Q8 activations, when the backend declares them for it.
    pub(crate) q8: Option<q8::Q8Weight>,
}

impl CpuWeight {
    /// The values of a vector weight (norms, biases, sinks: kept dequantized at load).
    pub(crate) fn vector(&self) -> &[f32] {
        self.dense.as_deref().unwrap_or_else(|| panic!("`{}` must be a vector", self.name))
    }

    fn row_bytes(&self, row: usize) -> &[u8] {
        &self.bytes[row * self.row_bytes..(row + 1) * self.row_bytes]
    }
}

impl Shape for CpuWeight {
    fn rows(&self) -> usize {
        self.rows
    }
    fn cols(&self) -> usize {
        self.cols
    }
}

/// The CPU backend.
#[derive(Debug)]
pub struct CpuBackend {
    pool: Pool,
    isa: Isa,
    /// The declared element type of the KV cache (`--kv-dtype`).
    kv_store: KvStore,
    /// Q8 activations for the weight formats that have integer codes (`--act-dtype q8`).
    q8_inputs: bool,
    /// This CPU has AVX-512 VNNI (and the ISA in use is AVX-512): the Q8 path's fast kernel.
    vnni: bool,
}

impl CpuBackend {
    /// A backend on `num_threads` threads (0: all cores) with the best detected ISA.
    pub fn new(num_threads: usize) -> Self {
        let n =
            if num_threads == 0 { std::thread::available_parallelism().map_or(1, |n| n.get()) } else { num_threads };
        let isa = Isa::detect();
        CpuBackend { pool: Pool::new(n), isa, kv_store: KvStore::F32, q8_inputs: false, vnni: has_vnni(isa) }
    }

    /// The same, with an explicit instruction set (tests compare ISAs); an `Isa` value is proof
    /// that this CPU supports it.
    pub fn with_isa(num_threads: usize, isa: Isa) -> Self {
        CpuBackend { isa, vnni: has_vnni(isa), ..Self::new(num_threads) }
    }

    /// The same, storing K and V in `store` (f32 by default; f16 and bf16 halve the cache and
    /// what attention reads, a declared precision the gate measures at its own floor).
    pub fn with_kv_store(self, store: KvStore) -> Self {
        CpuBackend { kv_store: store, ..self }
    }

    /// The same, taking activations as Q8 blocks in `linear` for the weight formats that have
    /// integer codes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K): integer dot products, a
    /// declared precision the gate measures at its own floor. Weights are repacked at load into
    /// rows about the size of the checkpoint's, beside them.
    pub fn with_q8_inputs(self, on: bool) -> Self {
        CpuBackend { q8_inputs: on, ..self }
    }

    /// Whether the Q8 path runs on VNNI instructions (else AVX2's, or portable code on a CPU
    /// without AVX2, with the same bits).
    pub fn q8_on_vnni(&self) -> bool {
        self.vnni
    }

    pub fn isa(&self) -> Isa {
        self.isa
    }

    pub fn num_threads(&self) -> usize {
        self.pool.num_threads()
    }

    /// Splits `rows` of `cols` over the pool and calls `f(first_row, rows_slice)`.
    fn par_rows(&self, num_rows: usize, f: &(dyn Fn(std::ops::Range<usize>) + Sync)) {
        if num_rows < 8 {
            return f(0..num_rows);
        }
        self.pool.run(&|t, nt| {
            let r = pool::split_range(num_rows, t, nt, 1);
            if !r.is_empty() {
                f(r);
            }
        });
    }
}

/// Whether the Q8 path may use VNNI under `isa` (only AVX-512 code calls that kernel).
fn has_vnni(isa: Isa) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        isa.kind() == IsaKind::Avx512 && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = isa;
        false
    }
}

impl Backend for CpuBackend {
    type Tensor = CpuTensor;
    type Weight = CpuWeight;
    type KvCache = CpuKvCache;

    fn name(&self) -> String {
        let n = self.pool.num_threads();
        let kv = if self.kv_store == KvStore::F32 { String::new() } else { format!(", {} KV", self.kv_store.name()) };
        let act = match (self.q8_inputs, self.vnni, self.isa.kind()) {
            (false, ..) => "",
            (true, true, _) => ", q8 activations on VNNI",
            (true, false, IsaKind::Scalar) => ", q8 activations",
            (true, false, _) => ", q8 activations on AVX2",
        };
        format!("cpu ({:?}, {n} thread{}{kv}{act})", self.isa, if n == 1 { "" } else { "s" })
    }

    fn kind(&self) -> &'static str {
        "cpu"
    }

    fn supports(&self, ty: GgmlType) -> bool {
        ty.can_dequantize()
    }

    fn kv_store(&self) -> KvStore {
        self.kv_store
    }

    fn linear_inputs(&self, ty: GgmlType, k: usize) -> LinearInputs {
        if self.q8_inputs && q8::supports(ty, k) { LinearInputs::Q8 } else { LinearInputs::F32 }
    }

    fn load_weight(&self, src: WeightSource) -> Result<CpuWeight, BackendError> {
        if !self.supports(src.ty) {
            return Err(BackendError::UnsupportedType { backend: self.name(), ty: src.ty, name: src.name });
        }
        let bad = |why: String| BackendError::BadWeight { name: src.name.clone(), why };
        let row_bytes = src
            .ty
            .bytes_for(src.cols as u64)
            .ok_or_else(|| bad(format!("{} columns do not fill whole blocks", src.cols)))?;
        if row_bytes as usize * src.rows != src.bytes.len() {
            return Err(bad(format!("{} bytes for {} × {} {}", src.bytes.len(), src.rows, src.cols, src.ty)));
        }
        let dense = if src.rows == 1 {
            let mut v = vec![0f32; src.cols];
            dequant::dequant_row(self.isa, src.ty, &src.bytes, &mut v);
            Some(v)
        } else {
            if !src.cols.is_multiple_of(simd::LANES) {
                return Err(bad(format!("row length {} is not a multiple of {}", src.cols, simd::LANES)));
            }
            None
        };
        let q8 = (self.linear_inputs(src.ty, src.cols) == LinearInputs::Q8)
            .then(|| q8::Q8Weight::repack(&self.pool, src.ty, src.rows, src.cols, &src.bytes, row_bytes as usize));
        Ok(CpuWeight {
            name: src.name,
            ty: src.ty,
            rows: src.rows,
            cols: src.cols,
            bytes: src.bytes,
            row_bytes: row_bytes as usize,
            dense,
            q8,
        })
    }

    fn tensor(&self, rows: usize, cols: usize) -> CpuTensor {
        CpuTensor { rows, cols, data: vec![0f32; rows * cols] }
    }

    fn upload(&self, data: &[f32], rows: usize, cols: usize) -> CpuTensor {
        assert_eq!(data.len(), rows * cols);
        CpuTensor { rows, cols, data: data.to_vec() }
    }

    fn download(&self, t: &CpuTensor) -> Vec<f32> {
        t.data.clone()
    }

    fn new_kv_cache(&self, spec: &KvSpec) -> CpuKvCache {
        CpuKvCache::new(spec, self.kv_store)
    }

    fn moe_ops(&self) -> Option<&dyn MoeOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }

    fn gated_delta_ops(
        &self,
    ) -> Option<&dyn GatedDeltaOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }

    fn lane_state_ops(
        &self,
    ) -> Option<&dyn LaneStateOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }

    fn compressed_attention_ops(
        &self,
    ) -> Option<&dyn CompressedAttentionOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }

    fn hyper_connection_ops(
        &self,
    ) -> Option<&dyn HyperConnectionOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }

    fn scored_moe_ops(
        &self,
    ) -> Option<&dyn ScoredMoeOps<Tensor = CpuTensor, Weight = CpuWeight, KvCache = CpuKvCache>> {
        Some(self)
    }
}

impl LinearOps for CpuBackend {
    fn linear(&self, x: &CpuTensor, w: &CpuWeight, out: &mut CpuTensor) {
        self.linear_batched(&[x], &[w], &mut [out]);
    }

    fn linear_multi(&self, x: &CpuTensor, ws: &[&CpuWeight], outs: &mut [&mut CpuTensor]) {
        let xs = vec![x; ws.len()];
        self.linear_batched(&xs, ws, outs);
    }

    fn linear_batched(&self, xs: &[&CpuTensor], ws: &[&CpuWeight], outs: &mut [&mut CpuTensor]) {
        assert!(
            xs.len() == ws.len() && ws.len() == outs.len(),
            "linear_batched: {} inputs, {} weights, {} outputs",
            xs.len(),
            ws.len(),
            outs.len()
        );
        let mut products: Vec<linear::Product> = xs
            .iter()
            .zip(ws)
            .zip(outs.iter_mut())
            .map(|((x, w), out)| {
                assert_eq!(
                    (x.cols, out.rows, out.cols),
                    (w.cols, x.rows, w.rows),
                    "linear `{}`: shape mismatch",
                    w.name
                );
                linear::Product { x: &x.data, num_rows: x.rows, w, out: &mut out.data }
            })
            .collect();
        linear::linear(&self.pool, self.isa, self.vnni, &mut products);
    }

    fn embed(&self, ids: &[u32], table: &CpuWeight, out: &mut CpuTensor) {
        assert_eq!((out.rows, out.cols), (ids.len(), table.cols), "embed `{}`: shape mismatch", table.name);
        for (row, &id) in out.data.chunks_exact_mut(table.cols).zip(ids) {
            assert!((id as usize) < table.rows, "token id {id} outside `{}`", table.name);
            dequant::dequant_row(self.isa, table.ty, table.row_bytes(id as usize), row);
        }
    }

    fn gather_rows(&self, x: &CpuTensor, rows: &[u32], out: &mut CpuTensor) {
        assert_eq!((out.rows, out.cols), (rows.len(), x.cols));
        for (o, &r) in out.data.chunks_exact_mut(x.cols).zip(rows) {
            o.copy_from_slice(&x.data[r as usize * x.cols..][..x.cols]);
        }
    }
}

impl ElementwiseOps for CpuBackend {
    fn rms_norm(&self, x: &CpuTensor, weight: &CpuWeight, eps: f32, out: &mut CpuTensor) {
        let w = weight.dense.as_deref().expect("norm weights are vectors");
        assert_eq!(
            (x.cols, out.rows, out.cols),
            (w.len(), x.rows, x.cols),
            "rms_norm `{}`: shape mismatch",
            weight.name
        );
        let cols = x.cols;
        let shared = SharedOut::new(&mut out.data);
        let isa = self.isa;
        self.par_rows(x.rows, &|r| {
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(r.start * cols, r.len() * cols) };
            elementwise::rms_norm_rows(isa, &x.data[r.start * cols..r.end * cols], w, eps, o);
        });
    }

    fn rms_norm_heads(&self, x: &CpuTensor, weight: &CpuWeight, eps: f32, out: &mut CpuTensor) {
        let w = weight.dense.as_deref().expect("norm weights are vectors");
        assert!(
            !w.is_empty() && x.cols.is_multiple_of(w.len()) && (out.rows, out.cols) == (x.rows, x.cols),
            "rms_norm_heads `{}`: shape mismatch",
            weight.name
        );
        let cols = x.cols;
        let shared = SharedOut::new(&mut out.data);
        let isa = self.isa;
        self.par_rows(x.rows, &|r| {
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(r.start * cols, r.len() * cols) };
            // `rms_norm_rows` normalizes every `w.len()`-long slice: here, every head.
            elementwise::rms_norm_rows(isa, &x.data[r.start * cols..r.end * cols], w, eps, o);
        });
    }

    fn add(&self, acc: &mut CpuTensor, x: &CpuTensor) {
        assert_eq!((acc.rows, acc.cols), (x.rows, x.cols));
        elementwise::add_into(&mut acc.data, &x.data);
    }

    fn add_bias(&self, x: &mut CpuTensor, bias: &CpuWeight) {
        let b = bias.dense.as_deref().expect("biases are vectors");
        assert_eq!(x.cols, b.len(), "add_bias `{}`: shape mismatch", bias.name);
        // One f32 add per element: the same rounding on every ISA.
        for row in x.data.chunks_exact_mut(x.cols.max(1)) {
            elementwise::add_into(row, b);
        }
    }

    fn silu_mul(&self, gate: &CpuTensor, up: &CpuTensor, out: &mut CpuTensor) {
        assert_eq!((gate.rows, gate.cols), (up.rows, up.cols));
        assert_eq!((gate.rows, gate.cols), (out.rows, out.cols));
        let cols = gate.cols;
        let shared = SharedOut::new(&mut out.data);
        let isa = self.isa;
        self.par_rows(gate.rows, &|r| {
            // SAFETY: threads get disjoint row ranges; `out` outlives the call.
            let o = unsafe { shared.part(r.start * cols, r.len() * cols) };
            let span = r.start * cols..r.end * cols;
            elementwise::silu_mul(isa, &gate.data[span.clone()], &up.data[span], o);
        });
    }
}

impl RopeOps for CpuBackend {
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> CpuTensor {
        let data = elementwise::rope_table(positions, inv_freq);
        CpuTensor { rows: positions.len(), cols: 2 * inv_freq.len(), data }
    }

    fn rope(&self, x: &mut CpuTensor, table: &CpuTensor, num_heads: usize, head_dim: usize) {
        assert_eq!((x.rows, x.cols), (table.rows, num_heads * head_dim), "rope: shape mismatch");
        let cols = x.cols;
        elementwise::rope_rows(&mut x.data, cols, &table.data, table.cols / 2, num_heads, head_dim);
    }

    fn rope_rotate_half(&self, x: &mut CpuTensor, table: &CpuTensor, num_heads: usize, head_dim: usize) {
        assert_eq!((x.rows, x.cols), (table.rows, num_heads * head_dim), "rope_rotate_half: shape mismatch");
        assert!(table.cols <= head_dim, "rope_rotate_half: the table rotates more dims than a head has");
        let cols = x.cols;
        elementwise::rope_rotate_half_rows(&mut x.data, cols, &table.data, table.cols / 2, num_heads, head_dim);
    }
}

impl AttentionOps for CpuBackend {
    fn check_head_dim(&self, head_dim: usize) -> Result<(), BackendError> {
        if head_dim == 0 || !head_dim.is_multiple_of(simd::LANES) || head_dim > attention::MAX_HEAD_DIM {
            return Err(BackendError::UnsupportedHeadDim {
                backend: self.name(),
                head_dim,
                why: format!("it needs a multiple of {} up to {}", simd::LANES, attention::MAX_HEAD_DIM),
            });
        }
        Ok(())
    }

    fn write_kv(&self, kv: &mut CpuKvCache, layer: usize, k: &CpuTensor, v: &CpuTensor, batch: &ForwardBatch) {
        kv.write(layer, &k.data, &v.data, &batch.slot_mapping);
    }

    fn attention(
        &self,
        q: &CpuTensor,
        kv: &CpuKvCache,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f64,
        out: &mut CpuTensor,
    ) {
        assert_eq!((q.rows, q.cols), (batch.num_rows(), num_heads * kv.spec.head_dim), "attention: q shape");
        attention::attention(&self.pool, self.isa, &q.data, kv, layer, batch, num_heads, scale as f32, &mut out.data);
    }
}
