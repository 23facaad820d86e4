//! A paged KV cache filled for the attention bit tests: every lane's history written in chunks.
#![allow(dead_code)]

use plumb_backend_cuda::CudaBackend;
use plumb_core::{AttentionOps, Backend, ForwardBatch, KvSpec, LaneStateSpec, LaneView};

/// Lanes of `lens` positions over KV blocks of `block` positions, handed out in a scrambled
/// order (block i of the pool goes out as i · stride mod n, a permutation: the stride is moved up
/// to the next one prime to n), as a pool that has served other requests would; and the spec of
/// one layer of such a cache with `num_kv_heads` heads of `head_dim`.
pub fn scrambled_lanes(
    lens: &[usize],
    block: usize,
    stride: usize,
    num_kv_heads: usize,
    head_dim: usize,
) -> (Vec<LaneView>, KvSpec) {
    let num_blocks: usize = lens.iter().map(|l| l.div_ceil(block)).sum();
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let stride = (stride..).find(|&s| gcd(s, num_blocks) == 1).expect("a stride prime to the pool");
    let mut ids: Vec<u32> = (0..num_blocks).map(|i| ((i * stride) % num_blocks) as u32).collect();
    let mut lanes = Vec::new();
    for len in lens {
        let rest = ids.split_off(len.div_ceil(block));
        lanes.push(LaneView { block_table: std::mem::replace(&mut ids, rest) });
    }
    let spec = KvSpec {
        num_layers: 1,
        num_kv_heads,
        head_dim,
        block_size: block,
        num_blocks,
        lane_state: LaneStateSpec::NONE,
    };
    (lanes, spec)
}

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
