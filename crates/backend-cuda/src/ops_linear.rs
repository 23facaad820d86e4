//! `linear` and its neighbours on the CUDA backend (`LinearOps`): which kernel takes a call —
//! the TMA kernels (kernels/linear_tma.cu, planned by `tma.rs`) or the ones they replaced, kept
//! for measuring (mma.sync and cp.async-fed wgmma, `PLUMB_CUDA_TMA=0`), or the f32 CUDA-core
//! kernels for other formats — how K is split for few rows (`decode_split`), the k-permuted
//! storage of tensor-core weights (`kperm_bytes`), and `embed`/`gather_rows`.
//! No launch parameter reads the token count except to cover every row or to split K, which
//! changes no bit (the chunk partials are folded in chunk order whatever the split).

use crate::launch::Launch;
use crate::ops_fused::Fuse;
use crate::pool::DeviceBuf;
use crate::tma::{TMA_ROWS, bf16_tile_map, tma_cluster, tma_name_cl, tma_smem, tma_threads};
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d};
use cudarc::driver::LaunchConfig;
use plumb_core::LinearOps;

/// Output features per `linear` block and activation rows per block (kernels/linear.cu).
const LIN_WARPS: usize = 8;
const LIN_ROWS: usize = 16;
/// `linear_split` (the same arithmetic with K chunks spread over warps): features per block, the
/// most chunks its shared memory holds, and the most rows it is used for (decode and verify).
pub(crate) const LIN_SPLIT_FEAT: usize = 4;
pub(crate) const LIN_SPLIT_MAX_CHUNKS: usize = 64;
const LIN_SPLIT_MAX_ROWS: usize = 64;
/// The most warps of a `linear_split` block (`LIN_SPLIT_MAX_WARPS`, its launch bounds).
const LIN_SPLIT_MAX_WARPS: usize = 24;

/// Whether a CUDA-core `linear` of K `k` over `padded_rows` rows runs on the split kernel (the
/// kernel that also fuses a norm before it and a SwiGLU after: ops_fused.rs).
pub(crate) fn splits_k(padded_rows: usize, k: usize) -> bool {
    padded_rows <= LIN_SPLIT_MAX_ROWS && k.div_ceil(256) <= LIN_SPLIT_MAX_CHUNKS
}
/// The tensor-core `linear`: the decode kernel (kernels/linear_mma.cu) takes up to this many
/// rows, staging two chunks of 64 weight rows and of the rows in at most this much shared
/// memory; the wgmma kernel (kernels/linear_wgmma.cu) takes more rows, staging six stages of
/// 64 K for 128 weight rows and 128 token rows. Both compute the same bits.
pub(crate) const MMA_DECODE_MAX_ROWS: usize = 64;
/// Up to this many rows the TMA kernel's last block of a feature tile folds a split K's chunk
/// partials (128 features × rows × chunks loads for one block); more rows fold in `fold_chunks`.
const TMA_FOLD_IN_KERNEL_ROWS: usize = 4;
/// Blocks the decode kernel aimed for before its split followed the device's resident blocks
/// (`PLUMB_CUDA_DECODE_SPLIT=fixed` brings that choice back, for measuring).
const DECODE_BLOCKS: usize = 264;
/// The decode kernel's modelled pipeline fill, in chunk times per block (`decode_split`).
pub(crate) const DECODE_FILL: f64 = 1.0;
/// From this many 8-row groups on, the wide decode kernel (two warps per 16 features, 256
/// threads) runs: each warp's chain of dependent mma steps is half as long. Same-run on the H200
/// at the 8B's shapes: 1.19–1.44× faster at 16 and 32 rows, 1.48–1.51× at 64; one group has
/// nothing to share.
pub(crate) const DECODE_WIDE_GROUPS: usize = 2;
pub(crate) const MMA_DECODE_SMEM: usize = 2 * (64 + MMA_DECODE_MAX_ROWS) * 512;
pub(crate) const WGMMA_SMEM: usize = 6 * 2 * 128 * 64 * 2;

/// Shared memory of a decode-kernel block for `groups` groups of 8 rows: two stages of 64
/// weight rows and the rows, 512 bytes each.
pub(crate) fn decode_smem(groups: usize) -> usize {
    2 * (64 + 8 * groups) * 512
}

