//! The op groups of `plumb_core::backend` on the CUDA backend: shape checks on the host, then one
//! kernel launch per op (see `kernels/*.cu` for each op's canonical arithmetic).
//! No launch parameter reads the token count except to cover every row: block shapes and
//! reduction trees come from the model's shapes alone. `linear` and its neighbours (`LinearOps`) are
//! in `ops_linear.rs`.

use crate::attention_plan::{
    ATM_PAIRS, ATM_WALK, ATT_PAIRS, ATT_SPLIT, ATT_WARPS, MAX_HEAD_DIM, MMA_HEAD_DIMS, attention_blocks,
    attention_mma_smem, attention_smem, attention_wgmma_smem, split_kv, split_states_bytes, splits_per_block,
};
use crate::kv::{CudaKvCache, attention_meta};
use crate::launch::Launch;
use crate::pool::DeviceBuf;
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d};
use cudarc::driver::LaunchConfig;
use plumb_core::{AttentionOps, BackendError, ElementwiseOps, ForwardBatch, KvStore, RopeOps};

/// A device address of per-row metadata: the step's (already on the device) or a fresh upload
/// kept alive until the launch is queued.
pub(crate) struct Meta {
    pub(crate) ptr: u64,
    _upload: Option<DeviceBuf>,
}

/// The checks `rope_qk` and `rope_write_kv` share — q and k of the table's rows, heads of
/// `heads` = (q heads, kv heads, head size), the same padding, a table no wider than a head —
/// and the pairs the table rotates per head.
pub(crate) fn rope_qk_half(
    op: &str,
    q: &CudaTensor,
    k: &CudaTensor,
    table: &CudaTensor,
    heads: (usize, usize, usize),
) -> usize {
    let (num_heads, num_kv_heads, head_dim) = heads;
    assert_eq!((q.rows, q.cols), (table.rows, num_heads * head_dim), "{op}: q's shape mismatch");
    assert_eq!((k.rows, k.cols), (table.rows, num_kv_heads * head_dim), "{op}: k's shape mismatch");
    assert!(q.padded_rows == table.padded_rows && k.padded_rows == table.padded_rows, "{op}: padded rows differ");
    let half = table.cols / 2;
    assert!(2 * half <= head_dim, "{op}: the table rotates more dims than a head has");
    half
}

/// The arguments `rope_qk` and `rope_write_kv` (kernels) both end with, in their order.
fn rope_qk_args(l: Launch, rows: usize, half: usize, heads: (usize, usize, usize), rotate_half: bool) -> Launch {
    let (num_heads, num_kv_heads, head_dim) = heads;
    l.i32(rows as i32)
        .i32(half as i32)
        .i32(num_heads as i32)
        .i32(num_kv_heads as i32)
        .i32(head_dim as i32)
        .i32(rotate_half as i32)
}

impl CudaBackend {
    /// Each row's cache slot on the device (the step's upload when this is the step's batch), and
    /// for padded rows the pad block's first slot, which no real row reads.
    pub(crate) fn kv_slots(&self, kv: &CudaKvCache, batch: &ForwardBatch, padded: usize) -> Meta {
        let num_slots = kv.spec.num_blocks * kv.spec.block_size;
        assert!(batch.slot_mapping.iter().all(|&s| (s as usize) < num_slots), "write_kv: slot outside the cache");
        let kv_id = crate::step::kv_id(kv);
        let step =
            self.with_step(|s| (s.kv_id == kv_id && s.padded_rows == padded && s.batch == *batch).then_some(s.slots));
        let pad_slot = kv.pad_block() * kv.spec.block_size as u32;
        self.step_meta(step, || {
            batch.slot_mapping.iter().copied().chain(std::iter::repeat(pad_slot)).take(padded).collect()
        })
    }

    pub(crate) fn step_meta(&self, ptr: Option<u64>, words: impl FnOnce() -> Vec<u32>) -> Meta {
        match ptr {
            Some(ptr) => Meta { ptr, _upload: None },
            None => {
                let buf = self.upload_words(&words());
                Meta { ptr: buf.ptr, _upload: Some(buf) }
            }
        }
    }

