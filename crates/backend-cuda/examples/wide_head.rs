//! The default model's LM head alone (49,152 × 576, Q8_0 as SmolLM2-135M ties it) at 1 to 4 rows:
//! `linear_replay_q8_0` (a thread a feature, opt-in) against `linear_wide` (a warp a feature, the
//! default), alternating rounds, each figure the device time per launch over back-to-back
//! launches (the kernels run tens of microseconds, longer than a launch). Also checks that both
//! give the same bits.
//!
//!   cargo run --release -p plumb-backend-cuda --example wide_head [-- ROUNDS]

use plumb_backend_cuda::CudaBackend;
use plumb_core::{Backend, GgmlType, HostBytes, LinearOps, WeightSource};
use plumb_verify::inputs::{Rng, Spread, activations, weight_bytes};
use std::time::Instant;

const REPS: usize = 500;

fn main() {
    let rounds: usize = std::env::args().nth(1).map_or(3, |r| r.parse().expect("ROUNDS: a count"));
    let b = CudaBackend::new(0).expect("a CUDA device");
    let (n, k) = (49_152, 576);
    let mut rng = Rng::new(7);
    let bytes = HostBytes::from_vec(weight_bytes(&mut rng, GgmlType::Q8_0, n, k));
    let head = b
        .load_weight(WeightSource { name: "head".into(), ty: GgmlType::Q8_0, rows: n, cols: k, bytes })
        .expect("weight");
    println!("{:<8} {:>5} {:>6} {:>10} {:>8}", "kernel", "rows", "round", "us/launch", "GB/s");
    for m in 1..=4 {
        let x = b.upload(&activations(&mut rng, m, k, Spread::DynamicRange), m, k);
        let mut outs = Vec::new();
        for round in 1..=rounds {
            let order = if round % 2 == 1 { [true, false] } else { [false, true] };
            for replay in order {
                b.set_wide_replay(replay);
                let mut out = b.tensor(m, n);
                for _ in 0..20 {
                    b.linear(&x, &head, &mut out);
                }
                b.synchronize();
                let t = Instant::now();
                for _ in 0..REPS {
                    b.linear(&x, &head, &mut out);
                }
                b.synchronize();
                let us = t.elapsed().as_secs_f64() * 1e6 / REPS as f64;
                let gbs = (n * k / 32 * 34) as f64 / (us * 1e-6) / 1e9;
                let name = if replay { "replay" } else { "wide" };
                println!("{name:<8} {m:>5} {round:>6} {us:>10.2} {gbs:>8.0}");
                outs.push((replay, b.download(&out)));
            }
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let first = bits(&outs[0].1);
        assert!(outs.iter().all(|(_, o)| bits(o) == first), "{m} rows: the two kernels' bits differ");
    }
    println!("the same bits from both kernels at 1-4 rows");
}
