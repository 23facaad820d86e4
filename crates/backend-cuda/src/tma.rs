//! The warp-specialised tensor-core `linear` (`linear_tma_bf16_n{8,16,32,64,128,192}` and the
//! 64-feature `linear_tma_bf16_n{16,32,64}_f64` in kernels/linear_tma.cu, each also as `_k1024`
//! for weights folded in chunks of 1,024): which instance takes a call, its shared memory and
//! resident blocks,
//! and the TMA tensor maps it reads its operands through — a 2-d bf16 matrix read in boxes of 64
//! elements of K by 128 (weights) or N (activation) rows, 128-byte swizzled, with zeros past its
//! last row and column, encoded on the host per launch (a driver call that touches no device
//! state) and passed to the kernel by value.

use crate::{CudaError, driver};
use cudarc::driver::{CudaContext, CudaFunction, sys};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

pub(crate) use crate::tma_ksplit::{
    KS_AUTO, TMA_KS, TMA_KS_NARROW_ROWS, ks_auto, ks_of, ks_setting, tma_name_ks, tma_smem_ks,
};

/// Activation rows per block of each instance (the wgmma N); a call takes the smallest that holds
/// its rows, or tiles more than 128 rows by 128 or 192 (`tma_kernel`).
pub(crate) const TMA_ROWS: [usize; 6] = [8, 16, 32, 64, 128, 192];
/// Threads of a block of `n` rows: two consumer warpgroups and one producer warp, or for 192 rows
/// a producer warpgroup, whose registers the consumers take (`tma_threads` in the kernel).
pub(crate) fn tma_threads(n: usize) -> u32 {
    if n > 128 { 384 } else { 288 }
}

/// The time of a 192-row task in 128-row tasks'. A stage of either takes in 128 weight rows and
/// its activation rows of 64 K, and an SM's intake binds both (~37 bytes a cycle for plumb's
/// 128 x 128 tiles and cuBLASLt's alike, docs/cuda-gemm-notes.md): 40 KB against 32 KB, 1.25.
/// Measured on the H200 at the 8B's shapes and 2,048 rows (persistent blocks, many waves): 1.31
/// for the LM head, 1.36 for gate|up (receipts/gemm-cuda-llama8b-prefill-tile-192.txt).
const TASK_COST_192: f64 = 1.36;
/// The row tiles that also have an instance of 64 features a task (the two warpgroups share the
/// features and split the rows, so at least 16 rows).
pub(crate) const TMA_NARROW_ROWS: [usize; 3] = [16, 32, 64];

/// The instance for `rows` rows among those of at most `max_rows` rows, for a weight of `tiles`
/// tiles of 128 features on a device keeping `slots` blocks of the 128- and 192-row instances
/// resident: (index into `TMA_ROWS`, kernel name). The smallest that holds the rows up to 128,
/// else the largest allowed, which tiles them — where both the 128- and 192-row tiles are allowed,
/// the one with the less modelled time: waves of tasks times a task's time (`TASK_COST_192`), ties
/// to 128. Waves matter: 512 rows of q|k|v are 192 tasks of 128 rows (two waves on 132 SMs) or 144
/// of 192 (two longer ones), measured 70.8 against 97.0 µs. A free choice: every instance computes
/// the same bits.
pub(crate) fn tma_kernel(rows: usize, max_rows: usize, tiles: usize, slots: [usize; 2]) -> (usize, String) {
    let last = TMA_ROWS.iter().rposition(|&n| n <= max_rows).unwrap_or(0);
    let mut i = TMA_ROWS[..=last].iter().position(|&n| rows <= n).unwrap_or(last);
    let waves = |n: usize, slots: usize| (tiles * rows.div_ceil(n)).div_ceil(slots.max(1)) as f64;
    if TMA_ROWS[i] == 192 && waves(192, slots[1]) * TASK_COST_192 >= waves(128, slots[0]) {
        i -= 1;
    }
    (i, format!("linear_tma_bf16_n{}", TMA_ROWS[i]))
}

/// The name of the instance of `n` rows and `ft` features a task for a weight folded in chunks
/// of `kc` (256 or 1,024: `ops_linear::fold_chunk`).
pub(crate) fn tma_name(n: usize, ft: usize, kc: usize) -> String {
    tma_name_cl(n, ft, kc, 1)
}

