//! The fused ops of `LinearOps` as their parts: the default of each fused op on a backend that
//! does not fuse it, and what the tests hold a fused launch to, bit for bit.

use super::{ElementwiseOps, LinearOps, Shape};

/// `linear_swiglu` as its parts: the gate and up products (`linear_multi`), then `silu_mul`.
pub fn swiglu_apart<B: LinearOps + ElementwiseOps + ?Sized>(
    b: &B,
    x: &B::Tensor,
    gate: &B::Weight,
    up: &B::Weight,
    out: &mut B::Tensor,
) {
    let n = x.rows();
    let (mut g, mut u) = (b.tensor(n, gate.rows()), b.tensor(n, up.rows()));
    b.linear_multi(x, &[gate, up], &mut [&mut g, &mut u]);
    b.silu_mul(&g, &u, out);
}

/// `linear_add` as its parts: the product into a tensor of its own, then `add`.
pub fn linear_add_apart<B: LinearOps + ElementwiseOps + ?Sized>(
    b: &B,
    x: &B::Tensor,
    w: &B::Weight,
    acc: &mut B::Tensor,
) {
    let mut out = b.tensor(x.rows(), w.rows());
    b.linear(x, w, &mut out);
    b.add(acc, &out);
}

/// `linear_add_norm` as its parts: the product into a tensor of its own, then `add_rms_norm` (the
/// bits of `add` then `rms_norm`): the normed sum.
pub fn linear_add_norm_apart<B: LinearOps + ElementwiseOps + ?Sized>(
    b: &B,
    x: &B::Tensor,
    w: &B::Weight,
    acc: &mut B::Tensor,
    norm: (&B::Weight, f32),
) -> B::Tensor {
    let mut out = b.tensor(x.rows(), w.rows());
    b.linear(x, w, &mut out);
    let mut normed = b.tensor(acc.rows(), acc.cols());
    b.add_rms_norm(acc, &out, norm.0, norm.1, &mut normed);
    normed
}

/// rms_norm(x) with `norm`'s weight and epsilon, into a tensor of its own: the first part of
/// `norm_linear_multi` and `norm_linear_swiglu` apart.
pub fn norm_apart<B: ElementwiseOps + ?Sized>(b: &B, x: &B::Tensor, norm: (&B::Weight, f32)) -> B::Tensor {
    let mut normed = b.tensor(x.rows(), x.cols());
    b.rms_norm(x, norm.0, norm.1, &mut normed);
    normed
}

/// `norm_linear_multi` as its parts: `rms_norm`, then `linear_multi`.
pub fn norm_linear_apart<B: LinearOps + ElementwiseOps + ?Sized>(
    b: &B,
    x: &B::Tensor,
    norm: (&B::Weight, f32),
    ws: &[&B::Weight],
    outs: &mut [&mut B::Tensor],
) {
    let normed = norm_apart(b, x, norm);
    b.linear_multi(&normed, ws, outs);
}
