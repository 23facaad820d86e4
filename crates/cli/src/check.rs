//! `plumb check`: the conformance suite, the whole-model gate and the residency gate for a model
//! on a backend, printed as tables and written as a receipt.

use crate::receipt;
use crate::session::{ModelArgs, OpenBackend, Session};
use anyhow::{Result, bail};
use plumb_checkpoint::Checkpoint;
use plumb_checkpoint::source::{NoProgress, sha256_model};
use plumb_engine::Request;
use plumb_sampling::SamplingParams;
use plumb_verify::conformance::run_suite;
use plumb_verify::gate::{Control, GateBound, run_gate};
use plumb_verify::outside::{OutsideFixture, compare};
use plumb_verify::residency;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Only the first two controls (64 tokens each) instead of eight plus a 512-token one. Their
    /// figures equal a full run's exactly, so a quick run reproduces part of a committed receipt.
    #[arg(long)]
    pub quick: bool,
    /// Seed of the conformance inputs (default: from the clock; printed).
    #[arg(long, allow_negative_numbers = true, value_parser = crate::counts::non_negative_u64)]
    pub seed: Option<u64>,
    /// Where to write the receipt (default: $PLUMB_HOME/receipts/check-<device kind>.json).
    #[arg(long)]
    pub receipt: Option<PathBuf>,
    /// Golden fixtures from Hugging Face transformers in float64 for this model (default:
    /// fixtures/smollm2 under the current directory, when it was made from the same file).
    #[arg(long)]
    pub fixtures: Option<PathBuf>,
}

/// The outside reference for the model at `model`, if there is one.
fn outside_fixture(args: &CheckArgs, model: &std::path::Path) -> Result<Option<OutsideFixture>> {
    if let Some(dir) = &args.fixtures {
        return Ok(Some(OutsideFixture::load(dir).map_err(anyhow::Error::msg)?));
    }
    let dir = PathBuf::from("fixtures/smollm2");
    if !dir.join("manifest.json").exists() {
        return Ok(None);
    }
    let fixture = OutsideFixture::load(&dir).map_err(anyhow::Error::msg)?;
    let same_file = model.file_name().is_some_and(|n| n.to_string_lossy() == fixture.model_file);
    Ok(same_file.then_some(fixture))
}

/// The gate's controls: the prompts of the transformers fixtures (fixtures/smollm2), so the
/// figures can be compared with the outside reference, each continued for 64 tokens, and one
/// long control of 512 tokens.
const PROMPTS: [&str; 8] = [
    "The capital of France is",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "In 1969, 3 astronauts flew 384,400 km; 12 men walked on the Moon between 1969 and 1972. 7 x 8 =",
    "La tour Eiffel a été construite en 1889 pour l'Exposition universelle. Elle mesure",
    "Once upon a time, in a small village by the sea,",
    "Ingredients:\n- 2 cups flour\n- 1 tsp salt\n\nSteps:\n1.",
    "Q: Why is the sky blue?\nA:",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
];
const LONG_CONTROL: &str = "The history of the printing press begins in the fifteenth century, when Johannes Gutenberg \
combined movable metal type, oil-based inks and a wooden screw press into a practical system for producing books. Within \
fifty years, printing shops had spread across Europe, the price of a book had fallen sharply, and ordinary merchants could \
afford to own one. As a result,";

/// The CPU and CUDA backends compute in float32 like the floor's reference chain but in its own fixed
/// order; measured it sits at about half the floor. 4× the floor allows any order of equal
/// quality while staying orders of magnitude below bf16 (2e-2) or 8-bit activations (3.7e-2);
/// no allowance for quantized activations, since the CPU backend uses none. Near-ties: the
/// default model's logits are O(10), so the CPU's per-logit error is about 3e-6 × 10 = 3e-5; a
/// float64 top-2 gap under 1e-3 (30× that) may flip under any float32 order of equal quality.
const F32_BOUND: GateBound = GateBound { floor_multiple: 4.0, abs_allowance: 0.0, near_tie: 1e-3 };

pub fn run(args: &CheckArgs) -> Result<()> {
    crate::on_device!(args.model.device, B => run_on::<B>(args))
}

