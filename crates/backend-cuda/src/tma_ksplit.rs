//! The K split over a cluster's CTAs (kernels/linear_tma.cu with KS > 1, `ks_fold_chunk` in
//! kernels/linear_tma_sync.cu): the instances' names, stages and shared memory, and where the
//! backend picks it (`ks_auto`). `TmaPlan` (tma.rs) holds the switches and resident blocks;
//! ops_tma.rs launches it. Split from tma.rs by meaning.

use crate::tma::{TMA_GLU_XCH_BYTES, kc_suffix};

/// The name of the instance of `n` rows (at most 64) whose clusters of `ks` CTAs split each
/// task's K (`_s2`, `_s4`: rank r takes every ks-th chunk from r, rank 0 folds them in chunk
/// order, `ks_fold_chunk` in kernels/linear_tma_sync.cu), of the products alone or of gate|up
/// with the SwiGLU (`glu`), for a weight folded in chunks of `kc`.
pub(crate) fn tma_name_ks(n: usize, ft: usize, kc: usize, ks: usize, glu: bool) -> String {
    let f = if ft == 64 { "_f64" } else { "" };
    let g = if glu { "_glu" } else { "" };
    format!("linear_tma_bf16_n{n}{f}{g}_s{ks}{}", kc_suffix(kc))
}

/// The K splits over a cluster the instances exist for (`tma_name_ks`).
pub(crate) const TMA_KS: [usize; 2] = [2, 4];
/// The row tiles whose K also splits over a cluster on 64-feature tasks (the `_f64_s2` /
/// `_f64_s4` instances, plain products: `TmaPlan::ksplit_narrow`).
pub(crate) const TMA_KS_NARROW_ROWS: [usize; 2] = [32, 64];

/// `TmaPlan::ksplit`'s setting for `ks_auto`'s choice.
pub(crate) const KS_AUTO: usize = 1;

/// The K split over a cluster the backend picks for a plain product (not `glu`) of `rows` rows
/// on the instance of `n` rows that would otherwise run `splits` splits: where those splits fold
/// in a launch of their own (more than `TMA_FOLD_IN_KERNEL_ROWS` rows), 4 CTAs at 8 rows and 2 at
/// 16 and 32; else none. Measured on an H100 (receipts/ab/session34, gemm_8b at the 8B's shapes,
/// µs: main / split in 2 / in 4): at 8 rows q|k|v 25.4 / 22.6 / 22.3, o 13.5 / 14.1 / 12.0, down
/// 49.6 / 48.4 / 46.6; at 16, q|k|v 26.3 / 23.7 / 24.3, down 50.3 / 48.9 / 50.2; at 32, down 57.0
/// / 53.5 / 68.6. Lost everywhere else: at one row (the last block's fold is cheaper than a
/// cluster's: o 10.1 / 13.3 / 11.8), at 64 rows (q|k|v 25.1 / 30.3 / 29.8, whole K on 64-feature
/// tiles), and gate|up with the SwiGLU at any row count (8 rows 82.5 / 83.4 / 89.5).
pub(crate) fn ks_auto(rows: usize, n: usize, splits: usize, glu: bool) -> usize {
    if glu || splits < 2 || rows <= crate::linear_plan::TMA_FOLD_IN_KERNEL_ROWS {
        return 1;
    }
    match n {
        8 => 4,
        16 | 32 => 2,
        _ => 1,
    }
}

/// A K-split switch from the environment variable `name`: unset or 0 (none), 2 or 4 (CTAs a
/// cluster), or where `auto` is allowed `auto` (`KS_AUTO`).
pub(crate) fn ks_setting(name: &'static str, auto: bool) -> Result<usize, crate::CudaError> {
    match std::env::var(name).ok().as_deref() {
        None | Some("0") => Ok(0),
        Some("auto") if auto => Ok(KS_AUTO),
        Some(v) => match v.parse::<usize>() {
            Ok(ks) if TMA_KS.contains(&ks) => Ok(ks),
            _ => Err(crate::CudaError::BadSetting {
                name,
                value: v.to_string(),
                expected: if auto { "auto, 0, 2 or 4" } else { "0, 2 or 4" },
            }),
        },
    }
}

