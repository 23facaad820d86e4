//! `plumb bench --draft SPEC --prompt-file FILE`: drafted against undrafted decoding of the same
//! chat prompt, A/B back to back in one process (the order alternates each repetition, so a
//! machine whose speed drifts favours neither), greedy, up to --gen-len tokens. Every drafted
//! answer must equal its undrafted twin token for token, or the bench fails.

use crate::bench::BenchArgs;
use crate::draft::DraftSpec;
use crate::receipt;
use crate::session::{ModelArgs, OpenBackend, Session};
use anyhow::{Context, Result};
use plumb_checkpoint::source::{NoProgress, sha256_file};
use plumb_engine::{DraftStats, Request};
use plumb_sampling::SamplingParams;
use serde_json::json;
use std::path::Path;
use std::time::Instant;

/// One generation: its tokens, decode tokens/s (after the first step that yields tokens) and
/// the draft counters it added.
struct Timed {
    tokens: Vec<u32>,
    decode_tokens_per_s: f64,
    drafts: DraftStats,
}

fn generate<B: OpenBackend>(
    s: &mut Session<B>,
    prompt: &[u32],
    gen_len: usize,
    spec: Option<&DraftSpec>,
) -> Result<Timed> {
    let proposer = spec.map(|d| d.proposer(&s.engine, &s.tokenizer)).transpose()?;
    s.engine.set_proposer(proposer);
    let before = s.engine.draft_stats();
    let stop_ids = s.tokenizer.spec().eog_ids.clone();
    s.engine.add_request(Request::new(prompt.to_vec(), SamplingParams::greedy(), gen_len, stop_ids))?;
    let mut tokens = Vec::new();
    let mut first: Option<(Instant, usize)> = None;
    while s.engine.has_work() {
        let out = s.engine.step();
        tokens.extend(out.iter().map(|o| o.token));
        if first.is_none() && !out.is_empty() {
            first = Some((Instant::now(), tokens.len()));
        }
    }
    let (t0, n0) = first.context("the request produced no token")?;
    let decode_tokens_per_s = (tokens.len() - n0) as f64 / t0.elapsed().as_secs_f64();
    let drafts = s.engine.draft_stats().since(&before);
    s.engine.set_proposer(None);
    Ok(Timed { tokens, decode_tokens_per_s, drafts })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub fn run_on<B: OpenBackend>(args: &BenchArgs, spec: DraftSpec, prompt_file: &Path) -> Result<()> {
    let started = receipt::Started::now();
    let text = std::fs::read_to_string(prompt_file).with_context(|| format!("reading {}", prompt_file.display()))?;
    let model = ModelArgs { draft: None, draft_model: None, draft_k: None, ..args.model.clone() };
    let mut s = Session::<B>::open(&model, 512)?;
    let prompt = crate::run::prompt_ids(&s, text.trim_end(), false)?;
    let threads = s.engine.backend().threads();
    eprintln!("draft A/B: {} prompt tokens, up to {} generated, {spec} ...", prompt.len(), args.gen_len);
    generate(&mut s, &prompt, 4, None)?;
    let (mut plain, mut drafted, mut stats) = (Vec::new(), Vec::new(), Vec::new());
    let mut num_generated = 0;
    for rep in 0..args.repetitions {
        let order = if rep % 2 == 0 { [None, Some(&spec)] } else { [Some(&spec), None] };
        let mut runs = Vec::new();
        for d in order {
            runs.push((d.is_some(), generate(&mut s, &prompt, args.gen_len, d)?));
        }
        if runs[0].1.tokens != runs[1].1.tokens {
            anyhow::bail!("repetition {rep}: the drafted answer differs from the undrafted one");
        }
        num_generated = runs[0].1.tokens.len();
        for (is_drafted, t) in runs {
            if is_drafted {
                drafted.push(t.decode_tokens_per_s);
                stats.push(t.drafts);
            } else {
                plain.push(t.decode_tokens_per_s);
            }
        }
    }
    let total = stats.iter().fold(DraftStats::default(), |a, d| DraftStats {
        num_verify_steps: a.num_verify_steps + d.num_verify_steps,
        num_draft_tokens: a.num_draft_tokens + d.num_draft_tokens,
        num_accepted_tokens: a.num_accepted_tokens + d.num_accepted_tokens,
        num_emitted_tokens: a.num_emitted_tokens + d.num_emitted_tokens,
    });
    let (p, d) = (median(plain.clone()), median(drafted.clone()));
    let figures = json!({
        "backend": s.engine.backend().name(),
        "threads": threads,
        "device": s.engine.backend().device_info(),
        "draft": spec.to_string(),
        "prompt_file": prompt_file.display().to_string(),
        "prompt_tokens": prompt.len(),
        "generated_tokens": num_generated,
        "repetitions": args.repetitions,
        "identical_outputs": true,
        "undrafted_decode_tokens_per_s": p,
        "drafted_decode_tokens_per_s": d,
        "speedup": d / p,
        "undrafted_runs": plain,
        "drafted_runs": drafted,
        "draft_acceptance_rate": total.acceptance_rate(),
        "draft_tokens_per_verify_step": total.tokens_per_verify_step(),
        "draft_tokens": total.num_draft_tokens,
        "draft_accepted_tokens": total.num_accepted_tokens,
        "load_average": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    });
    let sha = sha256_file(&s.path, &NoProgress)?;
    let r = receipt::envelope("bench-draft", started, &s.path, &sha, figures);
    if let Some(path) = &args.receipt {
        receipt::write(path, &r)?;
        eprintln!("receipt written to {}", path.display());
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("undrafted    {p:>8.1} tokens/s decode (median of {})", args.repetitions);
        println!("drafted      {d:>8.1} tokens/s decode ({spec}), {:.2}x", d / p);
        println!(
            "acceptance   {:.0}% of {} drafts, {:.2} tokens per verify step; {num_generated} tokens, identical",
            100.0 * total.acceptance_rate(),
            total.num_draft_tokens,
            total.tokens_per_verify_step()
        );
    }
    Ok(())
}