/// `tma_name` of the instance whose CTAs run in clusters of `cl` (`_c2`: x shared by a pair).
pub(crate) fn tma_name_cl(n: usize, ft: usize, kc: usize, cl: usize) -> String {
    let f = if ft == 64 { "_f64" } else { "" };
    let c = if cl == 2 { "_c2" } else { "" };
    format!("linear_tma_bf16_n{n}{f}{c}{}", kc_suffix(kc))
}

/// The suffix of the instances whose weights fold in chunks of `kc` (1,024: `_k1024`; 256: none).
pub(crate) fn kc_suffix(kc: usize) -> &'static str {
    if kc == 1024 { "_k1024" } else { "" }
}

/// The name of the GLU instance (gate|up with the SwiGLU, `ops_tma::linear_tma_glu`) of `n` rows
/// for a weight folded in chunks of `kc`: up to `TMA_GLU_MAX_ROWS` the up sums exchanged
/// (`_glu`), or `interleaved` (prefill rows: `n` of 128 or 192, whole K), gate's and up's rows
/// staged interleaved by 8 (`_gli`, `bf16_pair_map`), in clusters of `cl` CTAs sharing x (`_c2`).
pub(crate) fn tma_name_glu(n: usize, kc: usize, interleaved: bool, cl: usize) -> String {
    let g = if interleaved { "_gli" } else { "_glu" };
    let c = if cl == 2 { "_c2" } else { "" };
    format!("linear_tma_bf16_n{n}{g}{c}{}", kc_suffix(kc))
}

/// The CTAs a cluster of a TMA `linear` launch of `rows` rows on the instance of `n`, with `ft`
/// features a task and `splits` splits of K: 2 sharing x (the `_c2` instances: 128 features,
/// whole K), `decode` the switch of 64-row launches and `prefill` that of 128- and 192-row ones.
/// (Clusters of four, two row tiles by two feature tiles sharing x and the weight tile, ran at
/// 0.38-0.44 of cuBLASLt at 2,048 rows against 0.61-0.81 in pairs, pp2048 18,974 / 19,420
/// against 29,490 / 30,265, on an H100: receipts/ab/session34; removed.)
pub(crate) fn tma_cluster(decode: bool, prefill: bool, n: usize, ft: usize, splits: usize) -> usize {
    let on = if n == 64 { decode } else { prefill && n >= 128 };
    if on && ft == 128 && splits == 1 { 2 } else { 1 }
}

/// Dynamic shared memory of the instance of `n` rows and `ft` features: its stages (`tma_stages`
/// in the kernel) of an ft × 64 weight tile and an n × 64 activation tile, plus the slack that
/// lets the kernel align them to 1,024 bytes (the 128-byte swizzle's period).
pub(crate) fn tma_smem(n: usize, ft: usize) -> usize {
    let stages = match (n, ft) {
        (_, 64) | (128 | 8, _) => 6,
        (64, _) => 4,
        _ => 5,
    };
    stages * (ft * 128 + n * 128) + 1024
}

/// Rows of the instances that compute rms_norm(x) inside (the `_norm` instances: decode rows).
pub(crate) const TMA_NORM_ROWS: usize = 8;

/// The name of the instance of `n` rows with the norm inside (`TMA_NORM_ROWS`) for a weight
/// folded in chunks of `kc`: of the products alone, or with `glu` of gate|up with the SwiGLU.
pub(crate) fn tma_name_norm(n: usize, kc: usize, glu: bool) -> String {
    let g = if glu { "_glu" } else { "" };
    format!("linear_tma_bf16_n{n}{g}_norm{}", kc_suffix(kc))
}

/// The most rows of a GLU launch whose warpgroups exchange the up sums (`_glu`,
/// `ops_tma::linear_tma_glu`); more run the interleaved instances (`_gli`) or the two products
/// and `silu_mul`. On an H100 the 8B's gate|up with the exchange at 2,048 rows took 1,246 µs a
/// launch against ~860 for the products and 171 for `silu_mul` (pp2048 23,840 / 23,931 tokens/s
/// against 25,036 / 24,599; session 22, receipts/ab/session22/h100-call3-glu): the 192-row tile's
/// store, silu_mul's division and exponential on one warpgroup while the tensor cores wait, cost
/// more than the launch. At one row it won (tg32 163.8 / 163.7 against 161.8 / 161.4).
pub(crate) const TMA_GLU_MAX_ROWS: usize = 64;

