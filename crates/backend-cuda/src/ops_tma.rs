//! `linear` on the TMA kernels (kernels/linear_tma.cu), planned by `tma.rs`: the instance whose
//! row tile holds the rows (or tiles them by 128 or 192), 128 features a task (64 for whole-K
//! calls whose tasks would not cover the SMs: `TmaPlan::feature_tile`), and for few rows K split
//! over blocks as `decode_split` plans it for the instance's resident blocks; up to three weights
//! of one input as one launch, each on whole tiles of its own; and gate|up with the SwiGLU as one
//! launch where its tasks keep whole K (`linear_tma_glu`). Every choice here computes the same
//! bits.

use crate::launch::Launch;
use crate::linear_plan::{FOLD_SHORT_KC, TMA_FOLD_IN_KERNEL_ROWS, decode_split, keeps_whole_k};
use crate::pool::DeviceBuf;
use crate::tma::{
    TMA_GLU_MAX_ROWS, TMA_GLU_XCH_BYTES, TMA_NORM_ROWS, TMA_ROWS, bf16_pair_map, bf16_tile_map, tma_name_cl,
    tma_name_glu, tma_name_ks, tma_name_norm, tma_smem, tma_smem_ks, tma_threads,
};
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d};
use cudarc::driver::LaunchConfig;
use std::sync::atomic::Ordering;

/// How a TMA launch of `rows` rows over weights of `tiles_128` 128-feature tiles and K = `cols`
/// runs: the instance (`i` into `TMA_ROWS`, its `n` rows), the fold chunk `kc` and its
/// `num_chunks`, chunks a split and splits, features a task, CTAs a cluster sharing x (`cl`) and
/// CTAs a cluster splitting each task's K (`ks`: the `_s2` / `_s4` instances; then `splits` is 1).
pub(crate) struct TmaCall {
    pub i: usize,
    pub n: usize,
    pub kc: usize,
    pub num_chunks: usize,
    pub per_split: usize,
    pub splits: usize,
    pub ft: usize,
    pub cl: usize,
    pub ks: usize,
}

/// The TMA kernels' arguments after their four tensor maps, in the kernels' order
/// (kernels/linear_tma.cu): up to three outputs and their weights' features, the rows, K, chunks a
/// split, the split's partials and arrival counters (0: none), the residual add, where a GLU
/// launch writes its rounded copy (0: none), and for the `_norm` instances x (f32), the norm's
/// weight and epsilon (zeros for the others, which never read them).
struct TmaArgs {
    outs: [u64; 3],
    rows: usize,
    features: [usize; 3],
    cols: usize,
    per_split: usize,
    part: u64,
    counters: u64,
    resid: bool,
    xb: u64,
    norm: (u64, u64, f32),
}

impl TmaArgs {
    fn push(&self, l: Launch) -> Launch {
        let [o0, o1, o2] = self.outs;
        let [n0, n1, n2] = self.features.map(|n| n as i32);
        l.ptr(o0)
            .ptr(o1)
            .ptr(o2)
            .i32(self.rows as i32)
            .i32(n0)
            .i32(n1)
            .i32(n2)
            .i32(self.cols as i32)
            .i32(self.per_split as i32)
            .ptr(self.part)
            .ptr(self.counters)
            .i32(self.resid as i32)
            .ptr(self.xb)
            .ptr(self.norm.0)
            .ptr(self.norm.1)
            .f32(self.norm.2)
    }
}

impl CudaBackend {
    /// The plan of a TMA launch (`TmaCall`) of the products alone or gate|up with the SwiGLU
    /// (`glu`); `ks_ok`: whether its instance may split K over a cluster (not with the norm
    /// inside). A free choice: the fold is the same with any split, and many rows keep whole K a
    /// block.
    pub(crate) fn tma_call(&self, rows: usize, tiles_128: usize, cols: usize, glu: bool, ks_ok: bool) -> TmaCall {
        let i = self.tma.kernel(rows, tiles_128).0;
        let n = TMA_ROWS[i];
        let kc = self.fold_chunk(cols);
        let num_chunks = cols.div_ceil(kc);
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
        // K split over a cluster's CTAs, folded in its first: whole K a cluster, on 64-feature
        // tasks (`ksplit_narrow`, 17 to 64 rows) or 128-feature ones.
        let narrow = if ks_ok { self.tma.ksplit_narrow_of(rows, i, num_chunks, glu) } else { 1 };
        if narrow > 1 {
            return TmaCall { i, n, kc, num_chunks, per_split: num_chunks, splits: 1, ft: 64, cl: 1, ks: narrow };
        }
        let ks = if ks_ok { self.tma.ksplit_of(rows, i, num_chunks, num_chunks.div_ceil(per_split), glu) } else { 1 };
        if ks > 1 {
            return TmaCall { i, n, kc, num_chunks, per_split: num_chunks, splits: 1, ft: 128, cl: 1, ks };
        }
        let splits = num_chunks.div_ceil(per_split);
        let ft = if splits == 1 { self.tma.feature_tile(i, rows.div_ceil(n), tiles_128) } else { 128 };
        // Clusters of CTAs sharing x: `tma_cluster`.
        let cl = self.tma.cluster_of(n, ft, splits);
        TmaCall { i, n, kc, num_chunks, per_split, splits, ft, cl, ks }
    }

