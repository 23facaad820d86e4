//! Comparison with an outside implementation: golden fixtures from Hugging Face transformers run
//! in true float64 (fixtures/smollm2, made by tools/fixtures). The whole-model gate compares a
//! backend with plumb's own float64 graph, which cannot catch a mistake in the graph itself; this
//! compares both with transformers, prompt by prompt, on the logits the fixtures hold.

use crate::gate::{argmax, first_non_finite};
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::CheckpointRef;
use plumb_core::{ForwardBatch, FullBackend};
use plumb_models::ModelError;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One fixture prompt: the teacher-forced sequence and transformers' float64 logits of a subset
/// of the vocabulary at some of its positions.
#[derive(Clone, Debug)]
pub struct OutsidePrompt {
    pub name: String,
    /// Prompt followed by transformers' float64 greedy continuation.
    pub tokens: Vec<u32>,
    pub prompt_len: usize,
    pub positions: Vec<usize>,
    /// [positions.len(), subset_ids.len()] float64.
    pub logits: Vec<f64>,
}

/// A fixture folder.
#[derive(Clone, Debug)]
pub struct OutsideFixture {
    pub dir: PathBuf,
    /// The checkpoint file name the fixture was made from.
    pub model_file: String,
    pub subset_ids: Vec<usize>,
    pub prompts: Vec<OutsidePrompt>,
}

fn ids(v: &Value) -> Option<Vec<u64>> {
    v.as_array()?.iter().map(Value::as_u64).collect()
}

impl OutsideFixture {
    /// Reads `dir/manifest.json` and the float64 subset files it names.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let bad = |why: String| format!("fixture {}: {why}", dir.display());
        let text = std::fs::read_to_string(dir.join("manifest.json")).map_err(|e| bad(e.to_string()))?;
        let m: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let subset_ids: Vec<usize> =
            ids(&m["subset_ids"]).ok_or_else(|| bad("no subset_ids".into()))?.into_iter().map(|i| i as usize).collect();
        let mut prompts = Vec::new();
        for (i, p) in m["prompts"].as_array().ok_or_else(|| bad("no prompts".into()))?.iter().enumerate() {
            let prompt: Vec<u32> = ids(&p["prompt_ids"])
                .ok_or_else(|| bad(format!("prompt {i}: no prompt_ids")))?
                .into_iter()
                .map(|t| t as u32)
                .collect();
            let greedy = ids(&p["greedy_f64"]).ok_or_else(|| bad(format!("prompt {i}: no greedy_f64")))?;
            let positions: Vec<usize> = ids(&p["subset_positions"])
                .ok_or_else(|| bad(format!("prompt {i}: no subset_positions")))?
                .into_iter()
                .map(|x| x as usize)
                .collect();
            let file = p["files"]["subset_f64"]["file"]
                .as_str()
                .ok_or_else(|| bad(format!("prompt {i}: no subset_f64 file")))?;
            let bytes = std::fs::read(dir.join(file)).map_err(|e| bad(format!("{file}: {e}")))?;
            if bytes.len() != positions.len() * subset_ids.len() * 8 {
                return Err(bad(format!(
                    "{file} has {} bytes, expected {}",
                    bytes.len(),
                    positions.len() * subset_ids.len() * 8
                )));
            }
            let logits = bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes"))).collect();
            let mut tokens = prompt.clone();
            tokens.extend(greedy.into_iter().map(|t| t as u32));
            prompts.push(OutsidePrompt {
                name: format!("prompt {i}"),
                prompt_len: prompt.len(),
                tokens,
                positions,
                logits,
            });
        }
        let model_file = m["model_file"].as_str().unwrap_or_default().to_string();
        Ok(OutsideFixture { dir: dir.to_path_buf(), model_file, subset_ids, prompts })
    }
}

/// One prompt's agreement with transformers.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OutsidePromptReport {
    pub name: String,
    pub positions: usize,
    /// plumb's float64 graph vs transformers float64 (same arithmetic precision: ~1e-15).
    pub reference_nrms_max: f64,
    pub backend_nrms_mean: f64,
    pub backend_nrms_max: f64,
    /// plumb's float64 graph picks transformers' greedy token at every generated position.
    pub reference_greedy_agrees: bool,
}