/// The fold chunks (GPU.md's Kc for bf16): 256, the unit the decode kernel stages, and 1,024 for
/// long K (the TMA kernels unroll a chunk's stages: one instance per chunk).
pub(crate) const FOLD_SHORT_KC: usize = 256;
pub(crate) const FOLD_LONG_KC: usize = 1024;
/// The K from which a tensor-core weight is folded in chunks of 1,024: four of them or more
/// (`fold_chunk`; `PLUMB_CUDA_KC_LONG_FROM` overrides it, for measuring).
pub(crate) const FOLD_LONG_FROM: usize = 4 * FOLD_LONG_KC;

/// The fold chunk (GPU.md's Kc) of a tensor-core weight whose K is `k`: 1,024 elements from
/// `long_from` on, else 256. Every kernel that computes the weight's products cuts K the same way
/// (kernels/linear_mma.cu), so the bits follow K (and the backend's setting) alone, never the rows
/// or the split. Long chunks fold fewer partials: a split K writes each chunk's partial per row
/// (rows × 4 bytes a feature, written and read back) against its weights (Kc × 2 bytes a
/// feature), and whole K folds each chunk into the running sum. Measured on the H200 at the 8B's
/// shapes against chunks of 256 everywhere (`gemm_8b`, receipts/gemm-cuda-llama8b-fold-chunks.txt):
/// one row q|k|v 16.7 against 17.0 µs, o 9.1 / 9.4, gate|up 60.4 / 61.1, down 35.8 / 38.3; down at
/// 64 rows 55.1 against 64.3 (split), gate|up 72.1 against 74.3 (whole).
pub(crate) fn fold_chunk(k: usize, long_from: usize) -> usize {
    if k >= long_from { FOLD_LONG_KC } else { FOLD_SHORT_KC }
}

/// Chunks of K per block of the decode kernel, for `tiles` tiles of 64 features over
/// `num_chunks` chunks of `units` × 256 elements and `rows` rows, on a device that keeps `slots`
/// such blocks resident: the split with the least modelled time, in times of 256 elements. The
/// blocks run in waves of `slots`; a wave lasts as long as a block's chunks plus `fill` of
/// pipeline fill; when K is split, each chunk also costs its partials' traffic (4-byte values of
/// 64 features per row, written and read back, against 64 × 256 bf16 weights: rows / 64 of 256
/// elements' time). Ties go to fewer splits. Whole waves
/// matter at one row: 448 tiles of gate‖up over 396 slots of an H200 left one SM in eight idle
/// for a second wave as long as the first (89 µs; split in 4, 76 µs). A weight with two waves of
/// whole tiles or more keeps whole K per block: its tail is a small part of its time, and a split
/// only adds the fold (the LM head, 2,004 tiles: 241 µs whole, 280 µs split in 2).
pub(crate) fn decode_split(
    tiles: usize,
    num_chunks: usize,
    units: usize,
    slots: usize,
    rows: usize,
    fill: f64,
) -> usize {
    if tiles >= 2 * slots {
        return num_chunks;
    }
    let mut best = (f64::INFINITY, num_chunks);
    for per_split in (1..=num_chunks).rev() {
        let splits = num_chunks.div_ceil(per_split);
        let chunk = if splits > 1 { units as f64 + rows as f64 / 64.0 } else { units as f64 };
        let waves = (tiles * splits).div_ceil(slots.max(1));
        let cost = waves as f64 * (per_split as f64 * chunk + fill);
        if cost < best.0 * (1.0 - 1e-9) {
            best = (cost, per_split);
        }
    }
    best.1
}

/// Whether the TMA `linear` keeps whole K per block at `rows` rows over `num_chunks` chunks of
/// `kc`, whatever `decode_split` models: from 32 rows on, for K of four chunks or fewer (a split
/// leaves tasks of a chunk or two, measured slower) and wherever a chunk's
/// partials (rows × 4 bytes a feature, written and read back) pass a quarter of its weight bytes
/// (kc × 2 a feature: 16 × rows > kc). Measured on the H200 at the 8B's shapes, every split
/// against none: with chunks of 256 (receipts/gemm-cuda-llama8b-split-sweep.txt) a split's
/// partials, written, read back and folded per row, cost more than the model's traffic term
/// says — at 64 rows q|k|v took 28.0 µs whole and 41.5 split, o 23.1 and 26.7; with chunks of
/// 1,024 (receipts/gemm-cuda-llama8b-fold-chunks.txt) K = 4,096 still ran best whole at 32 and 64
/// rows (64 rows: q|k|v 22.6 against 30.3–31.2 split, o 20.0 against 21.9–23.5, gate|up 72.1
/// against 106.9–111.3), while down (14 chunks) gained from its split (64 rows: 55.1 against 61.4
/// whole; 32 rows: 45.8 against 56.4), as every shape does at 8 and 16 rows. The same bits either
/// way.
pub(crate) fn keeps_whole_k(rows: usize, num_chunks: usize, kc: usize) -> bool {
    rows >= 32 && (num_chunks <= 4 || 16 * rows > kc)
}