/// The shared memory a GLU launch (`ops_tma::linear_tma_glu`) adds past the stages: 16 words of
/// each of the 128 threads of a warpgroup (`GLU_XCH` in the kernel), for the up sums warpgroup 1
/// hands to warpgroup 0.
pub(crate) const TMA_GLU_XCH_BYTES: usize = 16 * 128 * 4;

/// The shared memory a TMA instance is launched with, from its name (None for other kernels).
pub(crate) fn tma_smem_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("linear_tma_bf16_n")?;
    let rest = rest.strip_suffix("_k1024").unwrap_or(rest);
    let rest = rest.strip_suffix("_norm").unwrap_or(rest);
    let rest = rest.strip_suffix("_c2").unwrap_or(rest);
    let rest = rest.strip_suffix("_glu").or_else(|| rest.strip_suffix("_gli")).unwrap_or(rest);
    let (n, ft) = match rest.strip_suffix("_f64") {
        Some(n) => (n, 64),
        None => (rest, 128),
    };
    Some(tma_smem(n.parse().ok()?, ft))
}

/// How tensor-core `linear` runs on this device: whether on the TMA kernels (default; off with
/// `PLUMB_CUDA_TMA=0`: mma.sync for few rows, cp.async-fed wgmma for many, the kernels they
/// replaced, kept for measuring against), each instance's resident blocks on the whole device
/// (SMs × blocks per SM at its shared memory and registers: what `ops_linear::decode_split` plans the
/// split of K with, and the persistent grid), and whether blocks walk several tasks (default;
/// `PLUMB_CUDA_TMA_PERSIST=0` launches one block per task). Two more switches exist for
/// measuring the choices against each other: `PLUMB_CUDA_TMA_ROWS=N` keeps to the instances of at
/// most N rows (more rows tile by the largest), `PLUMB_CUDA_TMA_SPLITS=S` splits K in S (at most
/// one split per chunk) for every call of up to 64 rows instead of `decode_split`'s choice, and
/// `PLUMB_CUDA_TMA_NARROW=0` keeps 128-feature tasks where whole-K tasks of 128 features would
/// leave SMs idle (`narrow`). All compute the same bits.
#[derive(Debug)]
pub(crate) struct TmaPlan {
    pub(crate) enabled: bool,
    pub(crate) sms: usize,
    pub(crate) slots: [usize; TMA_ROWS.len()],
    /// Resident blocks of the 64-feature instances (`TMA_NARROW_ROWS`; 0 for the others).
    pub(crate) slots_narrow: [usize; TMA_ROWS.len()],
    pub(crate) narrow: bool,
    pub(crate) persistent: bool,
    pub(crate) max_rows: usize,
    pub(crate) splits: Option<usize>,
    /// Whether the device launches clusters (`CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH`; the CPU
    /// emulator did not): without them the cluster switches below stay off.
    pub(crate) cluster_launch: bool,
    /// Whether 64-row whole-K launches run in clusters of two sharing x (`tma_cluster`): off
    /// unless `PLUMB_CUDA_TMA_CLUSTER=1` (the same bits). On the H200 the 8B's gate|up at 64 rows
    /// took 98 µs in clusters and 71 µs alone, every other shape the same (session 16); with
    /// the remote arrival's fence gone (session 33) an H100's 64 requests ran 6,169 / 6,155
    /// tokens/s steady in clusters against 6,197 / 6,212 alone.
    pub(crate) cluster: AtomicBool,
    /// Whether 128- and 192-row whole-K launches (prefill) run in clusters of two sharing x: on
    /// unless `PLUMB_CUDA_TMA_CLUSTER_PREFILL=0` (the same bits). A prefill product reads each
    /// stage's weight tile and the row tile's activations from L2, and Nsight Compute put the L2
    /// at 70-77% of its peak in the 8B's 2,048-row products on an H100 (session 31); a pair
    /// copies x once instead of twice. On an H100 the 8B's pp2048 went from 27,300-27,400 to
    /// 30,300-30,600 tokens/s, its gate|up at 2,048 rows from 941 to 743 µs (session 33).
    pub(crate) cluster_prefill: AtomicBool,
    /// The K split over a cluster's CTAs at decode rows (`tma_name_ks`: rank 0 folds the others'
    /// chunk sums as they come through distributed shared memory, where a split K otherwise
    /// writes every chunk's partials to global memory and folds them in a launch of its own):
    /// 0 (off, the default until the decode steps are timed with it), `KS_AUTO` (`ks_auto`'s
    /// choice: `PLUMB_CUDA_TMA_KSPLIT=auto`), or 2 or 4 CTAs a cluster for every call of up to 64
    /// rows whose K has that many chunks or more (`PLUMB_CUDA_TMA_KSPLIT=2|4`, for measuring).
    /// The same bits.
    pub(crate) ksplit: AtomicUsize,
    /// Resident blocks of the K-split instances (`TMA_KS`) of 8, 16, 32 and 64 rows.
    pub(crate) slots_ks: [[usize; TMA_KS.len()]; 4],
    /// The K split over a cluster on 64-feature tasks for plain products of 17 to 64 rows (the
    /// `_f64_s2` / `_f64_s4` instances): 0 (off, the default: not yet measured on a GPU) or 2 or
    /// 4 CTAs a cluster for every such call whose K has that many chunks
    /// (`PLUMB_CUDA_TMA_KSPLIT_NARROW=2|4`). At those rows main runs q|k|v and o whole K on
    /// 64-feature tasks, too few to fill the SMs (o: 64 tasks on 132), and down split K with every
    /// chunk's partials through global memory and a fold launch; this gives each 64-feature task
    /// ks CTAs and folds their sums in rank 0. The same bits (`ksplit`'s fold).
    pub(crate) ksplit_narrow: AtomicUsize,
    /// Resident blocks of those instances (`TMA_KS_NARROW_ROWS` by `TMA_KS`).
    pub(crate) slots_ks_narrow: [[usize; TMA_KS.len()]; TMA_KS_NARROW_ROWS.len()],
}