    /// `linear` of up to three weights of one input on the TMA kernels, `rounded` the input as
    /// `round_bf16` makes it where the caller has it, the product added into the outputs with
    /// `resid`; with `norm` (the norm weight's pointer and epsilon), of rms_norm(x) computed
    /// inside the launch (a `_norm` instance: the caller has checked `tma_norm_fuses`).
    pub(crate) fn linear_tma(
        &self,
        x: &CudaTensor,
        ws: &[&CudaWeight],
        outs: &mut [&mut CudaTensor],
        rounded: Option<&DeviceBuf>,
        resid: bool,
        norm: Option<(u64, f32)>,
    ) {
        let rows = x.padded_rows;
        let tiles_128: usize = ws.iter().map(|w| w.rows.div_ceil(128)).sum();
        let cols = ws[0].cols;
        let TmaCall { i, n, kc, num_chunks, per_split, splits, ft, cl, ks } =
            self.tma_call(rows, tiles_128, cols, false, norm.is_none());
        let features: usize = ws.iter().map(|w| w.rows).sum();
        let tiles: usize = ws.iter().map(|w| w.rows.div_ceil(ft)).sum();
        let part = (splits > 1).then(|| self.alloc(num_chunks * rows * features * 4));
        let wmaps: Vec<_> = ws.iter().map(|w| bf16_tile_map(w.ptr, w.cols, w.rows, w.row_bytes, ft)).collect();
        // The norm inside reads x itself: no rounded copy, and a map of x never read (weight 0's).
        assert!(norm.is_none() || (n, ft, cl) == (TMA_NORM_ROWS, 128, 1), "linear_tma: the norm inside at decode rows");
        let xmap = match norm {
            Some(_) => wmaps[0],
            None => {
                let own = rounded.is_none().then(|| self.rounded(x));
                let input = own.as_ref().or(rounded).expect("rounded above").ptr;
                bf16_tile_map(input, cols, rows, cols * 2, n / cl)
            }
        };
        let tasks = rows.div_ceil(n) * tiles.div_ceil(cl) * splits;
        let (grid, smem) = match ks {
            1 => (self.tma.cluster_grid(i, ft, tasks, cl), tma_smem(n, ft)),
            _ => (self.tma.ks_grid(i, ft, tasks, ks), tma_smem_ks(n, ft, ks, false)),
        };
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (tma_threads(n), 1, 1),
            shared_mem_bytes: smem as u32,
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
        let name = match (norm, ks) {
            (Some(_), _) => tma_name_norm(n, kc, false),
            (None, 1) => tma_name_cl(n, ft, kc, cl),
            (None, _) => tma_name_ks(n, ft, kc, ks, false),
        };
        self.tma_cluster_launches.fetch_add((cl > 1) as u64, Ordering::Relaxed);
        self.tma_ks_launches.fetch_add((ks > 1) as u64, Ordering::Relaxed);
        let l = Launch::new(self.kernel(&name), cfg)
            .cluster((cl * ks) as u32)
            .tensor_map(&xmap)
            .tensor_map(&wmaps[0])
            .tensor_map(m1)
            .tensor_map(m2);
        // Without a fold launch, the kernel adds into a residual (`resid`); with one, the fold does.
        let args = TmaArgs {
            outs: [outs[0].ptr(), o1, o2],
            rows,
            features: [ws[0].rows, n1, n2],
            cols,
            per_split,
            part: part.as_ref().map_or(0, |p| p.ptr),
            counters,
            resid: resid && !fold_apart,
            xb: 0,
            norm: norm.map_or((0, 0, 0.0), |(w, eps)| (x.ptr(), w, eps)),
        };
        self.submit(args.push(l));
        self.tma_norm_launches.fetch_add(norm.is_some() as u64, Ordering::Relaxed);
        if let Some(part) = part.filter(|_| fold_apart) {
            let l = Launch::new(self.kernel("fold_chunks"), grid_1d(rows * features)).ptr(part.ptr);
            self.submit(outputs(l).i32(num_chunks as i32).i32(resid as i32));
        }
    }

