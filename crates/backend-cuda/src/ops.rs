//! The op groups of `plumb_core::backend` on the CUDA backend: shape checks on the host, then one
//! kernel launch per op (see `kernels/*.cu` for each op's canonical arithmetic).
//! No launch parameter reads the token count except to cover every row: block shapes and
//! reduction trees come from the model's shapes alone.

use crate::kv::{CudaKvCache, attention_meta};
use crate::{CudaBackend, CudaTensor, CudaWeight, grid_1d, type_suffix};
use cudarc::driver::{LaunchArgs, LaunchConfig, PushKernelArg};
use plumb_core::{AttentionOps, BackendError, ElementwiseOps, ForwardBatch, LinearOps, RopeOps};

/// Output features per `linear` block and activation rows per block (kernels/linear.cu).
const LIN_WARPS: usize = 8;
const LIN_ROWS: usize = 16;
/// (row, head) units per attention block (kernels/attention.cu).
const ATT_WARPS: usize = 4;
/// The largest head the attention kernel's per-lane registers hold.
pub const MAX_HEAD_DIM: usize = 256;

fn launch(mut args: LaunchArgs<'_>, cfg: LaunchConfig, op: &str) {
    // SAFETY: every launch site passes the argument list its kernel declares (pointers to device
    // buffers of the sizes the kernel indexes, checked by the shape asserts before it, then the
    // scalars as i32/u64/f32 in the declared order).
    unsafe { args.launch(cfg) }.unwrap_or_else(|e| panic!("CUDA launch of `{op}` failed: {e}"));
}

