//! `plumb bench`: prefill and decode speed, measured like llama.cpp's `llama-bench`
//! (pp: a prompt of random tokens in one pass; tg: tokens generated one at a time from an empty
//! context; plus decode at a given context depth). Median of several runs, written as a receipt.

use crate::counts;
use crate::receipt;
use crate::session::{ModelArgs, OpenBackend, Session};
use anyhow::Result;
use plumb_checkpoint::source::{NoProgress, sha256_model};
use plumb_engine::Request;
use plumb_sampling::SamplingParams;
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Prompt tokens for the prefill test (pp).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = counts::positive)]
    pub prompt_len: usize,
    /// Tokens generated for the decode test (tg).
    #[arg(long, default_value_t = 128, allow_negative_numbers = true, value_parser = counts::positive)]
    pub gen_len: usize,
    /// Context depth for the decode-at-depth test (0 = skip).
    #[arg(long, default_value_t = 512, allow_negative_numbers = true, value_parser = counts::non_negative)]
    pub depth: usize,
    /// Runs per test; the median is reported.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true, value_parser = counts::positive)]
    pub repetitions: usize,
    /// Print the receipt as JSON on stdout (written to a file only with --receipt).
    #[arg(long)]
    pub json: bool,
    /// Write the receipt to this file (no receipt is written without it).
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// Serve N requests at once for each N listed (e.g. 1,4,8,16) through the lanes engine and
    /// report aggregate tokens/s, time to first token and inter-token latency percentiles
    /// (prompts of --prompt-len, --gen-len tokens each) instead of the pp/tg tests.
    #[arg(long, value_delimiter = ',')]
    pub concurrency: Option<Vec<usize>>,
    /// With --concurrency: rows per engine step (decode rows first, prefill chunks fill the rest;
    /// smaller keeps inter-token latency low while prompts prefill). Default: 128 on the CPU,
    /// 2048 on CUDA (a GPU's prefill GEMMs need many rows to fill it).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub step_tokens: Option<usize>,
    /// With --concurrency: draw throughput and latency against concurrency as SVG into this file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// With --draft or --draft-model: time drafted against undrafted decoding of this chat prompt, A/B back to back
    /// (--gen-len tokens, greedy, --repetitions pairs), instead of the pp/tg tests.
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// With --plot: a peer's concurrency receipt (tools/bench/peer-llamaserver.sh) to draw beside plumb.
    #[arg(long)]
    pub peer: Option<PathBuf>,
}

