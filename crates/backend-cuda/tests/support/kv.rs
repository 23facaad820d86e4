//! A paged KV cache filled for the attention bit tests: every lane's history written in chunks.
#![allow(dead_code)]

use plumb_backend_cuda::CudaBackend;
use plumb_core::{AttentionOps, Backend, ForwardBatch, KvSpec, LaneView};

/// Writes every lane's history into a fresh cache, `chunk(step)` rows at a time.
pub fn filled_cache(
    b: &CudaBackend,
    k: &[f32],
    v: &[f32],
    lanes: &[LaneView],
    spec: &KvSpec,
    lens: &[usize],
    chunk: &dyn Fn(usize) -> usize,
) -> plumb_backend_cuda::CudaKvCache {
    let width = spec.num_kv_heads * spec.head_dim;
    let mut all = ForwardBatch { block_size: spec.block_size, lanes: lanes.to_vec(), ..Default::default() };
    for (lane, &len) in lens.iter().enumerate() {
        for pos in 0..len {
            all.push_row(lane, 0, pos);
        }
    }
    let mut kv = b.new_kv_cache(spec);
    let (mut start, mut step) = (0, 0);
    while start < all.num_rows() {
        let end = (start + chunk(step)).min(all.num_rows());
        let part = ForwardBatch {
            token_ids: all.token_ids[start..end].to_vec(),
            positions: all.positions[start..end].to_vec(),
            row_lane: all.row_lane[start..end].to_vec(),
            slot_mapping: all.slot_mapping[start..end].to_vec(),
            lanes: lanes.to_vec(),
            state_slots: vec![],
            state_snapshots: vec![],
            logits_rows: vec![],
            block_size: spec.block_size,
        };
        let n = end - start;
        let (kt, vt) =
            (b.upload(&k[start * width..end * width], n, width), b.upload(&v[start * width..end * width], n, width));
        b.write_kv(&mut kv, 0, &kt, &vt, &part);
        (start, step) = (end, step + 1);
    }
    kv
}