/// A bf16 matrix's bytes k-permuted as the tensor-core kernels read them (kernels/linear_mma.cu,
/// `kperm`): in each group of 32 elements, word j = 4t + c moves to word 4c + t. Rows are whole
/// groups (`linear_inputs` admits K multiples of 32 only).
pub(crate) fn kperm_bytes(bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len().is_multiple_of(64), "k-permuted rows are whole groups of 32 bf16");
    let mut out = vec![0u8; bytes.len()];
    for (src, dst) in bytes.chunks_exact(64).zip(out.chunks_exact_mut(64)) {
        for j in 0..16 {
            let to = 4 * (j % 4) + j / 4;
            dst[4 * to..4 * to + 4].copy_from_slice(&src[4 * j..4 * j + 4]);
        }
    }
    out
}

impl CudaBackend {
    /// The fold chunk of a tensor-core weight of K `k` on this backend (`fold_chunk`).
    pub(crate) fn fold_chunk(&self, k: usize) -> usize {
        fold_chunk(k, self.fold_long_from)
    }

    /// x rounded to bf16 and k-permuted, as the tensor-core kernels take it.
    fn round_bf16(&self, x: &CudaTensor) -> DeviceBuf {
        let n32 = x.padded_rows * x.cols / 32;
        let buf = self.alloc(n32 * 64);
        self.submit(Launch::new(self.kernel("round_bf16"), grid_1d(n32)).ptr(x.ptr()).ptr(buf.ptr).u64(n32 as u64));
        buf
    }

    /// x as the tensor-core kernels take it: the copy the norm that wrote x made with it, else
    /// `round_bf16`'s (the same bits either way).
    fn rounded(&self, x: &CudaTensor) -> DeviceBuf {
        self.take_rounded(x).unwrap_or_else(|| self.round_bf16(x))
    }

    /// `linear` of up to three weights that read the same x (of one type and width: `linear_multi`
    /// groups them) in one launch where the kernel takes several (`seg_of` in kernels/linear.cu);
    /// a tensor-core weight takes `rounded` (x as `round_bf16` makes it) when given, else rounds x
    /// itself.
    pub(crate) fn linear_group(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
        rounded: Option<&DeviceBuf>,
    ) {
        self.linear_group_fused(x, ws, outs, rounded, Fuse::default());
    }

    /// `linear_group` with the work of its neighbours done inside the launch (`Fuse`; the caller
    /// has checked the kernel takes it: ops_fused.rs).
    pub(crate) fn linear_group_fused(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
        rounded: Option<&DeviceBuf>,
        fuse: Fuse,
    ) {
        assert!(!ws.is_empty() && ws.len() <= 3 && ws.len() == outs.len(), "linear: 1 to 3 weights, one output each");
        for (w, out) in ws.iter().zip(outs.iter()) {
            assert_eq!((x.cols, out.rows, out.cols), (w.cols, x.rows, w.rows), "linear `{}`: shape mismatch", w.name);
            assert_eq!(x.padded_rows, out.padded_rows, "linear `{}`: padded rows differ", w.name);
            assert!((w.ty, w.mma) == (ws[0].ty, ws[0].mma), "linear `{}`: grouped with another type", w.name);
        }
        if x.padded_rows == 0 {
            return;
        }
        if ws.iter().any(|w| w.rows == 0) {
            // A weight without features has nothing to launch; the others run alone.
            for (w, out) in ws.iter().zip(outs.iter_mut()).filter(|(w, _)| w.rows > 0) {
                self.linear_group_fused(x, &[w], &mut [&mut **out], rounded, fuse);
            }
            return;
        }
        for w in ws {
            self.work.add((w.rows * w.row_bytes) as u64, crate::measure::linear_flops(x.rows, w.rows, w.cols));
        }
        if ws[0].mma && self.tma.enabled {
            assert!(!fuse.glu && fuse.norm.is_none() && fuse.rope.is_none(), "linear_tma: fuses only a residual add");
            self.linear_tma(x, ws, outs, rounded, fuse.resid);
        } else if ws[0].mma {
            assert!(fuse == Fuse::default(), "linear_mma: fuses nothing");
            let own = rounded.is_none().then(|| self.rounded(x));
            for (w, out) in ws.iter().zip(outs.iter_mut()) {
                self.linear_mma(x, w, out, own.as_ref().or(rounded));
            }
        } else {
            self.linear_cuda_cores(x, ws, outs, fuse);
        }
    }