/// Every prompt's figures, and the verdict.
#[derive(Clone, Debug, serde::Serialize)]
pub struct OutsideReport {
    pub fixture: String,
    pub backend: String,
    pub prompts: Vec<OutsidePromptReport>,
    /// Bound on plumb's float64 graph vs transformers' float64.
    pub reference_bound: f64,
    pub pass: bool,
    pub failures: Vec<String>,
}

/// Float64 against float64 over identical weights, summed in other orders: ~1e-15 per operation,
/// far below any float32 effect (1e-6); a modelling difference (a wrong eps, RoPE layout, head)
/// shows as 1e-3 or more.
pub const REFERENCE_BOUND: f64 = 1e-12;

/// Teacher-forced logits of `tokens` ([len, vocab] in float64) on `backend`, in chunks of 256.
fn logits_of<B: FullBackend + 'static>(
    file: CheckpointRef<'_>,
    backend: &B,
    tokens: &[u32],
) -> Result<Vec<f64>, ModelError> {
    let model = plumb_models::load_model_with(file, backend, None)?;
    let num_blocks = tokens.len().div_ceil(16);
    let mut kv = backend.new_kv_cache(&model.kv_spec(16, num_blocks));
    let mut out = Vec::new();
    for start in (0..tokens.len()).step_by(256) {
        let end = (start + 256).min(tokens.len());
        let batch = ForwardBatch::single_lane(&tokens[start..end], start, 16, (0..num_blocks as u32).collect());
        out.extend(backend.download_f64(&model.forward(backend, &batch, &mut kv, None)));
    }
    Ok(out)
}

/// Compares plumb's float64 graph and `backend` with the fixture, on its first `max_prompts` prompts.
pub fn compare<'c, B: FullBackend + 'static>(
    file: impl Into<CheckpointRef<'c>>,
    backend: &B,
    fixture: &OutsideFixture,
    max_prompts: usize,
    ref_threads: usize,
) -> Result<OutsideReport, ModelError> {
    let file = file.into();
    let reference = RefBackend::<f64>::new(ref_threads);
    let subset = &fixture.subset_ids;
    let mut prompts = Vec::new();
    let mut failures = Vec::new();
    for p in fixture.prompts.iter().take(max_prompts) {
        let truth = logits_of(file, &reference, &p.tokens)?;
        let got = logits_of(file, backend, &p.tokens)?;
        let vocab = truth.len() / p.tokens.len();
        for (what, l) in [("float64 reference", &truth), ("backend", &got)] {
            if let Some(pos) = first_non_finite(l, vocab) {
                failures.push(format!("{}: {what} logits hold NaN or infinity at position {pos}", p.name));
            }
        }
        let (mut ref_max, mut sum, mut max) = (0f64, 0f64, 0f64);
        for (r, &pos) in p.positions.iter().enumerate() {
            let want = &p.logits[r * subset.len()..(r + 1) * subset.len()];
            let pick = |l: &[f64]| subset.iter().map(|&i| l[pos * vocab + i]).collect::<Vec<f64>>();
            let e_ref = crate::nrms(&pick(&truth), want);
            let e = crate::nrms(&pick(&got), want);
            ref_max = if e_ref.is_nan() { e_ref } else { ref_max.max(e_ref) };
            max = if e.is_nan() { e } else { max.max(e) };
            sum += e;
        }
        let greedy_agrees = (p.prompt_len - 1..p.tokens.len() - 1)
            .all(|pos| argmax(&truth[pos * vocab..(pos + 1) * vocab]) == p.tokens[pos + 1]);
        if !crate::within(ref_max, REFERENCE_BOUND) {
            failures.push(format!(
                "{}: plumb's float64 graph differs from transformers' float64 by NRMS {ref_max:.3e} (bound {REFERENCE_BOUND:.0e}): the graph itself is wrong",
                p.name
            ));
        }
        if !greedy_agrees {
            failures.push(format!("{}: plumb's float64 greedy choice differs from transformers' float64", p.name));
        }
        prompts.push(OutsidePromptReport {
            name: p.name.clone(),
            positions: p.positions.len(),
            reference_nrms_max: ref_max,
            backend_nrms_mean: sum / p.positions.len().max(1) as f64,
            backend_nrms_max: max,
            reference_greedy_agrees: greedy_agrees,
        });
    }
    Ok(OutsideReport {
        fixture: fixture.dir.display().to_string(),
        backend: backend.name(),
        prompts,
        reference_bound: REFERENCE_BOUND,
        pass: failures.is_empty(),
        failures,
    })
}
