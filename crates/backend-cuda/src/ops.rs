//! The op groups of `plumb_core::backend` on the CUDA backend: shape checks on the host, then one
//! kernel launch per op (see `kernels/*.cu` for each op's canonical arithmetic).
//! No launch parameter reads the token count except to cover every row: block shapes and
//! reduction trees come from the model's shapes alone. `linear` and its neighbours (`LinearOps`) are
//! in `ops_linear.rs`.

use crate::kv::{CudaKvCache, attention_meta};
use crate::launch::Launch;
use crate::pool::DeviceBuf;
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d};
use cudarc::driver::LaunchConfig;
use plumb_core::{AttentionOps, BackendError, ElementwiseOps, ForwardBatch, KvStore, RopeOps};

/// Warps per attention block and (row, head) pairs per warp in one walk (kernels/attention.cu).
const ATT_WARPS: usize = 4;
const ATT_PAIRS: usize = 4;
/// Shared memory of an attention block for heads of `head_dim` stored as `store`: the K tile (64
/// rows of head_dim values and 16 bytes), the V tile and the f32 q of one walk's pairs, as
/// `att_smem_bytes` in attention.cu.
pub(crate) fn attention_smem(head_dim: usize, store: KvStore) -> usize {
    let e = store.bytes();
    64 * (head_dim * e + 16) + 64 * head_dim * e + 4 * ATT_WARPS * ATT_PAIRS * head_dim
}
/// Head sizes with tensor-core attention kernels (`attention_mma.cu`), for f16 and bf16 stores.
pub const MMA_HEAD_DIMS: [usize; 3] = [64, 96, 128];
/// (row, head) pairs of one tensor-core attention walk: 4 warps of 16.
const ATM_PAIRS: usize = 64;
/// Positions per split of the tensor-core attention's canonical form unless
/// `PLUMB_CUDA_ATM_SPLIT` names another multiple of a tile (`CudaBackend::atm_split`), and of the
/// f32 kernel's (`ATT_SPLIT`: a tile).
pub(crate) const ATM_SPLIT: usize = 256;
const ATT_SPLIT: usize = 64;

/// Unsplit attention blocks per SM from which decode rows walk their context instead of splitting
/// it over blocks (`attention`): the tensor-core kernel keeps two 4-warp blocks resident per SM.
const ATTENTION_FILL_BLOCKS_PER_SM: usize = 2;
/// The same for one-warp decode blocks (`attention`), of which four or five fit an SM (44–49 KB
/// of shared memory each at 128-dim heads).
const ATTENTION_FILL_WARP_BLOCKS_PER_SM: usize = 3;

/// The tensor-core attention's split length from `PLUMB_CUDA_ATM_SPLIT` (a positive multiple of
/// 64 positions), else `ATM_SPLIT`. Part of the canonical form: it is read once, when the backend
/// is made, and every row of every batch takes it.
pub(crate) fn atm_split_from(var: Option<&str>) -> Result<usize, crate::CudaError> {
    match var {
        None => Ok(ATM_SPLIT),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 && n.is_multiple_of(64) => Ok(n),
            _ => Err(crate::CudaError::BadSetting {
                name: "PLUMB_CUDA_ATM_SPLIT",
                value: v.to_owned(),
                expected: "a positive multiple of 64 positions",
            }),
        },
    }
}
/// Shared memory of a tensor-core attention block of `warps` warps: the K and V tiles (two
/// buffers of each, one for a one-warp block) and each warp's q pieces (2 for f16, 3 for bf16),
/// rows of head_dim · 2 + 16 bytes, as `atm_smem_bytes` in attention_mma.cu.
pub(crate) fn attention_mma_smem(head_dim: usize, store: KvStore, warps: usize) -> usize {
    let pieces = if store == KvStore::F16 { 2 } else { 3 };
    let tiles = if warps == 1 { 2 * 64 } else { 4 * 64 };
    (tiles + warps * pieces * 16) * (head_dim * 2 + 16)
}
/// The most bytes of split states one attention call may keep for `attention_merge` (beyond, its
/// rows walk their splits on one block each: the same bits).
const SPLIT_KV_PART_BYTES: usize = 64 << 20;

/// How many blocks decode rows split their context over (`None`: each row's block walks it all).
/// Decode rows (a block each) may split their context over blocks, one per split of the kernel's
/// form (`split_len` positions), and `attention_merge` folds the splits in order: a free choice,
/// the walk folds them with the same arithmetic. The count is a power of two, so a decode step's
/// graph changes only when the longest context doubles; a context of one split needs no merge
/// (one launch less per layer); and the split states of `pairs` (row, head) pairs stay within
/// `SPLIT_KV_PART_BYTES`, which long contexts at many rows would pass (they have blocks enough).
pub(crate) fn split_kv(pairs: usize, head_dim: usize, longest: usize, split_len: usize) -> Option<usize> {
    let splits = longest.div_ceil(split_len).next_power_of_two();
    (splits > 1 && split_states_bytes(pairs, head_dim, splits) <= SPLIT_KV_PART_BYTES).then_some(splits)
}

/// Bytes of the split states `attention_merge` folds: per (row, head) pair and split, the
/// unnormalised output and the running max and sum, in f32.
fn split_states_bytes(pairs: usize, head_dim: usize, splits: usize) -> usize {
    pairs * splits * (head_dim + 2) * 4
}