    /// `linear` on the f32 CUDA-core kernels (kernels/linear.cu), every format but tensor-core bf16;
    /// with `fuse.glu`, ws = [gate, up] and outs = [silu(gate) · up] (on the split kernel, as a
    /// norm is: `Fuse`).
    pub(crate) fn linear_cuda_cores(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
        fuse: Fuse,
    ) {
        let glu = fuse.glu;
        let w = ws[0];
        let chunks = w.cols.div_ceil(256);
        let split = splits_k(x.padded_rows, w.cols);
        let rope = fuse.rope;
        assert!(
            split || !glu && fuse.norm.is_none() && rope.is_none(),
            "linear `{}`: only the split kernel fuses a norm, a SwiGLU or RoPE",
            w.name
        );
        // A SwiGLU block takes both weights' tasks of its features.
        let (feat, held) = (LIN_SPLIT_FEAT, if glu { 2 * chunks } else { chunks });
        let (kernel, features) = if split { (&w.kernels[1], feat) } else { (&w.kernels[0], LIN_WARPS) };
        let blocks: usize =
            if glu { w.rows.div_ceil(feat) } else { ws.iter().map(|w| w.rows.div_ceil(features)).sum() };
        // The split kernel: a warp per (feature, chunk) task, up to its most.
        let warps = if split { (feat * held).clamp(LIN_WARPS, LIN_SPLIT_MAX_WARPS) } else { LIN_WARPS };
        let cfg = LaunchConfig {
            grid_dim: (blocks as u32, x.padded_rows.div_ceil(LIN_ROWS) as u32, 1),
            block_dim: (warps as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let at = |i: usize| {
            (ws.get(i).map_or(0, |w| w.ptr), outs.get(i).map_or(0, |o| o.ptr()), ws.get(i).map_or(0, |w| w.rows))
        };
        let (w1, o1, n1) = at(1);
        let (w2, o2, n2) = at(2);
        self.submit(
            Launch::new(kernel, cfg)
                .ptr(x.ptr())
                .ptr(w.ptr)
                .ptr(w1)
                .ptr(w2)
                .u64(w.row_bytes as u64)
                .ptr(outs[0].ptr())
                .ptr(o1)
                .ptr(o2)
                .i32(x.padded_rows as i32)
                .i32(w.rows as i32)
                .i32(n1 as i32)
                .i32(n2 as i32)
                .i32(w.cols as i32)
                .i32(self.staged_loads as i32)
                .i32(glu as i32)
                .ptr(fuse.norm.map_or(0, |n| n.0))
                .f32(fuse.norm.map_or(0.0, |n| n.1))
                .i32(fuse.resid as i32)
                .ptr(rope.map_or(0, |r| r.table))
                .ptr(rope.map_or(0, |r| r.slots))
                .ptr(rope.map_or(0, |r| r.k_cache))
                .ptr(rope.map_or(0, |r| r.v_cache))
                .i32(rope.map_or(0, |r| r.store))
                .i32(rope.map_or(0, |r| r.half))
                .i32(rope.map_or(0, |r| r.head_dim)),
        );
    }

    /// `linear` of a tensor-core weight on the kernels the TMA kernels replaced (`PLUMB_CUDA_TMA=0`,
    /// for measuring): mma.sync for few rows, cp.async-fed wgmma for many.
    fn linear_mma(&self, x: &CudaTensor, w: &CudaWeight, out: &mut CudaTensor, rounded: Option<&DeviceBuf>) {
        // The decode kernel's split of K (kernels/linear_mma.cu) and where its partials go.
        let mut decode = None;
        let kc = self.fold_chunk(w.cols);
        let (kernel, cfg) = if x.padded_rows <= MMA_DECODE_MAX_ROWS {
            let tiles = w.rows.div_ceil(64);
            let num_chunks = w.cols.div_ceil(kc);
            let groups = x.padded_rows.div_ceil(8);
            let wide = groups >= self.decode_wide_groups;
            let slots = if wide { self.decode_slots_wide[groups - 1] } else { self.decode_slots[groups - 1] };
            // A free choice: the fold is the same with any split.
            let per_split = match slots {
                Some(slots) => {
                    decode_split(tiles, num_chunks, kc / FOLD_SHORT_KC, slots, x.padded_rows, self.decode_fill)
                }
                None => num_chunks.div_ceil(DECODE_BLOCKS.div_ceil(tiles).clamp(1, num_chunks)),
            };
            let splits = num_chunks.div_ceil(per_split);
            let part = (splits > 1).then(|| self.alloc(num_chunks * x.padded_rows * w.rows * 4));
            decode = Some((per_split, part));
            let smem = decode_smem(groups);
            let grid = (tiles as u32, splits as u32, 1);
            let (kernel, threads) =
                if wide { (self.kernel("linear_mma_decode_wide_bf16"), 256) } else { (&w.kernels[1], 128) };
            (kernel, LaunchConfig { grid_dim: grid, block_dim: (threads, 1, 1), shared_mem_bytes: smem as u32 })
        } else {
            let grid = (x.padded_rows.div_ceil(128) as u32, w.rows.div_ceil(128) as u32, 1);
            let cfg = LaunchConfig { grid_dim: grid, block_dim: (256, 1, 1), shared_mem_bytes: WGMMA_SMEM as u32 };
            (&w.kernels[0], cfg)
        };
        // The tensor-core kernels take the activations rounded to bf16 and k-permuted, once for
        // every block.
        let own = rounded.is_none().then(|| self.rounded(x));
        let input = own.as_ref().or(rounded).map(|b| b.ptr).expect("rounded above");
        let l = Launch::new(kernel, cfg)
            .ptr(input)
            .ptr(w.ptr)
            .u64(w.row_bytes as u64)
            .ptr(out.ptr())
            .i32(x.padded_rows as i32)
            .i32(w.rows as i32)
            .i32(w.cols as i32)
            .i32(kc as i32);
        let l = match &decode {
            Some((per_split, part)) => {
                let counters = self.arrival_counters(w.rows.div_ceil(64));
                l.i32(*per_split as i32).ptr(part.as_ref().map_or(0, |p| p.ptr)).ptr(counters)
            }
            None => l,
        };
        self.submit(l);
    }

    /// `linear` on the TMA kernels (kernels/linear_tma.cu): the instance whose row tile holds
    /// the rows (or tiles them by 128), 128 features per task (64 for whole-K calls whose tasks
    /// would not cover the SMs: `TmaPlan::feature_tile`), and for few rows K split over blocks as
    /// `decode_split` plans it for the instance's resident blocks. Up to three weights of one
    /// input run as one launch, each on whole tiles of its own.
    fn linear_tma(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
        rounded: Option<&DeviceBuf>,
        resid: bool,
    ) {
        let rows = x.padded_rows;
        let tiles_128: usize = ws.iter().map(|w| w.rows.div_ceil(128)).sum();
        let i = self.tma.kernel(rows, tiles_128).0;
        let n = TMA_ROWS[i];
        let cols = ws[0].cols;
        let features: usize = ws.iter().map(|w| w.rows).sum();
        let kc = self.fold_chunk(cols);
        let num_chunks = cols.div_ceil(kc);
        // A free choice: the fold is the same with any split. Many rows keep whole K per block.
        let per_split = if n <= 64 {
            match self.tma.splits {
                Some(s) => num_chunks.div_ceil(s.min(num_chunks)),
                None if keeps_whole_k(rows, num_chunks, kc) => num_chunks,
                None => {
                    decode_split(tiles_128, num_chunks, kc / FOLD_SHORT_KC, self.tma.slots[i], rows, self.decode_fill)
                }
            }
        } else {
            num_chunks
        };
        let splits = num_chunks.div_ceil(per_split);
        let ft = if splits == 1 { self.tma.feature_tile(i, rows.div_ceil(n), tiles_128) } else { 128 };
        let tiles: usize = ws.iter().map(|w| w.rows.div_ceil(ft)).sum();
        let part = (splits > 1).then(|| self.alloc(num_chunks * rows * features * 4));
        let own = rounded.is_none().then(|| self.rounded(x));
        let input = own.as_ref().or(rounded).expect("rounded above").ptr;
        // Clusters of two CTAs share x (each copies half its rows to both): `tma_cluster`.
        let cl = tma_cluster(self.tma.cluster, n, ft, splits);
        let xmap = bf16_tile_map(input, cols, rows, cols * 2, n / cl);
        let wmaps: Vec<_> = ws.iter().map(|w| bf16_tile_map(w.ptr, w.cols, w.rows, w.row_bytes, ft)).collect();
        let tasks = rows.div_ceil(n) * tiles.div_ceil(cl) * splits;
        let grid =
            if cl == 1 { self.tma.grid(i, ft, tasks) } else { cl * tasks.min(self.tma.grid(i, ft, tasks * cl) / cl) };
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (tma_threads(n), 1, 1),
            shared_mem_bytes: tma_smem(n, ft) as u32,
        };
        // The last block of a tile folds a few rows' partials; more rows fold in a launch of
        // their own, every element in parallel.
        let fold_apart = part.is_some() && rows > TMA_FOLD_IN_KERNEL_ROWS;
        // The counters are sized in 64-feature tiles (the mma.sync kernel's); a TMA tile is ft / 64.
        let counters = if fold_apart { 0 } else { self.arrival_counters(tiles * ft / 64) };
        // Weight i's map, output and features; a launch of fewer weights repeats the first map
        // (never read: those weights have no features).
        let seg = |i: usize| {
            (wmaps.get(i).unwrap_or(&wmaps[0]), outs.get(i).map_or(0, |o| o.ptr()), ws.get(i).map_or(0, |w| w.rows))
        };
        let (m1, o1, n1) = seg(1);
        let (m2, o2, n2) = seg(2);
        // Both kernels take the outputs, then the rows and each weight's features.
        let outputs = |l: Launch| {
            l.ptr(outs[0].ptr()).ptr(o1).ptr(o2).i32(rows as i32).i32(ws[0].rows as i32).i32(n1 as i32).i32(n2 as i32)
        };
        let l = Launch::new(self.kernel(&tma_name_cl(n, ft, kc, cl)), cfg)
            .cluster(cl as u32)
            .tensor_map(&xmap)
            .tensor_map(&wmaps[0])
            .tensor_map(m1)
            .tensor_map(m2);
        let part_ptr = part.as_ref().map_or(0, |p| p.ptr);
        // Without a fold launch, the kernel adds into a residual (`resid`); with one, the fold does.
        let l = outputs(l).i32(cols as i32).i32(per_split as i32).ptr(part_ptr).ptr(counters);
        self.submit(l.i32((resid && !fold_apart) as i32));
        if let Some(part) = part.filter(|_| fold_apart) {
            let l = Launch::new(self.kernel("fold_chunks"), grid_1d(rows * features)).ptr(part.ptr);
            self.submit(outputs(l).i32(num_chunks as i32).i32(resid as i32));
        }
    }
}

impl LinearOps for CudaBackend {
    fn linear(&self, x: &CudaTensor, w: &CudaWeight, out: &mut CudaTensor) {
        self.linear_group(x, &[w], &mut [out], None);
    }