impl CudaBackend {
    fn linear_into(&self, x: &CudaTensor, w: &CudaWeight, out: &mut CudaTensor) {
        assert_eq!((x.cols, out.rows, out.cols), (w.cols, x.rows, w.rows), "linear `{}`: shape mismatch", w.name);
        if x.rows == 0 || w.rows == 0 {
            return;
        }
        let name = format!("linear_{}", type_suffix(w.ty).expect("loaded weights have kernels"));
        let (row_bytes, m, n, k) = (w.row_bytes as u64, x.rows as i32, w.rows as i32, w.cols as i32);
        let mut b = self.stream.launch_builder(self.kernel(&name));
        b.arg(&x.buf).arg(&w.bytes).arg(&row_bytes).arg(&mut out.buf).arg(&m).arg(&n).arg(&k);
        let cfg = LaunchConfig {
            grid_dim: (w.rows.div_ceil(LIN_WARPS) as u32, x.rows.div_ceil(LIN_ROWS) as u32, 1),
            block_dim: (LIN_WARPS as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(b, cfg, &name);
    }
}

impl LinearOps for CudaBackend {
    fn linear(&self, x: &CudaTensor, w: &CudaWeight, out: &mut CudaTensor) {
        self.linear_into(x, w, out);
    }

    fn embed(&self, ids: &[u32], table: &CudaWeight, out: &mut CudaTensor) {
        assert_eq!((out.rows, out.cols), (ids.len(), table.cols), "embed `{}`: shape mismatch", table.name);
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= table.rows) {
            panic!("token id {id} outside `{}`", table.name);
        }
        if ids.is_empty() {
            return;
        }
        let name = format!("embed_{}", type_suffix(table.ty).expect("loaded weights have kernels"));
        let dev_ids = self.upload_u32(ids);
        let (row_bytes, cols) = (table.row_bytes as u64, table.cols as i32);
        let mut b = self.stream.launch_builder(self.kernel(&name));
        b.arg(&dev_ids).arg(&table.bytes).arg(&row_bytes).arg(&mut out.buf).arg(&cols);
        let cfg = LaunchConfig { grid_dim: (ids.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        launch(b, cfg, &name);
    }

    fn gather_rows(&self, x: &CudaTensor, rows: &[u32], out: &mut CudaTensor) {
        assert_eq!((out.rows, out.cols), (rows.len(), x.cols), "gather_rows: shape mismatch");
        assert!(rows.iter().all(|&r| (r as usize) < x.rows), "gather_rows: row out of range");
        if rows.is_empty() {
            return;
        }
        let dev_rows = self.upload_u32(rows);
        let cols = x.cols as i32;
        let mut b = self.stream.launch_builder(self.kernel("gather_rows"));
        b.arg(&x.buf).arg(&dev_rows).arg(&mut out.buf).arg(&cols);
        let cfg = LaunchConfig { grid_dim: (rows.len() as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        launch(b, cfg, "gather_rows");
    }
}

impl ElementwiseOps for CudaBackend {
    fn rms_norm(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        let w = weight.dense.as_ref().expect("norm weights are vectors");
        assert_eq!(
            (x.cols, out.rows, out.cols),
            (weight.cols, x.rows, x.cols),
            "rms_norm `{}`: shape mismatch",
            weight.name
        );
        if x.rows == 0 {
            return;
        }
        let cols = x.cols as i32;
        let mut b = self.stream.launch_builder(self.kernel("rms_norm"));
        b.arg(&x.buf).arg(w).arg(&eps).arg(&mut out.buf).arg(&cols);
        let cfg = LaunchConfig { grid_dim: (x.rows as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        launch(b, cfg, "rms_norm");
    }

    fn rms_norm_heads(&self, x: &CudaTensor, weight: &CudaWeight, eps: f32, out: &mut CudaTensor) {
        let w = weight.dense.as_ref().expect("norm weights are vectors");
        let d = weight.cols;
        assert!(
            d > 0 && x.cols.is_multiple_of(d) && (out.rows, out.cols) == (x.rows, x.cols),
            "rms_norm_heads `{}`: shape mismatch",
            weight.name
        );
        let num_slices = x.rows * (x.cols / d);
        if num_slices == 0 {
            return;
        }
        // [num_rows, num_heads · head_dim] is [num_rows · num_heads, head_dim] in memory, so the
        // row kernel normalizes each head with the same arithmetic as a whole-row RMSNorm.
        let cols = d as i32;
        let mut b = self.stream.launch_builder(self.kernel("rms_norm"));
        b.arg(&x.buf).arg(w).arg(&eps).arg(&mut out.buf).arg(&cols);
        let cfg = LaunchConfig { grid_dim: (num_slices as u32, 1, 1), block_dim: (256, 1, 1), shared_mem_bytes: 0 };
        launch(b, cfg, "rms_norm");
    }

    fn add(&self, acc: &mut CudaTensor, x: &CudaTensor) {
        assert_eq!((acc.rows, acc.cols), (x.rows, x.cols), "add: shape mismatch");
        let n = (x.rows * x.cols) as u64;
        let mut b = self.stream.launch_builder(self.kernel("add"));
        b.arg(&mut acc.buf).arg(&x.buf).arg(&n);
        launch(b, grid_1d(n as usize), "add");
    }

    fn add_bias(&self, x: &mut CudaTensor, bias: &CudaWeight) {
        let bv = bias.dense.as_ref().expect("biases are vectors");
        assert_eq!(x.cols, bias.cols, "add_bias `{}`: shape mismatch", bias.name);
        let (n, cols) = ((x.rows * x.cols) as u64, x.cols.max(1) as i32);
        let mut b = self.stream.launch_builder(self.kernel("add_bias"));
        b.arg(&mut x.buf).arg(bv).arg(&n).arg(&cols);
        launch(b, grid_1d(n as usize), "add_bias");
    }

    fn silu_mul(&self, gate: &CudaTensor, up: &CudaTensor, out: &mut CudaTensor) {
        assert_eq!((gate.rows, gate.cols), (up.rows, up.cols), "silu_mul: shape mismatch");
        assert_eq!((gate.rows, gate.cols), (out.rows, out.cols), "silu_mul: shape mismatch");
        let n = (gate.rows * gate.cols) as u64;
        let mut b = self.stream.launch_builder(self.kernel("silu_mul"));
        b.arg(&gate.buf).arg(&up.buf).arg(&mut out.buf).arg(&n);
        launch(b, grid_1d(n as usize), "silu_mul");
    }
}

impl RopeOps for CudaBackend {
    fn rope_table(&self, positions: &[u32], inv_freq: &[f64]) -> CudaTensor {
        // Angles and trigonometry in f64 on the host, once per step: the one f32 table every path
        // (prefill, decode, any chunking) reads.
        let half = inv_freq.len();
        let mut table = vec![0f32; positions.len() * 2 * half];
        for (row, &p) in table.chunks_exact_mut(2 * half.max(1)).zip(positions) {
            for (i, &f) in inv_freq.iter().enumerate() {
                let angle = p as f64 * f;
                row[i] = angle.cos() as f32;
                row[half + i] = angle.sin() as f32;
            }
        }
        use plumb_core::Backend;
        self.upload(&table, positions.len(), 2 * half)
    }

    fn rope(&self, x: &mut CudaTensor, table: &CudaTensor, num_heads: usize, head_dim: usize) {
        assert_eq!((x.rows, x.cols), (table.rows, num_heads * head_dim), "rope: shape mismatch");
        let half = table.cols / 2;
        assert!(2 * half <= head_dim, "rope: the table rotates more dims than a head has");
        let n = x.rows * num_heads * half;
        if n == 0 {
            return;
        }
        let (rows, cols, half_i, heads, hd) =
            (x.rows as i32, x.cols as i32, half as i32, num_heads as i32, head_dim as i32);
        let mut b = self.stream.launch_builder(self.kernel("rope"));
        b.arg(&mut x.buf).arg(&table.buf).arg(&rows).arg(&cols).arg(&half_i).arg(&heads).arg(&hd);
        launch(b, grid_1d(n), "rope");
    }

    fn rope_rotate_half(&self, x: &mut CudaTensor, table: &CudaTensor, num_heads: usize, head_dim: usize) {
        assert_eq!((x.rows, x.cols), (table.rows, num_heads * head_dim), "rope_rotate_half: shape mismatch");
        let half = table.cols / 2;
        assert!(2 * half <= head_dim, "rope_rotate_half: the table rotates more dims than a head has");
        let n = x.rows * num_heads * half;
        if n == 0 {
            return;
        }
        let (rows, cols, half_i, heads, hd) =
            (x.rows as i32, x.cols as i32, half as i32, num_heads as i32, head_dim as i32);
        let mut b = self.stream.launch_builder(self.kernel("rope_rotate_half"));
        b.arg(&mut x.buf).arg(&table.buf).arg(&rows).arg(&cols).arg(&half_i).arg(&heads).arg(&hd);
        launch(b, grid_1d(n), "rope_rotate_half");
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
        let rows = batch.num_rows();
        assert_eq!((k.rows, k.cols, v.rows, v.cols), (rows, len, rows, len), "write_kv: shape mismatch");
        let num_slots = kv.spec.num_blocks * kv.spec.block_size;
        assert!(batch.slot_mapping.iter().all(|&s| (s as usize) < num_slots), "write_kv: slot outside the cache");
        if rows == 0 {
            return;
        }
        let slots = self.upload_u32(&batch.slot_mapping);
        let (rows_i, len_i) = (rows as i32, len as i32);
        let CudaKvCache { k: kc, v: vc, .. } = kv;
        let mut b = self.stream.launch_builder(self.kernel("write_kv"));
        b.arg(&k.buf).arg(&v.buf).arg(&slots).arg(&mut kc[layer]).arg(&mut vc[layer]).arg(&rows_i).arg(&len_i);
        launch(b, grid_1d(rows * len), "write_kv");
    }

    fn attention(
        &self,
        q: &CudaTensor,
        kv: &CudaKvCache,
        layer: usize,
        batch: &ForwardBatch,
        num_heads: usize,
        scale: f32,
        out: &mut CudaTensor,
    ) {
        let spec = &kv.spec;
        let rows = batch.num_rows();
        assert_eq!((q.rows, q.cols), (rows, num_heads * spec.head_dim), "attention: q shape");
        assert_eq!((out.rows, out.cols), (q.rows, q.cols), "attention: out shape");
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
        if rows == 0 {
            return;
        }
        let meta = self.upload_u32(&attention_meta(batch));
        let (rows_i, lanes_i, heads_i, kv_heads_i, hd_i, bs_i) = (
            rows as i32,
            batch.lanes.len() as i32,
            num_heads as i32,
            spec.num_kv_heads as i32,
            spec.head_dim as i32,
            spec.block_size as i32,
        );
        let mut b = self.stream.launch_builder(self.kernel("attention"));
        b.arg(&q.buf)
            .arg(&kv.k[layer])
            .arg(&kv.v[layer])
            .arg(&meta)
            .arg(&rows_i)
            .arg(&lanes_i)
            .arg(&heads_i)
            .arg(&kv_heads_i)
            .arg(&hd_i)
            .arg(&bs_i)
            .arg(&scale)
            .arg(&mut out.buf);
        let cfg = LaunchConfig {
            grid_dim: ((rows * num_heads).div_ceil(ATT_WARPS) as u32, 1, 1),
            block_dim: (ATT_WARPS as u32 * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        launch(b, cfg, "attention");
    }
}
