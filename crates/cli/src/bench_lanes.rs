//! `plumb bench --concurrency 1,4,8,16`: N independent requests decoding together through the
//! threaded lanes engine, as a server would run them. Per concurrency: aggregate tokens/s, time
//! to first token and inter-token latency percentiles (p50/p90/p99), written as a receipt with an
//! SVG plot; a peer receipt (llama-server, same prompts and lengths) can be drawn beside it.

use crate::bench::BenchArgs;
use crate::roofline::{self, DecodeRoof};
use crate::session::OpenBackend;
use crate::{plot, receipt};
use anyhow::{Context, Result, bail};
use plumb_checkpoint::Checkpoint;
use plumb_checkpoint::source::{NoProgress, sha256_model};
use plumb_engine::{Engine, EngineHandle, Event, Request};
use plumb_sampling::SamplingParams;
use plumb_scheduler::SchedulerConfig;
use serde_json::{Value, json};
use std::time::Instant;

/// Decode steps of the one-request run that measures the bytes a decode step reads besides KV.
const CALIBRATION_STEPS: usize = 32;

/// One request's timings, in seconds from the submission of the whole round.
struct Timings {
    first: f64,
    tokens: Vec<f64>,
}

/// The value below which `q` of `v` lies (nearest rank), in milliseconds.
fn percentile_ms(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    s[rank - 1] * 1e3
}

fn percentiles(v: &[f64]) -> Value {
    json!({ "p50": percentile_ms(v, 0.5), "p90": percentile_ms(v, 0.9), "p99": percentile_ms(v, 0.99) })
}

/// Runs `n` requests at once and returns each one's timings. The clients are tasks on one
/// thread, as a server's connections are, so they take no cores from the kernels.
fn round(handle: &EngineHandle, prompts: &[Vec<u32>], gen_len: usize) -> Result<Vec<Timings>> {
    let rt = tokio::runtime::Builder::new_current_thread().build()?;
    let start = Instant::now();
    let streams = prompts
        .iter()
        .map(|p| handle.submit(Request::new(p.clone(), SamplingParams::greedy(), gen_len, vec![])))
        .collect::<Result<Vec<_>, _>>()?;
    rt.block_on(async move {
        let tasks: Vec<_> = streams
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    let mut t = Timings { first: 0.0, tokens: Vec::new() };
                    while let Some(e) = s.next().await {
                        match e {
                            Event::Token(_) => t.tokens.push(start.elapsed().as_secs_f64()),
                            Event::Failed(e) => return Err(anyhow::anyhow!("{e}")),
                        }
                    }
                    t.first = t.tokens.first().copied().unwrap_or(0.0);
                    Ok(t)
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.map_err(|e| anyhow::anyhow!("a client task failed: {e}"))??);
        }
        Ok(out)
    })
}

/// Figures of one concurrency level; `prompt_len` tokens per request.
fn figures(n: usize, prompt_len: usize, t: &[Timings]) -> Value {
    let generated: usize = t.iter().map(|r| r.tokens.len()).sum();
    let end = t.iter().filter_map(|r| r.tokens.last()).fold(0f64, |a, &b| a.max(b));
    let first = t.iter().map(|r| r.first).fold(f64::INFINITY, f64::min);
    let ttft: Vec<f64> = t.iter().map(|r| r.first).collect();
    let itl: Vec<f64> = t.iter().flat_map(|r| r.tokens.windows(2).map(|w| w[1] - w[0])).collect();
    // Steady state: from the moment every request is decoding to the moment the first finishes.
    let all_decoding = t.iter().map(|r| r.first).fold(0f64, f64::max);
    let first_done = t.iter().filter_map(|r| r.tokens.last()).fold(f64::INFINITY, |a, &b| a.min(b));
    let in_window = t.iter().flat_map(|r| &r.tokens).filter(|&&x| x > all_decoding && x <= first_done).count();
    let steady = (first_done > all_decoding).then(|| in_window as f64 / (first_done - all_decoding));
    json!({
        "concurrency": n,
        "generated_tokens": generated,
        "wall_secs": end,
        "aggregate_tokens_per_s": generated as f64 / end,
        // Tokens after each request's first, over the span in which requests were decoding.
        "aggregate_decode_tokens_per_s": (generated - t.len()) as f64 / (end - first),
        "steady_decode_tokens_per_s": steady,
        // Every prompt token over the time until the last request's first token (prefill
        // shares its steps with the decode rows of requests already answering).
        "prefill_tokens_per_s": (n * prompt_len) as f64 / all_decoding,
        "ttft_ms": percentiles(&ttft),
        "itl_ms": percentiles(&itl),
    })
}