    /// A per-row launch over `rows` rows, one block of 256 threads each.
    pub(crate) fn row_blocks(rows: usize) -> LaunchConfig {
        LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 }
    }
}

impl CudaBackend {
    /// `rms_norm` of x, or with `add` x += add first in the same pass (`add_rms_norm`: the bits of
    /// `add` then `rms_norm`). With tensor-core weights loaded, the norm also writes its output as
    /// `round_bf16` would (what the q/k/v and gate/up projections after it take), saving that launch.
    fn norm_rows(&self, x: &CudaTensor, add: Option<&CudaTensor>, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        let w = weight.dense_ptr.expect("norm weights are vectors");
        assert_eq!(
            (x.cols, out.rows, out.cols, out.padded_rows),
            (weight.cols, x.rows, x.cols, x.padded_rows),
            "rms_norm `{}`: shape mismatch",
            weight.name
        );
        if x.padded_rows == 0 {
            return;
        }
        let round = self.mma_weights.load(std::sync::atomic::Ordering::Relaxed) && x.cols.is_multiple_of(32);
        let rounded = round.then(|| self.alloc(x.padded_rows * x.cols * 2));
        let blocks = Self::row_blocks(x.padded_rows);
        let l = match add {
            // The fused kernel always takes the copy's address; null when there is none.
            Some(d) => Launch::new(self.kernel("add_rms_norm"), blocks).ptr(x.ptr()).ptr(d.ptr()),
            None => Launch::new(self.kernel(if round { "rms_norm_bf16" } else { "rms_norm" }), blocks).ptr(x.ptr()),
        };
        let l = l.ptr(w).f32(eps).ptr(out.ptr()).i32(x.cols as i32);
        self.submit(match (&rounded, add.is_some()) {
            (Some(buf), _) => l.ptr(buf.ptr),
            (None, true) => l.ptr(0),
            (None, false) => l,
        });
        if let Some(buf) = rounded {
            self.keep_rounded(out, buf);
        }
    }
}

impl ElementwiseOps for CudaBackend {
    fn rms_norm(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        self.norm_rows(x, None, weight, eps, out);
    }

    fn add_rms_norm(&self, acc: &mut CudaTensor, x: &CudaTensor, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        if !self.fuse_add {
            self.add(acc, x);
            return self.rms_norm(acc, weight, eps, out);
        }
        assert_eq!(
            (acc.rows, acc.cols, acc.padded_rows),
            (x.rows, x.cols, x.padded_rows),
            "add_rms_norm: shape mismatch"
        );
        self.norm_rows(&*acc, Some(x), weight, eps, out);
    }

    fn rms_norm_heads(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        let w = weight.dense_ptr.expect("norm weights are vectors");
        let d = weight.cols;
        assert!(
            d > 0
                && x.cols.is_multiple_of(d)
                && (out.rows, out.cols, out.padded_rows) == (x.rows, x.cols, x.padded_rows),
            "rms_norm_heads `{}`: shape mismatch",
            weight.name
        );
        let num_slices = x.padded_rows * (x.cols / d);
        if num_slices == 0 {
            return;
        }
        // [num_rows, num_heads · head_dim] is [num_rows · num_heads, head_dim] in memory, so the
        // row kernel normalizes each head with the same arithmetic as a whole-row RMSNorm.
        let l = Launch::new(self.kernel("rms_norm"), Self::row_blocks(num_slices))
            .ptr(x.ptr())
            .ptr(w)
            .f32(eps)
            .ptr(out.ptr())
            .i32(d as i32);
        self.submit(l);
    }

    fn add(&self, acc: &mut CudaTensor, x: &CudaTensor) {
        assert_eq!((acc.rows, acc.cols, acc.padded_rows), (x.rows, x.cols, x.padded_rows), "add: shape mismatch");
        let n = x.padded_rows * x.cols;
        if n == 0 {
            return;
        }
        let l = Launch::new(self.kernel("add"), grid_1d(n)).ptr(acc.ptr()).ptr(x.ptr()).u64(n as u64);
        self.submit(l);
    }

