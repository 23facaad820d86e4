//! `plumb run`: generate text from one prompt, streamed as it is produced; and [`generate`], the
//! one generation loop that `run` and `chat` share (prefill meter, stop strings, Ctrl-C, limits).

use crate::counts;
use crate::progress::PrefillMeter;
use crate::session::{ModelArgs, OpenBackend, Session};
use crate::signals::CatchInterrupt;
use anyhow::{Context, Result, bail};
use plumb_engine::{FinishReason, Request};
use plumb_sampling::{SamplingDefaults, SamplingParams};
use plumb_tokenizer::{ChatMessage, StopMatcher, StopStep, StreamDecoder};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Instant;

/// Sampling options. One left unset takes the model's default (`generation_config.json`, GGUF
/// `general.sampling.*`), else plumb's (shown in each help line).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SampleArgs {
    /// 0 = greedy [default: the model's, else 0.8].
    #[arg(long, allow_negative_numbers = true)]
    pub temperature: Option<f32>,
    /// Keep the K most likely tokens, 0 = off [default: the model's, else 40].
    #[arg(long, allow_negative_numbers = true, value_parser = counts::non_negative)]
    pub top_k: Option<usize>,
    /// Keep the smallest set of tokens whose probability reaches P, 1 = off [default: the model's, else 0.95].
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Drop tokens less likely than P × the most likely one, 0 = off [default: the model's, else 0.05].
    #[arg(long)]
    pub min_p: Option<f32>,
    /// Penalize tokens already present, 1 = off [default: the model's, else 1].
    #[arg(long)]
    pub repeat_penalty: Option<f32>,
    /// Lower each token's logit by this much per time it was generated (OpenAI style, -2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Lower the logit of every token generated at least once by this much (-2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Random seed (default: from the clock).
    #[arg(long, allow_negative_numbers = true, value_parser = counts::non_negative_u64)]
    pub seed: Option<u64>,
    /// Most tokens to generate (default: until the model ends its turn or the context is full).
    #[arg(long, short = 'n', value_name = "N", allow_negative_numbers = true, value_parser = counts::positive)]
    pub max_tokens: Option<usize>,
    /// Stop before this text (it is not printed); may be given several times.
    #[arg(long = "stop", value_name = "TEXT")]
    pub stop: Vec<String>,
}

impl SampleArgs {
    /// The parameters of one request: each option given on the command line, else the model's
    /// default, else plumb's.
    pub fn params(&self, model: &SamplingDefaults) -> SamplingParams {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        });
        SamplingParams {
            temperature: self.temperature.or(model.temperature).unwrap_or(0.8),
            top_k: self.top_k.or(model.top_k).unwrap_or(40),
            top_p: self.top_p.or(model.top_p).unwrap_or(0.95),
            min_p: self.min_p.or(model.min_p).unwrap_or(0.05),
            repetition_penalty: self.repeat_penalty.or(model.repetition_penalty).unwrap_or(1.0),
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed,
            logit_bias: Vec::new(),
        }
    }
}

/// `plumb run`'s arguments.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub sample: SampleArgs,
    /// Send the prompt as plain text instead of a chat turn.
    #[arg(long)]
    pub raw: bool,
    /// Read the prompt from this file (trailing newlines are dropped).
    #[arg(long, short = 'f', value_name = "FILE", conflicts_with = "prompt")]
    pub file: Option<PathBuf>,
    /// The prompt, e.g. "What is the capital of France?"; `-` reads it from standard input.
    pub prompt: Option<String>,
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// The model generated an end-of-turn token.
    EndOfTurn,
    /// `-n` tokens were generated.
    MaxTokens(usize),
    /// Prompt and answer filled the context of this many tokens.
    ContextFull(usize),
    /// A `--stop` string came.
    StopText,
    /// Ctrl-C.
    Interrupted,
}