pub fn run(args: &BenchArgs, levels: &[usize]) -> Result<()> {
    if levels.is_empty() || levels.contains(&0) {
        bail!("--concurrency takes a list of positive counts, e.g. 1,4,8,16");
    }
    crate::on_device!(args.model.device, B => run_on::<B>(args, levels))
}

fn run_on<B: OpenBackend>(args: &BenchArgs, levels: &[usize]) -> Result<()> {
    let started = receipt::Started::now();
    let path = crate::resolve_model(args.model.model.as_deref())?;
    let file = Checkpoint::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let backend = B::open(&args.model)?;
    let model = plumb_models::load_model(&file, &backend)?;
    let vocab = model.config().vocab_size;
    let lanes = *levels.iter().max().expect("non-empty");
    let per_request = args.prompt_len + args.gen_len + 1;
    let step_tokens = args.step_tokens.unwrap_or(args.model.device.default_step_tokens(128));
    let config = SchedulerConfig {
        block_size: crate::session::BLOCK_SIZE,
        num_blocks: (lanes * per_request).div_ceil(crate::session::BLOCK_SIZE) + lanes,
        max_lanes: lanes,
        max_batch_tokens: step_tokens,
        max_model_len: per_request,
        max_waiting: lanes,
        enable_prefix_cache: true,
    };
    let backend_name = backend.name();
    let threads = backend.threads();
    let device = backend.device_info_later();
    // The roofline's inputs, where the backend measures and counts them: its copy bandwidth
    // (measured before the engine's KV cache takes the memory), its byte counter, and the bytes
    // one position's K and V take as stored.
    let bandwidth = backend.copy_bandwidth();
    let work = backend.work_source();
    let kv_store = plumb_core::Backend::kv_store(&backend);
    let drafter = crate::draft::DraftSpec::from_args(&args.model)?;
    let mut engine = Engine::try_new(backend, model, config)?;
    if let Some(spec) = &drafter {
        let tokenizer = plumb_engine::load::checkpoint_tokenizer(file.as_ref())?;
        engine.set_proposer(Some(spec.proposer(&engine, &tokenizer)?));
    }
    let handle = EngineHandle::spawn(engine, lanes);
    eprintln!("benchmarking {} lanes on {backend_name} ...", path.display());
    round(&handle, &[crate::bench::tokens(16, vocab, 99)], 2)?;
    let decode_roof = match (bandwidth, &work) {
        (Some(bandwidth), Some(work)) => {
            let kv = plumb_models::registry::kv_layout(file.as_ref())?;
            let kv_per_position = kv.bytes_per_position_as(kv_store) as f64;
            // One request of a one-token prompt, with CALIBRATION_STEPS decode steps and without:
            // the difference is those steps' bytes, weights and KV at positions 1 onward.
            let read = |generated: usize, seed: u64| -> Result<f64> {
                let before = work().0;
                round(&handle, &[crate::bench::tokens(1, vocab, seed)], generated)?;
                Ok((work().0 - before) as f64)
            };
            let steps = read(CALIBRATION_STEPS + 1, 77)? - read(1, 78)?;
            let weights_per_step = roofline::weights_per_step(steps, CALIBRATION_STEPS, 1, kv_per_position);
            (weights_per_step > 0.0).then_some(DecodeRoof { bandwidth, weights_per_step, kv_per_position })
        }
        _ => None,
    };
    let mut results = Vec::new();
    for (level, &n) in levels.iter().enumerate() {
        // Distinct random prompts: no prefix-cache hits between requests or rounds.
        let prompts: Vec<Vec<u32>> = (0..n)
            .map(|i| crate::bench::tokens(args.prompt_len, vocab, 10_000 * (level as u64 + 1) + i as u64))
            .collect();
        let before = handle.stats().drafts;
        let mut f = figures(n, args.prompt_len, &round(&handle, &prompts, args.gen_len)?);
        if let Some(r) = &decode_roof {
            let roof = r.tokens_per_s(n, args.prompt_len, args.gen_len);
            f["decode_roofline_tokens_per_s"] = json!(roof);
            f["decode_fraction_of_roofline"] = json!(f["aggregate_decode_tokens_per_s"].as_f64().map(|d| d / roof));
            f["steady_fraction_of_roofline"] = json!(f["steady_decode_tokens_per_s"].as_f64().map(|d| d / roof));
        }
        eprintln!(
            "{n:>3} concurrent: {:>7.1} tokens/s aggregate, {:.1} decoding ({:.1} steady), {:.1} prefilling, TTFT p50 {:.0} ms, ITL p50 {:.1} ms p99 {:.1} ms",
            f["aggregate_tokens_per_s"].as_f64().unwrap_or(0.0),
            f["aggregate_decode_tokens_per_s"].as_f64().unwrap_or(0.0),
            f["steady_decode_tokens_per_s"].as_f64().unwrap_or(0.0),
            f["prefill_tokens_per_s"].as_f64().unwrap_or(0.0),
            f["ttft_ms"]["p50"].as_f64().unwrap_or(0.0),
            f["itl_ms"]["p50"].as_f64().unwrap_or(0.0),
            f["itl_ms"]["p99"].as_f64().unwrap_or(0.0),
        );
        if let Some(roof) = f["decode_roofline_tokens_per_s"].as_f64() {
            eprintln!(
                "    roofline {roof:.1} decode tokens/s: decoding at {:.0}%, steady at {:.0}% of it",
                100.0 * f["decode_fraction_of_roofline"].as_f64().unwrap_or(0.0),
                100.0 * f["steady_fraction_of_roofline"].as_f64().unwrap_or(0.0)
            );
        }
        if drafter.is_some() {
            let d = handle.stats().drafts.since(&before);
            f["drafts"] = json!({
                "acceptance_rate": d.acceptance_rate(),
                "tokens_per_verify_step": d.tokens_per_verify_step(),
                "draft_tokens": d.num_draft_tokens,
                "accepted_tokens": d.num_accepted_tokens,
            });
            eprintln!(
                "    drafts: {} of {} accepted ({:.0}%), {:.2} tokens per verify step",
                d.num_accepted_tokens,
                d.num_draft_tokens,
                100.0 * d.acceptance_rate(),
                d.tokens_per_verify_step()
            );
        }
        results.push(f);
    }
    let mut figures = json!({
        "backend": backend_name,
        "threads": threads,
        "device": device(),
        "prompt_len": args.prompt_len,
        "gen_len": args.gen_len,
        "step_tokens": step_tokens,
        "sampling": "greedy, end-of-turn ignored",
        "draft": drafter.as_ref().map(ToString::to_string),
        "levels": results,
    });
    if let Some(r) = &decode_roof {
        figures["roofline"] = r.describe(args.prompt_len, args.gen_len);
    }
    let sha = sha256_model(&path, &NoProgress)?;
    let r = receipt::envelope("bench-concurrency", started, &path, &sha, figures.clone());
    if let Some(out) = &args.receipt {
        receipt::write(out, &r)?;
        eprintln!("receipt written to {}", out.display());
    }
    if let Some(svg) = &args.plot {
        let peer = match &args.peer {
            Some(p) => Some(serde_json::from_str::<Value>(&std::fs::read_to_string(p)?)?),
            None => None,
        };
        std::fs::write(
            svg,
            plot::concurrency_svg(&figures, peer.as_ref().map(|p| (plot::peer_name(p), &p["figures"]))),
        )?;
        eprintln!("plot written to {}", svg.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    }
    Ok(())
}
