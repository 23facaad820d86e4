//! The CUDA backend's fused products (`LinearOps::linear_swiglu`, `linear_add`, `linear_add_norm`,
//! `norm_linear_multi`, `norm_linear_swiglu`): where a kernel takes its neighbour's work, the
//! product's launch does it — the split CUDA-core kernel computes an RMSNorm of its input as it
//! reads it and a SwiGLU of its two products as it folds them, the TMA kernels of decode rows the
//! RMSNorm as they write their activation tiles, and every `linear` kernel but the
//! replaced tensor-core ones adds its output into a residual as it stores it — each with the
//! arithmetic of the op it replaces (kernels/linear.cu), so the bits of the ops apart. Where none
//! takes it, the ops run apart.

use crate::kv::CudaKvCache;
use crate::ops::rope_qk_half;
use crate::ops_linear::{LIN_SPLIT_FEAT, LIN_SPLIT_MAX_CHUNKS, splits_k};
use crate::tma::{TMA_NORM_ROWS, TMA_ROWS};
use crate::{CudaBackend, CudaTensor, CudaWeight};
use plumb_core::{
    AttentionOps, Backend, ElementwiseOps, ForwardBatch, KvStore, LinearOps, linear_add_apart, linear_add_norm_apart,
    norm_apart, norm_linear_apart, swiglu_apart,
};
use std::sync::atomic::Ordering;

/// The most rows whose tensor-core (TMA) products add the residual as they store: decode and
/// concurrent-decode steps. A prefill-sized step adds it apart (with the norm after it, in
/// `add_rms_norm`, where `linear_add_norm` asks), which costs less than the add in the store
/// there: on the H200 the 8B's 2,048-token prefill ran at 27,321 and 27,486 tokens/s with the
/// adds apart against 25,848 and 26,282 with each in its product's store (session 17, alternating
/// runs of one call: receipts/ab/session17/h200-callA-8b/pp2048-*.json). The same bits either way.
const TMA_RESIDUAL_MAX_ROWS: usize = 64;

/// The neighbours' work a `linear` launch takes (kernels/linear.cu, linear_tma.cu): a SwiGLU of
/// its two products (`glu`), an RMSNorm of its input (`norm`: the norm weight's device pointer and
/// epsilon), an add into its output's previous contents (`resid`), and RoPE of q|k with the K/V
/// store after a q|k|v launch (`rope`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Fuse {
    pub glu: bool,
    pub norm: Option<(u64, f32)>,
    pub resid: bool,
    pub rope: Option<QkvRope>,
}

/// The RoPE and K/V store arguments of a q|k|v split launch (`QkvRope` in kernels/linear.cu): the
/// step's cos/sin table, each row's cache slot, the layer's K and V caches, the store's code,
/// the rotated pairs and the head size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct QkvRope {
    pub table: u64,
    pub slots: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub store: i32,
    pub half: i32,
    pub head_dim: i32,
}

impl CudaBackend {
    /// Whether `linear_swiglu` of these weights runs as one split launch: CUDA-core weights of
    /// one type and shape, rows the split kernel takes, both weights' partials of four features
    /// within a block's, no rounded copy wanted of the output (no tensor-core weight loaded), and
    /// `PLUMB_CUDA_FUSE_SWIGLU` not 0.
    fn swiglu_fuses(&self, x: &CudaTensor, gate: &CudaWeight, up: &CudaWeight) -> bool {
        let chunks = gate.cols.div_ceil(256);
        self.fuse_swiglu
            && !gate.mma
            && (gate.ty, gate.cols, gate.rows, gate.row_bytes, gate.mma)
                == (up.ty, up.cols, up.rows, up.row_bytes, up.mma)
            && splits_k(x.padded_rows, x.cols)
            && 2 * LIN_SPLIT_FEAT * chunks <= LIN_SPLIT_FEAT * LIN_SPLIT_MAX_CHUNKS
            && !self.mma_weights.load(Ordering::Relaxed)
    }

