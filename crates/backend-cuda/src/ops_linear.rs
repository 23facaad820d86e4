//! `linear` and its neighbours on the CUDA backend (`LinearOps`): which kernel takes a call —
//! the TMA kernels (kernels/linear_tma.cu, planned by `tma.rs`) or the ones they replaced, kept
//! for measuring (mma.sync and cp.async-fed wgmma, `PLUMB_CUDA_TMA=0`), or the f32 CUDA-core
//! kernels for other formats (`linear_split` for few rows, `linear_wide` for many features at
//! few rows), with the work of the ops around them a launch takes (`Fuse`, ops_fused.rs) — as
//! linear_plan.rs plans it, and `embed`/`gather_rows`.
//! No launch parameter reads the token count except to cover every row or to split K, which
//! changes no bit (the chunk partials are folded in chunk order whatever the split).

use crate::launch::Launch;
use crate::ops_fused::Fuse;
use crate::pool::DeviceBuf;
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d};
use cudarc::driver::{CudaFunction, LaunchConfig};
use plumb_core::LinearOps;
use std::sync::atomic::Ordering;

use crate::linear_plan::{DECODE_BLOCKS, FOLD_SHORT_KC, MMA_DECODE_MAX_ROWS, decode_split, fold_chunk};
pub(crate) use crate::linear_plan::{
    DECODE_FILL, DECODE_WIDE_GROUPS, FOLD_LONG_FROM, MMA_DECODE_SMEM, WGMMA_SMEM, decode_smem, kperm_bytes,
};

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

/// `linear_wide` (kernels/linear.cu): warps a block, features a warp, the most rows, the most bytes
/// of a weight row and of K, and the fewest features it is used for: a weight whose four-feature
/// blocks would run many waves of `linear_split` (the default model's LM head, 49,152 × 576).
const LIN_WIDE_WARPS: usize = 8;
pub(crate) const LIN_WIDE_THREADS: u32 = LIN_WIDE_WARPS as u32 * 32;
const LIN_WIDE_FEAT: usize = 2;
const LIN_WIDE_ROWS: usize = 4;
const LIN_WIDE_ROW_BYTES: usize = 1088;
const LIN_WIDE_MAX_K: usize = 1024;
const LIN_WIDE_FROM: usize = 8192;
/// `linear_replay_q8_0` (kernels/linear_replay.cu): features (threads) a block.
const LIN_REPLAY_FEAT: usize = 32;
/// `linear_tile` (kernels/linear_tile.cu): features a block and its threads.
const LIN_TILE_N: usize = 64;
const LIN_TILE_THREADS: u32 = 256;

/// The dynamic shared memory of `linear_tile` in tiles of `rows` (64 or 32): a 256-element chunk
/// of x and w as four planes of 64 lines each, x's lines `rows` + 8 floats, w's 72 (linear_tile.cu).
pub(crate) const fn tile_smem(rows: usize) -> usize {
    4 * 64 * (rows + 8 + 72) * 4
}

/// The arguments the CUDA-core `linear` kernels of up to three weights begin with (`seg_of` in
/// kernels/linear.cu): x, the weights, their row bytes, the outputs, the rows, each weight's
/// features (0 for a weight not given) and K.
fn segment_args(l: Launch, x: &CudaTensor, ws: &[&CudaWeight], outs: &[&mut CudaTensor]) -> Launch {
    let w = |i: usize| ws.get(i).map_or(0, |w| w.ptr);
    let o = |i: usize| outs.get(i).map_or(0, |o| o.ptr());
    let n = |i: usize| ws.get(i).map_or(0, |w| w.rows) as i32;
    let l = l.ptr(x.ptr()).ptr(w(0)).ptr(w(1)).ptr(w(2)).u64(ws[0].row_bytes as u64);
    l.ptr(o(0)).ptr(o(1)).ptr(o(2)).i32(x.padded_rows as i32).i32(n(0)).i32(n(1)).i32(n(2)).i32(ws[0].cols as i32)
}

/// Whether a `linear_tile` launch of `tiles` tiles of `chunks` 256-element chunks each runs a
/// block a (tile, chunk) on a device of `sms` SMs (one 64-row block an SM fits): where whole-K
/// tiles leave SMs idle and a block a chunk takes fewer rounds of one chunk. The default model's
/// o (72 tiles of three chunks at 512 rows on 132 SMs) and down (72 of six) then fill the SMs;
/// its q|k|v (120 of three) would gain nothing and stays whole, as does any launch of more tiles
/// than SMs.
pub(crate) fn tile_chunk_split(tiles: usize, chunks: usize, sms: usize) -> bool {
    tiles < sms && (tiles * chunks).div_ceil(sms) < chunks
}

