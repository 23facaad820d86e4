//! A loaded model ready to serve: checkpoint, tokenizer, chat template, backend and engine.
//! The CLI's one place that picks a backend.

use anyhow::{Context, Result};
use plumb_backend_cpu::CpuBackend;
use plumb_checkpoint::GgufFile;
use plumb_core::Backend;
use plumb_engine::Engine;
use plumb_engine::load;
use plumb_scheduler::SchedulerConfig;
use plumb_tokenizer::{ChatTemplate, Tokenizer};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// KV positions per block.
pub const BLOCK_SIZE: usize = 16;

/// Options shared by every command that runs a model.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf path or a known model name (default: SmolLM2-135M-Instruct, pulled on first use).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Kernel threads (default: all cores).
    #[arg(long, short = 't', default_value_t = 0)]
    pub threads: usize,
    /// Context length to reserve KV space for (default: the model's, at most 8192).
    #[arg(long)]
    pub ctx: Option<usize>,
}

pub struct Session {
    pub path: PathBuf,
    pub tokenizer: Tokenizer,
    pub template: Option<ChatTemplate>,
    pub engine: Engine<CpuBackend>,
}

impl Session {
    pub fn open(args: &ModelArgs, max_batch_tokens: usize) -> Result<Session> {
        let path = crate::resolve_model(args.model.as_deref())?;
        Self::open_path(&path, args, max_batch_tokens)
    }

    pub fn open_path(path: &Path, args: &ModelArgs, max_batch_tokens: usize) -> Result<Session> {
        let start = Instant::now();
        let file = GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
        let tokenizer = load::tokenizer(&file)?;
        let template = load::chat_template(&tokenizer)?;
        let backend = CpuBackend::new(args.threads);
        let model = plumb_models::load_model(&file, &backend).with_context(|| format!("loading {}", path.display()))?;
        let model_ctx = model.config().max_position_embeddings;
        let ctx = args.ctx.unwrap_or(model_ctx.min(8192));
        if ctx == 0 || ctx > model_ctx {
            anyhow::bail!("--ctx {ctx} is outside 1..={model_ctx} (the model's context length)");
        }
        let config = SchedulerConfig {
            block_size: BLOCK_SIZE,
            num_blocks: ctx.div_ceil(BLOCK_SIZE),
            max_lanes: 1,
            max_batch_tokens,
            max_model_len: ctx,
            max_waiting: 1,
            enable_prefix_cache: true,
        };
        let engine = Engine::new(backend, model, config);
        eprintln!(
            "loaded {} in {:.2} s ({})",
            path.file_name().map_or(path.display().to_string(), |n| n.to_string_lossy().into_owned()),
            start.elapsed().as_secs_f64(),
            engine.backend().name()
        );
        Ok(Session { path: path.to_path_buf(), tokenizer, template, engine })
    }
}
