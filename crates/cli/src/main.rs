//! `plumb`: the command line. Parses arguments, resolves the model, and hands off to one command.
//! This is the one place that will pick a backend; it holds no model or tokenizer logic itself.

mod bench;
mod bench_draft;
mod bench_lanes;
mod cache;
mod chat;
mod check;
mod counts;
mod draft;
mod inspect;
mod inspect_moe;
mod perplexity;
mod plot;
mod progress;
mod receipt;
mod roofline;
mod run;
mod serve;
mod session;
mod signals;
mod synth;

use anyhow::Result;
use clap::{Parser, Subcommand};
use plumb_checkpoint::source;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "plumb", version, about = "An LLM inference engine that can prove what it computes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Fetch a known model into the cache and verify its checksum (default: SmolLM2-135M-Instruct Q4_1).
    Pull {
        #[arg(help = known_models_help())]
        model: Option<String>,
    },
    /// List the cached models: name, size, architecture, and whether its family passed its gate here.
    List,
    /// Remove a cached model (and its checksum stamp); refuses files outside the cache.
    Rm {
        /// A cached model: its file name as `plumb list` shows it (with or without .gguf), a known
        /// name, or a path to a file in the cache.
        model: String,
    },
    /// Generate text from a prompt, streamed as it is produced (through the chat template unless --raw).
    Run(run::RunArgs),
    /// Chat interactively (/help lists the commands); Ctrl-D or /bye leaves.
    Chat {
        #[command(flatten)]
        model: session::ModelArgs,
        #[command(flatten)]
        sample: run::SampleArgs,
        /// A system message for the conversation.
        #[arg(long)]
        system: Option<String>,
    },
    /// Measure prefill and decode speed (median of runs); a receipt is written only with
    /// --receipt FILE (--json prints it).
    Bench(bench::BenchArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat, completions, streaming, metrics).
    Serve(serve::ServeArgs),
    /// Run the conformance suite, the whole-model gate and the residency gate; always writes a
    /// receipt (default: $PLUMB_HOME/receipts/check-<backend>.json).
    Check(check::CheckArgs),
    /// Perplexity of a text file, computed as llama.cpp's llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Write a random-weight Hugging Face model folder of a preset shape or a config.json
    /// (config, safetensors, a working tokenizer, chat template) for benchmarks and tests.
    Synth(synth::SynthArgs),
    /// Show a model's architecture, hyper-parameters, tensors and tokenizer.
    Inspect {
        /// A path to a .gguf file or a known model name; default: the default model (pulled on first use).
        model: Option<String>,
        /// Print machine-readable JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// `pull`'s MODEL help: the names it knows.
fn known_models_help() -> String {
    let m = &source::DEFAULT_MODEL;
    format!(
        "A known model name: {} (all {}, {:.1} MB); default: {}",
        m.aliases.join(", "),
        m.display_name,
        m.size as f64 / 1e6,
        m.aliases[0]
    )
}

/// Resolves `--model` to a file, pulling the default model on first use.
pub fn resolve_model(spec: Option<&str>) -> Result<PathBuf> {
    let home = source::plumb_home()?;
    Ok(source::resolve_model(spec, &home, &progress::Bars::default())?)
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Pull { model } => {
            let home = source::plumb_home()?;
            let bars = progress::Bars::default();
            let known = match model.as_deref() {
                None => &source::DEFAULT_MODEL,
                Some(m) if source::DEFAULT_MODEL.aliases.iter().any(|a| a.eq_ignore_ascii_case(m)) => {
                    &source::DEFAULT_MODEL
                }
                Some(m) => {
                    return Err(source::SourceError::UnknownModel {
                        spec: m.into(),
                        known: source::DEFAULT_MODEL.aliases.join(", "),
                    }
                    .into());
                }
            };
            let path = source::ensure_model(known, &home, &bars)?;
            println!("{} ready at {}", known.display_name, path.display());
            Ok(())
        }
        Command::Inspect { model, json } => inspect::run(model.as_deref(), json),
        Command::List => cache::list(),
        Command::Rm { model } => cache::rm(&model),
        Command::Run(args) => run::run(&args),
        Command::Chat { model, sample, system } => chat::chat(&model, &sample, system.as_deref()),
        Command::Bench(args) => bench::run(&args),
        Command::Perplexity(args) => perplexity::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Serve(args) => serve::run(args),
        Command::Synth(args) => synth::run(&args),
    }
}

fn main() -> ExitCode {
    signals::restore_sigpipe();
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
