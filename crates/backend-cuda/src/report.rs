//! What the CUDA backend reports of itself — the device, the toolkit, the kernels its switches
//! picked, its counters — for receipts, and the switches tests and benchmarks set at run time.

use crate::kernel_set::store_code;
use crate::{CudaBackend, GraphStats, compile, launch};
use plumb_core::KvStore;
use std::sync::atomic::Ordering;

impl CudaBackend {
    /// The device's name as the driver reports it.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// The architecture the kernels were compiled for (`sm_90a` on an H200).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The CUDA version the driver supports, as `major.minor` (e.g. `13.0`).
    pub fn driver_version(&self) -> String {
        format!("{}.{}", self.driver_version / 1000, self.driver_version % 1000 / 10)
    }

    /// The NVRTC (toolkit) version that compiled the kernels, as `major.minor`.
    pub fn nvrtc_version(&self) -> String {
        format!("{}.{}", self.nvrtc_version.0, self.nvrtc_version.1)
    }

    /// Whether the device has Hopper's warpgroup MMA (`wgmma`, sm_90a), which the tensor-core
    /// `linear` needs for many rows.
    pub fn has_wgmma(&self) -> bool {
        self.arch == "sm_90a"
    }

    /// The device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ctx.ordinal()
    }

    /// Submits recorded work and waits until every queued kernel has finished (timing needs it;
    /// downloads do it themselves).
    pub fn synchronize(&self) {
        self.flush();
        self.stream.synchronize().expect("CUDA stream synchronize failed");
    }

    /// Turns CUDA graphs for decode steps on or off (default: on unless `PLUMB_CUDA_GRAPHS=0`);
    /// takes effect at the next step.
    pub fn set_graphs(&self, on: bool) {
        self.graphs_enabled.store(on, Ordering::Relaxed);
    }

    /// Makes new KV caches store K and V as `store` (default: f32, or `PLUMB_CUDA_KV`); the
    /// declared precision [`Backend::kv_store`] reports, which the gate measures.
    pub fn set_kv_store(&self, store: KvStore) {
        self.kv_store.store(store_code(store), Ordering::Relaxed);
    }

    /// Runs RMSNorm inside the split products that read it (on) or as its own launch (off): the
    /// same bits, so the tests hold both paths to them whatever the default.
    pub fn set_fuse_norm(&self, on: bool) {
        self.fuse_norm.store(on, Ordering::Relaxed);
    }

    /// Runs RMSNorm inside the TMA products of decode rows that read it (on) or as its own launch
    /// (off): the same bits, so the tests hold both paths to them whatever the default.
    pub fn set_tma_norm(&self, on: bool) {
        self.tma_norm.store(on, Ordering::Relaxed);
    }

    /// Runs prefill chunks' attention on the warpgroup MMA (on, where the device has it) or on
    /// mma.sync (off): the same bits, so the tests hold both paths to them whatever the default.
    pub fn set_attention_wgmma(&self, on: bool) {
        self.attention_wgmma.store(on, Ordering::Relaxed);
    }

    /// Runs `linear_wide` as a persistent grid of `blocks` blocks, each walking groups of
    /// features (None: a block a group, the default), so a test can make each block walk many
    /// groups: the same bits.
    pub fn set_wide_grid(&self, blocks: Option<usize>) {
        self.wide_grid.store(blocks.map_or(0, |b| b.max(1)), Ordering::Relaxed);
    }

    /// Runs a Q8_0 weight of many features at few rows on `linear_replay_q8_0`, a thread a
    /// feature (on, the default), or on `linear_wide`, a warp a feature (off): the same bits.
    pub fn set_wide_replay(&self, on: bool) {
        self.wide_replay.store(on, Ordering::Relaxed);
    }

    /// Runs CUDA-core weights at more rows than the split kernel takes on `linear_tile`, register
    /// tiles of 64 rows (`Some(64)`, the default) or of 32 where 64 would leave SMs idle
    /// (`Some(32)`), or on `linear_`, a warp a feature (None): the same bits.
    pub fn set_linear_tile(&self, rows: Option<usize>) {
        let mode = match rows {
            None => 0,
            Some(64) => 1,
            Some(32) => 2,
            Some(r) => panic!("set_linear_tile: tiles of 64 or 32 rows, not {r}"),
        };
        self.linear_tile.store(mode, Ordering::Relaxed);
    }

    /// Splits one-weight `linear_tile` launches that would leave SMs idle by chunk (on, the
    /// default) or runs each tile's whole K in one block (off): the same bits.
    pub fn set_tile_split(&self, on: bool) {
        self.tile_split.store(on, Ordering::Relaxed);
    }

    /// Runs 64-row whole-K tensor-core launches in clusters of two CTAs sharing x (on) or alone
    /// (off, the default): the same bits.
    pub fn set_tma_cluster(&self, on: bool) {
        self.tma.cluster.store(on && self.tma.cluster_launch, Ordering::Relaxed);
    }

    /// Runs whole-K TMA `linear` launches of prefill rows (128- and 192-row tiles; gate|up with
    /// the SwiGLU interleaved too) in clusters of two CTAs sharing x (on, the default) or one CTA
    /// each (off): the same bits. `PLUMB_CUDA_TMA_CLUSTER_PREFILL=0` turns it off at start.
    pub fn set_tma_cluster_prefill(&self, on: bool) {
        self.tma.cluster_prefill.store(on && self.tma.cluster_launch, Ordering::Relaxed);
    }

    /// Runs tensor-core gate|up and the SwiGLU as one TMA launch where its tasks keep whole K
    /// (on, the default) or as the two products and `silu_mul` (off): the same bits.
    pub fn set_tma_glu(&self, on: bool) {
        self.tma_glu.store(on, Ordering::Relaxed);
    }

    /// How many gate|up pairs ran as one TMA launch with the SwiGLU (`set_tma_glu`) so far.
    pub fn tma_norm_launches(&self) -> u64 {
        self.tma_norm_launches.load(Ordering::Relaxed)
    }

    /// Attention launches on the warpgroup MMA so far (for tests).
    pub fn attention_wgmma_launches(&self) -> u64 {
        self.attention_wgmma_launches.load(Ordering::Relaxed)
    }

    /// TMA launches of gate|up with the SwiGLU inside so far (for tests).
    pub fn tma_glu_launches(&self) -> u64 {
        self.tma_glu_launches.load(Ordering::Relaxed)
    }

    /// Runs prefill rows' tensor-core gate|up and the SwiGLU as one TMA launch, gate's and up's
    /// rows interleaved (on, the default, where `set_tma_glu` is on too) or as the two products
    /// and `silu_mul` (off): the same bits.
    pub fn set_tma_gli(&self, on: bool) {
        self.tma_gli.store(on, Ordering::Relaxed);
    }

    /// Of `tma_glu_launches`, those of prefill rows with gate's and up's rows interleaved.
    pub fn tma_gli_launches(&self) -> u64 {
        self.tma_gli_launches.load(Ordering::Relaxed)
    }

    /// TMA `linear` launches (plain or gate|up with the SwiGLU) run in clusters of two sharing x.
    pub fn tma_cluster_launches(&self) -> u64 {
        self.tma_cluster_launches.load(Ordering::Relaxed)
    }

    /// Splits the K of TMA `linear` launches over clusters of CTAs (rank 0 folds the others'
    /// chunk sums as they come): where the backend picks (None: `tma::ks_auto`), never (Some(0),
    /// the default), or in clusters of `ks` (Some(2) or Some(4)) for every launch of up to 64
    /// rows whose K has that many chunks: the same bits. `PLUMB_CUDA_TMA_KSPLIT` (auto, 0, 2, 4)
    /// sets it at start.
    ///
    /// # Panics
    /// If `ks` is neither 0 nor a split with instances (2, 4).
    pub fn set_tma_ksplit(&self, ks: Option<usize>) {
        let ks = match ks {
            None => crate::tma::KS_AUTO,
            Some(ks) => {
                assert!(ks == 0 || crate::tma::TMA_KS.contains(&ks), "set_tma_ksplit: 0, 2 or 4, not {ks}");
                ks
            }
        };
        self.tma.ksplit.store(if self.tma.cluster_launch { ks } else { 0 }, Ordering::Relaxed);
    }

    /// The K split over clusters `set_tma_ksplit` set (None: the backend's pick).
    pub fn tma_ksplit(&self) -> Option<usize> {
        match self.tma.ksplit.load(Ordering::Relaxed) {
            crate::tma::KS_AUTO => None,
            ks => Some(ks),
        }
    }

    /// Splits the K of plain TMA `linear` launches of 17 to 64 rows over clusters of `ks` CTAs on
    /// 64-feature tasks (2 or 4; 0, the default, never), rank 0 folding the others' chunk sums:
    /// the same bits. `PLUMB_CUDA_TMA_KSPLIT_NARROW` (0, 2, 4) sets it at start. Where set, it
    /// takes those calls before `set_tma_ksplit`'s choice.
    ///
    /// # Panics
    /// If `ks` is neither 0 nor a split with instances (2, 4).
    pub fn set_tma_ksplit_narrow(&self, ks: usize) {
        assert!(ks == 0 || crate::tma::TMA_KS.contains(&ks), "set_tma_ksplit_narrow: 0, 2 or 4, not {ks}");
        self.tma.ksplit_narrow.store(if self.tma.cluster_launch { ks } else { 0 }, Ordering::Relaxed);
    }

    /// The K split over clusters on 64-feature tasks `set_tma_ksplit_narrow` set (0: none).
    pub fn tma_ksplit_narrow(&self) -> usize {
        self.tma.ksplit_narrow.load(Ordering::Relaxed)
    }

    /// TMA `linear` launches (plain or gate|up with the SwiGLU) whose K split over a cluster.
    pub fn tma_ks_launches(&self) -> u64 {
        self.tma_ks_launches.load(Ordering::Relaxed)
    }

    pub fn graphs_enabled(&self) -> bool {
        self.graphs_enabled.load(Ordering::Relaxed)
    }

    /// Which kernels the switches picked (`PLUMB_CUDA_TMA`, `PLUMB_CUDA_TMA_PERSIST`,
    /// `PLUMB_CUDA_ATT_MMA`, `PLUMB_CUDA_ATT_WGMMA`, `PLUMB_CUDA_ATT_SPLIT`, `PLUMB_CUDA_NORM_ROUND`, `PLUMB_CUDA_PDL`,
    /// `PLUMB_CUDA_PDL_OFF`, `PLUMB_CUDA_NORM_RELEASE`,
    /// `PLUMB_CUDA_FUSE_ADD`, `PLUMB_CUDA_GROUP_LINEAR`, `PLUMB_CUDA_FUSE_ROPE_KV`,
    /// `PLUMB_CUDA_STAGED_LOADS`, `PLUMB_CUDA_FUSE_SWIGLU`, `PLUMB_CUDA_WIDE_REPLAY`,
    /// `PLUMB_CUDA_ATT_MERGE_LAUNCH`), for receipts: a
    /// figure measured with a switch off says so.
    pub fn kernel_choices(&self) -> [(&'static str, bool); 33] {
        [
            ("linear_tma", self.tma.enabled),
            ("linear_tma_persistent", self.tma.persistent),
            ("attention_tensor_cores", self.attention_mma),
            ("attention_prefill_wgmma", self.tma.enabled && self.attention_wgmma.load(Ordering::Relaxed)),
            ("attention_split_kv", self.attention_split_kv),
            ("attention_warp_blocks", self.attention_warp_blocks),
            ("attention_merge_launch", self.attention_merge_launch),
            ("producers_round_bf16", self.norm_round),
            ("programmatic_dependent_launch", launch::pdl()),
            ("programmatic_dependent_launch_for_every_kernel", launch::pdl() && !launch::pdl_off_any()),
            ("early_weight_reads", compile::early_weights()),
            ("norm_releases_next_kernel_early", !compile::norm_late_release()),
            ("fused_add_norm", self.fuse_add),
            ("grouped_linear", self.group_linear),
            ("fused_rope_kv_write", self.fuse_rope_kv),
            ("staged_quant_loads", self.staged_loads),
            ("fused_swiglu", self.fuse_swiglu),
            ("fused_norm_prologue", self.fuse_norm.load(Ordering::Relaxed)),
            ("norm_inside_decode_tma_products", self.tma_norm.load(Ordering::Relaxed)),
            ("linear_tma_cluster", self.tma.cluster.load(Ordering::Relaxed)),
            ("linear_tma_cluster_prefill", self.tma.cluster_prefill.load(Ordering::Relaxed)),
            ("linear_tma_ksplit_auto", self.tma.ksplit.load(Ordering::Relaxed) == crate::tma::KS_AUTO),
            ("linear_tma_ksplit_narrow", self.tma.ksplit_narrow.load(Ordering::Relaxed) > 1),
            ("fused_residual_store", self.fuse_residual),
            ("fused_qkv_rope_kv_write", self.fuse_qkv_rope),
            ("wide_rows_linear", self.wide_rows),
            ("wide_rows_persistent", self.wide_grid.load(Ordering::Relaxed) != 0),
            ("wide_rows_replay_q8_0", self.wide_replay.load(Ordering::Relaxed)),
            ("linear_tile", self.linear_tile.load(Ordering::Relaxed) > 0),
            ("linear_tile_32_rows", self.linear_tile.load(Ordering::Relaxed) == 2),
            ("linear_tile_chunk_split", self.tile_split.load(Ordering::Relaxed)),
            ("linear_tma_glu", self.tma_glu.load(Ordering::Relaxed)),
            ("linear_tma_glu_prefill_interleaved", self.tma_gli.load(Ordering::Relaxed)),
        ]
    }

    /// The K from which tensor-core weights fold chunks of 1,024 elements instead of 256
    /// (`ops_linear::fold_chunk`; `PLUMB_CUDA_KC_LONG_FROM`), for receipts: bits follow it.
    pub fn fold_long_from(&self) -> usize {
        self.fold_long_from
    }

    /// Positions per split of the tensor-core attention's canonical form (bits follow it).
    pub fn attention_split(&self) -> usize {
        self.atm_split
    }

    /// How recorded steps ran so far: captured, replayed, or launch by launch.
    pub fn graph_stats(&self) -> GraphStats {
        self.lock_state().graphs.stats()
    }

    /// The graph counters, readable after the backend has moved (into an engine thread).
    pub fn graph_stats_source(&self) -> impl Fn() -> GraphStats + Send + Sync + 'static {
        let stats = self.lock_state().graphs.stats.clone();
        move || *stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device's free and total memory in bytes, as the driver reports them now.
    pub fn memory_info(&self) -> Option<(usize, usize)> {
        self.ctx.bind_to_thread().ok()?;
        cudarc::driver::result::mem_get_info().ok()
    }

    /// Activation pool allocations served from its free lists and by the driver.
    pub fn pool_stats(&self) -> (u64, u64) {
        let p = self.pool.lock().expect("pool lock");
        (p.num_hits, p.num_misses)
    }
}