/// The shared memory past the stages of an instance of `n` rows and `ft` features a task whose
/// clusters of `ks` CTAs split K: rank 0's slots for the others' sums of a round, 256 threads ×
/// nw / 2 floats each, nw the rows of a warpgroup's wgmma (n, or n / 2 when the warpgroups share
/// 64 features; `ks_slot_bytes` in the kernel).
pub(crate) fn ks_recv_bytes(n: usize, ft: usize, ks: usize) -> usize {
    let nw = if ft == 64 { n / 2 } else { n };
    (ks - 1) * 256 * (nw / 2) * 4
}

/// Stages of the K-split instances of `n` rows and `ft` features split in `ks` (`tma_stages_ks`
/// in the kernel, the same table): as many as keep two blocks an SM with the slots and a GLU
/// exchange, but for 128-feature tasks of 32 and 64 rows split in four, whose slots alone take 48
/// and 96 KB. 64-feature tasks (plain products of 32 and 64 rows): six stages of their 12 or 16
/// KB, but five for 64 rows split in two and three in four (slots of 16 and 48 KB).
pub(crate) fn tma_stages_ks(n: usize, ft: usize, ks: usize) -> usize {
    match (n, ft, ks) {
        (64, 64, 2) => 5,
        (64, 64, _) => 3,
        (_, 64, _) => 6,
        (8, _, _) | (16, _, 2) => 5,
        (16, _, _) | (32, _, _) => 4,
        (_, _, 2) => 3,
        _ => 4,
    }
}

/// The dynamic shared memory a K-split launch of `n` rows and `ft` features a task in clusters of
/// `ks` takes: its stages of an ft × 64 weight tile and an n × 64 activation tile, the alignment
/// slack, a GLU launch's exchange (`glu`), and rank 0's slots.
pub(crate) fn tma_smem_ks(n: usize, ft: usize, ks: usize, glu: bool) -> usize {
    tma_stages_ks(n, ft, ks) * (ft * 128 + n * 128)
        + 1024
        + if glu { TMA_GLU_XCH_BYTES } else { 0 }
        + ks_recv_bytes(n, ft, ks)
}

/// The rows, features a task and K split of a K-split instance from its name (`tma_name_ks`),
/// else None.
pub(crate) fn ks_of(name: &str) -> Option<(usize, usize, usize)> {
    let rest = name.strip_suffix("_k1024").unwrap_or(name);
    let ks = TMA_KS.into_iter().find(|ks| rest.ends_with(&format!("_s{ks}")))?;
    let ft = if rest.contains("_f64_") { 64 } else { 128 };
    Some((name.strip_prefix("linear_tma_bf16_n")?.split('_').next()?.parse().ok()?, ft, ks))
}

#[cfg(test)]
mod tests {
    use crate::tma::{tma_smem, tma_smem_max_of};