/// The largest head the attention kernel's per-lane registers hold.
pub const MAX_HEAD_DIM: usize = 256;

/// A device address of per-row metadata: the step's (already on the device) or a fresh upload
/// kept alive until the launch is queued.
pub(crate) struct Meta {
    pub(crate) ptr: u64,
    _upload: Option<DeviceBuf>,
}

/// The checks `rope_qk` and `rope_write_kv` share — q and k of the table's rows, heads of
/// `heads` = (q heads, kv heads, head size), the same padding, a table no wider than a head —
/// and the pairs the table rotates per head.
fn rope_qk_half(op: &str, q: &CudaTensor, k: &CudaTensor, table: &CudaTensor, heads: (usize, usize, usize)) -> usize {
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
    fn kv_slots(&self, kv: &CudaKvCache, batch: &ForwardBatch, padded: usize) -> Meta {
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
        self.bytes_read.fetch_add(attended * per_position, std::sync::atomic::Ordering::Relaxed);
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
        // Decode rows on at least a block per SM take one-warp blocks on the tensor cores: a decode
        // row's (row, head) pairs fill one warp's m16 tile at most, and a 4-warp block would leave
        // three warps idle and its shared memory and registers would keep two blocks an SM (one
        // live warp each; Nsight Compute on the 64-row 8B step: 12.5% occupancy, 7.3 cycles between
        // a warp's instructions). The same walk and arithmetic, one tile buffer: the same bits.
        let warp_blocks = mma
            && self.attention_warp_blocks
            && rows_per_block == 1
            && group <= 16
            && padded * spec.num_kv_heads >= self.tma.sms;
        let warps = if warp_blocks { 1 } else { ATT_WARPS };
        let (name, smem) = if mma {
            (
                format!("attention_mma_{}_{}", spec.head_dim, kv.store.name()),
                attention_mma_smem(spec.head_dim, kv.store, warps),
            )
        } else {
            (format!("attention_{}_{}", spec.head_dim, kv.store.name()), attention_smem(spec.head_dim, kv.store))
        };
        let split_len = if mma { self.atm_split } else { ATT_SPLIT };
        let longest = batch.positions.iter().map(|&p| p as usize + 1).max().unwrap_or(1);
        // Split-KV only while the unsplit blocks would leave the device short of two a SM (three
        // one-warp blocks): at 64 decode rows of the 8B (512 4-warp blocks) splitting lost 3% (5,372
        // steady tokens/s against 5,546 walking, receipts/bench-cuda-llama8b-attention-splits.txt).
        // Same bits either way.
        let fill = if warp_blocks { ATTENTION_FILL_WARP_BLOCKS_PER_SM } else { ATTENTION_FILL_BLOCKS_PER_SM };
        let fills = padded * spec.num_kv_heads >= fill * self.tma.sms;
        let splits = (rows_per_block == 1 && self.attention_split_kv && !fills)
            .then(|| split_kv(padded * num_heads, spec.head_dim, longest, split_len))
            .flatten();
        let part = splits.map(|s| self.alloc(split_states_bytes(padded * num_heads, spec.head_dim, s)));
        let cfg = LaunchConfig {
            grid_dim: (padded.div_ceil(rows_per_block) as u32, spec.num_kv_heads as u32, splits.unwrap_or(1) as u32),
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
        // The tensor-core kernel takes its split length.
        let l = if mma { l.i32(split_len as i32) } else { l };
        self.submit(l);
        if let (Some(part), Some(splits)) = (part, splits) {
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

#[cfg(test)]
mod tests {
    use super::split_kv;

    #[test]
    fn decode_splits_are_powers_of_two_within_the_state_budget() {
        // One split: the walk, no merge; then powers of two of the splits the context spans.
        assert_eq!(split_kv(9, 64, 64, 64), None);
        assert_eq!(split_kv(9, 64, 65, 64), Some(2));
        assert_eq!(split_kv(9, 64, 144, 64), Some(4));
        assert_eq!(split_kv(32, 128, 576, 256), Some(4));
        // 64 rows of 32 heads at 128K positions would keep 2,048 states of 130 floats per pair
        // (2.2 GB): they walk instead, as they do from the budget on.
        assert_eq!(split_kv(64 * 32, 128, 131_072, 64), None);
        let last = (1..=20).map(|e| 1usize << e).filter(|&n| split_kv(64 * 32, 128, n, 64).is_some()).max();
        // 32 splits of 2,048 pairs' states (1 MiB per split) fit in 64 MiB, 64 do not: the
        // f32 kernel's one-tile splits stop at 2,048 positions there (512 blocks walk instead).
        assert_eq!(last, Some(2048));
        assert_eq!(split_kv(64 * 32, 128, 8192, 256), Some(32));
    }

    #[test]
    fn the_tensor_core_split_is_a_multiple_of_a_tile() {
        use super::{ATM_SPLIT, atm_split_from};
        assert_eq!(atm_split_from(None).unwrap(), ATM_SPLIT);
        assert_eq!(atm_split_from(Some("64")).unwrap(), 64);
        assert_eq!(atm_split_from(Some("1024")).unwrap(), 1024);
        for bad in ["0", "96", "-64", "x", ""] {
            let e = atm_split_from(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("PLUMB_CUDA_ATM_SPLIT") && e.contains("multiple of 64"), "{bad}: {e}");
        }
    }
}