impl TmaPlan {
    pub(crate) fn new(ctx: &CudaContext, kernels: &HashMap<String, CudaFunction>) -> Result<TmaPlan, CudaError> {
        use cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH as CLUSTERS;
        use cudarc::driver::sys::CUdevice_attribute_enum::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT as SMS;
        let sms = ctx.attribute(SMS).map_err(driver("reading the number of SMs"))? as usize;
        let cluster_launch = ctx.attribute(CLUSTERS).map_err(driver("reading whether clusters launch"))? == 1;
        let resident = |n: usize, ft: usize| -> Result<usize, CudaError> {
            let per_sm = kernels[&tma_name(n, ft, 256)]
                .occupancy_max_active_blocks_per_multiprocessor(tma_threads(n), tma_smem(n, ft), None)
                .map_err(driver("reading the TMA kernel's occupancy"))?;
            Ok(sms * per_sm.max(1) as usize)
        };
        let (mut slots, mut slots_narrow) = ([0; TMA_ROWS.len()], [0; TMA_ROWS.len()]);
        for (i, &n) in TMA_ROWS.iter().enumerate() {
            slots[i] = resident(n, 128)?;
            if TMA_NARROW_ROWS.contains(&n) {
                slots_narrow[i] = resident(n, 64)?;
            }
        }
        let resident_ks = |n: usize, ft: usize, ks: usize| -> Result<usize, CudaError> {
            let per_sm = kernels[&tma_name_ks(n, ft, 256, ks, false)]
                .occupancy_max_active_blocks_per_multiprocessor(tma_threads(n), tma_smem_ks(n, ft, ks, false), None)
                .map_err(driver("reading the K-split kernel's occupancy"))?;
            Ok(sms * per_sm.max(1) as usize)
        };
        let mut slots_ks = [[0; TMA_KS.len()]; 4];
        for (i, row) in slots_ks.iter_mut().enumerate() {
            for (j, &ks) in TMA_KS.iter().enumerate() {
                row[j] = resident_ks(TMA_ROWS[i], 128, ks)?;
            }
        }
        let mut slots_ks_narrow = [[0; TMA_KS.len()]; TMA_KS_NARROW_ROWS.len()];
        for (i, row) in slots_ks_narrow.iter_mut().enumerate() {
            for (j, &ks) in TMA_KS.iter().enumerate() {
                row[j] = resident_ks(TMA_KS_NARROW_ROWS[i], 64, ks)?;
            }
        }
        let ksplit_narrow = ks_setting("PLUMB_CUDA_TMA_KSPLIT_NARROW", false)?;
        let ksplit = ks_setting("PLUMB_CUDA_TMA_KSPLIT", true)?;
        let off = |name| std::env::var(name).is_ok_and(|v| v == "0");
        let number = |name| std::env::var(name).ok().and_then(|v| v.parse::<usize>().ok()).filter(|&v| v > 0);
        Ok(TmaPlan {
            enabled: !off("PLUMB_CUDA_TMA"),
            sms,
            slots,
            slots_narrow,
            narrow: !off("PLUMB_CUDA_TMA_NARROW"),
            persistent: !off("PLUMB_CUDA_TMA_PERSIST"),
            max_rows: number("PLUMB_CUDA_TMA_ROWS").unwrap_or(192),
            splits: number("PLUMB_CUDA_TMA_SPLITS"),
            cluster_launch,
            cluster: AtomicBool::new(cluster_launch && std::env::var("PLUMB_CUDA_TMA_CLUSTER").is_ok_and(|v| v == "1")),
            cluster_prefill: AtomicBool::new(
                cluster_launch && std::env::var("PLUMB_CUDA_TMA_CLUSTER_PREFILL").map_or(true, |v| v != "0"),
            ),
            ksplit: AtomicUsize::new(if cluster_launch { ksplit } else { 0 }),
            slots_ks,
            ksplit_narrow: AtomicUsize::new(if cluster_launch { ksplit_narrow } else { 0 }),
            slots_ks_narrow,
        })
    }