    /// q/k/v and gate/up: the activations are rounded once for all the tensor-core weights, and
    /// runs of up to three weights of one type and width go as one launch (`linear_group`).
    fn linear_multi(&self, x: &CudaTensor, ws: &[&CudaWeight], outs: &mut [&mut CudaTensor]) {
        assert_eq!(ws.len(), outs.len(), "linear_multi: one output per weight");
        let rounded = (ws.iter().all(|w| w.mma) && x.padded_rows > 0).then(|| self.rounded(x));
        let (mut i, mut outs) = (0, outs);
        while i < ws.len() {
            let same = |w: &&&CudaWeight| (w.ty, w.cols, w.mma) == (ws[i].ty, ws[i].cols, ws[i].mma);
            let len = ws[i..].iter().take(if self.group_linear { 3 } else { 1 }).take_while(same).count();
            let (group, rest) = outs.split_at_mut(len);
            self.linear_group(x, &ws[i..i + len], group, rounded.as_ref());
            (i, outs) = (i + len, rest);
        }
    }

    /// gate|up and the SwiGLU as one launch of the split CUDA-core kernel where it applies
    /// (`swiglu_fuses`: a quantized model's decode and verify steps), else apart: the same bits.
    fn linear_swiglu(&self, x: &CudaTensor, gate: &CudaWeight, up: &CudaWeight, out: &mut CudaTensor) {
        self.fused_swiglu(x, None, gate, up, out);
    }