/// Deterministic pseudo-random token ids below `vocab` (llama-bench also uses random tokens).
pub fn tokens(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    (0..n as u64).map(|i| (plumb_sampling::uniform(seed, i) * vocab as f64) as u32).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Seconds to prefill `prompt` and, separately, to decode `gen` more tokens.
fn timed_generation<B: plumb_core::FullBackend>(
    s: &mut Session<B>,
    prompt: Vec<u32>,
    num_gen: usize,
) -> Result<(f64, f64)> {
    let req = Request::new(prompt, SamplingParams::greedy(), num_gen + 1, vec![]);
    s.engine.add_request(req)?;
    let start = Instant::now();
    let mut first = None;
    while s.engine.has_work() {
        if !s.engine.step().is_empty() && first.is_none() {
            first = Some(start.elapsed().as_secs_f64());
        }
    }
    let total = start.elapsed().as_secs_f64();
    let first = first.unwrap_or(total);
    Ok((first, total - first))
}

pub fn run(args: &BenchArgs) -> Result<()> {
    if let Some(levels) = &args.concurrency {
        return crate::bench_lanes::run(args, levels);
    }
    if let Some(file) = &args.prompt_file {
        let spec = crate::draft::DraftSpec::from_args(&args.model)?
            .ok_or_else(|| anyhow::anyhow!("--prompt-file needs --draft or --draft-model (an A/B of drafts)"))?;
        return crate::on_device!(args.model.device, B => crate::bench_draft::run_on::<B>(args, spec, file));
    }
    crate::on_device!(args.model.device, B => run_on::<B>(args))
}

fn run_on<B: OpenBackend>(args: &BenchArgs) -> Result<()> {
    let started = crate::receipt::Started::now();
    let ctx = (args.prompt_len.max(args.depth) + args.gen_len + 1).max(args.model.ctx.unwrap_or(0));
    let model = ModelArgs { ctx: Some(ctx), ..args.model.clone() };
    let mut s = Session::<B>::open(&model, args.prompt_len.max(1))?;
    let vocab = s.engine.model().config().vocab_size;
    let threads = s.engine.backend().threads();
    eprintln!("benchmarking {} on {} ...", s.path.display(), s.engine.backend().name());
    // Warm-up: touches every weight page once so runs measure compute, not disk.
    timed_generation(&mut s, tokens(16, vocab, 99), 2)?;
    let (mut pp, mut tg, mut dd) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..args.repetitions {
        let (prefill, _) = timed_generation(&mut s, tokens(args.prompt_len, vocab, rep as u64), 0)?;
        pp.push(args.prompt_len as f64 / prefill);
        let (_, decode) = timed_generation(&mut s, tokens(1, vocab, 1000 + rep as u64), args.gen_len)?;
        tg.push(args.gen_len as f64 / decode);
        if args.depth > 0 {
            let (_, decode) = timed_generation(&mut s, tokens(args.depth, vocab, 2000 + rep as u64), args.gen_len)?;
            dd.push(args.gen_len as f64 / decode);
        }
    }
    // The work (bytes read, FLOPs) of one generation, where the backend counts it (for the
    // roofline): a decode token's bytes are a generation's less its prompt's prefill alone. Each
    // generation has a prompt of its own: one that shared a prefix with an earlier one would find
    // it in the prefix cache and count a shorter prefill (a 2,048-token prompt counted 1,536
    // tokens' FLOPs behind a 512-token one, and the decode at depth took the gap between two
    // unequal prefills as its own).
    let work = s.engine.backend().work_source();
    let mut seed = 4000;
    let mut work_of = |prompt: usize, generated: usize| -> Result<Option<(f64, f64)>> {
        let Some(work) = &work else { return Ok(None) };
        seed += 1;
        let before = work();
        timed_generation(&mut s, tokens(prompt, vocab, seed), generated)?;
        let after = work();
        Ok(Some(((after.0 - before.0) as f64, (after.1 - before.1) as f64)))
    };
    let mut decode_bytes = |prompt: usize| -> Result<Option<f64>> {
        let (with, without) = (work_of(prompt, args.gen_len)?, work_of(prompt, 0)?);
        Ok(with.zip(without).map(|(a, b)| (a.0 - b.0) / args.gen_len as f64))
    };
    let tg_bytes = decode_bytes(1)?;
    let dd_bytes = if args.depth > 0 { decode_bytes(args.depth)? } else { None };
    let pp_flops = work_of(args.prompt_len, 0)?.map(|w| w.1);
    let sha = sha256_model(&s.path, &NoProgress)?;
    let mut figures = json!({
        "backend": s.engine.backend().name(),
        "threads": threads,
        "device": s.engine.backend().device_info(),
        "repetitions": args.repetitions,
        format!("pp{}_tokens_per_s", args.prompt_len): median(pp.clone()),
        format!("tg{}_tokens_per_s", args.gen_len): median(tg.clone()),
        "pp_runs": pp,
        "tg_runs": tg,
    });
    if let Some(spec) = crate::draft::DraftSpec::from_args(&args.model)? {
        let d = s.engine.draft_stats();
        figures["draft"] = json!(spec.to_string());
        figures["draft_acceptance_rate"] = json!(d.acceptance_rate());
        figures["draft_tokens_per_verify_step"] = json!(d.tokens_per_verify_step());
    }
    if args.depth > 0 {
        figures[format!("tg{}_at_depth{}_tokens_per_s", args.gen_len, args.depth)] = json!(median(dd.clone()));
        figures["depth_runs"] = json!(dd);
    }
    if let (Some(bw), Some(tg_bytes)) = (s.engine.backend().copy_bandwidth(), tg_bytes) {
        // Roofline: the bytes a generated token reads ÷ the copy bandwidth measured now.
        let tg_fraction = median(tg.clone()) * tg_bytes / bw;
        let mut roof = json!({
            "copy_bandwidth_gb_per_s": bw / 1e9,
            "tg_bytes_per_token": tg_bytes,
            "tg_roofline_tokens_per_s": bw / tg_bytes,
            "tg_fraction_of_roofline": tg_fraction,
        });
        if let Some(dd_bytes) = dd_bytes {
            roof["depth_bytes_per_token"] = json!(dd_bytes);
            roof["depth_roofline_tokens_per_s"] = json!(bw / dd_bytes);
            roof["depth_fraction_of_roofline"] = json!(median(dd.clone()) * dd_bytes / bw);
        }
        eprintln!(
            "roofline: {:.0} GB/s copy bandwidth, {:.3} GB per token: tg at {:.0}% of it",
            bw / 1e9,
            tg_bytes / 1e9,
            100.0 * tg_fraction
        );
        figures["roofline"] = roof;
    }
    // Prefill against the device's measured dense bf16 rate (the FLOPs of one pp pass, counted).
    if let Some(flops) = pp_flops.filter(|&f| f > 0.0)
        && let Some(rate) = s.engine.backend().bf16_matmul_rate()
    {
        let pp_roof = crate::roofline::prefill(median(pp.clone()), args.prompt_len, flops, rate);
        eprintln!(
            "prefill roofline: {:.1} GFLOP per token, {:.0} TFLOP/s bf16 measured (cuBLASLt): pp at {:.0}% of it",
            flops / args.prompt_len as f64 / 1e9,
            rate / 1e12,
            100.0 * pp_roof["pp_fraction_of_bf16_rate"].as_f64().unwrap_or(0.0)
        );
        match figures.get_mut("roofline").and_then(|r| r.as_object_mut()) {
            Some(roof) => roof.extend(pp_roof.as_object().cloned().unwrap_or_default()),
            None => figures["roofline"] = pp_roof,
        }
    }
    let r = receipt::envelope("bench", started, &s.path, &sha, figures.clone());
    if let Some(path) = &args.receipt {
        receipt::write(path, &r)?;
        eprintln!("receipt written to {}", path.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("backend      {}", s.engine.backend().name());
        println!("pp{:<10} {:>8.1} tokens/s (median of {})", args.prompt_len, median(pp), args.repetitions);
        println!("tg{:<10} {:>8.1} tokens/s", args.gen_len, median(tg));
        if args.depth > 0 {
            println!("tg{} @ d{:<4} {:>8.1} tokens/s", args.gen_len, args.depth, median(dd));
        }
    }
    Ok(())
}
