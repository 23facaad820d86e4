//! The roofline columns of `plumb bench` receipts: what a run would reach if every byte it must
//! read moved at the copy bandwidth measured in the same run (decode), or every floating-point
//! operation ran at the dense bf16 matrix-multiply rate measured in the same run (prefill). The
//! bytes and FLOPs are the backend's own counts of what its ops read and do (CUDA: weights once
//! per `linear`, K and V of every attended position once per row; 2 FLOPs a multiply-add).

use serde_json::{Value, json};

/// Positions attended by one row decoding at positions `first` .. `first + steps` (each attends
/// its own and every earlier one).
fn attended(first: usize, steps: usize) -> f64 {
    (first..first + steps).map(|p| (p + 1) as f64).sum()
}

/// The bytes a decode step reads besides KV (weights), from a calibration: `bytes` read by
/// `steps` one-row decode steps at positions `first` onward, less their KV at
/// `kv_per_position` bytes a position.
pub fn weights_per_step(bytes: f64, steps: usize, first: usize, kv_per_position: f64) -> f64 {
    (bytes - attended(first, steps) * kv_per_position) / steps as f64
}

/// The decode roofline of `rows` requests decoding together after prompts of `prompt_len`,
/// `gen_len` tokens each: per step the weights once and each row's KV at its mean attended
/// context over the decode (positions prompt_len .. prompt_len + gen_len - 1, each attending p + 1).
pub struct DecodeRoof {
    pub bandwidth: f64,
    pub weights_per_step: f64,
    pub kv_per_position: f64,
}

impl DecodeRoof {
    pub fn mean_context(prompt_len: usize, gen_len: usize) -> f64 {
        attended(prompt_len, gen_len) / gen_len as f64
    }
    pub fn step_bytes(&self, rows: usize, prompt_len: usize, gen_len: usize) -> f64 {
        self.weights_per_step + rows as f64 * Self::mean_context(prompt_len, gen_len) * self.kv_per_position
    }
    pub fn tokens_per_s(&self, rows: usize, prompt_len: usize, gen_len: usize) -> f64 {
        rows as f64 * self.bandwidth / self.step_bytes(rows, prompt_len, gen_len)
    }
    /// What a receipt records of the roofline itself.
    pub fn describe(&self, prompt_len: usize, gen_len: usize) -> Value {
        json!({
            "copy_bandwidth_gb_per_s": self.bandwidth / 1e9,
            "weights_bytes_per_step": self.weights_per_step,
            "kv_bytes_per_position": self.kv_per_position,
            "mean_decode_context": Self::mean_context(prompt_len, gen_len),
            "definition": "rows × copy bandwidth ÷ (weights_bytes_per_step + rows × mean_decode_context × \
                kv_bytes_per_position); the weights' bytes from a one-request calibration run of the backend's \
                byte counter, less its KV",
        })
    }
}

/// The prefill roofline of a `prompt_len`-token prompt whose pass does `flops` FLOPs (the
/// backend's count) against a measured bf16 rate, with the measured prefill speed's share of it.
pub fn prefill(pp_tokens_per_s: f64, prompt_len: usize, flops: f64, rate: f64) -> Value {
    json!({
        "bf16_matmul_tflops": rate / 1e12,
        "pp_flops_per_token": flops / prompt_len as f64,
        "pp_roofline_tokens_per_s": prompt_len as f64 * rate / flops,
        "pp_fraction_of_bf16_rate": pp_tokens_per_s * flops / prompt_len as f64 / rate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calibration_takes_the_kv_out_of_the_weights() {
        // 32 steps at positions 1..=32 attend 2 + 3 + … + 33 = 560 positions.
        assert_eq!(attended(1, 32), 560.0);
        let (w, kv) = (15.0e9, 131_072.0);
        let bytes = 32.0 * w + 560.0 * kv;
        assert!((weights_per_step(bytes, 32, 1, kv) - w).abs() < 1e-3);
    }

    #[test]
    fn the_decode_roofline_grows_with_rows_until_kv_dominates() {
        // The 8B shape on an H200: 15.0 GB of weights, 131 KB of f16 KV a position, 4.26 TB/s.
        let r = DecodeRoof { bandwidth: 4.26e12, weights_per_step: 15.0e9, kv_per_position: 131_072.0 };
        // 512-token prompts, 256 generated: rows attend 640.5 positions on average.
        assert_eq!(DecodeRoof::mean_context(512, 256), 640.5);
        let one = r.tokens_per_s(1, 512, 256);
        assert!((one - 4.26e12 / (15.0e9 + 640.5 * 131_072.0)).abs() < 1e-6);
        let (r8, r64) = (r.tokens_per_s(8, 512, 256), r.tokens_per_s(64, 512, 256));
        assert!(r8 > 7.0 * one && r64 > 7.0 * r8 / 2.0, "{one} {r8} {r64}");
        assert!(r64 < 64.0 * one);
    }

    #[test]
    fn the_prefill_share_is_the_flop_rate_over_the_measured_one() {
        // 16 GFLOP a token at 27,692 tokens/s against 780 TFLOP/s: 56.8%.
        let v = prefill(27_692.0, 2048, 2048.0 * 16.0e9, 780.0e12);
        let f = v["pp_fraction_of_bf16_rate"].as_f64().unwrap();
        assert!((f - 27_692.0 * 16.0e9 / 780.0e12).abs() < 1e-12, "{f}");
        assert!((v["pp_roofline_tokens_per_s"].as_f64().unwrap() - 48_750.0).abs() < 1e-6);
    }
}
