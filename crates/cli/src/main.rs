//! `plumb`: the command line. Parses arguments, resolves the model, and hands off to one command.
//! This is the one place that will pick a backend; it holds no model or tokenizer logic itself.

mod bench;
mod bench_lanes;
mod check;
mod inspect;
mod perplexity;
mod plot;
mod progress;
mod receipt;
mod run;
mod session;

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
    /// Fetch a model into the cache (default: SmolLM2-135M-Instruct Q4_1) and verify its checksum.
    Pull {
        /// A known model name (see `plumb pull --help`); default: smollm2-135m-instruct.
        model: Option<String>,
    },
    /// Generate text from a prompt, streamed as it is produced (through the chat template unless --raw).
    Run {
        #[command(flatten)]
        model: session::ModelArgs,
        #[command(flatten)]
        sample: run::SampleArgs,
        /// Send the prompt as plain text instead of a chat turn.
        #[arg(long)]
        raw: bool,
        /// The prompt, e.g. "What is the capital of France?"
        prompt: String,
    },
    /// Chat interactively; end input (Ctrl-D) to leave.
    Chat {
        #[command(flatten)]
        model: session::ModelArgs,
        #[command(flatten)]
        sample: run::SampleArgs,
        /// A system message for the conversation.
        #[arg(long)]
        system: Option<String>,
    },
    /// Measure prefill and decode speed (median of runs) and write a receipt.
    Bench(bench::BenchArgs),
    /// Run the conformance suite, the whole-model gate and the residency gate; write a receipt.
    Check(check::CheckArgs),
    /// Perplexity of a text file, computed as llama.cpp's llama-perplexity does.
    Perplexity(perplexity::PerplexityArgs),
    /// Show a model's architecture, hyper-parameters, tensors and tokenizer.
    Inspect {
        /// A path to a .gguf file or a known model name; default: the default model (pulled on first use).
        model: Option<String>,
        /// Print machine-readable JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
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
        Command::Run { model, sample, raw, prompt } => run::run(&model, &sample, raw, &prompt),
        Command::Chat { model, sample, system } => run::chat(&model, &sample, system.as_deref()),
        Command::Bench(args) => bench::run(&args),
        Command::Perplexity(args) => perplexity::run(&args),
        Command::Check(args) => check::run(&args),
    }
}

fn main() -> ExitCode {
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
