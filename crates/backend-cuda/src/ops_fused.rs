//! The CUDA backend's fused products (`LinearOps::linear_swiglu`, `linear_add`,
//! `norm_linear_multi`, `norm_linear_swiglu`): where a kernel takes its neighbour's work, the
//! product's launch does it — the split CUDA-core kernel computes an RMSNorm of its input as it
//! reads it and a SwiGLU of its two products as it folds them, and every `linear` kernel but the
//! replaced tensor-core ones adds its output into a residual as it stores it — each with the
//! arithmetic of the op it replaces (kernels/linear.cu), so the bits of the ops apart. Where none
//! takes it, the ops run apart.

use crate::ops_linear::{LIN_SPLIT_FEAT, LIN_SPLIT_MAX_CHUNKS, splits_k};
use crate::{CudaBackend, CudaTensor, CudaWeight};
use plumb_core::{Backend, ElementwiseOps, linear_add_apart, norm_apart, norm_linear_apart, swiglu_apart};
use std::sync::atomic::Ordering;

/// The neighbours' work a `linear` launch takes (kernels/linear.cu, linear_tma.cu): a SwiGLU of
/// its two products (`glu`), an RMSNorm of its input (`norm`: the norm weight's device pointer and
/// epsilon) and an add into its output's previous contents (`resid`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Fuse {
    pub glu: bool,
    pub norm: Option<(u64, f32)>,
    pub resid: bool,
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
    /// type and width, rows the split kernel takes, a norm weight of x's width, and
    /// `PLUMB_CUDA_FUSE_NORM` not 0. Nothing else reads the normed rows, so no rounded copy of
    /// them is wanted.
    fn norm_fuses(&self, x: &CudaTensor, norm: &CudaWeight, ws: &[&CudaWeight]) -> bool {
        self.fuse_norm
            && x.cols > 0
            && norm.dense_ptr.is_some()
            && norm.cols == x.cols
            && ws.iter().all(|w| !w.mma && (w.ty, w.cols) == (ws[0].ty, ws[0].cols))
            && splits_k(x.padded_rows, x.cols)
    }

    /// `norm_linear_multi`: runs of up to three weights (as `linear_multi` groups them), each
    /// launch computing the norm inside its blocks where `norm_fuses`, else the two apart.
    pub(crate) fn fused_norm_linear(
        &self,
        x: &CudaTensor,
        norm: (&CudaWeight, f32),
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
    ) {
        assert_eq!(ws.len(), outs.len(), "norm_linear_multi: one output per weight");
        if !self.norm_fuses(x, norm.0, ws) {
            return norm_linear_apart(self, x, norm, ws, outs);
        }
        let fuse = Fuse { norm: Some((norm.0.dense_ptr.expect("checked"), norm.1)), ..Fuse::default() };
        let per = if self.group_linear { 3 } else { 1 };
        for (ws, outs) in ws.chunks(per).zip(outs.chunks_mut(per)) {
            self.linear_group_fused(x, ws, outs, None, fuse);
        }
    }

    /// `linear_swiglu` (with `norm`: of rms_norm(x)), as one split launch where `swiglu_fuses` and
    /// the norm fuses; else whatever of it does.
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
            Some(n) if !self.norm_fuses(x, n.0, &[gate, up]) => {
                return self.fused_swiglu(&norm_apart(self, x, n), None, gate, up, out);
            }
            Some(n) if !glu => {
                let rows = x.rows;
                let (mut g, mut u) = (self.tensor(rows, gate.rows), self.tensor(rows, up.rows));
                self.fused_norm_linear(x, n, &[gate, up], &mut [&mut g, &mut u]);
                return self.silu_mul(&g, &u, out);
            }
            None if !glu => return swiglu_apart(self, x, gate, up, out),
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
        self.linear_cuda_cores(x, &[gate, up], &mut [out], Fuse { glu: true, norm, resid: false });
    }

    /// `linear_add`: the add in the product's store on every kernel but the replaced tensor-core
    /// ones (`PLUMB_CUDA_TMA=0`), unless `PLUMB_CUDA_FUSE_RESIDUAL=0`; else the two apart.
    pub(crate) fn fused_linear_add(&self, x: &CudaTensor, w: &CudaWeight, acc: &mut CudaTensor) {
        if !self.fuse_residual || w.mma && !self.tma.enabled {
            return linear_add_apart(self, x, w, acc);
        }
        self.linear_group_fused(x, &[w], &mut [acc], None, Fuse { resid: true, ..Fuse::default() });
    }
}