    fn add_bias(&self, x: &mut CudaTensor, bias: &CudaWeight) {
        let bv = bias.dense_ptr.expect("biases are vectors");
        assert_eq!(x.cols, bias.cols, "add_bias `{}`: shape mismatch", bias.name);
        let n = x.padded_rows * x.cols;
        if n == 0 {
            return;
        }
        let l = Launch::new(self.kernel("add_bias"), grid_1d(n)).ptr(x.ptr()).ptr(bv).u64(n as u64).i32(x.cols as i32);
        self.submit(l);
    }

    fn silu_mul(&self, gate: &CudaTensor, up: &CudaTensor, out: &mut CudaTensor) {
        let shape = |t: &CudaTensor| (t.rows, t.cols, t.padded_rows);
        assert_eq!(shape(gate), shape(up), "silu_mul: shape mismatch");
        assert_eq!(shape(gate), shape(out), "silu_mul: shape mismatch");
        let n = gate.padded_rows * gate.cols;
        if n == 0 {
            return;
        }
        // As rms_norm: with tensor-core weights loaded, the rounded copy the down projection takes.
        let round = self.mma_weights.load(std::sync::atomic::Ordering::Relaxed) && gate.cols.is_multiple_of(32);
        let rounded = round.then(|| self.alloc(n * 2));
        let l = Launch::new(self.kernel(if round { "silu_mul_bf16" } else { "silu_mul" }), grid_1d(n))
            .ptr(gate.ptr())
            .ptr(up.ptr())
            .ptr(out.ptr())
            .u64(n as u64);
        self.submit(match &rounded {
            Some(buf) => l.ptr(buf.ptr),
            None => l,
        });
        if let Some(buf) = rounded {
            self.keep_rounded(out, buf);
        }
    }
}

impl CudaBackend {
    fn rope_launch(&self, kernel: &str, x: &mut CudaTensor, table: &CudaTensor, num_heads: usize, head_dim: usize) {
        assert_eq!((x.rows, x.cols), (table.rows, num_heads * head_dim), "{kernel}: shape mismatch");
        assert_eq!(x.padded_rows, table.padded_rows, "{kernel}: padded rows differ");
        let half = table.cols / 2;
        assert!(2 * half <= head_dim, "{kernel}: the table rotates more dims than a head has");
        let n = x.padded_rows * num_heads * half;
        if n == 0 {
            return;
        }
        let l = Launch::new(self.kernel(kernel), grid_1d(n))
            .ptr(x.ptr())
            .ptr(table.ptr())
            .i32(x.padded_rows as i32)
            .i32(x.cols as i32)
            .i32(half as i32)
            .i32(num_heads as i32)
            .i32(head_dim as i32);
        self.submit(l);
    }
}

impl RopeOps for CudaBackend {
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> CudaTensor {
        // Angles and trigonometry in f64 on the host, once per step: the one f32 table every path
        // (prefill, decode, any chunking) reads. A step stages it with its metadata.
        if let Some(t) = self.step_rope_table(positions, inv_freq) {
            return t;
        }
        let padded = self.padded_rows(positions.len());
        let table = crate::step_state::rope_rows(positions, padded, inv_freq);
        use plumb_core::Backend;
        let mut t = self.upload(&table, padded, 2 * inv_freq.len());
        t.rows = positions.len();
        t
    }

    fn rope(&self, x: &mut CudaTensor, table: &CudaTensor, num_heads: usize, head_dim: usize) {
        self.rope_launch("rope", x, table, num_heads, head_dim);
    }

    fn rope_rotate_half(&self, x: &mut CudaTensor, table: &CudaTensor, num_heads: usize, head_dim: usize) {
        self.rope_launch("rope_rotate_half", x, table, num_heads, head_dim);
    }

    fn rope_qk(
        &self,
        q: &mut CudaTensor,
        k: &mut CudaTensor,
        table: &CudaTensor,
        num_heads: usize,
        num_kv_heads: usize,
        head_dim: usize,
        rotate_half: bool,
    ) {
        let half = rope_qk_half("rope_qk", q, k, table, (num_heads, num_kv_heads, head_dim));
        let n = table.padded_rows * (num_heads + num_kv_heads) * half;
        if n == 0 {
            return;
        }
        let l = Launch::new(self.kernel("rope_qk"), grid_1d(n)).ptr(q.ptr()).ptr(k.ptr()).ptr(table.ptr());
        self.submit(rope_qk_args(l, table.padded_rows, half, (num_heads, num_kv_heads, head_dim), rotate_half));
    }
}