fn run_on<B: OpenBackend>(args: &CheckArgs) -> Result<()> {
    let started = receipt::Started::now();
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    });
    // The gate decides whether the family may run here, so opening must not require it to have passed.
    let session_backend = B::open(&args.model)?;
    let path = crate::resolve_model(args.model.model.as_deref())?;
    let mut session = Session::open_path(&path, &args.model, 256, session_backend, false)?;
    // Threads for the float64 reference: the CPU backend's own count, or every core beside a GPU.
    let threads = session
        .engine
        .backend()
        .threads()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let backend = B::open(&args.model)?;
    let kind = plumb_core::Backend::kind(&backend);

    println!("== conformance: every op and weight format vs float64 (seed {seed}) ==");
    let cases = run_suite(&backend, seed);
    for c in &cases {
        println!(
            "{:<13} {:<46} {:>10.3e} ≤ {:<10.3e} {}",
            c.op,
            c.variant,
            c.error,
            c.bound,
            if c.pass { "pass" } else { "FAIL" }
        );
    }
    let conformance_pass = cases.iter().all(|c| c.pass);

    println!(
        "\n== whole-model gate: {} on {} vs float64 ==",
        session.path.display(),
        plumb_core::Backend::name(&backend)
    );
    let (prompts, gen_len, long): (&[&str], usize, bool) =
        if args.quick { (&PROMPTS[..2], 64, false) } else { (&PROMPTS, 64, true) };
    let mut controls: Vec<Control> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| Control { name: format!("prompt {i}"), prompt: session.tokenizer.encode(p, true, true), gen_len })
        .collect();
    if long {
        controls.push(Control {
            name: "long control".into(),
            prompt: session.tokenizer.encode(LONG_CONTROL, true, true),
            gen_len: 512,
        });
    }
    let file = Checkpoint::open(&session.path)?;
    let gate = run_gate(&file, &backend, &controls, F32_BOUND, threads)?;
    println!(
        "{:<14} {:>6} {:>11} {:>11} {:>11} {:>11}  greedy  near-ties  chunked  laned",
        "control", "tokens", "nrms mean", "nrms max", "floor mean", "floor max"
    );
    for c in &gate.controls {
        println!(
            "{:<14} {:>6} {:>11.3e} {:>11.3e} {:>11.3e} {:>11.3e}  {:<7} {:>9}  {:<7}  {}",
            c.name,
            c.prompt_len + c.gen_len,
            c.nrms_mean,
            c.nrms_max,
            c.floor_mean,
            c.floor_max,
            if c.greedy_agrees { "agrees" } else { "DIFFERS" },
            c.near_ties,
            if c.invariant { "exact" } else { "BROKEN" },
            if c.lanes_invariant { "exact" } else { "BROKEN" }
        );
    }
    println!(
        "all: NRMS mean {:.3e} (bound {:.3e}), worst {:.3e} (bound {:.3e}); floor mean {:.3e}, worst {:.3e}",
        gate.nrms_mean,
        F32_BOUND.floor_multiple * gate.floor_mean,
        gate.nrms_worst,
        F32_BOUND.floor_multiple * gate.floor_worst,
        gate.floor_mean,
        gate.floor_worst
    );

    println!("\n== outside reference: Hugging Face transformers in float64 ==");
    let outside = match outside_fixture(args, &session.path)? {
        Some(fixture) => {
            let report = compare(&file, &backend, &fixture, prompts.len() + usize::from(long), threads)?;
            println!(
                "{:<14} {:>9} {:>16} {:>13} {:>13}",
                "prompt",
                "positions",
                "float64 graph",
                format!("{kind} mean"),
                format!("{kind} worst")
            );
            for p in &report.prompts {
                println!(
                    "{:<14} {:>9} {:>16.3e} {:>13.3e} {:>13.3e}",
                    p.name, p.positions, p.reference_nrms_max, p.backend_nrms_mean, p.backend_nrms_max
                );
            }
            println!(
                "plumb's float64 graph within {:.0e} of transformers on every prompt: {}",
                report.reference_bound,
                if report.pass { "pass" } else { "FAIL" }
            );
            Some(report)
        }
        None => {
            println!("no transformers fixtures for this model (pass --fixtures DIR to compare)");
            None
        }
    };

    println!("\n== residency gate: no file reads or major faults while serving ==");
    let warm = Request::new(session.tokenizer.encode("Hello", false, false), SamplingParams::greedy(), 8, vec![]);
    generate(&mut session, warm);
    let prompt = session.tokenizer.encode(LONG_CONTROL, false, false);
    let serve = Request::new(prompt, SamplingParams::greedy(), 256, vec![]);
    let res = residency::measure(256, || generate(&mut session, serve));
    println!(
        "256 tokens: {} bytes read from files, {} from storage, {} major faults: {}",
        res.file_bytes_read,
        res.storage_bytes_read,
        res.major_faults,
        if res.pass { "pass" } else { "FAIL" }
    );

    let pass = conformance_pass && gate.pass && res.pass && outside.as_ref().is_none_or(|o| o.pass);
    let mut failures: Vec<String> = cases
        .iter()
        .filter(|c| !c.pass)
        .map(|c| format!("conformance {} [{}]: {:.3e} > {:.3e}", c.op, c.variant, c.error, c.bound))
        .collect();
    failures.extend(gate.failures.iter().cloned());
    failures.extend(res.failures.iter().cloned());
    failures.extend(outside.iter().flat_map(|o| o.failures.iter().cloned()));
    let family = plumb_models::registry::family_of(&session.engine.model().config().architecture).unwrap_or("unknown");
    let figures = json!({
        "family": family,
        "backend_kind": kind,
        "backend": plumb_core::Backend::name(&backend),
        "device": backend.device_info(),
        "quick": args.quick,
        "conformance_seed": seed,
        "conformance": cases,
        "gate": gate,
        "residency": res,
        "outside_reference": outside,
        "pass": pass,
        "failures": failures,
    });
    let sha = sha256_model(&session.path, &NoProgress)?;
    let r = receipt::envelope("check", started, &session.path, &sha, figures);
    let path = match &args.receipt {
        Some(p) => p.clone(),
        None => plumb_checkpoint::source::plumb_home()?.join("receipts").join(format!("check-{kind}.json")),
    };
    receipt::write(&path, &r)?;
    println!("\nreceipt written to {}", path.display());
    if !pass {
        for f in &failures {
            eprintln!("FAILED: {f}");
        }
        bail!("plumb check failed ({} problems)", failures.len());
    }
    println!("plumb check passed");
    Ok(())
}

fn generate<B: plumb_core::FullBackend>(s: &mut Session<B>, req: Request) {
    if s.engine.add_request(req).is_ok() {
        while s.engine.has_work() {
            s.engine.step();
        }
    }
}
