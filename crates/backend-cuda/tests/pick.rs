//! Sampling reductions on the device (`Backend::pick`) equal their definition
//! (`plumb_core::pick::pick_host`) bit for bit: argmax and top-k of edited rows, for vocabularies
//! from 1 to Llama 3's, k from 1 to the device maximum (and beyond the row), rows full of ties,
//! signed zeros, infinities and NaNs, and many rows per call. Log-probabilities on the device
//! (`Backend::logprobs`) are their definition's (`plumb_core::logprobs::logprobs_host`) within
//! its tolerance, with the same alternatives in the same order, tied rows included.

#[path = "support/device.rs"]
mod device;

use plumb_core::logprobs::{LogprobRow, logprobs_host, logprobs_match};
use plumb_core::pick::{LogitEdit, MAX_DEVICE_TOP_K, Penalties, Pick, PickRow, Picked, pick_host};
use plumb_core::{Backend, Shape};
use plumb_verify::inputs::Rng;

/// Picks with their values as bits, so NaN candidates compare too.
fn bits(p: &Picked) -> (Option<u32>, Vec<(u32, u32)>) {
    match p {
        Picked::Argmax(t) => (Some(*t), Vec::new()),
        Picked::TopK(c) => (None, c.iter().map(|&(t, v)| (t, v.to_bits())).collect()),
    }
}

/// A row drawn from a small value set (so ties are everywhere), or from a normal distribution.
fn row(rng: &mut Rng, cols: usize, kind: usize) -> Vec<f32> {
    let special = [0.0, -0.0, 1.5, -1.5, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, -f32::NAN, 3.0];
    (0..cols)
        .map(|_| match kind {
            0 => special[rng.below(6)],
            1 => special[rng.below(special.len())],
            _ => rng.normal() as f32 * 4.0,
        })
        .collect()
}

fn edits(rng: &mut Rng, cols: usize) -> Vec<LogitEdit> {
    let mut tokens: Vec<u32> = (0..rng.below(6)).map(|_| rng.below(cols) as u32).collect();
    tokens.sort_unstable();
    tokens.dedup();
    tokens
        .into_iter()
        .map(|token| LogitEdit {
            token,
            has_bias: rng.below(2) == 0,
            bias: (rng.normal() * 5.0) as f32,
            repeated: rng.below(2) == 0,
            count: rng.below(4) as u32,
        })
        .collect()
}

#[test]
fn device_picks_equal_the_host_definition() {
    let Some(b) = device::backend("pick") else { return };
    let mut rng = Rng::new(device::seed());
    let mut checked = 0;
    for &cols in &[1usize, 3, 100, 1025, 49_152, 128_256] {
        for kind in 0..3 {
            let num_rows = 1 + rng.below(9);
            let host: Vec<Vec<f32>> = (0..num_rows).map(|_| row(&mut rng, cols, kind)).collect();
            let flat: Vec<f32> = host.concat();
            let mut t = b.upload(&flat, num_rows, cols);
            assert_eq!(t.cols(), cols);
            let ks = [1, 2, 7, 40, MAX_DEVICE_TOP_K];
            let chosen: Vec<usize> = (0..num_rows).filter(|_| rng.below(5) > 0).collect();
            let rows: Vec<PickRow> = chosen
                .into_iter()
                .map(|r| PickRow {
                    row: r,
                    pick: if rng.below(3) == 0 { Pick::Argmax } else { Pick::TopK(ks[rng.below(ks.len())]) },
                    penalties: Penalties { repetition: 1.3, frequency: 0.4, presence: -0.2 },
                    edits: edits(&mut rng, cols),
                })
                .collect();
            let got = b.pick(&mut t, &rows);
            assert_eq!(got.len(), rows.len());
            for (r, g) in rows.iter().zip(&got) {
                let want = pick_host(&host[r.row], r);
                assert_eq!(bits(g), bits(&want), "cols {cols}, kind {kind}, row {}: {:?}", r.row, r.pick);
                checked += 1;
            }
        }
    }
    eprintln!("{checked} rows picked on the device equal the host definition");
    assert!(checked > 10);
}