    /// acc += x · wᵀ with the add in the product's store where the kernel takes it (ops_fused.rs).
    fn linear_add(&self, x: &CudaTensor, w: &CudaWeight, acc: &mut CudaTensor) {
        self.fused_linear_add(x, w, acc);
    }

    /// The products of rms_norm(x), the norm inside the split kernel's blocks where it applies.
    fn norm_linear_multi(
        &self,
        x: &CudaTensor,
        norm: (&CudaWeight, f32),
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
    ) {
        self.fused_norm_linear(x, norm, ws, outs);
    }

    /// `linear_swiglu` of rms_norm(x), the norm inside the split kernel's blocks where it applies.
    fn norm_linear_swiglu(
        &self,
        x: &CudaTensor,
        norm: (&CudaWeight, f32),
        gate: &CudaWeight,
        up: &CudaWeight,
        out: &mut CudaTensor,
    ) {
        self.fused_swiglu(x, Some(norm), gate, up, out);
    }

    fn embed(&self, ids: &[u32], table: &CudaWeight, out: &mut CudaTensor) {
        assert_eq!((out.rows, out.cols), (ids.len(), table.cols), "embed `{}`: shape mismatch", table.name);
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= table.rows) {
            panic!("token id {id} outside `{}`", table.name);
        }
        if out.padded_rows == 0 {
            return;
        }
        let padded = out.padded_rows;
        let step = self.with_step(|s| (s.batch.token_ids == ids && s.padded_rows == padded).then_some(s.ids));
        // Padded rows embed token 0.
        let ids_dev = self.step_meta(step, || ids.iter().copied().chain(std::iter::repeat(0)).take(padded).collect());
        let l = Launch::new(&table.kernels[2], Self::row_blocks(padded))
            .ptr(ids_dev.ptr)
            .ptr(table.ptr)
            .u64(table.row_bytes as u64)
            .ptr(out.ptr())
            .i32(table.cols as i32);
        self.submit(l);
    }