    /// Whether rms_norm(x) with `norm` runs inside the products of `ws`: CUDA-core weights of one
    /// type and width, rows the split kernel takes, a norm weight of x's width, and the fusion on
    /// (`set_fuse_norm`, `PLUMB_CUDA_FUSE_NORM=1`). Nothing else reads the normed rows, so no
    /// rounded copy of them is wanted.
    fn norm_fuses(&self, x: &CudaTensor, norm: &CudaWeight, ws: &[&CudaWeight]) -> bool {
        self.fuse_norm.load(Ordering::Relaxed)
            && x.cols > 0
            && norm.dense_ptr.is_some()
            && norm.cols == x.cols
            && split_products(x, ws)
    }

    /// Whether rms_norm(x) with `norm` runs inside the TMA launch of `ws` (a `_norm` instance,
    /// kernels/linear_tma.cu): tensor-core weights of x's width on the TMA kernels, rows of the
    /// decode instance (`TMA_NORM_ROWS`), a norm weight of x's width, and `PLUMB_CUDA_TMA_NORM`
    /// not 0 (`set_tma_norm`). The launch writes the activation tiles rms_norm's rounded copy
    /// would have given it, so the bits are those of the norm, then the products.
    fn tma_norm_fuses(&self, x: &CudaTensor, norm: &CudaWeight, ws: &[&CudaWeight]) -> bool {
        let tiles: usize = ws.iter().map(|w| w.rows.div_ceil(128)).sum();
        self.tma_norm_rows(x)
            && x.cols > 0
            && x.cols.is_multiple_of(8)
            && norm.dense_ptr.is_some()
            && norm.cols == x.cols
            && ws.iter().all(|w| w.mma && w.cols == x.cols && w.rows > 0)
            && TMA_ROWS[self.tma.kernel(x.padded_rows, tiles).0] == TMA_NORM_ROWS
    }

    /// Whether the norm inside the TMA products is on and x's rows are decode rows it takes.
    fn tma_norm_rows(&self, x: &CudaTensor) -> bool {
        self.tma_norm.load(Ordering::Relaxed) && self.tma.enabled && (1..=TMA_NORM_ROWS).contains(&x.padded_rows)
    }

    /// `norm_linear_multi`: runs of up to three weights (as `linear_multi` groups them), each
    /// launch computing the norm inside its blocks where `tma_norm_fuses` or `norm_fuses`, else
    /// the two apart.
    pub(crate) fn fused_norm_linear(
        &self,
        x: &CudaTensor,
        norm: (&CudaWeight, f32),
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
    ) {
        assert_eq!(ws.len(), outs.len(), "norm_linear_multi: one output per weight");
        if !self.norm_fuses(x, norm.0, ws) && !self.tma_norm_fuses(x, norm.0, ws) {
            return norm_linear_apart(self, x, norm, ws, outs);
        }
        let fuse = Fuse { norm: Some((norm.0.dense_ptr.expect("checked"), norm.1)), ..Fuse::default() };
        let per = if self.group_linear { 3 } else { 1 };
        for (ws, outs) in ws.chunks(per).zip(outs.chunks_mut(per)) {
            self.linear_group_fused(x, ws, outs, None, fuse);
        }
    }