    /// The instance that takes `rows` rows of a weight of `tiles` 128-feature tiles: (index into
    /// `TMA_ROWS`, kernel name).
    pub(crate) fn kernel(&self, rows: usize, tiles: usize) -> (usize, String) {
        let at = |n: usize| TMA_ROWS.iter().position(|&r| r == n).map_or(0, |i| self.slots[i]);
        tma_kernel(rows, self.max_rows, tiles, [at(128), at(192)])
    }

    /// The feature tile of a whole-K call of `row_tiles` row tiles on instance `i` over `tiles`
    /// tiles of 128 features: 64 where the 128-feature tasks would leave SMs without one and a
    /// 64-feature instance exists (more tasks, each reading its weight rows at one SM's pace),
    /// else 128. A free choice: every instance computes the same bits.
    pub(crate) fn feature_tile(&self, i: usize, row_tiles: usize, tiles: usize) -> usize {
        let narrow = self.narrow && self.slots_narrow[i] > 0 && row_tiles * tiles < self.sms;
        if narrow { 64 } else { 128 }
    }

    /// Blocks to launch for `tasks` tasks of instance `i` with `ft` features a task.
    pub(crate) fn grid(&self, i: usize, ft: usize, tasks: usize) -> usize {
        let slots = if ft == 64 { self.slots_narrow[i] } else { self.slots[i] };
        if self.persistent { tasks.min(slots) } else { tasks }
    }

    /// `tma_cluster` under this plan's switches.
    pub(crate) fn cluster_of(&self, n: usize, ft: usize, splits: usize) -> usize {
        let on = |b: &AtomicBool| b.load(Ordering::Relaxed);
        tma_cluster(on(&self.cluster), on(&self.cluster_prefill), n, ft, splits)
    }

    /// The K split over a cluster for a call of `rows` rows on instance `i` over `num_chunks`
    /// chunks of K that would otherwise run `splits` splits (`glu`: gate|up with the SwiGLU): under
    /// `KS_AUTO`, `ks_auto`'s; under a forced split, it where the instance has 64 rows or fewer and
    /// K that many chunks; else 1.
    pub(crate) fn ksplit_of(&self, rows: usize, i: usize, num_chunks: usize, splits: usize, glu: bool) -> usize {
        let ks = match self.ksplit.load(Ordering::Relaxed) {
            KS_AUTO => ks_auto(rows, TMA_ROWS[i], splits, glu),
            ks if TMA_ROWS[i] <= 64 => ks,
            _ => 1,
        };
        if ks > 1 && num_chunks >= ks { ks } else { 1 }
    }