impl std::fmt::Display for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finish::EndOfTurn => write!(f, "stopped at end of turn"),
            Finish::MaxTokens(n) => write!(f, "reached -n {n}"),
            Finish::ContextFull(n) => write!(f, "context full ({n} tokens)"),
            Finish::StopText => write!(f, "stopped at a --stop string"),
            Finish::Interrupted => write!(f, "stopped by Ctrl-C"),
        }
    }
}

/// The prompt leaves no room for an answer in the context.
#[derive(Debug)]
pub struct NoRoom {
    pub prompt_len: usize,
    pub ctx: usize,
}

impl std::fmt::Display for NoRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the prompt has {} tokens, which leaves no room for an answer in the context of {} tokens; \
             shorten the prompt or raise --ctx",
            self.prompt_len, self.ctx
        )
    }
}

impl std::error::Error for NoRoom {}

/// Figures of one generation, and the text shown.
#[derive(Debug)]
pub struct GenStats {
    pub prompt_tokens: usize,
    pub generated: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub finish: Finish,
    /// What was written to the output (stop strings excluded).
    pub text: String,
}

/// Generates from `prompt` ids, writing text to `out` as it comes: until the model ends its
/// turn, `-n` tokens, a stop string, Ctrl-C (when `interrupt` is given) or a full context.
pub fn generate<B: plumb_core::FullBackend>(
    s: &mut Session<B>,
    prompt: Vec<u32>,
    sample: &SampleArgs,
    interrupt: Option<&CatchInterrupt>,
    out: &mut dyn Write,
) -> Result<GenStats> {
    let prompt_tokens = prompt.len();
    let config = s.engine.scheduler_config();
    let (ctx, step_tokens) = (config.max_model_len.min(config.num_blocks * config.block_size), config.max_batch_tokens);
    if prompt_tokens >= ctx && prompt_tokens > 0 {
        return Err(NoRoom { prompt_len: prompt_tokens, ctx }.into());
    }
    let room = ctx.saturating_sub(prompt_tokens);
    let max_tokens = sample.max_tokens.map_or(room, |n| n.min(room));
    let stop_ids = s.tokenizer.spec().eog_ids.clone();
    let id = s.engine.add_request(Request::new(prompt, sample.params(&s.sampling), max_tokens, stop_ids))?;
    let mut decoder = StreamDecoder::new(&s.tokenizer, true);
    let mut stops = StopMatcher::new(sample.stop.iter().cloned());
    let mut meter = PrefillMeter::new(prompt_tokens, step_tokens);
    let (mut text, mut generated, mut finish) = (String::new(), 0, None);
    let start = Instant::now();
    let mut first_token_at = None;
    while s.engine.has_work() && finish.is_none() {
        if interrupt.is_some_and(CatchInterrupt::take) {
            s.engine.abort(id);
            finish = Some(Finish::Interrupted);
            break;
        }
        for u in s.engine.step().into_iter().filter(|u| u.seq_id == id) {
            if first_token_at.is_none() {
                meter.clear();
                first_token_at = Some(start.elapsed().as_secs_f64());
            }
            generated += 1;
            let piece = match stops.push(&decoder.push(u.token)?) {
                StopStep::Continue(piece) => piece,
                StopStep::Stopped { text: piece, .. } => {
                    s.engine.abort(id);
                    finish = Some(Finish::StopText);
                    piece
                }
            };
            out.write_all(piece.as_bytes())?;
            out.flush()?;
            text.push_str(&piece);
            finish = finish.or(match u.finished {
                Some(FinishReason::Stop) => Some(Finish::EndOfTurn),
                Some(FinishReason::Length) if generated < room => Some(Finish::MaxTokens(generated)),
                Some(FinishReason::Length) => Some(Finish::ContextFull(ctx)),
                None => None,
            });
        }
        if first_token_at.is_none() {
            meter.update(s.engine.num_computed_tokens(id).unwrap_or(0));
        }
    }
    if finish != Some(Finish::StopText) {
        let tail = match stops.push(&decoder.finish()) {
            StopStep::Continue(t) => t + &stops.finish(),
            StopStep::Stopped { text, .. } => text,
        };
        out.write_all(tail.as_bytes())?;
        text.push_str(&tail);
    }
    let total = start.elapsed().as_secs_f64();
    let prefill_secs = first_token_at.unwrap_or(total);
    Ok(GenStats {
        prompt_tokens,
        generated,
        prefill_secs,
        decode_secs: total - prefill_secs,
        finish: finish.unwrap_or(Finish::Interrupted),
        text,
    })
}

