//! `linear_wide` (a warp per feature in turn, for weights of at least 8,192 features at up to 8
//! rows: the LM head at decode) against the other CUDA-core paths: up to 8 rows run it, 9 to 64
//! rows `linear_split`, more rows `linear`, and every row must have the bits of the row alone.
//! Grouped weights that are wide together but not apart must give the bits of each apart.

#[path = "support/device.rs"]
mod device;
#[path = "support/rows.rs"]
mod rows;

use plumb_core::{Backend, GgmlType, LinearOps};
use plumb_verify::inputs::{Rng, Spread, activations};
use rows::{MAX_M, check_rows, pick, weight};

#[test]
fn wide_weights_give_every_row_the_bits_of_the_other_paths() {
    let Some(b) = device::backend("linear_wide") else { return };
    let mut rng = Rng::new(device::seed());
    // 8,200 features: past the threshold, ending in a partial block of 8 warps. K = 576 is three
    // chunks (one load group of four, the last chunk partial); 1,344 is six (two groups, the
    // second short). K-quants, whose rows are whole super-blocks, take 768 and 1,536.
    let n = 8200;
    for k in [576usize, 1344] {
        let x = activations(&mut rng, MAX_M, 1536, Spread::DynamicRange);
        for ty in [GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::F16] {
            let block = ty.info().expect("dequantizable").block_elems;
            let k = if k.is_multiple_of(block) { k } else { k.next_multiple_of(block) };
            let x = &x[..MAX_M * k];
            let w = weight(&b, &mut rng, ty, n, k);
            check_rows(&format!("linear {ty} {n}x{k}"), n, &mut |rows| {
                let xt = b.upload(&pick(x, k, rows), rows.len(), k);
                let mut out = b.tensor(rows.len(), n);
                b.linear(&xt, &w, &mut out);
                let got = b.download(&out);
                assert!(got.iter().all(|v| v.is_finite()), "{ty}: non-finite output");
                got
            });
        }
    }
}

#[test]
fn weights_wide_together_give_the_bits_of_each_apart() {
    let Some(b) = device::backend("linear_wide") else { return };
    let mut rng = Rng::new(device::seed() ^ 0x71de);
    // 4,000 + 4,000 + 300 features run wide together and split (or whole) apart.
    let (widths, k) = ([4000, 4000, 300], 576);
    for ty in [GgmlType::Q8_0, GgmlType::Q4_1] {
        let ws: Vec<_> = widths.iter().map(|&n| weight(&b, &mut rng, ty, n, k)).collect();
        for m in [1, 3, 8, 9, 70] {
            let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
            let mut together: Vec<_> = widths.iter().map(|&n| b.tensor(m, n)).collect();
            b.linear_multi(&x, &ws.iter().collect::<Vec<_>>(), &mut together.iter_mut().collect::<Vec<_>>());
            for (i, w) in ws.iter().enumerate() {
                let mut alone = b.tensor(m, widths[i]);
                b.linear(&x, w, &mut alone);
                let (got, want) = (b.download(&together[i]), b.download(&alone));
                if let Some(j) = got.iter().zip(&want).position(|(a, c)| a.to_bits() != c.to_bits()) {
                    panic!("{ty}, {m} rows: weight {i} run together differs at {j}: {} vs {}", got[j], want[j]);
                }
                assert!(want.iter().all(|v| v.is_finite()), "{ty}: non-finite output");
            }
        }
    }
    eprintln!("linear_wide: weights together give the bits of each apart");
}