    /// The K split over a cluster on 64-feature tasks (`ksplit_narrow`) for a call of `rows`
    /// rows on instance `i` over `num_chunks` chunks of K, `glu` gate|up with the SwiGLU (never
    /// split so): the setting where the instance has such instances and the call more than 16
    /// rows and K that many chunks, else 1.
    pub(crate) fn ksplit_narrow_of(&self, rows: usize, i: usize, num_chunks: usize, glu: bool) -> usize {
        let ks = self.ksplit_narrow.load(Ordering::Relaxed);
        let fits = TMA_KS_NARROW_ROWS.contains(&TMA_ROWS[i]) && rows > 16 && !glu && num_chunks >= ks;
        if ks > 1 && fits { ks } else { 1 }
    }

    /// The grid of `tasks` tasks of instance `i` with `ft` features a task, each taken by a
    /// cluster of `ks` CTAs splitting its K: whole clusters, as many as stay resident where blocks
    /// walk tasks.
    pub(crate) fn ks_grid(&self, i: usize, ft: usize, tasks: usize, ks: usize) -> usize {
        let j = TMA_KS.iter().position(|&k| k == ks).expect("a K split with instances");
        let slots = match ft {
            64 => {
                let r = TMA_KS_NARROW_ROWS.iter().position(|&n| n == TMA_ROWS[i]).expect("a narrow K-split instance");
                self.slots_ks_narrow[r][j]
            }
            _ => self.slots_ks[i][j],
        };
        let clusters = if self.persistent { tasks.min((slots / ks).max(1)) } else { tasks };
        clusters * ks
    }

    /// The grid of `tasks` cluster tasks in clusters of `cl` CTAs: `grid` of their CTAs, whole
    /// clusters.
    pub(crate) fn cluster_grid(&self, i: usize, ft: usize, tasks: usize, cl: usize) -> usize {
        if cl == 1 { self.grid(i, ft, tasks) } else { cl * tasks.min(self.grid(i, ft, tasks * cl) / cl) }
    }
}

/// The tensor map of a row-major bf16 matrix of `rows` rows of `k` elements, `row_bytes` apart,
/// at device address `ptr`, read in boxes of 64 × `box_rows`.
///
/// # Panics
/// If the driver refuses the map (an address or stride TMA cannot take: they are 16-byte
/// multiples for every tensor-core weight and rounded activation), like any in-op device failure.
pub(crate) fn bf16_tile_map(ptr: u64, k: usize, rows: usize, row_bytes: usize, box_rows: usize) -> sys::CUtensorMap {
    let map = encode_bf16_map(ptr, &[k as u64, rows as u64], &[row_bytes as u64], &[64, box_rows as u32]);
    map.unwrap_or_else(|r| {
        panic!("encoding a TMA map of {rows} x {k} bf16 at {ptr:#x}, rows {row_bytes} bytes apart: {r:?}")
    })
}

/// The rank-4 map the interleaved GLU (`_gli` instances) stages a task's weights with: gate's
/// and up's `rows` rows of `k` elements (`row_bytes` apart each) seen as (k, 8 rows, which
/// weight, group of 8 features), so one box of 64 × 8 × 2 × 8 lands, one 1,024-byte swizzle atom
/// after another, the first weight's 8 rows of a group, the other's same 8, then the next
/// group's: the layout the kernel's accumulator pairs need, in one copy a stage instead of
/// sixteen. The first weight is the one lower in memory (a stride is unsigned): the bool says
/// whether that is up (the kernel then reads its pairs the other way). None where the two cannot
/// be one tensor of TMA: not a multiple of 16 bytes apart, rows not whole groups of 8, or the
/// driver refusing the map.
pub(crate) fn bf16_pair_map(
    gate: u64,
    up: u64,
    k: usize,
    rows: usize,
    row_bytes: usize,
) -> Option<(sys::CUtensorMap, bool)> {
    let (first, apart) = (gate.min(up), gate.abs_diff(up));
    if apart == 0 || !apart.is_multiple_of(16) || !rows.is_multiple_of(8) || !row_bytes.is_multiple_of(16) {
        return None;
    }
    let dims = [k as u64, 8, 2, (rows / 8) as u64];
    let strides = [row_bytes as u64, apart, 8 * row_bytes as u64];
    encode_bf16_map(first, &dims, &strides, &[64, 8, 2, 8]).ok().map(|m| (m, up < gate))
}