    #[test]
    fn k_split_instances_are_named_and_sized_by_their_split() {
        use super::{TMA_GLU_XCH_BYTES, ks_recv_bytes, tma_name_ks, tma_smem_ks};
        assert_eq!(tma_name_ks(8, 128, 1024, 4, false), "linear_tma_bf16_n8_s4_k1024");
        assert_eq!(tma_name_ks(64, 128, 256, 2, true), "linear_tma_bf16_n64_glu_s2");
        assert_eq!(tma_name_ks(64, 64, 1024, 4, false), "linear_tma_bf16_n64_f64_s4_k1024");
        // Rank 0's slots: the other ranks' 256 threads' nw / 2 sums each (nw = n, or n / 2 on
        // 64-feature tasks).
        assert_eq!(ks_recv_bytes(8, 128, 4), 3 * 256 * 4 * 4);
        assert_eq!(ks_recv_bytes(64, 128, 2), 256 * 32 * 4);
        assert_eq!(ks_recv_bytes(64, 64, 2), 256 * 16 * 4);
        assert_eq!(tma_smem_max_of("linear_tma_bf16_n8_s4_k1024"), Some(5 * (128 * 128 + 8 * 128) + 1024 + 12288));
        assert_eq!(tma_smem_max_of("linear_tma_bf16_n16_glu_s2"), Some(tma_smem_ks(16, 128, 2, true)));
        assert_eq!(tma_smem_ks(16, 128, 2, true), tma_smem_ks(16, 128, 2, false) + TMA_GLU_XCH_BYTES);
        assert_eq!(
            tma_smem_max_of("linear_tma_bf16_n64_f64_s2_k1024"),
            Some(5 * (64 * 128 + 64 * 128) + 1024 + 256 * 16 * 4)
        );
        assert_eq!(tma_smem_max_of("linear_tma_bf16_n32_f64_s4"), Some(tma_smem_ks(32, 64, 4, false)));
        // The plain 64-feature instances are not K-split ones.
        assert_eq!(tma_smem_max_of("linear_tma_bf16_n64_f64_k1024"), Some(tma_smem(64, 64)));
        // The plain instances' neighbours keep their sizes.
        assert_eq!(tma_smem_max_of("linear_tma_bf16_n8_k1024"), Some(tma_smem(8, 128)));
        // Two blocks an SM of 228 KB (1 KB of each the driver's, 1 KB of static barriers), but
        // for 32 and 64 rows split in four and 64 rows with a GLU exchange; every one fits one.
        for n in [8, 16, 32, 64] {
            for ks in [2, 4] {
                for glu in [false, true] {
                    let two = 2 * (tma_smem_ks(n, 128, ks, glu) + 2048) <= 228 * 1024;
                    assert_eq!(two, n <= 16 || (ks == 2 && (n == 32 || !glu)), "n{n} s{ks} glu {glu}");
                    assert!(tma_smem_ks(n, 128, ks, glu) <= 227 * 1024, "n{n} s{ks} glu {glu}");
                }
            }
        }
        // On 64-feature tasks (plain products of 32 and 64 rows), two blocks an SM every time,
        // with at least three stages.
        for n in super::TMA_KS_NARROW_ROWS {
            for ks in [2, 4] {
                assert!(2 * (tma_smem_ks(n, 64, ks, false) + 2048) <= 228 * 1024, "n{n} f64 s{ks}");
                assert!(super::tma_stages_ks(n, 64, ks) >= 3, "n{n} f64 s{ks}");
            }
        }
    }

    #[test]
    fn the_k_split_over_a_cluster_goes_where_it_was_measured_to_pay() {
        use super::ks_auto;
        // Plain products whose split would fold in a launch: 4 CTAs at 8 rows, 2 at 16 and 32.
        assert_eq!(ks_auto(8, 8, 4, false), 4);
        assert_eq!(ks_auto(5, 8, 2, false), 4);
        assert_eq!(ks_auto(13, 16, 7, false), 2);
        assert_eq!(ks_auto(32, 32, 7, false), 2);
        // Not at rows the last block folds, not whole K, not 64 rows, not gate|up.
        assert_eq!(ks_auto(4, 8, 4, false), 1);
        assert_eq!(ks_auto(32, 32, 1, false), 1);
        assert_eq!(ks_auto(64, 64, 7, false), 1);
        assert_eq!(ks_auto(8, 8, 4, true), 1);
    }

    #[test]
    fn k_split_switches_read_their_values_and_refuse_others() {
        use super::{KS_AUTO, ks_setting};
        // A variable of this test's own.
        // SAFETY: nextest runs each test in a process of its own, so no other thread reads the
        // environment while this one writes it.
        let set = |v: &str| unsafe { std::env::set_var("PLUMB_TEST_KS_SWITCH", v) };
        assert_eq!(ks_setting("PLUMB_TEST_KS_SWITCH", true).unwrap(), 0, "unset");
        for (v, auto, want) in
            [("0", true, Some(0)), ("2", false, Some(2)), ("4", true, Some(4)), ("auto", true, Some(KS_AUTO))]
        {
            set(v);
            assert_eq!(ks_setting("PLUMB_TEST_KS_SWITCH", auto).ok(), want, "{v}");
        }
        for (v, auto) in [("auto", false), ("3", true), ("8", false), ("two", true)] {
            set(v);
            assert!(ks_setting("PLUMB_TEST_KS_SWITCH", auto).is_err(), "{v} (auto allowed: {auto})");
        }
    }
}
