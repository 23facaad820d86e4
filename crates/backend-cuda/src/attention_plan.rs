//! How an attention launch is laid out on the CUDA backend: block shapes and shared memory of the
//! two attention kernels (`kernels/attention.cu`, `kernels/attention_mma.cu`), the tensor-core
//! kernel's split length, and when decode rows take one-warp blocks or split their contexts over
//! blocks. Free choices, except the split length (part of the canonical form): the bits of every
//! (row, head) are the same whichever the launch (`tests/row_invariance.rs`).

use plumb_core::KvStore;

/// Warps per attention block and (row, head) pairs per warp in one walk (kernels/attention.cu).
pub(crate) const ATT_WARPS: usize = 4;
pub(crate) const ATT_PAIRS: usize = 4;
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
pub(crate) const ATM_PAIRS: usize = 64;
/// Positions per split of the tensor-core attention's canonical form unless
/// `PLUMB_CUDA_ATM_SPLIT` names another multiple of a tile (`CudaBackend::atm_split`), and of the
/// f32 kernel's (`ATT_SPLIT`: a tile). 256 measured against 128 and 64 with blocks walking several
/// splits (`splits_per_block`): shorter splits won 2–5% at one request of the 8B and lost 3% at
/// 32 rows and 4–10% at one request's depth 4,096, where the fold takes 2–4× the states
/// (receipts/bench-cuda-llama8b-attention-walks.txt).
pub(crate) const ATM_SPLIT: usize = 256;
pub(crate) const ATT_SPLIT: usize = 64;

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
/// Shared memory of a warpgroup-MMA attention block (`attention_wgmma.cu`, `atw_smem_bytes`): two
/// buffers of the K and V tiles and q's pieces (2 for f16, 3 for bf16), each 64 rows of
/// head_dim 16-bit values as wgmma core matrices (no padding).
pub(crate) fn attention_wgmma_smem(head_dim: usize, store: KvStore) -> usize {
    let pieces = if store == KvStore::F16 { 2 } else { 3 };
    (4 + pieces) * 64 * head_dim * 2
}
/// Warps per attention block, and whether decode rows may split their contexts over blocks, for
/// a launch of `blocks` (rows × KV heads, before any split) with `rows_per_block` rows of GQA
/// groups of `group` heads on `sms` SMs; `one_warp`: the tensor-core kernel, one-warp blocks on.
/// Free choices: the walk and its arithmetic are the same either way, so are the bits.
/// - Decode rows on at least a block per SM take one-warp blocks: a decode row's (row, head) pairs
///   fill one warp's m16 tile at most, and a 4-warp block would leave three warps idle while its
///   shared memory and registers keep two blocks an SM (one live warp each; Nsight Compute on the
///   64-row 8B step: 12.5% occupancy, 7.3 cycles between a warp's instructions,
///   receipts/ncu-cuda-8b-conc64-decode.txt). One-warp blocks measured 64.9 µs a layer there.
/// - Decode rows split only while their blocks would leave the device short of two 4-warp blocks
///   an SM, or three one-warp ones: at 64 decode rows of the 8B (512 4-warp blocks) splitting lost
///   3% (5,372 steady tokens/s against 5,546 walking, receipts/bench-cuda-llama8b-attention-splits.txt);
///   at 32 rows on one-warp blocks it won 7% (3,769 against 3,514,
///   receipts/bench-cuda-llama8b-warp-blocks-early-weights.txt).
pub(crate) fn attention_blocks(
    one_warp: bool,
    rows_per_block: usize,
    group: usize,
    blocks: usize,
    sms: usize,
) -> (usize, bool) {
    let decode = rows_per_block == 1;
    let warps = if one_warp && decode && group <= 16 && blocks >= sms { 1 } else { ATT_WARPS };
    (warps, decode && blocks < fill_blocks(warps, sms))
}

/// Blocks of `warps` warps that keep `sms` SMs filled (`ATTENTION_FILL_*`).
fn fill_blocks(warps: usize, sms: usize) -> usize {
    sms * if warps == 1 { ATTENTION_FILL_WARP_BLOCKS_PER_SM } else { ATTENTION_FILL_BLOCKS_PER_SM }
}

/// The most positions one block of a split decode launch walks: the layout measured best from 8
/// to 64 rows of the 8B when it was also the split length (receipts/bench-cuda-llama8b-attention-splits.txt,
/// bench-cuda-llama8b-attention-fold-graph-segments.txt).
pub(crate) const ATM_WALK: usize = 256;