impl AttentionOps for CudaBackend {
    /// The q|k|v products of rms_norm(x) (or of x, normed already), RoPE and the K/V store in one
    /// split launch where it applies (ops_fused.rs), else apart: the same bits.
    fn norm_qkv_rope_write_kv(
        &self,
        x: &CudaTensor,
        norm: Option<(&CudaWeight, f32)>,
        ws: [&CudaWeight; 3],
        qkv: [&mut CudaTensor; 3],
        table: &CudaTensor,
        kv: &mut CudaKvCache,
        layer: usize,
        batch: &ForwardBatch,
        heads: (usize, usize, usize),
        rotate_half: bool,
    ) {
        self.fused_norm_qkv_rope(x, norm, ws, qkv, table, kv, layer, batch, heads, rotate_half);
    }

    fn check_head_dim(&self, head_dim: usize) -> Result<(), BackendError> {
        if head_dim == 0 || !head_dim.is_multiple_of(32) || head_dim > MAX_HEAD_DIM {
            use plumb_core::Backend;
            return Err(BackendError::UnsupportedHeadDim {
                backend: self.name(),
                head_dim,
                why: format!("it needs a multiple of 32 up to {MAX_HEAD_DIM}"),
            });
        }
        Ok(())
    }

    fn write_kv(&self, kv: &mut CudaKvCache, layer: usize, k: &CudaTensor, v: &CudaTensor, batch: &ForwardBatch) {
        let len = kv.spec.num_kv_heads * kv.spec.head_dim;
        assert_eq!(
            (k.rows, k.cols, v.rows, v.cols),
            (batch.num_rows(), len, batch.num_rows(), len),
            "write_kv: shape mismatch"
        );
        assert_eq!(k.padded_rows, v.padded_rows, "write_kv: padded rows differ");
        let padded = k.padded_rows;
        if padded == 0 {
            return;
        }
        let slots = self.kv_slots(kv, batch, padded);
        let l = Launch::new(self.kernel(&format!("write_kv_{}", kv.store.name())), grid_1d(padded * len))
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(slots.ptr)
            .ptr(kv.k_ptrs[layer])
            .ptr(kv.v_ptrs[layer])
            .i32(padded as i32)
            .i32(len as i32);
        self.submit(l);
    }

    fn rope_write_kv(
        &self,
        q: &mut CudaTensor,
        k: &mut CudaTensor,
        v: &CudaTensor,
        table: &CudaTensor,
        kv: &mut CudaKvCache,
        layer: usize,
        batch: &ForwardBatch,
        (num_heads, num_kv_heads, head_dim): (usize, usize, usize),
        rotate_half: bool,
    ) {
        if !self.fuse_rope_kv {
            self.rope_qk(q, k, table, num_heads, num_kv_heads, head_dim, rotate_half);
            self.write_kv(kv, layer, k, v, batch);
            return;
        }
        let len = kv.spec.num_kv_heads * kv.spec.head_dim;
        assert_eq!(
            (num_kv_heads * head_dim, kv.spec.head_dim),
            (len, head_dim),
            "rope_write_kv: heads differ from the cache's"
        );
        let heads = (num_heads, num_kv_heads, head_dim);
        let half = rope_qk_half("rope_write_kv", q, k, table, heads);
        assert_eq!(
            (v.rows, v.cols, v.padded_rows, table.rows),
            (batch.num_rows(), len, table.padded_rows, batch.num_rows()),
            "rope_write_kv: v's or the batch's shape mismatch"
        );
        assert!(head_dim.is_multiple_of(2), "rope_write_kv: an odd head size");
        let padded = table.padded_rows;
        if padded == 0 {
            return;
        }
        let slots = self.kv_slots(kv, batch, padded);
        let n = padded * (num_heads * half + num_kv_heads * head_dim / 2);
        let l = Launch::new(self.kernel(&format!("rope_write_kv_{}", kv.store.name())), grid_1d(n))
            .ptr(q.ptr())
            .ptr(k.ptr())
            .ptr(v.ptr())
            .ptr(table.ptr())
            .ptr(slots.ptr)
            .ptr(kv.k_ptrs[layer])
            .ptr(kv.v_ptrs[layer]);
        self.submit(rope_qk_args(l, padded, half, heads, rotate_half));
    }

