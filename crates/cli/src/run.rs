//! `plumb run` and `plumb chat`: generate text, streamed as it is produced.

use crate::session::{ModelArgs, Session};
use anyhow::{Context, Result, bail};
use plumb_engine::{FinishReason, Request};
use plumb_sampling::SamplingParams;
use plumb_tokenizer::{ChatMessage, StreamDecoder};
use std::io::{BufRead, Write};
use std::time::Instant;

/// Sampling options.
#[derive(clap::Args, Debug, Clone)]
pub struct SampleArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Keep the K most likely tokens (0 = off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches P (1 = off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than P × the most likely one (0 = off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Penalize tokens already present (1 = off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Lower each token's logit by this much per time it was generated (OpenAI style, -2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Lower the logit of every token generated at least once by this much (-2..2).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Random seed (default: from the clock).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Most tokens to generate.
    #[arg(long, short = 'n', default_value_t = 256)]
    pub max_tokens: usize,
}

impl SampleArgs {
    pub fn params(&self) -> SamplingParams {
        let seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
        });
        SamplingParams {
            temperature: self.temperature,
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            repetition_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            seed,
        }
    }
}

/// Figures of one generation.
pub struct GenStats {
    pub prompt_tokens: usize,
    pub generated: usize,
    pub prefill_secs: f64,
    pub decode_secs: f64,
    pub finish: Option<FinishReason>,
}

/// Generates from `prompt` ids, writing text to `out` as it comes; returns the ids generated.
pub fn generate(
    s: &mut Session,
    prompt: Vec<u32>,
    sample: &SampleArgs,
    out: &mut dyn Write,
) -> Result<(Vec<u32>, GenStats)> {
    let stop_ids = s.tokenizer.spec().eog_ids.clone();
    let prompt_tokens = prompt.len();
    let req = Request::new(prompt, sample.params(), sample.max_tokens, stop_ids);
    let id = s.engine.add_request(req)?;
    let mut decoder = StreamDecoder::new(&s.tokenizer, true);
    let mut generated = Vec::new();
    let start = Instant::now();
    let mut first_token_at = None;
    let mut finish = None;
    while s.engine.has_work() {
        for u in s.engine.step() {
            if u.seq_id != id {
                continue;
            }
            first_token_at.get_or_insert_with(|| start.elapsed().as_secs_f64());
            generated.push(u.token);
            out.write_all(decoder.push(u.token)?.as_bytes())?;
            out.flush()?;
            finish = u.finished;
        }
    }
    out.write_all(decoder.finish().as_bytes())?;
    let total = start.elapsed().as_secs_f64();
    let prefill_secs = first_token_at.unwrap_or(total);
    let stats =
        GenStats { prompt_tokens, generated: generated.len(), prefill_secs, decode_secs: total - prefill_secs, finish };
    Ok((generated, stats))
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
        "\n[{} prompt tokens, {:.1} tok/s prefill; {} generated, {:.1} tok/s decode; resident {:.1} MB; {}]",
        st.prompt_tokens,
        st.prompt_tokens as f64 / st.prefill_secs,
        st.generated,
        decode_rate,
        resident_bytes() as f64 / 1e6,
        match st.finish {
            Some(FinishReason::Stop) => "stopped at end of turn",
            Some(FinishReason::Length) => "reached --max-tokens",
            None => "aborted",
        }
    );
}

/// Prompt ids: raw text, or the chat template around one user turn.
fn prompt_ids(s: &Session, prompt: &str, raw: bool) -> Result<Vec<u32>> {
    if prompt.is_empty() {
        bail!("the prompt is empty: pass some text, e.g. plumb run \"What is the capital of France?\"");
    }
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

pub fn run(model: &ModelArgs, sample: &SampleArgs, raw: bool, prompt: &str) -> Result<()> {
    let mut s = Session::open(model, 512)?;
    let ids = prompt_ids(&s, prompt, raw)?;
    let mut stdout = std::io::stdout().lock();
    let (_, stats) = generate(&mut s, ids, sample, &mut stdout)?;
    writeln!(stdout)?;
    print_stats(&stats);
    Ok(())
}

pub fn chat(model: &ModelArgs, sample: &SampleArgs, system: Option<&str>) -> Result<()> {
    let mut s = Session::open(model, 512)?;
    if s.template.is_none() {
        bail!("this model has no chat template, so `plumb chat` cannot format turns; try `plumb run --raw`");
    }
    let mut messages: Vec<ChatMessage> = system.map(|sys| vec![ChatMessage::new("system", sys)]).unwrap_or_default();
    eprintln!("plumb chat — {} (end input with Ctrl-D)", s.path.display());
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        eprint!("> ");
        std::io::stderr().flush()?;
        let Some(line) = lines.next() else {
            eprintln!();
            return Ok(());
        };
        let line = line.context("reading standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(ChatMessage::new("user", &line));
        let text = s.template.as_ref().expect("checked above").render(&messages, true)?;
        let ids = s.tokenizer.encode(&text, true, true);
        let mut stdout = std::io::stdout().lock();
        let (generated, _) = match generate(&mut s, ids, sample, &mut stdout) {
            Ok(r) => r,
            Err(e) => {
                // A turn that does not fit is dropped; the conversation goes on.
                messages.pop();
                eprintln!("error: {e}");
                continue;
            }
        };
        writeln!(stdout)?;
        let reply = s.tokenizer.decode(&generated, true)?;
        messages.push(ChatMessage::new("assistant", &reply));
    }
}