    /// `linear_swiglu` (with `norm`: of rms_norm(x)), as one split launch where `swiglu_fuses` and
    /// the norm fuses, or one TMA launch after the norm where `linear_tma_glu` applies; else
    /// whatever of it does.
    pub(crate) fn fused_swiglu(
        &self,
        x: &CudaTensor,
        norm: Option<(&CudaWeight, f32)>,
        gate: &CudaWeight,
        up: &CudaWeight,
        out: &mut CudaTensor,
    ) {
        let glu = self.swiglu_fuses(x, gate, up);
        match norm {
            Some(n) if self.tma_norm_fuses(x, n.0, &[gate, up]) => {
                // One TMA launch with the norm and the SwiGLU inside where its tasks keep whole
                // K, else the norm inside the two products and silu_mul after.
                let inside = Some((n.0.dense_ptr.expect("checked"), n.1));
                if self.linear_tma_glu(x, gate, up, out, None, inside) {
                    return;
                }
                let (mut g, mut u) = (self.tensor(x.rows, gate.rows), self.tensor(x.rows, up.rows));
                self.fused_norm_linear(x, n, &[gate, up], &mut [&mut g, &mut u]);
                return self.silu_mul(&g, &u, out);
            }
            Some(n) if !self.norm_fuses(x, n.0, &[gate, up]) => {
                return self.fused_swiglu(&norm_apart(self, x, n), None, gate, up, out);
            }
            Some(n) if !glu => {
                let rows = x.rows;
                let (mut g, mut u) = (self.tensor(rows, gate.rows), self.tensor(rows, up.rows));
                self.fused_norm_linear(x, n, &[gate, up], &mut [&mut g, &mut u]);
                return self.silu_mul(&g, &u, out);
            }
            None if !glu => {
                // Tensor-core weights: one TMA launch where its tasks keep whole K.
                if self.linear_tma_glu(x, gate, up, out, None, None) {
                    return;
                }
                return swiglu_apart(self, x, gate, up, out);
            }
            _ => {}
        }
        assert_eq!(
            (x.cols, out.rows, out.cols),
            (gate.cols, x.rows, gate.rows),
            "swiglu `{}`: shape mismatch",
            gate.name
        );
        assert_eq!(x.padded_rows, out.padded_rows, "swiglu `{}`: padded rows differ", gate.name);
        if x.padded_rows == 0 || gate.rows == 0 {
            return;
        }
        for w in [gate, up] {
            self.work.add((w.rows * w.row_bytes) as u64, crate::measure::linear_flops(x.rows, w.rows, w.cols));
        }
        let norm = norm.map(|(w, eps)| (w.dense_ptr.expect("checked by norm_fuses"), eps));
        self.linear_cuda_cores(x, &[gate, up], &mut [out], Fuse { glu: true, norm, ..Fuse::default() });
    }

    /// Whether x · wᵀ adds into the residual as it stores: on every kernel but the replaced
    /// tensor-core ones (`PLUMB_CUDA_TMA=0`) and the tensor-core ones past `TMA_RESIDUAL_MAX_ROWS`
    /// rows, unless `PLUMB_CUDA_FUSE_RESIDUAL=0`.
    fn residual_in_store(&self, x: &CudaTensor, w: &CudaWeight) -> bool {
        self.fuse_residual && !(w.mma && (!self.tma.enabled || x.padded_rows > TMA_RESIDUAL_MAX_ROWS))
    }

    /// `linear_add`: the add in the product's store where `residual_in_store`, else the two apart.
    pub(crate) fn fused_linear_add(&self, x: &CudaTensor, w: &CudaWeight, acc: &mut CudaTensor) {
        if !self.residual_in_store(x, w) {
            return linear_add_apart(self, x, w, acc);
        }
        self.linear_group_fused(x, &[w], &mut [acc], None, Fuse { resid: true, ..Fuse::default() });
    }

    /// `linear_add_norm`: with the norm inside the products on (`set_fuse_norm`) and CUDA-core
    /// weights at rows the split kernel takes, `linear_add` and None (the next products compute
    /// the norm; where their weights cannot, they run it apart); else the add in the product's
    /// store and the norm after it where `residual_in_store`, or the product then the add and the
    /// norm as one `add_rms_norm` — on the H200 the 8B's 2,048-token prefill spent 17.6 ms of 269
    /// in `add` and `rms_norm` apart against 11.7 in `add_rms_norm` (session 17,
    /// receipts/ab/session17/h200-callD-8b-profile). The same bits every way.
    pub(crate) fn fused_linear_add_norm(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        acc: &mut CudaTensor,
        norm: (&CudaWeight, f32),
    ) -> Option<CudaTensor> {
        if self.fuse_norm.load(Ordering::Relaxed) && !w.mma && splits_k(x.padded_rows, acc.cols) {
            self.fused_linear_add(x, w, acc);
            return None;
        }
        // Tensor-core weights at decode rows: the next products' TMA launch computes the norm
        // (`tma_norm_fuses`; where it cannot, they run it apart).
        if self.tma_norm_rows(x) && w.mma && norm.0.cols == acc.cols && self.residual_in_store(x, w) {
            self.fused_linear_add(x, w, acc);
            return None;
        }
        if self.residual_in_store(x, w) {
            self.fused_linear_add(x, w, acc);
            return Some(norm_apart(self, acc, norm));
        }
        Some(linear_add_norm_apart(self, x, w, acc, norm))
    }