/// Whether a CUDA-core `linear` of K `k` over `padded_rows` rows runs on the split kernel (the
/// kernel that also fuses a norm before it and a SwiGLU after: ops_fused.rs).
pub(crate) fn splits_k(padded_rows: usize, k: usize) -> bool {
    padded_rows <= LIN_SPLIT_MAX_ROWS && k.div_ceil(256) <= LIN_SPLIT_MAX_CHUNKS
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
    pub(crate) fn rounded(&self, x: &CudaTensor) -> DeviceBuf {
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
            assert!(!fuse.glu && fuse.rope.is_none(), "linear_tma: fuses a residual add or the norm of x");
            assert!(!(fuse.resid && fuse.norm.is_some()), "linear_tma: the norm inside adds into no residual");
            self.linear_tma(x, ws, outs, rounded, fuse.resid, fuse.norm);
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
        if let Some(kernel) = self.wide_kernel(x, ws, fuse) {
            if let Some(smem) = self.replay_smem(x, w) {
                // A thread a feature, LIN_REPLAY_FEAT features a block (kernels/linear_replay.cu).
                let cfg = LaunchConfig {
                    grid_dim: (w.rows.div_ceil(LIN_REPLAY_FEAT) as u32, 1, 1),
                    block_dim: (LIN_REPLAY_FEAT as u32, 1, 1),
                    shared_mem_bytes: smem as u32,
                };
                let l = Launch::new(self.kernel("linear_replay_q8_0"), cfg).ptr(x.ptr()).ptr(w.ptr);
                let l = l.u64(w.row_bytes as u64).ptr(outs[0].ptr()).i32(x.padded_rows as i32).i32(w.rows as i32);
                return self.submit(l.i32(w.cols as i32).i32(fuse.resid as i32));
            }
            // A block a group of features, or a persistent grid whose blocks walk them (kernels/linear.cu).
            let groups = w.rows.div_ceil(LIN_WIDE_WARPS * LIN_WIDE_FEAT);
            let blocks = match self.wide_grid.load(std::sync::atomic::Ordering::Relaxed) {
                0 => groups,
                grid => groups.min(grid),
            };
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, 1, 1),
                block_dim: (LIN_WIDE_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let l = Launch::new(kernel, cfg).ptr(x.ptr()).ptr(w.ptr).u64(w.row_bytes as u64).ptr(outs[0].ptr());
            let l = l.i32(x.padded_rows as i32).i32(w.rows as i32).i32(w.cols as i32).i32(fuse.resid as i32);
            return self.submit(l);
        }
        let chunks = w.cols.div_ceil(256);
        let split = splits_k(x.padded_rows, w.cols);
        if let Some((kernel, tile_rows)) = self.tile_kernel(x, ws, split, fuse) {
            // Register tiles of 64 features, each weight on whole tiles of its own.
            let blocks: usize = ws.iter().map(|w| w.rows.div_ceil(LIN_TILE_N)).sum();
            let row_tiles = x.padded_rows.div_ceil(tile_rows);
            let split = ws.len() == 1
                && self.tile_split.load(Ordering::Relaxed)
                && tile_chunk_split(blocks * row_tiles, chunks, self.tma.sms);
            let cfg = LaunchConfig {
                grid_dim: (blocks as u32, row_tiles as u32, if split { chunks as u32 } else { 1 }),
                block_dim: (LIN_TILE_THREADS, 1, 1),
                shared_mem_bytes: tile_smem(tile_rows) as u32,
            };
            // Split by chunk: each chunk's sums of a tile in `part`, one arrival counter a tile.
            let part = split.then(|| self.alloc(chunks * x.padded_rows * w.rows * 4));
            let counters = if split { self.arrival_counters(blocks * row_tiles) } else { 0 };
            let l = segment_args(Launch::new(kernel, cfg), x, ws, outs).i32(fuse.resid as i32);
            return self.submit(l.ptr(part.as_ref().map_or(0, |p| p.ptr)).ptr(counters));
        }
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
        self.submit(
            segment_args(Launch::new(kernel, cfg), x, ws, outs)
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

    /// `linear_wide` for this launch where it applies: one weight of many features (`LIN_WIDE_FROM`)
    /// whose rows fit its shared buffers in whole words, few rows, nothing fused but a residual
    /// add, and `PLUMB_CUDA_WIDE_ROWS` not 0.
    fn wide_kernel<'k>(&self, x: &CudaTensor, ws: &[&'k CudaWeight], fuse: Fuse) -> Option<&'k CudaFunction> {
        let w = ws[0];
        let fits = w.row_bytes <= LIN_WIDE_ROW_BYTES && w.row_bytes.is_multiple_of(4) && w.cols <= LIN_WIDE_MAX_K;
        let plain = !fuse.glu && fuse.norm.is_none() && fuse.rope.is_none();
        (self.wide_rows && ws.len() == 1 && plain && fits && x.padded_rows <= LIN_WIDE_ROWS && w.rows >= LIN_WIDE_FROM)
            .then_some(w.wide_kernel.as_ref())
            .flatten()
    }

    /// `linear_tile` for this launch, and its rows a tile, where it applies: rows past the split
    /// kernel's, nothing fused but a residual add, K a multiple of 4, x and the weights 16-byte
    /// aligned (its float4 reads, and `deq4`'s words), and `PLUMB_CUDA_LINEAR_TILE` not 0
    /// (`set_linear_tile`). Under 2, tiles of 32 rows where tiles of 64 would give fewer blocks
    /// than the device has SMs (one block an SM fits). Which tiles changes no element's operations.
    fn tile_kernel<'k>(
        &self,
        x: &CudaTensor,
        ws: &[&'k CudaWeight],
        split: bool,
        fuse: Fuse,
    ) -> Option<(&'k CudaFunction, usize)> {
        let w = ws[0];
        let plain = !fuse.glu && fuse.norm.is_none() && fuse.rope.is_none();
        // 16-byte x rows, and weight rows whose elements `deq4` reads four at a time.
        let aligned = w.cols.is_multiple_of(4)
            && x.ptr().is_multiple_of(16)
            && ws.iter().all(|w| w.ptr.is_multiple_of(16) && w.row_bytes.is_multiple_of(2));
        let mode = self.linear_tile.load(Ordering::Relaxed);
        if mode == 0 || split || !plain || !aligned {
            return None;
        }
        let blocks_64 = ws.iter().map(|w| w.rows.div_ceil(LIN_TILE_N)).sum::<usize>() * x.padded_rows.div_ceil(64);
        let kernels = w.tile_kernels.as_ref()?;
        Some(if mode == 2 && blocks_64 < self.tma.sms { (&kernels[1], 32) } else { (&kernels[0], 64) })
    }

    /// The dynamic shared memory of `linear_replay_q8_0` for a launch `linear_wide` would take, where
    /// the replay applies: a Q8_0 weight, 16-byte aligned rows of the block and x (16-byte pieces
    /// copied and read), within the 48 KiB a block gets without opting in, and the replay on
    /// (unless `PLUMB_CUDA_WIDE_REPLAY=0`). The default model's head at one row takes 21.9 KiB.
    fn replay_smem(&self, x: &CudaTensor, w: &CudaWeight) -> Option<usize> {
        let smem = LIN_REPLAY_FEAT * w.row_bytes + 4 * x.padded_rows * w.cols;
        let aligned = w.ptr.is_multiple_of(16) && x.ptr().is_multiple_of(16) && w.cols.is_multiple_of(4);
        (self.wide_replay.load(Ordering::Relaxed) && w.ty == plumb_core::GgmlType::Q8_0 && aligned && smem <= 48 << 10)
            .then_some(smem)
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

    /// acc += x · wᵀ and rms_norm of the sum: the add in the product's store and the norm apart, or
    /// the add and the norm as one `add_rms_norm` (ops_fused.rs).
    fn linear_add_norm(
        &self,
        x: &CudaTensor,
        w: &CudaWeight,
        acc: &mut CudaTensor,
        norm: (&CudaWeight, f32),
    ) -> Option<CudaTensor> {
        self.fused_linear_add_norm(x, w, acc, norm)
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
    use super::tile_chunk_split;

    #[test]
    fn tiles_split_by_chunk_only_where_whole_k_leaves_sms_idle() {
        // The default model at 512 rows on an H100's 132 SMs: o and down split, q|k|v and
        // gate|up stay whole.
        assert!(tile_chunk_split(72, 3, 132));
        assert!(tile_chunk_split(72, 6, 132));
        assert!(!tile_chunk_split(120, 3, 132));
        assert!(!tile_chunk_split(384, 3, 132));
        // One chunk has nothing to split; a full device gains nothing.
        assert!(!tile_chunk_split(10, 1, 132));
        assert!(!tile_chunk_split(132, 6, 132));
    }
}