    fn gather_rows(&self, x: &CudaTensor, rows: &[u32], out: &mut CudaTensor) {
        assert_eq!((out.rows, out.cols), (rows.len(), x.cols), "gather_rows: shape mismatch");
        assert!(rows.iter().all(|&r| (r as usize) < x.rows), "gather_rows: row out of range");
        if out.padded_rows == 0 {
            return;
        }
        let padded = out.padded_rows;
        let step = self.with_step(|s| {
            let fits = padded <= s.padded_rows.max(s.batch.logits_rows.len()) && x.padded_rows == s.padded_rows;
            (s.batch.logits_rows == rows && fits).then_some(s.logits_rows)
        });
        // Padded output rows copy padded input rows (or row 0 when the input has none).
        let rows_dev = self.step_meta(step, || {
            (0..padded).map(|i| rows.get(i).copied().unwrap_or(i.min(x.padded_rows - 1) as u32)).collect()
        });
        let l = Launch::new(self.kernel("gather_rows"), Self::row_blocks(padded))
            .ptr(x.ptr())
            .ptr(rows_dev.ptr)
            .ptr(out.ptr())
            .i32(x.cols as i32);
        self.submit(l);
    }
}

#[cfg(test)]
mod tests {
    use super::{decode_split, fold_chunk, kperm_bytes};

    #[test]
    fn long_k_takes_long_fold_chunks() {
        // The default model (K = 576, 1,536) and the 1B's K = 2,048 keep chunks of 256; the 8B's
        // K = 4,096 (4 chunks) and 14,336 (14), and the 1B's down (8,192: 8) take 1,024.
        for (k, kc) in [(576, 256), (1536, 256), (2048, 256), (4064, 256), (4096, 1024), (8192, 1024), (14336, 1024)] {
            assert_eq!(fold_chunk(k, super::FOLD_LONG_FROM), kc, "K = {k}");
        }
        assert_eq!(fold_chunk(14336, usize::MAX), 256);
        assert_eq!(fold_chunk(576, 0), 1024);
    }

