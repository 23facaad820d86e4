//! The residual stream between a decoder's sublayers on the untraced path: each sublayer reads
//! rms_norm(x) and adds its output into x. Where the add runs apart from the norm after it, the
//! two go as one `add_rms_norm` and the next sublayer reads the normed rows; where a backend
//! computes the norm inside the next products' launch, that sublayer reads x and the norm. Either
//! way the bits of `add` then `rms_norm` apart.

use plumb_core::{Backend, ElementwiseOps, LinearOps, Shape};

/// What a sublayer reads: x normed already (by the add before it), or x with its norm still to
/// apply (the norm's weight and epsilon), which the backend may compute inside the products.
pub enum Input<'a, B: Backend> {
    Normed(&'a B::Tensor),
    Pending((&'a B::Weight, f32)),
}

impl<B: Backend> std::fmt::Debug for Input<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Input::Normed(_) => "Input::Normed",
            Input::Pending(_) => "Input::Pending",
        })
    }
}

impl<'a, B: Backend> Input<'a, B> {
    /// The normed rows the add before handed over, else x with `norm` to apply.
    pub fn from(normed: Option<&'a B::Tensor>, norm: (&'a B::Weight, f32)) -> Self {
        normed.map_or(Input::Pending(norm), Input::Normed)
    }

    /// `f` of the normed rows: those handed over, or rms_norm(x) computed here.
    pub fn with_normed<R>(self, b: &B, x: &B::Tensor, f: impl FnOnce(&B::Tensor) -> R) -> R
    where
        B: ElementwiseOps,
    {
        match self {
            Input::Normed(n) => f(n),
            Input::Pending(norm) => f(&plumb_core::norm_apart(b, x, norm)),
        }
    }
}

/// x += a · wᵀ; with `next` (the next sublayer's norm), that sublayer's input: the normed sum, or
/// None where the backend leaves the norm to the next products (`linear_add_norm`).
pub fn linear_add<B: LinearOps + ElementwiseOps>(
    b: &B,
    a: &B::Tensor,
    w: &B::Weight,
    x: &mut B::Tensor,
    next: Option<(&B::Weight, f32)>,
) -> Option<B::Tensor> {
    match next {
        Some(norm) => b.linear_add_norm(a, w, x, norm),
        None => {
            b.linear_add(a, w, x);
            None
        }
    }
}

/// x += out (a sublayer's output computed apart); with `next`, rms_norm of the sum in the same
/// pass (`add_rms_norm`): the next sublayer's input.
pub fn add<B: ElementwiseOps>(
    b: &B,
    x: &mut B::Tensor,
    out: &B::Tensor,
    next: Option<(&B::Weight, f32)>,
) -> Option<B::Tensor> {
    match next {
        Some((w, eps)) => {
            let mut normed = b.tensor(x.rows(), x.cols());
            b.add_rms_norm(x, out, w, eps, &mut normed);
            Some(normed)
        }
        None => {
            b.add(x, out);
            None
        }
    }
}
