//! Random-weight checkpoints of real shapes (`plumb synth`): a Hugging Face model folder —
//! `config.json`, safetensors weights (sharded with an index above the shard size), a working
//! byte-level BPE tokenizer with a chat template, and `generation_config.json` — from a preset
//! name or any `config.json` of an architecture it knows.
//! Owns: editing the config (`--layers`, dtype, the tokenizer's special ids) and the order of
//! writing. Invariants: the weights depend only on the seed and the tensor names; they are
//! streamed to disk, never held whole; `config.json` is written last, so a folder interrupted
//! midway is never taken for a model.

pub mod arch;
pub mod deepseek_v4;
pub mod hybrid;
pub mod presets;
pub mod rng;
pub mod tokenizer;
pub mod writer;

use crate::error::CheckpointError;
use crate::source::Progress;
use arch::{Arch, Shape, TensorSpec};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use tokenizer::SynthTokenizer;
pub use writer::SynthDtype;

/// Shard size Hugging Face-style folders of plumb synth use by default: 4 GiB of data per file.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 4 << 30;

/// How to write a synthetic checkpoint.
#[derive(Clone, Debug)]
pub struct SynthOptions {
    pub dtype: SynthDtype,
    pub seed: u64,
    /// Keep the shape but use this many decoder layers.
    pub num_layers: Option<usize>,
    pub max_shard_bytes: u64,
    /// Threads generating weights (0: all cores). The bytes do not depend on it.
    pub threads: usize,
}

impl Default for SynthOptions {
    fn default() -> Self {
        SynthOptions {
            dtype: SynthDtype::BF16,
            seed: 0,
            num_layers: None,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            threads: 0,
        }
    }
}

/// A checkpoint ready to write: its final config, shape, tensors and tokenizer.
#[derive(Debug)]
pub struct SynthPlan {
    /// The `config.json` to write, keys sorted as transformers writes them.
    pub config: Map<String, Value>,
    pub shape: Shape,
    pub tensors: Vec<TensorSpec>,
    pub tokenizer: SynthTokenizer,
    pub shards: Vec<writer::Shard>,
    options: SynthOptions,
}

/// What was written.
#[derive(Debug)]
pub struct SynthSummary {
    pub architecture: String,
    pub num_params: u64,
    pub num_tensors: usize,
    /// Weight files, in order.
    pub files: Vec<PathBuf>,
    /// Bytes of weights (data sections).
    pub weight_bytes: u64,
}

fn bad(file: &str, key: &str, why: impl Into<String>) -> CheckpointError {
    CheckpointError::BadConfig { file: file.into(), key: key.into(), why: why.into() }
}

impl SynthPlan {
    /// Checks `config_text` (named `file` in errors), applies the options, and lays out the tensors.
    pub fn new(config_text: &str, file: &str, options: SynthOptions) -> Result<SynthPlan, CheckpointError> {
        let mut m: Map<String, Value> =
            serde_json::from_str(config_text).map_err(|e| bad(file, "(file)", format!("is not a JSON object: {e}")))?;
        if let Some(n) = options.num_layers {
            set_num_layers(&mut m, n, file)?;
        }
        let dtype_key = if m.contains_key("dtype") { "dtype" } else { "torch_dtype" };
        m.insert(dtype_key.into(), json!(options.dtype.torch_name()));
        if let Some(Value::String(a)) = m.get("architectures").and_then(|a| a.get(0))
            && let Some((_, model_type)) = Arch::of(a)
        {
            m.entry("model_type").or_insert(json!(model_type));
        }
        let shape = Shape::parse(&Value::Object(m.clone()).to_string(), file)?;
        let tokenizer = SynthTokenizer::new(shape.arch, shape.config.vocab_size, file)?;
        m.insert("bos_token_id".into(), json!(tokenizer.bos_id()));
        m.insert("eos_token_id".into(), json!(tokenizer.stop_ids()));
        m.sort_keys();
        let tensors = shape.tensors();
        let shards = writer::plan_shards(&tensors, options.dtype, options.max_shard_bytes.max(1));
        Ok(SynthPlan { config: m, shape, tensors, tokenizer, shards, options })
    }

    /// The plan for preset `name` (see [`presets::PRESETS`]).
    pub fn preset(name: &str, options: SynthOptions) -> Result<SynthPlan, CheckpointError> {
        let p = presets::preset(name)
            .ok_or_else(|| CheckpointError::UnknownPreset { name: name.into(), known: presets::names() })?;
        SynthPlan::new(&(p.config)().to_string(), &format!("preset {name}"), options)
    }

    pub fn num_params(&self) -> u64 {
        self.tensors.iter().map(TensorSpec::num_elems).sum()
    }

    /// Writes the folder `out` (created if needed; refused unless empty).
    pub fn write(&self, out: &Path, progress: &dyn Progress) -> Result<SynthSummary, CheckpointError> {
        prepare_dir(out)?;
        let threads = match self.options.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let put = |name: &str, text: &str| {
            let path = out.join(name);
            std::fs::write(&path, text).map_err(|e| CheckpointError::io(&path, e))
        };
        let tok = &self.tokenizer;
        put("tokenizer.json", &tok.tokenizer_json())?;
        put("tokenizer_config.json", &tok.tokenizer_config_json(self.shape.config.max_position_embeddings))?;
        put("generation_config.json", &tok.generation_config_json())?;
        for shard in &self.shards {
            writer::write_shard(out, shard, &self.tensors, self.options.dtype, self.options.seed, threads, progress)?;
        }
        if self.shards.len() > 1 {
            put("model.safetensors.index.json", &writer::index_json(&self.shards, &self.tensors))?;
        }
        let config = serde_json::to_string_pretty(&self.config).expect("JSON values serialize");
        put("config.json", &config)?;
        Ok(SynthSummary {
            architecture: self.shape.config.architecture.clone(),
            num_params: self.num_params(),
            num_tensors: self.tensors.len(),
            files: self.shards.iter().map(|s| out.join(&s.file)).collect(),
            weight_bytes: self.shards.iter().map(|s| s.bytes).sum(),
        })
    }
}

/// `--layers n`: the layer count, and the per-layer lists cut (or extended with their last entry) to match.
fn set_num_layers(m: &mut Map<String, Value>, n: usize, file: &str) -> Result<(), CheckpointError> {
    if n == 0 {
        return Err(bad(file, "num_hidden_layers", "must be positive (--layers 0)"));
    }
    m.insert("num_hidden_layers".into(), json!(n));
    if let Some(Value::Array(types)) = m.get_mut("layer_types")
        && let Some(last) = types.last().cloned()
    {
        types.resize(n, last);
    }
    if let Some(Value::Array(types)) = m.get_mut("mlp_layer_types")
        && let Some(last) = types.last().cloned()
    {
        types.resize(n, last);
    }
    if let Some(Value::Array(only)) = m.get_mut("mlp_only_layers") {
        only.retain(|i| i.as_u64().is_none_or(|i| i < n as u64));
    }
    Ok(())
}

/// Creates `dir`, or checks that it is empty.
fn prepare_dir(dir: &Path) -> Result<(), CheckpointError> {
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).map_err(|e| CheckpointError::io(dir, e))?;
        if entries.next().is_some() {
            return Err(CheckpointError::OutputNotEmpty(dir.to_path_buf()));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, e))
}
