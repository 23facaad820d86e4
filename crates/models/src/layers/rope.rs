//! RoPE inverse frequencies, with the scaling variants checkpoints declare.
//! Computed in f64; backends build their cos/sin tables from these.

use crate::registry::ModelError;
use plumb_checkpoint::ModelConfig;
use plumb_checkpoint::hparams::RopeScaling;

/// Divides each inverse frequency by the checkpoint's factor for it (GGUF `rope_freqs`, as
/// llama.cpp's converter writes Llama-3 scaling: `inv_freq[i] / factors[i]`). A checkpoint that
/// also declares scaling in its config would be scaled twice, so that is refused.
pub fn apply_freq_factors(inv_freq: &mut [f64], factors: &[f32], c: &ModelConfig) -> Result<(), ModelError> {
    if factors.len() != inv_freq.len() {
        return Err(ModelError::WrongShape {
            name: "model.rope_freqs.weight".into(),
            expected: (1, inv_freq.len()),
            actual: (1, factors.len()),
        });
    }
    if c.rope_scaling.is_some() {
        return Err(ModelError::Unsupported("RoPE frequency factors together with a declared rope_scaling"));
    }
    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
        return Err(ModelError::BadValue {
            name: "model.rope_freqs.weight".into(),
            why: format!("holds {bad}; factors must be positive"),
        });
    }
    for (f, &d) in inv_freq.iter_mut().zip(factors) {
        *f /= d as f64;
    }
    Ok(())
}

/// inv_freq[i] = theta^(-2i / rope_dim), adjusted by the configured scaling. [rope_dim / 2]
pub fn inv_freq(c: &ModelConfig) -> Vec<f64> {
    let d = c.rope_dim as f64;
    let base: Vec<f64> = (0..c.rope_dim / 2).map(|i| 1.0 / c.rope_theta.powf(2.0 * i as f64 / d)).collect();
    match c.rope_scaling {
        // YaRN is refused when the model loads; plain frequencies here keep this total.
        None | Some(RopeScaling::Yarn { .. }) => base,
        Some(RopeScaling::Linear { factor }) => base.into_iter().map(|f| f / factor).collect(),
        Some(RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings }) => {
            let old = original_max_position_embeddings as f64;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let smooth = (old / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                        (1.0 - smooth) * f / factor + smooth * f
                    }
                })
                .collect()
        }
    }
}