/// The argmax is split over blocks of 4,096 columns (up to 64 blocks, longer spans past that):
/// the largest value placed at each block's edges, tied across neighbouring blocks (the lower
/// index wins), as +0 against -0 (equal: the lower index wins), below a NaN at index 0 (which
/// wins) and among NaNs elsewhere (below every number), for rows of one to past 64 blocks.
#[test]
fn an_argmax_split_over_blocks_is_the_first_largest() {
    let Some(b) = device::backend("pick argmax splits") else { return };
    let mut rng = Rng::new(device::seed() ^ 0xa59);
    let mut checked = 0;
    for &cols in &[4_095usize, 4_096, 4_097, 8_193, 128_256, 262_145, 300_001] {
        // The backend's span (`pick.rs`, `argmax_splits`).
        let span = cols.div_ceil(cols.div_ceil(4_096).min(64));
        // Places for the largest value: the row's ends and both sides of the first two and the
        // last block edges.
        let mut places: Vec<usize> = vec![0, 1, cols - 1];
        let last_edge = (cols - 1) / span * span;
        for e in [span, 2 * span, last_edge] {
            if e > 0 && e < cols {
                places.extend([e - 1, e]);
            }
        }
        places.sort_unstable();
        places.dedup();
        let mut host = Vec::new();
        let mut at_of_row = Vec::new();
        for (i, at) in places.iter().flat_map(|&at| (0..4).map(move |v| (v, at))) {
            let mut r: Vec<f32> = (0..cols).map(|_| rng.normal() as f32).collect();
            at_of_row.push(at);
            match i {
                // One largest value.
                0 => r[at] = 9.0,
                // Tied with the column after it (across a block edge when `at` ends a block).
                1 => {
                    r[at] = 9.0;
                    r[(at + 1).min(cols - 1)] = 9.0;
                }
                // -0 and +0 as the largest, NaNs elsewhere below them.
                2 => {
                    r.iter_mut().for_each(|v| *v = if rng.below(2) == 0 { f32::NAN } else { -1.0 });
                    r[0] = -1.0;
                    r[at] = -0.0;
                    r[(at + 1).min(cols - 1)] = 0.0;
                }
                // A NaN at index 0 wins over the largest anywhere.
                _ => {
                    r[at] = 9.0;
                    r[0] = f32::NAN;
                }
            }
            host.push(r);
        }
        let mut t = b.upload(&host.concat(), host.len(), cols);
        let rows: Vec<PickRow> = (0..host.len())
            .map(|row| PickRow {
                row,
                pick: Pick::Argmax,
                penalties: Penalties { repetition: 1.0, frequency: 0.0, presence: 0.0 },
                edits: Vec::new(),
            })
            .collect();
        let got = b.pick(&mut t, &rows);
        for (r, g) in rows.iter().zip(&got) {
            let want = pick_host(&host[r.row], r);
            assert_eq!(bits(g), bits(&want), "cols {cols}, row {} (largest at {})", r.row, at_of_row[r.row]);
            checked += 1;
        }
    }
    eprintln!("{checked} split argmax rows equal the host definition");
}

#[test]
fn device_logprobs_are_the_host_definition_within_its_tolerance() {
    let Some(b) = device::backend("logprobs") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x10c);
    let mut checked = 0;
    for &cols in &[1usize, 3, 100, 1025, 49_152, 128_256] {
        // Finite rows (a NaN logit makes every log-probability NaN, on both sides): ties and
        // signed zeros from the small set with −inf, or normal values.
        for kind in [0, 2] {
            let num_rows = 1 + rng.below(9);
            let host: Vec<Vec<f32>> = (0..num_rows)
                .map(|_| {
                    let mut r = row(&mut rng, cols, kind);
                    r.iter_mut().filter(|v| **v == f32::INFINITY).for_each(|v| *v = 2.5);
                    // Some logit finite: a row of −inf has no distribution.
                    r[0] = r[0].max(-1.5);
                    r
                })
                .collect();
            let t = b.upload(&host.concat(), num_rows, cols);
            let rows: Vec<LogprobRow> = (0..num_rows * 2)
                .map(|_| LogprobRow { row: rng.below(num_rows), token: rng.below(cols) as u32, top: rng.below(21) })
                .collect();
            let got = b.logprobs(&t, &rows);
            assert_eq!(got.len(), rows.len());
            for (r, g) in rows.iter().zip(&got) {
                let want = logprobs_host(&host[r.row], r.token, r.top);
                assert!(logprobs_match(g, &want), "cols {cols}, kind {kind}, {r:?}: {g:?} against {want:?}");
                checked += 1;
            }
        }
    }
    eprintln!("{checked} device log-probabilities match the host definition");
    assert!(checked > 10);
}
