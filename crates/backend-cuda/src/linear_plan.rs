//! How the CUDA backend plans a `linear` (ops_linear.rs launches it): the tensor-core kernels'
//! row limits and shared memory, the fold chunk of a weight's K (`fold_chunk`), how K is split
//! over blocks for few rows (`decode_split`, `keeps_whole_k`), and the k-permuted storage of
//! tensor-core weights (`kperm_bytes`). None of it changes a bit: the chunk partials are folded in
//! chunk order whatever the split.

/// The tensor-core `linear`: the decode kernel (kernels/linear_mma.cu) takes up to this many
/// rows, staging two chunks of 64 weight rows and of the rows in at most this much shared
/// memory; the wgmma kernel (kernels/linear_wgmma.cu) takes more rows, staging six stages of
/// 64 K for 128 weight rows and 128 token rows. Both compute the same bits.
pub(crate) const MMA_DECODE_MAX_ROWS: usize = 64;
/// Up to this many rows the TMA kernel's last block of a feature tile folds a split K's chunk
/// partials (128 features × rows × chunks loads for one block); more rows fold in `fold_chunks`.
pub(crate) const TMA_FOLD_IN_KERNEL_ROWS: usize = 4;
/// Blocks the decode kernel aimed for before its split followed the device's resident blocks
/// (`PLUMB_CUDA_DECODE_SPLIT=fixed` brings that choice back, for measuring).
pub(crate) const DECODE_BLOCKS: usize = 264;
/// The decode kernel's modelled pipeline fill, in chunk times per block (`decode_split`).
pub(crate) const DECODE_FILL: f64 = 1.0;
/// From this many 8-row groups on, the wide decode kernel (two warps per 16 features, 256
/// threads) runs: each warp's chain of dependent mma steps is half as long. Same-run on the H200
/// at the 8B's shapes: 1.19–1.44× faster at 16 and 32 rows, 1.48–1.51× at 64; one group has
/// nothing to share.
pub(crate) const DECODE_WIDE_GROUPS: usize = 2;
pub(crate) const MMA_DECODE_SMEM: usize = 2 * (64 + MMA_DECODE_MAX_ROWS) * 512;
pub(crate) const WGMMA_SMEM: usize = 6 * 2 * 128 * 64 * 2;

/// Shared memory of a decode-kernel block for `groups` groups of 8 rows: two stages of 64
/// weight rows and the rows, 512 bytes each.
pub(crate) fn decode_smem(groups: usize) -> usize {
    2 * (64 + 8 * groups) * 512
}

/// The fold chunks (GPU.md's Kc for bf16): 256, the unit the decode kernel stages, and 1,024 for
/// long K (the TMA kernels unroll a chunk's stages: one instance per chunk).
pub(crate) const FOLD_SHORT_KC: usize = 256;
pub(crate) const FOLD_LONG_KC: usize = 1024;
/// The K from which a tensor-core weight is folded in chunks of 1,024: four of them or more
/// (`fold_chunk`; `PLUMB_CUDA_KC_LONG_FROM` overrides it, for measuring).
pub(crate) const FOLD_LONG_FROM: usize = 4 * FOLD_LONG_KC;

/// The fold chunk (GPU.md's Kc) of a tensor-core weight whose K is `k`: 1,024 elements from
/// `long_from` on, else 256. Every kernel that computes the weight's products cuts K the same way
/// (kernels/linear_mma.cu), so the bits follow K (and the backend's setting) alone, never the rows
/// or the split. Long chunks fold fewer partials: a split K writes each chunk's partial per row
/// (rows × 4 bytes a feature, written and read back) against its weights (Kc × 2 bytes a
/// feature), and whole K folds each chunk into the running sum. Measured on the H200 at the 8B's
/// shapes against chunks of 256 everywhere (`gemm_8b`, receipts/gemm-cuda-llama8b-fold-chunks.txt):
/// one row q|k|v 16.7 against 17.0 µs, o 9.1 / 9.4, gate|up 60.4 / 61.1, down 35.8 / 38.3; down at
/// 64 rows 55.1 against 64.3 (split), gate|up 72.1 against 74.3 (whole).
pub(crate) fn fold_chunk(k: usize, long_from: usize) -> usize {
    if k >= long_from { FOLD_LONG_KC } else { FOLD_SHORT_KC }
}