/// How many consecutive splits of a decode row one block of a split launch walks, for `states`
/// splits a row (a power of two) on `base_blocks` blocks before the split: one each while the
/// blocks stay within what fills the SMs (one request: every split its own block), else doubling
/// up to `max_walk` positions a block (`ATM_WALK`; the f32 kernel walks one split a block). A
/// free choice: a block writes each of its splits' states, reset between them as a fresh block
/// starts, and the fold takes them in split order whoever wrote them — the same bits.
pub(crate) fn splits_per_block(
    states: usize,
    base_blocks: usize,
    warps: usize,
    sms: usize,
    split_len: usize,
    max_walk: usize,
) -> usize {
    let most = (max_walk / split_len).clamp(1, states.max(1));
    let fill = fill_blocks(warps, sms);
    let mut k = 1;
    while 2 * k <= most && base_blocks * states.div_ceil(k) > fill {
        k *= 2;
    }
    k
}

/// The most bytes of split states one attention call may keep for their fold (beyond, its rows
/// walk their splits on one block each: the same bits).
const SPLIT_KV_PART_BYTES: usize = 64 << 20;

/// How many blocks decode rows split their context over (`None`: each row's block walks it all).
/// Decode rows (a block each) may split their context over blocks, one per split of the kernel's
/// form (`split_len` positions), and the splits fold in order (on the tensor cores by the last of
/// a row's blocks to finish, else by `attention_merge`): a free choice,
/// the walk folds them with the same arithmetic. The count is a power of two, so a decode step's
/// graph changes only when the longest context doubles; a context of one split needs no merge
/// (one launch less per layer); and the split states of `pairs` (row, head) pairs stay within
/// `SPLIT_KV_PART_BYTES`, which long contexts at many rows would pass (they have blocks enough).
pub(crate) fn split_kv(pairs: usize, head_dim: usize, longest: usize, split_len: usize) -> Option<usize> {
    let splits = longest.div_ceil(split_len).next_power_of_two();
    (splits > 1 && split_states_bytes(pairs, head_dim, splits) <= SPLIT_KV_PART_BYTES).then_some(splits)
}

/// Bytes of the split states a split decode launch folds: per (row, head) pair and split, the
/// unnormalised output and the running max and sum, in f32.
pub(crate) fn split_states_bytes(pairs: usize, head_dim: usize, splits: usize) -> usize {
    pairs * splits * (head_dim + 2) * 4
}

/// The largest head the attention kernel's per-lane registers hold.
pub const MAX_HEAD_DIM: usize = 256;

#[cfg(test)]
mod tests {
    use super::split_kv;

    #[test]
    fn decode_rows_take_one_warp_blocks_once_they_cover_the_sms() {
        use super::attention_blocks;
        // The 8B's 8 KV heads on an H200's 132 SMs: (warps, may split).
        let sms = 132;
        assert_eq!(attention_blocks(true, 1, 4, 8, sms), (4, true)); // one request
        assert_eq!(attention_blocks(true, 1, 4, 8 * 8, sms), (4, true));
        assert_eq!(attention_blocks(true, 1, 4, 32 * 8, sms), (1, true)); // 256 < 3 × 132
        assert_eq!(attention_blocks(true, 1, 4, 64 * 8, sms), (1, false));
        // Off, or a group wider than one m16 tile: 4-warp blocks, split below 2 × 132.
        assert_eq!(attention_blocks(false, 1, 4, 32 * 8, sms), (4, true));
        assert_eq!(attention_blocks(false, 1, 4, 64 * 8, sms), (4, false));
        assert_eq!(attention_blocks(true, 1, 18, 64 * 8, sms), (4, false));
        // Prefill chunks (several rows a block) never split and keep 4 warps.
        assert_eq!(attention_blocks(true, 16, 4, 4096, sms), (4, false));
        assert_eq!(attention_blocks(true, 16, 4, 8, sms), (4, false));
    }

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
    #[test]
    fn split_blocks_walk_one_split_until_they_would_overfill_the_sms() {
        use super::splits_per_block;
        let sms = 132;
        // One request of the 8B (8 KV heads) at ~600 positions, splits of 64: 16 states, each
        // its own block (128 four-warp blocks).
        assert_eq!(splits_per_block(16, 8, 4, sms, 64, 256), 1);
        // Eight requests: 64 base blocks take four splits each (256 blocks, the 256-position walk).
        assert_eq!(splits_per_block(16, 64, 4, sms, 64, 256), 4);
        // Four requests: two splits a block (256 blocks).
        assert_eq!(splits_per_block(16, 32, 4, sms, 64, 256), 2);
        // 32 requests on one-warp blocks: the longest walk (1,024 blocks), as before splits and
        // walks were apart.
        assert_eq!(splits_per_block(16, 256, 1, sms, 64, 256), 4);
        // Splits as long as the walk, or the f32 kernel's one split a block: one.
        assert_eq!(splits_per_block(4, 64, 4, sms, 256, 256), 1);
        assert_eq!(splits_per_block(16, 64, 4, sms, 64, 64), 1);
        // Never more splits a block than a row has.
        assert_eq!(splits_per_block(2, 512, 4, sms, 64, 256), 2);
    }
}