    /// The stored element of element k, as `kperm` in kernels/linear_mma.cu computes it.
    fn kperm(k: usize) -> usize {
        let j = (k % 32) / 2;
        (k / 32) * 32 + 2 * (4 * (j % 4) + j / 4) + k % 2
    }

    #[test]
    fn kperm_bytes_moves_each_element_where_the_kernels_read_it() {
        let elements: Vec<u16> = (0..256u16).map(|i| i.wrapping_mul(40503)).collect();
        let bytes: Vec<u8> = elements.iter().flat_map(|e| e.to_le_bytes()).collect();
        let stored = kperm_bytes(&bytes);
        for (k, &e) in elements.iter().enumerate() {
            let s = kperm(k);
            assert_eq!(u16::from_le_bytes([stored[2 * s], stored[2 * s + 1]]), e, "element {k}");
        }
        // Piece p of a group holds step p / 2's half p % 2: positions 2t, 2t + 1 (or 2t + 8, 2t + 9)
        // of that step hold elements 8t + 4 (p / 2) + 2 (p % 2) + {0, 1}.
        for p in 0..4 {
            for t in 0..4 {
                for b in 0..2 {
                    let k = 8 * t + 4 * (p / 2) + 2 * (p % 2) + b;
                    assert_eq!(kperm(k), 8 * p + 2 * t + b, "piece {p}, thread {t}");
                }
            }
        }
        assert_eq!(kperm_bytes(&stored), bytes, "the permutation is its own inverse");
    }

    #[test]
    fn many_rows_keep_whole_k_as_measured() {
        use super::keeps_whole_k;
        // The 8B's q|k|v, o, gate|up (K = 4,096: 4 chunks) and down (14,336: 14), both in chunks
        // of 1,024, at the row counts measured, and K = 14,336 in 56 chunks of 256.
        for (rows, chunks, kc, whole) in [
            (64, 4, 1024, true),
            (64, 14, 1024, false),
            (32, 4, 1024, true),
            (32, 14, 1024, false),
            (16, 4, 1024, false),
            (8, 14, 1024, false),
            (1, 4, 1024, false),
            (128, 14, 1024, true),
            (32, 56, 256, true),
            (16, 56, 256, false),
        ] {
            assert_eq!(keeps_whole_k(rows, chunks, kc), whole, "{rows} rows, {chunks} chunks of {kc}");
        }
    }

    #[test]
    fn decode_splits_fill_whole_waves() {
        // Llama-3.1-8B at one row on 396 slots (132 SMs × 3): gate‖up splits K in 4 (1,792
        // blocks, 5 waves of 4 chunks) instead of one wave and a bit; down (64 tiles, 56 chunks)
        // fills one wave.
        assert_eq!(decode_split(448, 16, 1, 396, 8, 1.0), 4);
        let per = decode_split(64, 56, 1, 396, 8, 1.0);
        assert!(64 * 56usize.div_ceil(per) <= 396, "{per}");
        // Partials cost more with more rows: 64 rows split no more than one row does.
        assert!(decode_split(448, 16, 1, 396, 64, 1.0) >= decode_split(448, 16, 1, 396, 8, 1.0));
        // A weight that fills two waves or more keeps whole chunks per block.
        assert_eq!(decode_split(2004, 16, 1, 396, 8, 1.0), 16);
        assert_eq!(decode_split(100_000, 16, 1, 396, 8, 1.0), 16);
        // Longer chunks: down at 64 rows in 14 chunks of 1,024 on 264 slots (two blocks an SM)
        // splits into more tasks than the 32 tiles alone, each a few chunks.
        let per = decode_split(32, 14, 4, 264, 64, 1.0);
        assert!(per < 14 && 32 * 14usize.div_ceil(per) <= 264, "{per}");
        // Always a valid split.
        for tiles in [1, 7, 64, 396, 397, 2004] {
            for chunks in [1, 2, 16, 56] {
                let p = decode_split(tiles, chunks, 1, 396, 8, 1.0);
                assert!((1..=chunks).contains(&p));
            }
        }
    }
}