/// Chunks of K per block of the decode kernel, for `tiles` tiles of 64 features over
/// `num_chunks` chunks of `units` × 256 elements and `rows` rows, on a device that keeps `slots`
/// such blocks resident: the split with the least modelled time, in times of 256 elements. The
/// blocks run in waves of `slots`; a wave lasts as long as a block's chunks plus `fill` of
/// pipeline fill; when K is split, each chunk also costs its partials' traffic (4-byte values of
/// 64 features per row, written and read back, against 64 × 256 bf16 weights: rows / 64 of 256
/// elements' time). Ties go to fewer splits. Whole waves
/// matter at one row: 448 tiles of gate‖up over 396 slots of an H200 left one SM in eight idle
/// for a second wave as long as the first (89 µs; split in 4, 76 µs). A weight with two waves of
/// whole tiles or more keeps whole K per block: its tail is a small part of its time, and a split
/// only adds the fold (the LM head, 2,004 tiles: 241 µs whole, 280 µs split in 2).
pub(crate) fn decode_split(
    tiles: usize,
    num_chunks: usize,
    units: usize,
    slots: usize,
    rows: usize,
    fill: f64,
) -> usize {
    if tiles >= 2 * slots {
        return num_chunks;
    }
    let mut best = (f64::INFINITY, num_chunks);
    for per_split in (1..=num_chunks).rev() {
        let splits = num_chunks.div_ceil(per_split);
        let chunk = if splits > 1 { units as f64 + rows as f64 / 64.0 } else { units as f64 };
        let waves = (tiles * splits).div_ceil(slots.max(1));
        let cost = waves as f64 * (per_split as f64 * chunk + fill);
        if cost < best.0 * (1.0 - 1e-9) {
            best = (cost, per_split);
        }
    }
    best.1
}

/// Whether the TMA `linear` keeps whole K per block at `rows` rows over `num_chunks` chunks of
/// `kc`, whatever `decode_split` models: from 32 rows on, for K of four chunks or fewer (a split
/// leaves tasks of a chunk or two, measured slower) and wherever a chunk's
/// partials (rows × 4 bytes a feature, written and read back) pass a quarter of its weight bytes
/// (kc × 2 a feature: 16 × rows > kc). Measured on the H200 at the 8B's shapes, every split
/// against none: with chunks of 256 (receipts/gemm-cuda-llama8b-split-sweep.txt) a split's
/// partials, written, read back and folded per row, cost more than the model's traffic term
/// says — at 64 rows q|k|v took 28.0 µs whole and 41.5 split, o 23.1 and 26.7; with chunks of
/// 1,024 (receipts/gemm-cuda-llama8b-fold-chunks.txt) K = 4,096 still ran best whole at 32 and 64
/// rows (64 rows: q|k|v 22.6 against 30.3–31.2 split, o 20.0 against 21.9–23.5, gate|up 72.1
/// against 106.9–111.3), while down (14 chunks) gained from its split (64 rows: 55.1 against 61.4
/// whole; 32 rows: 45.8 against 56.4), as every shape does at 8 and 16 rows. The same bits either
/// way.
pub(crate) fn keeps_whole_k(rows: usize, num_chunks: usize, kc: usize) -> bool {
    rows >= 32 && (num_chunks <= 4 || 16 * rows > kc)
}