    /// `norm_qkv_rope_write_kv`: one split launch of the three products, RoPE of q and k and the
    /// K/V store in its fold (kernels/linear.cu, `QkvRope`), the norm (where there is one) inside
    /// it where the norm fuses and else launched before it, where the weights take the split kernel, the three run
    /// as one launch, pairs are adjacent (GGUF's layout; rotate-half pairs sit in other blocks)
    /// and `PLUMB_CUDA_FUSE_QKV_ROPE` and `PLUMB_CUDA_FUSE_ROPE_KV` are not 0; else
    /// `norm_linear_multi` then `rope_write_kv`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fused_norm_qkv_rope(
        &self,
        x: &CudaTensor,
        norm: Option<(&CudaWeight, f32)>,
        ws: [&CudaWeight; 3],
        [q, k, v]: [&mut CudaTensor; 3],
        table: &CudaTensor,
        kv: &mut CudaKvCache,
        layer: usize,
        batch: &ForwardBatch,
        heads: (usize, usize, usize),
        rotate_half: bool,
    ) {
        let (_, num_kv_heads, head_dim) = heads;
        let len = num_kv_heads * head_dim;
        let fuses = self.fuse_qkv_rope
            && self.fuse_rope_kv
            && self.group_linear
            && !rotate_half
            && head_dim > 0
            && head_dim.is_multiple_of(2)
            && (kv.spec.num_kv_heads * kv.spec.head_dim, kv.spec.head_dim) == (len, head_dim)
            && (v.rows, v.cols, v.padded_rows) == (batch.num_rows(), len, table.padded_rows)
            && (table.rows, x.padded_rows) == (batch.num_rows(), table.padded_rows)
            && ws.iter().all(|w| w.rows > 0)
            && split_products(x, &ws);
        if !fuses {
            match norm {
                Some(norm) => self.fused_norm_linear(x, norm, &ws, &mut [&mut *q, &mut *k, &mut *v]),
                None => self.linear_multi(x, &ws, &mut [&mut *q, &mut *k, &mut *v]),
            }
            return self.rope_write_kv(q, k, v, table, kv, layer, batch, heads, rotate_half);
        }
        let half = rope_qk_half("norm_qkv_rope_write_kv", q, k, table, heads);
        let slots = self.kv_slots(kv, batch, table.padded_rows);
        let store = match kv.store {
            KvStore::F32 => 0,
            KvStore::F16 => 1,
            KvStore::Bf16 => 2,
        };
        let rope = QkvRope {
            table: table.ptr(),
            slots: slots.ptr,
            k_cache: kv.k_ptrs[layer],
            v_cache: kv.v_ptrs[layer],
            store,
            half: half as i32,
            head_dim: head_dim as i32,
        };
        match norm {
            Some(norm) if self.norm_fuses(x, norm.0, &ws) => {
                let norm = Some((norm.0.dense_ptr.expect("checked"), norm.1));
                let fuse = Fuse { norm, rope: Some(rope), ..Fuse::default() };
                self.linear_group_fused(x, &ws, &mut [q, k, v], None, fuse);
            }
            Some(norm) => {
                let normed = norm_apart(self, x, norm);
                self.linear_group_fused(
                    &normed,
                    &ws,
                    &mut [q, k, v],
                    None,
                    Fuse { rope: Some(rope), ..Fuse::default() },
                );
            }
            None => self.linear_group_fused(x, &ws, &mut [q, k, v], None, Fuse { rope: Some(rope), ..Fuse::default() }),
        }
    }
}

/// Whether the products of x by `ws` run on the split CUDA-core kernel as one launch can fuse
/// them: CUDA-core weights of one type and width, and rows the split kernel takes.
fn split_products(x: &CudaTensor, ws: &[&CudaWeight]) -> bool {
    ws.iter().all(|w| !w.mma && (w.ty, w.cols) == (ws[0].ty, ws[0].cols)) && splits_k(x.padded_rows, x.cols)
}
