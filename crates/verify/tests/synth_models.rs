//! Checkpoints written by `plumb synth` run through plumb's families: every tensor loads with the
//! shape the family expects, the residual stream stays finite and of bounded size through every
//! layer (also 32 layers deep), the logits are finite and spread (no collapsed softmax, not the
//! same argmax everywhere), and the CPU backend agrees with the float64 graph on the same weights.

use plumb_backend_cpu::CpuBackend;
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::HfCheckpoint;
use plumb_checkpoint::source::NoProgress;
use plumb_checkpoint::synth::{SynthDtype, SynthOptions, SynthPlan};
use plumb_core::{ForwardBatch, FullBackend};
use plumb_verify::nrms;

/// Logits of every position of `tokens`, and the RMS of the residual stream after each layer.
fn forward<B: FullBackend + 'static>(ckpt: &HfCheckpoint, b: &B, tokens: &[u32]) -> (Vec<f64>, Vec<f64>) {
    let model = plumb_models::load_model_with(ckpt, b, None).unwrap();
    let blocks = tokens.len().div_ceil(16);
    let mut kv = b.new_kv_cache(&model.kv_spec(16, blocks));
    let batch = ForwardBatch::single_lane(tokens, 0, 16, (0..blocks as u32).collect());
    let mut layer_rms = Vec::new();
    let mut trace = |name: &str, _layer: Option<usize>, t: &B::Tensor| {
        if name == "layer_out" {
            let x = b.download_f64(t);
            layer_rms.push((x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64).sqrt());
        }
    };
    let logits = b.download_f64(&model.forward(b, &batch, &mut kv, Some(&mut trace)));
    (logits, layer_rms)
}

fn check(preset: &str, num_layers: Option<usize>) {
    let dir = tempfile::tempdir().unwrap();
    let options = SynthOptions { dtype: SynthDtype::F32, seed: 11, num_layers, ..SynthOptions::default() };
    let plan = SynthPlan::preset(preset, options).unwrap();
    plan.write(dir.path(), &NoProgress).unwrap();
    let ckpt = HfCheckpoint::open(dir.path()).unwrap();
    let (vocab, layers) = (ckpt.config.vocab_size, ckpt.config.num_hidden_layers);
    let tokens: Vec<u32> = (0..40u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % vocab as u32).collect();
    let (cpu, cpu_rms) = forward(&ckpt, &CpuBackend::new(2), &tokens);
    let (reference, ref_rms) = forward(&ckpt, &RefBackend::<f64>::new(2), &tokens);

    assert_eq!(ref_rms.len(), layers);
    // Each sublayer adds about unit RMS to the stream: √(2·layers) with room to spare.
    let bound = 4.0 * (2.0 * layers as f64 + 1.0).sqrt();
    for (i, rms) in ref_rms.iter().enumerate() {
        assert!(rms.is_finite() && *rms > 0.05 && *rms < bound, "{preset}: layer {i} output RMS {rms}");
    }
    assert!(cpu_rms.iter().all(|r| r.is_finite()), "{preset}: {cpu_rms:?}");

    let mut argmaxes = std::collections::BTreeSet::new();
    for row in reference.chunks_exact(vocab) {
        assert!(row.iter().all(|x| x.is_finite()), "{preset}: finite logits");
        let mean = row.iter().sum::<f64>() / vocab as f64;
        let std = (row.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / vocab as f64).sqrt();
        assert!((0.2..5.0).contains(&std), "{preset}: logit spread {std}");
        let max = row.iter().cloned().fold(f64::MIN, f64::max);
        let top_p = 1.0 / row.iter().map(|x| (x - max).exp()).sum::<f64>();
        assert!(top_p < 0.9, "{preset}: softmax collapsed onto one token (p = {top_p})");
        argmaxes.insert(row.iter().enumerate().fold(0, |b, (i, x)| if *x > row[b] { i } else { b }));
    }
    let err = nrms(&cpu, &reference);
    eprintln!(
        "{preset} ({layers} layers): layer RMS {ref_rms:.2?}, {} distinct argmaxes of {} positions, cpu vs float64 NRMS {err:.2e}",
        argmaxes.len(),
        tokens.len()
    );
    // Deep random stacks pull positions together (attention averages them); a few distinct
    // argmaxes still show the logits depend on the input.
    assert!(argmaxes.len() > tokens.len() / 8, "{preset}: {} distinct argmaxes", argmaxes.len());
    assert!(err < 1e-4, "{preset}: cpu vs float64 NRMS {err:e}");
}

#[test]
fn tiny_llama_runs_finite_and_spread() {
    check("tiny-llama", None);
}

#[test]
fn tiny_qwen3_runs_finite_and_spread() {
    check("tiny-qwen3", None);
}

#[test]
fn tiny_qwen3_moe_runs_finite_and_spread() {
    check("tiny-qwen3-moe", None);
}

#[test]
fn tiny_deepseek_v4_runs_finite_and_spread() {
    check("tiny-deepseek-v4", None);
}

#[test]
fn a_deep_stack_stays_finite() {
    check("tiny-qwen3", Some(32));
    check("tiny-llama", Some(32));
}