/// A bf16 matrix's bytes k-permuted as the tensor-core kernels read them (kernels/linear_mma.cu,
/// `kperm`): in each group of 32 elements, word j = 4t + c moves to word 4c + t. Rows are whole
/// groups (`linear_inputs` admits K multiples of 32 only).
pub(crate) fn kperm_bytes(bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len().is_multiple_of(64), "k-permuted rows are whole groups of 32 bf16");
    let mut out = vec![0u8; bytes.len()];
    for (src, dst) in bytes.chunks_exact(64).zip(out.chunks_exact_mut(64)) {
        for j in 0..16 {
            let to = 4 * (j % 4) + j / 4;
            dst[4 * to..4 * to + 4].copy_from_slice(&src[4 * j..4 * j + 4]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{decode_split, fold_chunk, kperm_bytes};

    #[test]
    fn long_k_takes_long_fold_chunks() {
        // The default model (K = 576, 1,536) and the 1B's K = 2,048 keep chunks of 256; the 8B's
        // K = 4,096 (4 chunks) and 14,336 (14), and the 1B's down (8,192: 8) take 1,024.
        for (k, kc) in [(576, 256), (1536, 256), (2048, 256), (4064, 256), (4096, 1024), (8192, 1024), (14336, 1024)] {
            assert_eq!(fold_chunk(k, super::FOLD_LONG_FROM), kc, "K = {k}");
        }
        assert_eq!(fold_chunk(14336, usize::MAX), 256);
        assert_eq!(fold_chunk(576, 0), 1024);
    }

    /// The stored element of element k, as `kperm` in kernels/linear_mma.cu computes it.
    fn kperm(k: usize) -> usize {
        let j = (k % 32) / 2;
        (k / 32) * 32 + 2 * (4 * (j % 4) + j / 4) + k % 2
    }

    #[test]
    fn kperm_bytes_moves_each_element_where_the_kernels_read_it() {
        let elements: Vec<u16> = (0..256u16).map(|i| i.wrapping_mul(40503)).collect();
        let bytes: Vec<u8> = elements.iter().flat_map(|e| e.to_le_bytes()).collect();
        let stored = kperm_bytes(&bytes);
        for (k, &e) in elements.iter().enumerate() {
            let s = kperm(k);
            assert_eq!(u16::from_le_bytes([stored[2 * s], stored[2 * s + 1]]), e, "element {k}");
        }
        // Piece p of a group holds step p / 2's half p % 2: positions 2t, 2t + 1 (or 2t + 8, 2t + 9)
        // of that step hold elements 8t + 4 (p / 2) + 2 (p % 2) + {0, 1}.
        for p in 0..4 {
            for t in 0..4 {
                for b in 0..2 {
                    let k = 8 * t + 4 * (p / 2) + 2 * (p % 2) + b;
                    assert_eq!(kperm(k), 8 * p + 2 * t + b, "piece {p}, thread {t}");
                }
            }
        }
        assert_eq!(kperm_bytes(&stored), bytes, "the permutation is its own inverse");
    }

    #[test]
    fn many_rows_keep_whole_k_as_measured() {
        use super::keeps_whole_k;
        // The 8B's q|k|v, o, gate|up (K = 4,096: 4 chunks) and down (14,336: 14), both in chunks
        // of 1,024, at the row counts measured, and K = 14,336 in 56 chunks of 256.
        for (rows, chunks, kc, whole) in [
            (64, 4, 1024, true),
            (64, 14, 1024, false),
            (32, 4, 1024, true),
            (32, 14, 1024, false),
            (16, 4, 1024, false),
            (8, 14, 1024, false),
            (1, 4, 1024, false),
            (128, 14, 1024, true),
            (32, 56, 256, true),
            (16, 56, 256, false),
        ] {
            assert_eq!(keeps_whole_k(rows, chunks, kc), whole, "{rows} rows, {chunks} chunks of {kc}");
        }
    }

    #[test]
    fn decode_splits_fill_whole_waves() {
        // Llama-3.1-8B at one row on 396 slots (132 SMs × 3): gate‖up splits K in 4 (1,792
        // blocks, 5 waves of 4 chunks) instead of one wave and a bit; down (64 tiles, 56 chunks)
        // fills one wave.
        assert_eq!(decode_split(448, 16, 1, 396, 8, 1.0), 4);
        let per = decode_split(64, 56, 1, 396, 8, 1.0);
        assert!(64 * 56usize.div_ceil(per) <= 396, "{per}");
        // Partials cost more with more rows: 64 rows split no more than one row does.
        assert!(decode_split(448, 16, 1, 396, 64, 1.0) >= decode_split(448, 16, 1, 396, 8, 1.0));
        // A weight that fills two waves or more keeps whole chunks per block.
        assert_eq!(decode_split(2004, 16, 1, 396, 8, 1.0), 16);
        assert_eq!(decode_split(100_000, 16, 1, 396, 8, 1.0), 16);
        // Longer chunks: down at 64 rows in 14 chunks of 1,024 on 264 slots (two blocks an SM)
        // splits into more tasks than the 32 tiles alone, each a few chunks.
        let per = decode_split(32, 14, 4, 264, 64, 1.0);
        assert!(per < 14 && 32 * 14usize.div_ceil(per) <= 264, "{per}");
        // Always a valid split.
        for tiles in [1, 7, 64, 396, 397, 2004] {
            for chunks in [1, 2, 16, 56] {
                let p = decode_split(tiles, chunks, 1, 396, 8, 1.0);
                assert!((1..=chunks).contains(&p));
            }
        }
    }
}