    /// silu(x · gateᵀ) · (x · upᵀ) into `out` as one TMA launch (the kernel's `glu`: a task's
    /// warpgroups take the same 64 features of gate and of up), with the rounded copy the down
    /// projection takes where `silu_mul` would write one: whole-K tasks store the SwiGLU of their
    /// sums; split ones write both products' chunk partials, which the last block of a pair (up to
    /// `TMA_FOLD_IN_KERNEL_ROWS` rows) or `fold_chunks_glu` folds and takes the SwiGLU of — silu_mul's
    /// arithmetic on the folds `linear_multi` makes, so its bits. Where the launch `linear_multi`
    /// would make of [gate, up] runs 128-feature tasks a CTA a cluster on at most
    /// `TMA_GLU_MAX_ROWS` rows, and `PLUMB_CUDA_TMA_GLU` is not 0 (`set_tma_glu`); past those rows,
    /// where it runs whole-K tasks of 128 or 192 rows, on the interleaved instances (`_gli`: each
    /// warpgroup stages 32 features of gate and the same 32 of up in alternate 8-row atoms, one
    /// box of `bf16_pair_map` a stage, so a thread holds both sums of its elements; where that map
    /// does not apply, up below gate in memory, the two apart) unless `PLUMB_CUDA_TMA_GLI=0` (`set_tma_gli`);
    /// false where it does not apply, and nothing ran. With `norm` (the norm weight's pointer and
    /// epsilon), of rms_norm(x) computed inside (a `_norm` instance: `TMA_NORM_ROWS` rows).
    pub(crate) fn linear_tma_glu(
        &self,
        x: &CudaTensor,
        gate: &CudaWeight,
        up: &CudaWeight,
        out: &mut CudaTensor,
        rounded: Option<&DeviceBuf>,
        norm: Option<(u64, f32)>,
    ) -> bool {
        let rows = x.padded_rows;
        let same = (gate.ty, gate.rows, gate.cols, gate.row_bytes) == (up.ty, up.rows, up.cols, up.row_bytes);
        // Prefill rows: the interleaved instances.
        let il = rows > TMA_GLU_MAX_ROWS;
        let on = self.tma_glu.load(Ordering::Relaxed) && (!il || self.tma_gli.load(Ordering::Relaxed));
        if !on || !self.tma.enabled || !gate.mma || !up.mma || !same || rows == 0 {
            return false;
        }
        let (cols, n0) = (gate.cols, gate.rows);
        let TmaCall { i, n, kc, num_chunks, per_split, splits, ft, cl, ks } =
            self.tma_call(rows, 2 * n0.div_ceil(128), cols, true, norm.is_none());
        // Clusters (x shared by a pair) only on the interleaved instances.
        if ft != 128 || (cl != 1 && !il) || (norm.is_some() && n != TMA_NORM_ROWS) {
            return false;
        }
        if il && (n < 128 || splits != 1 || norm.is_some()) {
            return false;
        }
        // Interleaved: gate and up in one rank-4 map, both staged by one box a stage (whole
        // groups of 8 features, 16-byte multiples apart; else the two apart). `up_first`: the
        // map's first weight, the one lower in memory, is up.
        let (gmap, umap, up_first) = if il {
            if gate.row_bytes != up.row_bytes {
                return false;
            }
            let Some((pair, up_first)) = bf16_pair_map(gate.ptr, up.ptr, cols, n0, gate.row_bytes) else {
                return false;
            };
            (pair, pair, up_first)
        } else {
            let g = bf16_tile_map(gate.ptr, cols, n0, gate.row_bytes, 64);
            (g, bf16_tile_map(up.ptr, cols, n0, up.row_bytes, 64), false)
        };
        // The norm inside reads x itself: no rounded copy, and a map of x never read (gate's).
        let xmap = match norm {
            Some(_) => gmap,
            None => {
                let own = rounded.is_none().then(|| self.rounded(x));
                let input = own.as_ref().or(rounded).expect("rounded above").ptr;
                bf16_tile_map(input, cols, rows, cols * 2, n / cl)
            }
        };
        // A task is a pair of 64-feature tiles, one of gate and one of up (in clusters of two, a
        // task is two such pairs, one a CTA).
        let pairs = n0.div_ceil(64);
        let tasks = rows.div_ceil(n) * pairs.div_ceil(cl) * splits;
        let (grid, smem) = match ks {
            1 => (self.tma.cluster_grid(i, ft, tasks, cl), tma_smem(n, ft) + if il { 0 } else { TMA_GLU_XCH_BYTES }),
            _ => (self.tma.ks_grid(i, 128, tasks, ks), tma_smem_ks(n, 128, ks, true)),
        };
        let cfg = LaunchConfig {
            grid_dim: (grid as u32, 1, 1),
            block_dim: (tma_threads(n), 1, 1),
            shared_mem_bytes: smem as u32,
        };
        let part = (splits > 1).then(|| self.alloc(num_chunks * rows * 2 * n0 * 4));
        let fold_apart = part.is_some() && rows > TMA_FOLD_IN_KERNEL_ROWS;
        let counters = if fold_apart { 0 } else { self.arrival_counters(pairs) };
        // As silu_mul: with tensor-core weights loaded, the rounded copy the down projection takes.
        let round = self.mma_weights.load(Ordering::Relaxed) && n0.is_multiple_of(32);
        let xb = round.then(|| self.alloc(rows * n0 * 2));
        let xb_ptr = xb.as_ref().map_or(0, |b| b.ptr);
        let part_ptr = part.as_ref().map_or(0, |p| p.ptr);
        let name = match (norm, ks) {
            (Some(_), _) => tma_name_norm(n, kc, true),
            (None, 1) => tma_name_glu(n, kc, il, cl),
            (None, _) => tma_name_ks(n, 128, kc, ks, true),
        };
        let l = Launch::new(self.kernel(&name), cfg)
            .cluster((cl * ks) as u32)
            .tensor_map(&xmap)
            .tensor_map(&gmap)
            .tensor_map(&umap)
            .tensor_map(&umap);
        let args = TmaArgs {
            outs: [out.ptr(), 0, 0],
            rows,
            // n2 of a GLU launch: under GLU_IL, whether the pair map holds up first.
            features: [n0, n0, up_first as usize],
            cols,
            per_split,
            part: part_ptr,
            counters,
            resid: false,
            xb: xb_ptr,
            norm: norm.map_or((0, 0, 0.0), |(w, eps)| (x.ptr(), w, eps)),
        };
        self.submit(args.push(l));
        if fold_apart {
            let l = Launch::new(self.kernel("fold_chunks_glu"), grid_1d(rows * n0)).ptr(part_ptr).ptr(out.ptr());
            self.submit(l.ptr(xb_ptr).i32(rows as i32).i32(n0 as i32).i32(num_chunks as i32));
        }
        if let Some(buf) = xb {
            self.keep_rounded(out, buf);
        }
        for w in [gate, up] {
            self.work.add((w.rows * w.row_bytes) as u64, crate::measure::linear_flops(x.rows, w.rows, w.cols));
        }
        self.tma_glu_launches.fetch_add(1, Ordering::Relaxed);
        self.tma_gli_launches.fetch_add(il as u64, Ordering::Relaxed);
        self.tma_cluster_launches.fetch_add((cl > 1) as u64, Ordering::Relaxed);
        self.tma_ks_launches.fetch_add((ks > 1) as u64, Ordering::Relaxed);
        self.tma_norm_launches.fetch_add(norm.is_some() as u64, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::TmaArgs;
    use crate::launch::test_launch;

    #[test]
    fn tma_args_go_in_the_kernels_order() {
        // The order of kernels/linear_tma.cu's parameters after the maps, written out as the
        // launches that ran on the GPU in session 22 wrote them.
        let args = TmaArgs {
            outs: [0x10, 0x20, 0x30],
            rows: 8,
            features: [576, 192, 64],
            cols: 4096,
            per_split: 2,
            part: 0x40,
            counters: 0x50,
            resid: true,
            xb: 0x60,
            norm: (0x70, 0x80, 1e-5),
        };
        let want = test_launch(1, 4).ptr(0x10).ptr(0x20).ptr(0x30).i32(8).i32(576).i32(192).i32(64).i32(4096);
        let want = want.i32(2).ptr(0x40).ptr(0x50).i32(1).ptr(0x60).ptr(0x70).ptr(0x80).f32(1e-5);
        assert_eq!(args.push(test_launch(1, 4)).difference(&want), None);
    }
}