/// This process's resident memory in bytes (Linux; 0 elsewhere).
pub fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = status.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1));
    kb.and_then(|v| v.parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
}

fn print_stats(st: &GenStats) {
    let decode_rate = if st.generated > 1 { (st.generated - 1) as f64 / st.decode_secs } else { 0.0 };
    eprintln!(
        "\n[{}, {:.1} tok/s prefill; {} generated, {:.1} tok/s decode; resident {:.1} MB; {}]",
        counts::plural(st.prompt_tokens, "prompt token", "prompt tokens"),
        st.prompt_tokens as f64 / st.prefill_secs,
        st.generated,
        decode_rate,
        resident_bytes() as f64 / 1e6,
        st.finish
    );
}

/// Prompt ids: raw text, or the chat template around one user turn.
pub fn prompt_ids<B: plumb_core::FullBackend>(s: &Session<B>, prompt: &str, raw: bool) -> Result<Vec<u32>> {
    let text = if raw {
        prompt.to_string()
    } else {
        let Some(t) = &s.template else {
            bail!("this model has no chat template; use --raw to send the prompt as plain text");
        };
        t.render(&[ChatMessage::new("user", prompt)], true)?
    };
    // Raw prompts are user text: control-token spellings stay text. Templates insert them on purpose.
    Ok(s.tokenizer.encode(&text, true, !raw))
}

/// The prompt from the argument, `-` (standard input) or `--file`.
fn read_prompt(args: &RunArgs) -> Result<String> {
    let (text, from) = match (&args.file, args.prompt.as_deref()) {
        (Some(path), _) => {
            let text =
                std::fs::read_to_string(path).with_context(|| format!("reading the prompt from {}", path.display()))?;
            (text.trim_end_matches(['\n', '\r']).to_string(), format!(" in {}", path.display()))
        }
        (None, Some("-")) => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the prompt from standard input")?;
            (text.trim_end_matches(['\n', '\r']).to_string(), " on standard input".to_string())
        }
        (None, Some(p)) => (p.to_string(), String::new()),
        (None, None) => bail!(
            "no prompt: pass it as an argument (plumb run \"What is the capital of France?\"), \
             `-` to read standard input, or -f FILE"
        ),
    };
    if text.is_empty() {
        bail!("the prompt{from} is empty: pass some text, e.g. plumb run \"What is the capital of France?\"");
    }
    Ok(text)
}

pub fn run(args: &RunArgs) -> Result<()> {
    crate::on_device!(args.model.device, B => run_on::<B>(args))
}

fn run_on<B: OpenBackend>(args: &RunArgs) -> Result<()> {
    let prompt = read_prompt(args)?;
    let mut s = Session::<B>::open(&args.model, 512)?;
    let ids = prompt_ids(&s, &prompt, args.raw)?;
    let mut stdout = std::io::stdout().lock();
    let stats = generate(&mut s, ids, &args.sample, None, &mut stdout)?;
    writeln!(stdout)?;
    stdout.flush()?;
    print_stats(&stats);
    if let Some(spec) = crate::draft::DraftSpec::from_args(&args.model)? {
        let d = s.engine.draft_stats();
        eprintln!(
            "[drafts {spec}: {} of {} accepted ({:.0}%), {:.2} tokens per verify step]",
            d.num_accepted_tokens,
            d.num_draft_tokens,
            100.0 * d.acceptance_rate(),
            d.tokens_per_verify_step()
        );
    }
    Ok(())
}