/// `cuTensorMapEncodeTiled` of bf16 elements at `ptr`: dims innermost first, the byte strides of
/// every dimension past the first, boxes of 64 elements (128 bytes, the swizzle's span) by the
/// rest, 128-byte swizzle, no fill past the tensor but zeros.
fn encode_bf16_map(ptr: u64, dims: &[u64], strides: &[u64], boxes: &[u32]) -> Result<sys::CUtensorMap, sys::CUresult> {
    assert!(dims.len() == boxes.len() && strides.len() + 1 == dims.len() && dims.len() <= 5, "a TMA map's shape");
    let mut map = sys::CUtensorMap { opaque: [0; 16] };
    let elem_strides = [1u32; 5];
    // SAFETY: every pointer argument points at a live local array of the length the rank asks
    // for (checked above); `ptr` is a device address the driver only records in the map.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map,
            sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            dims.len() as u32,
            ptr as *mut std::ffi::c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem_strides.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    if r == sys::CUresult::CUDA_SUCCESS { Ok(map) } else { Err(r) }
}

/// The shared memory an instance is launched with (its kernel attribute): `tma_smem_of`, plus
/// the exchange of a GLU instance (`linear_tma_glu`).
pub(crate) fn tma_smem_max_of(name: &str) -> Option<usize> {
    let glu = name.contains("_glu");
    if let Some((n, ft, ks)) = ks_of(name) {
        return Some(tma_smem_ks(n, ft, ks, glu));
    }
    Some(tma_smem_of(name)? + if glu { TMA_GLU_XCH_BYTES } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::{TMA_ROWS, tma_kernel, tma_name, tma_smem, tma_smem_of};

    #[test]
    fn instances_are_sized_by_their_name() {
        assert_eq!(tma_smem_of("linear_tma_bf16_n64"), Some(tma_smem(64, 128)));
        assert_eq!(tma_smem_of("linear_tma_bf16_n64_f64"), Some(6 * (64 * 128 + 64 * 128) + 1024));
        assert_eq!(tma_smem_of("linear_tma_bf16_n64_f64_k1024"), tma_smem_of("linear_tma_bf16_n64_f64"));
        assert_eq!(tma_smem_of(&tma_name(32, 128, 1024)), Some(tma_smem(32, 128)));
        assert_eq!(tma_name(16, 64, 256), "linear_tma_bf16_n16_f64");
        assert_eq!(super::tma_name_cl(64, 128, 1024, 2), "linear_tma_bf16_n64_c2_k1024");
        assert_eq!(tma_smem_of("linear_tma_bf16_n64_c2_k1024"), Some(tma_smem(64, 128)));
        // Clusters share x only where a launch is whole-K 128-feature tasks of 64 rows (the
        // decode switch) or of 128 and 192 rows (the prefill one).
        assert_eq!(super::tma_cluster(true, false, 64, 128, 1), 2);
        assert_eq!(super::tma_cluster(false, true, 192, 128, 1), 2);
        assert_eq!(super::tma_cluster(false, true, 128, 128, 1), 2);
        for (on, n, ft, splits) in [(false, 64, 128, 1), (true, 32, 128, 1), (true, 64, 64, 1), (true, 64, 128, 2)] {
            assert_eq!(super::tma_cluster(on, false, n, ft, splits), 1);
        }
        for (n, ft, splits) in [(64, 128, 1), (32, 128, 1), (192, 64, 1), (128, 128, 2)] {
            assert_eq!(super::tma_cluster(false, true, n, ft, splits), 1);
        }
        assert_eq!(super::tma_name_glu(192, 1024, true, 2), "linear_tma_bf16_n192_gli_c2_k1024");
        assert_eq!(tma_smem_of("linear_tma_bf16_n192_c2_k1024"), Some(tma_smem(192, 128)));
        assert_eq!(tma_smem_of("linear_tma_bf16_n128"), Some(6 * 2 * 128 * 128 + 1024));
        assert_eq!(tma_smem_of("linear_wgmma_bf16"), None);
        assert_eq!(super::tma_smem_max_of("linear_tma_bf16_n64_glu_k1024"), Some(tma_smem(64, 128) + 8192));
        assert_eq!(super::tma_smem_max_of(&super::tma_name_glu(8, 256, false, 1)), Some(tma_smem(8, 128) + 8192));
        assert_eq!(super::tma_smem_max_of("linear_tma_bf16_n192_k1024"), Some(tma_smem(192, 128)));
        assert_eq!(super::tma_smem_max_of("linear_tma_bf16_n64_f64"), tma_smem_of("linear_tma_bf16_n64_f64"));
        assert_eq!(super::tma_smem_max_of("linear_tma_bf16_n64_c2_k1024"), Some(tma_smem(64, 128)));
        assert_eq!(tma_smem_of("linear_tma_bf16_n192_k1024"), Some(5 * (128 * 128 + 192 * 128) + 1024));
        assert!(tma_smem(192, 128) + super::TMA_GLU_XCH_BYTES <= 227 * 1024);
        // The interleaved GLU: the plain instance's stages, no exchange.
        assert_eq!(super::tma_name_glu(192, 1024, true, 1), "linear_tma_bf16_n192_gli_k1024");
        assert_eq!(super::tma_smem_max_of(&super::tma_name_glu(192, 1024, true, 1)), Some(tma_smem(192, 128)));
        assert_eq!(super::tma_smem_max_of(&super::tma_name_glu(128, 256, true, 1)), Some(tma_smem(128, 128)));
        // The norm inside: its own stages, named after the plain and GLU instances.
        assert_eq!(super::tma_name_norm(8, 1024, true), "linear_tma_bf16_n8_glu_norm_k1024");
        assert_eq!(super::tma_name_norm(8, 256, false), "linear_tma_bf16_n8_norm");
        assert_eq!(tma_smem_of("linear_tma_bf16_n8_norm_k1024"), Some(tma_smem(8, 128)));
        assert_eq!(super::tma_smem_max_of("linear_tma_bf16_n8_glu_norm"), Some(tma_smem(8, 128) + 8192));
        // Two blocks of each few-row instance fit an H200 SM's 227 KB.
        for n in [8, 16, 32, 64] {
            for ft in [64, 128] {
                assert!(2 * tma_smem(n, ft) <= 227 * 1024, "n{n} f{ft}");
                // With a GLU launch's exchange (128 features a task), still two an SM of 228 KB
                // (1 KB of each block the driver's).
                if ft == 128 {
                    assert!(2 * (tma_smem(n, ft) + super::TMA_GLU_XCH_BYTES + 1024) <= 228 * 1024, "glu n{n}");
                }
            }
        }
    }

    #[test]
    fn the_instance_is_the_smallest_that_holds_the_rows_within_the_cap() {
        let k = |rows, max| tma_kernel(rows, max, 48, [132, 132]);
        assert_eq!(k(1, 128), (0, "linear_tma_bf16_n8".into()));
        assert_eq!(k(9, 128).0, 1);
        assert_eq!(k(64, 128).0, 3);
        assert_eq!(k(65, 128).0, 4);
        assert_eq!(k(5000, 128).0, 4);
        // A cap tiles more rows by the largest instance it allows.
        assert_eq!(k(64, 16), (1, "linear_tma_bf16_n16".into()));
        assert_eq!(k(8, 16).0, 0);
        assert_eq!(k(2048, 32).0, 2);
        // A cap below every instance still leaves the smallest.
        assert_eq!(k(100, 1).0, 0);
    }

    #[test]
    fn the_192_row_tile_takes_calls_where_its_waves_pay() {
        let h200 = [132, 132];
        // The 8B's shapes (128-feature tiles: q|k|v 48, o and down 32, gate|up 224, head 1,002) at
        // 512 and 2,048 rows, as measured (receipts/gemm-cuda-llama8b-prefill-tile-192.txt).
        for (tiles, rows, n) in [
            (48, 2048, 192),
            (224, 2048, 192),
            (1002, 2048, 192),
            (32, 2048, 128),
            (48, 512, 128),
            (224, 512, 128),
            (32, 512, 128),
            (1002, 512, 128),
        ] {
            let (i, name) = tma_kernel(rows, 192, tiles, h200);
            assert_eq!(TMA_ROWS[i], n, "{tiles} tiles, {rows} rows: {name}");
        }
        assert_eq!(tma_kernel(128, 192, 48, h200).0, 4);
        assert_eq!(tma_kernel(2048, 128, 48, h200).0, 4);
    }
}
