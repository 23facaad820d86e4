//! `plumb perplexity`: perplexity of a text file as llama.cpp's `llama-perplexity` computes it —
//! non-overlapping chunks of `ctx` tokens (BOS first when the model adds one), each scored on
//! its second half — so engines can be compared with one number.

use crate::counts;
use crate::receipt;
use crate::session::{ModelArgs, Session};
use anyhow::{Context, Result, bail};
use plumb_backend_ref::RefBackend;
use plumb_checkpoint::Checkpoint;
use plumb_checkpoint::source::{NoProgress, sha256_file, sha256_model};
use plumb_core::{Backend, ForwardBatch};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Tokens per chunk.
    #[arg(long = "chunk", default_value_t = 512, allow_negative_numbers = true, value_parser = counts::positive)]
    pub chunk: usize,
    /// Score at most this many chunks (default: all).
    #[arg(long, allow_negative_numbers = true, value_parser = counts::positive)]
    pub chunks: Option<usize>,
    /// Compute on the float64 reference backend instead (slow: for gating the figure).
    #[arg(long)]
    pub reference: bool,
    /// Also write a receipt to this file.
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// A UTF-8 text file.
    pub file: PathBuf,
}

/// The model on the float64 reference backend, loaded once.
struct Reference {
    backend: RefBackend<f64>,
    model: Box<dyn plumb_models::CausalLm<RefBackend<f64>>>,
}

impl Reference {
    fn load(file: &Checkpoint) -> Result<Self> {
        let backend = RefBackend::<f64>::new(std::thread::available_parallelism().map_or(1, |n| n.get()));
        let model = plumb_models::load_model(file, &backend)?;
        Ok(Reference { backend, model })
    }

    /// Logits of every position of `chunk` (one lane, fresh cache).
    fn logits(&self, chunk: &[u32]) -> Vec<f32> {
        reference_logits(&self.backend, self.model.as_ref(), chunk)
    }
}

fn reference_logits(
    backend: &RefBackend<f64>,
    model: &dyn plumb_models::CausalLm<RefBackend<f64>>,
    chunk: &[u32],
) -> Vec<f32> {
    let n = chunk.len();
    let mut kv = backend.new_kv_cache(&model.kv_spec(16, n.div_ceil(16)));
    let batch = ForwardBatch::single_lane(chunk, 0, 16, (0..n.div_ceil(16) as u32).collect());
    backend.download(&model.forward(backend, &batch, &mut kv, None))
}

/// −log softmax(logits)[target], in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    -(logits[target as usize] as f64 - max - sum.ln())
}

pub fn run(args: &PerplexityArgs) -> Result<()> {
    let started = crate::receipt::Started::now();
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    if args.chunk < 4 {
        bail!("--chunk must be at least 4 tokens");
    }
    let model = ModelArgs { ctx: Some(args.chunk), ..args.model.clone() };
    let mut s = Session::<plumb_backend_cpu::CpuBackend>::open(&model, args.chunk.min(512))?;
    let tokens = s.tokenizer.encode(&text, false, false);
    let available = tokens.len() / args.chunk;
    let num_chunks = args.chunks.map_or(available, |c| c.min(available));
    if num_chunks == 0 {
        bail!("{} has {} tokens, fewer than one chunk of {}", args.file.display(), tokens.len(), args.chunk);
    }
    let vocab = s.engine.model().config().vocab_size;
    let bos = s.tokenizer.spec().bos_id.filter(|_| s.tokenizer.spec().add_bos);
    let first = args.chunk / 2;
    let reference = if args.reference { Some(Reference::load(&Checkpoint::open(&s.path)?)?) } else { None };
    let (mut total, mut count) = (0f64, 0usize);
    eprintln!(
        "perplexity over {} of {} tokens, scoring the second half of each",
        counts::plural(num_chunks, "chunk", "chunks"),
        args.chunk
    );
    for c in 0..num_chunks {
        let mut chunk = tokens[c * args.chunk..(c + 1) * args.chunk].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let logits = match &reference {
            Some(r) => r.logits(&chunk),
            None => s.engine.logits_all(&chunk)?,
        };
        for j in first..args.chunk - 1 {
            total += nll(&logits[j * vocab..(j + 1) * vocab], chunk[j + 1]);
            count += 1;
        }
        eprint!("[{}]{:.4} ", c + 1, (total / count as f64).exp());
        std::io::stderr().flush()?;
    }
    eprintln!();
    let ppl = (total / count as f64).exp();
    let backend = if args.reference { "ref (float64)".to_string() } else { s.engine.backend().name() };
    println!(
        "perplexity {ppl:.4} over {} ({count} scored tokens) on {backend}",
        counts::plural(num_chunks, "chunk", "chunks")
    );
    if let Some(path) = &args.receipt {
        let text_sha = sha256_file(&args.file, &NoProgress)?;
        let figures = json!({
            "backend": backend,
            "text": { "path": args.file.display().to_string(), "sha256": text_sha },
            "chunk": args.chunk,
            "chunks": num_chunks,
            "scored_tokens": count,
            "perplexity": ppl,
        });
        let sha = sha256_model(&s.path, &NoProgress)?;
        receipt::write(path, &receipt::envelope("perplexity", started, &s.path, &sha, figures))?;
        eprintln!("receipt written to {}", path.display());
    }
    Ok(())
}
