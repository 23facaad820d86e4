//! `plumb synth`: writes a random-weight Hugging Face model folder of a preset shape or of any
//! `config.json` plumb knows, for benchmarks and tests at real sizes without a download.
//! The writing itself is `plumb_checkpoint::synth`; this file parses options and reports.

use crate::counts;
use crate::progress::Bars;
use anyhow::{Context, Result};
use plumb_checkpoint::synth::{SynthDtype, SynthOptions, SynthPlan, arch, presets};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
#[command(after_help = presets_help())]
pub struct SynthArgs {
    /// A preset shape (listed below).
    #[arg(long, value_name = "NAME", required_unless_present = "config", conflicts_with = "config")]
    pub arch: Option<String>,
    /// A Hugging Face config.json to copy the shape from (its architecture must be one plumb synth writes).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Element type of the weights: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub dtype: SynthDtype,
    /// Seed of the weights: the same seed writes the same bytes, on any machine.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = counts::non_negative_u64)]
    pub seed: u64,
    /// Keep the shape but write only N decoder layers (real widths, quick to write and run).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = counts::positive)]
    pub layers: Option<usize>,
    /// Largest weight file, in MiB; bigger models are sharded with an index, as Hugging Face does.
    #[arg(long, value_name = "MIB", default_value_t = 4096, allow_negative_numbers = true, value_parser = counts::positive)]
    pub max_shard_mib: usize,
    /// Threads generating weights (default: all cores; the bytes do not depend on it).
    #[arg(long, short = 't', default_value_t = 0, allow_negative_numbers = true, value_parser = counts::non_negative)]
    pub threads: usize,
    /// The folder to write: created if missing, refused unless empty.
    pub out_dir: PathBuf,
}

/// The presets, one a line, for `--help`.
fn presets_help() -> String {
    let mut s = String::from("Presets (--arch):\n");
    for p in presets::PRESETS {
        s.push_str(&format!("  {:<16} {}\n", p.name, p.about));
    }
    s.push_str(&format!("\n--config takes a config.json of: {}\n", arch::SUPPORTED));
    s.push_str("\nExample: plumb synth --arch llama-3.2-1b /tmp/llama-1b && plumb bench --model /tmp/llama-1b");
    s
}

/// `1.23 G`, `45.6 M`, `789 k`: a count with an SI prefix.
fn si(n: u64) -> String {
    match n as f64 {
        x if x >= 1e9 => format!("{:.2} G", x / 1e9),
        x if x >= 1e6 => format!("{:.1} M", x / 1e6),
        x => format!("{:.0} k", x / 1e3),
    }
}

pub fn run(args: &SynthArgs) -> Result<()> {
    let options = SynthOptions {
        dtype: args.dtype,
        seed: args.seed,
        num_layers: args.layers,
        max_shard_bytes: args.max_shard_mib as u64 * (1 << 20),
        threads: args.threads,
    };
    let plan = match (&args.arch, &args.config) {
        (Some(name), _) => SynthPlan::preset(name, options)?,
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
            SynthPlan::new(&text, &path.display().to_string(), options)?
        }
        (None, None) => anyhow::bail!("give --arch NAME or --config FILE"),
    };
    let start = Instant::now();
    let summary = plan.write(&args.out_dir, &Bars::default())?;
    let c = &plan.shape.config;
    eprintln!(
        "wrote {} ({} parameters, {} layers, {} tensors, {}B of {} weights in {}) to {} in {:.1} s",
        summary.architecture,
        si(summary.num_params),
        c.num_hidden_layers,
        summary.num_tensors,
        si(summary.weight_bytes),
        args.dtype.safetensors_name(),
        counts::plural(summary.files.len(), "file", "files"),
        args.out_dir.display(),
        start.elapsed().as_secs_f64()
    );
    println!("{}", args.out_dir.display());
    Ok(())
}
