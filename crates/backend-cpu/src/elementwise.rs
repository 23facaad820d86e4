//! Row-wise ops: RMSNorm, residual add, SiLU·up, RoPE. Each row is computed on its own, with a
//! fixed lane order over columns, so splitting rows across threads cannot change a result.

use crate::simd::{F32x16, LANES, exp, simd_dispatch};

simd_dispatch! {
    /// out = x / sqrt(mean(x²) + eps) · weight, one row of `weight.len()` columns at a time.
    pub fn rms_norm_rows(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) => rms_norm_kernel
}

#[inline(always)]
fn rms_norm_kernel<S: F32x16>(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let cols = weight.len();
    for (xr, or) in x.chunks_exact(cols).zip(out.chunks_exact_mut(cols)) {
        let mut acc = S::zero();
        let mut j = 0;
        while j + LANES <= cols {
            let v = S::load(&xr[j..]);
            acc = v.fma(v, acc);
            j += LANES;
        }
        let mut sum = acc.hsum();
        for &v in &xr[j..] {
            sum = v.mul_add(v, sum);
        }
        let inv = 1.0 / (sum / cols as f32 + eps).sqrt();
        let inv_v = S::splat(inv);
        let mut j = 0;
        while j + LANES <= cols {
            S::load(&xr[j..]).mul(inv_v).mul(S::load(&weight[j..])).store(&mut or[j..]);
            j += LANES;
        }
        for ((o, &v), &w) in or[j..].iter_mut().zip(&xr[j..]).zip(&weight[j..]) {
            *o = v * inv * w;
        }
    }
}

simd_dispatch! {
    /// out = silu(gate) · up = gate / (1 + e^-gate) · up.
    pub fn silu_mul(gate: &[f32], up: &[f32], out: &mut [f32]) => silu_mul_kernel
}

#[inline(always)]
fn silu_mul_kernel<S: F32x16>(gate: &[f32], up: &[f32], out: &mut [f32]) {
    let n = out.len();
    let mut j = 0;
    while j + LANES <= n {
        silu_mul_lanes(S::load(&gate[j..]), S::load(&up[j..])).store(&mut out[j..]);
        j += LANES;
    }
    if j < n {
        // The tail goes through the same lane code on a zero-padded copy (no recursion: a
        // recursive kernel would not inline into its `#[target_feature]` entry point).
        let (mut g, mut u, mut o) = ([0f32; LANES], [0f32; LANES], [0f32; LANES]);
        g[..n - j].copy_from_slice(&gate[j..]);
        u[..n - j].copy_from_slice(&up[j..]);
        silu_mul_lanes(S::load(&g), S::load(&u)).store(&mut o);
        out[j..].copy_from_slice(&o[..n - j]);
    }
}

#[inline(always)]
fn silu_mul_lanes<S: F32x16>(g: S, u: S) -> S {
    let e = exp(S::zero().sub(g));
    g.div(S::splat(1.0).add(e)).mul(u)
}

/// acc += x (one rounding per element; the compiler vectorizes it).
pub fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a += *b;
    }
}

/// Rotates adjacent pairs of each head by the row's (cos, sin) table.
pub fn rope_rows(x: &mut [f32], cols: usize, table: &[f32], half: usize, num_heads: usize, head_dim: usize) {
    for (row, tab) in x.chunks_exact_mut(cols).zip(table.chunks_exact(2 * half)) {
        let (cos, sin) = tab.split_at(half);
        for head in row.chunks_exact_mut(head_dim).take(num_heads) {
            for i in 0..half {
                let (x0, x1) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = x0 * cos[i] - x1 * sin[i];
                head[2 * i + 1] = x0 * sin[i] + x1 * cos[i];
            }
        }
    }
}

/// Rotates pairs (x[i], x[i + half]) of each head by the row's (cos, sin) table (rotate-half).
pub fn rope_rotate_half_rows(
    x: &mut [f32],
    cols: usize,
    table: &[f32],
    half: usize,
    num_heads: usize,
    head_dim: usize,
) {
    for (row, tab) in x.chunks_exact_mut(cols).zip(table.chunks_exact(2 * half)) {
        let (cos, sin) = tab.split_at(half);
        for head in row.chunks_exact_mut(head_dim).take(num_heads) {
            for i in 0..half {
                let (x0, x1) = (head[i], head[i + half]);
                head[i] = x0 * cos[i] - x1 * sin[i];
                head[i + half] = x1 * cos[i] + x0 * sin[i];
            }
        }
    }
}

/// The (cos, sin) table for `positions` × `inv_freq`, angles and trigonometry in f64.
pub fn rope_table(positions: &[u32], inv_freq: &[f64]) -> Vec<f32> {
    let half = inv_freq.len();
    let mut table = vec![0f32; positions.len() * 2 * half];
    for (row, &p) in table.chunks_exact_mut(2 * half).zip(positions) {
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = p as f64 * f;
            row[i] = angle.cos() as f32;
            row[half + i] = angle.sin() as f32;
        }
    }
    table
}