    fn attention(
        &self,
        q: &CudaTensor,
        kv: &CudaKvCache,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f64,
        out: &mut CudaTensor,
    ) {
        let scale = scale as f32;
        let spec = &kv.spec;
        let rows = batch.num_rows();
        assert_eq!((q.rows, q.cols), (rows, num_heads * spec.head_dim), "attention: q shape");
        assert_eq!((out.rows, out.cols, out.padded_rows), (q.rows, q.cols, q.padded_rows), "attention: out shape");
        assert!(num_heads.is_multiple_of(spec.num_kv_heads), "attention: heads are not a multiple of KV heads");
        assert!(spec.head_dim.is_multiple_of(32) && spec.head_dim <= MAX_HEAD_DIM, "attention: unsupported head_dim");
        let num_slots = spec.num_blocks * spec.block_size;
        for (r, &pos) in batch.positions.iter().enumerate() {
            let table = &batch.lanes[batch.row_lane[r] as usize].block_table;
            let last = pos as usize / spec.block_size;
            assert!(last < table.len(), "attention: row {r} is past its lane's block table");
            assert!(
                table[..=last].iter().all(|&b| (b as usize + 1) * spec.block_size <= num_slots),
                "attention: block outside the cache"
            );
        }
        let padded = q.padded_rows;
        if padded == 0 {
            return;
        }
        // K and V of every attended position, once per row, as stored.
        let attended: u64 = batch.positions.iter().map(|&p| p as u64 + 1).sum();
        let per_position = (2 * spec.num_kv_heads * spec.head_dim * kv.store.bytes()) as u64;
        self.work.add(attended * per_position, crate::measure::attention_flops(attended, num_heads, spec.head_dim));
        let kv_id = crate::step::kv_id(kv);
        let step = self
            .with_step(|s| (s.kv_id == kv_id && s.padded_rows == padded && s.batch == *batch).then_some(s.attn_meta));
        let meta = self.step_meta(step, || attention_meta(batch, padded, kv.pad_block()));
        // Rows per block: a block walks the KV tiles once for the consecutive rows of one lane it
        // holds, so prefill chunks share their tiles; rows of different lanes in one block would
        // walk one after another, so batches of about a row per lane (decode) take a row each.
        // A free choice: the arithmetic of every (row, head) is the same either way.
        // The choice of kernel follows the model's head size and the cache's store only, never the
        // batch, so every row of a model takes one canonical form.
        let mma = self.attention_mma && kv.store != KvStore::F32 && MMA_HEAD_DIMS.contains(&spec.head_dim);
        let group = num_heads / spec.num_kv_heads;
        let (walk, max_rows) = if mma { (ATM_PAIRS, 64) } else { (ATT_WARPS * ATT_PAIRS, 8) };
        let rows_per_block = if rows >= 4 * batch.lanes.len().max(1) { (walk / group).clamp(1, max_rows) } else { 1 };
        let (warps, may_split) = attention_blocks(
            mma && self.attention_warp_blocks,
            rows_per_block,
            group,
            padded * spec.num_kv_heads,
            self.tma.sms,
        );
        // Blocks of several rows of a lane (prefill chunks), never split, take the warpgroup MMA
        // where the device has it: the same form, so the same bits.
        let wgmma = mma
            && warps == ATT_WARPS
            && rows_per_block > 1
            && !may_split
            && self.tma.enabled
            && self.attention_wgmma.load(std::sync::atomic::Ordering::Relaxed);
        let (name, smem) = if wgmma {
            self.attention_wgmma_launches.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (
                format!("attention_wgmma_{}_{}", spec.head_dim, kv.store.name()),
                attention_wgmma_smem(spec.head_dim, kv.store),
            )
        } else if mma {
            (
                format!("attention_mma_{}_{}", spec.head_dim, kv.store.name()),
                attention_mma_smem(spec.head_dim, kv.store, warps),
            )
        } else {
            (format!("attention_{}_{}", spec.head_dim, kv.store.name()), attention_smem(spec.head_dim, kv.store))
        };
        let split_len = if mma { self.atm_split } else { ATT_SPLIT };
        let longest = batch.positions.iter().map(|&p| p as usize + 1).max().unwrap_or(1);
        let splits = (may_split && self.attention_split_kv)
            .then(|| split_kv(padded * num_heads, spec.head_dim, longest, split_len))
            .flatten();
        let part = splits.map(|s| self.alloc(split_states_bytes(padded * num_heads, spec.head_dim, s)));
        // Splits a block walks: the tensor-core kernel's blocks may take several, the f32 kernel's one.
        let row_blocks = padded.div_ceil(rows_per_block);
        let base_blocks = row_blocks * spec.num_kv_heads;
        let max_walk = if mma { ATM_WALK.max(split_len) } else { split_len };
        let per_block =
            splits.map_or(1, |s| splits_per_block(s, base_blocks, warps, self.tma.sms, split_len, max_walk));
        let cfg = LaunchConfig {
            grid_dim: (row_blocks as u32, spec.num_kv_heads as u32, (splits.unwrap_or(1) / per_block) as u32),
            block_dim: (warps as u32 * 32, 1, 1),
            shared_mem_bytes: smem as u32,
        };
        // One kernel per head size and store (kernels/attention.cu, attention_mma.cu):
        // `check_head_dim` admits exactly those head sizes.
        let l = Launch::new(self.kernel(&name), cfg)
            .ptr(q.ptr())
            .ptr(kv.k_ptrs[layer])
            .ptr(kv.v_ptrs[layer])
            .ptr(meta.ptr)
            .i32(padded as i32)
            .i32(num_heads as i32)
            .i32(spec.num_kv_heads as i32)
            .i32(spec.block_size as i32)
            .f32(scale)
            .ptr(out.ptr())
            .i32(rows_per_block as i32);
        // The split workspace (0: the walk folds the splits itself).
        let l = l.ptr(part.as_ref().map_or(0, |p| p.ptr)).i32(splits.unwrap_or(1) as i32);
        if mma {
            // The tensor-core kernel takes its split length, the rounded copy of out it writes for
            // the o projection's tensor-core weight (as `rms_norm` does for q|k|v), and the arrival
            // counters by which the last block of a split row folds the splits itself.
            let round = self.mma_weights.load(std::sync::atomic::Ordering::Relaxed);
            let rounded = round.then(|| self.alloc(padded * q.cols * 2));
            let arrivals =
                if splits.is_some() { self.arrival_counters(cfg.grid_dim.0 as usize * spec.num_kv_heads) } else { 0 };
            let l = l.i32(split_len as i32).i32((per_block * split_len) as i32);
            self.submit(l.ptr(rounded.as_ref().map_or(0, |b| b.ptr)).ptr(arrivals));
            if let Some(buf) = rounded {
                self.keep_rounded(out, buf);
            }
            return;
        }
        // The f32 kernel's split rows: their last block folds them, or `attention_merge` after it.
        let fold_in_kernel = splits.is_some() && !self.attention_merge_launch;
        let arrivals =
            if fold_in_kernel { self.arrival_counters(cfg.grid_dim.0 as usize * spec.num_kv_heads) } else { 0 };
        self.submit(l.ptr(arrivals));
        if let (Some(part), Some(splits), false) = (part, splits, fold_in_kernel) {
            let pairs = padded * num_heads;
            let cfg = LaunchConfig {
                grid_dim: (pairs.div_ceil(4) as u32, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            };
            let l = Launch::new(self.kernel("attention_merge"), cfg)
                .ptr(part.ptr)
                .ptr(meta.ptr)
                .i32(padded as i32)
                .i32(num_heads as i32)
                .i32(spec.head_dim as i32)
                .i32(splits as i32)
                .i32(split_len as i32)
                .ptr(out.ptr());
            self.submit(l);
        }
    }
}
