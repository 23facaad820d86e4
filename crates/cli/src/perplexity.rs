//! `plumb perplexity`: perplexity of a text file as llama.cpp's `llama-perplexity` computes it —
//! non-overlapping chunks of `ctx` tokens (BOS first when the model adds one), each scored on
//! its second half — so engines can be compared with one number.

use crate::session::{ModelArgs, Session};
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct PerplexityArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Tokens per chunk.
    #[arg(long = "chunk", default_value_t = 512)]
    pub chunk: usize,
    /// Score at most this many chunks (default: all).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// A UTF-8 text file.
    pub file: PathBuf,
}

/// −log softmax(logits)[target], in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    -(logits[target as usize] as f64 - max - sum.ln())
}

pub fn run(args: &PerplexityArgs) -> Result<()> {
    let text = std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    if args.chunk < 4 {
        bail!("--chunk must be at least 4 tokens");
    }
    let model = ModelArgs { ctx: Some(args.chunk), ..args.model.clone() };
    let mut s = Session::open(&model, args.chunk.min(512))?;
    let tokens = s.tokenizer.encode(&text, false, false);
    let available = tokens.len() / args.chunk;
    let num_chunks = args.chunks.map_or(available, |c| c.min(available));
    if num_chunks == 0 {
        bail!("{} has {} tokens, fewer than one chunk of {}", args.file.display(), tokens.len(), args.chunk);
    }
    let vocab = s.engine.model().config().vocab_size;
    let bos = s.tokenizer.spec().bos_id.filter(|_| s.tokenizer.spec().add_bos);
    let first = args.chunk / 2;
    let (mut total, mut count) = (0f64, 0usize);
    eprintln!("perplexity over {num_chunks} chunks of {} tokens, scoring the second half of each", args.chunk);
    for c in 0..num_chunks {
        let mut chunk = tokens[c * args.chunk..(c + 1) * args.chunk].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        let logits = s.engine.logits_all(&chunk)?;
        for j in first..args.chunk - 1 {
            total += nll(&logits[j * vocab..(j + 1) * vocab], chunk[j + 1]);
            count += 1;
        }
        eprint!("[{}]{:.4} ", c + 1, (total / count as f64).exp());
        std::io::stderr().flush()?;
    }
    eprintln!();
    let ppl = (total / count as f64).exp();
    println!("perplexity {ppl:.4} over {num_chunks} chunks ({count} scored tokens)");
    Ok(())
}
