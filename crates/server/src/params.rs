//! A request body → a [`Job`] in engine terms (token ids, sampling parameters, stop strings), or
//! the 400 that names the offending field. Fields plumb does not support yet are refused here,
//! by name; unknown fields are ignored, as OpenAI does.

use crate::error::ApiError;
use crate::state::LoadedModel;
use crate::wire::{ChatCompletionRequest, CompletionRequest, MessageContent, Prompt, SamplingFields, Stop};
use plumb_engine::MAX_LOGPROBS;
use plumb_sampling::SamplingParams;
use plumb_tokenizer::ChatMessage;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Most answers one request may ask for (`n`), as OpenAI.
pub const MAX_N: u32 = 128;
/// Most stop sequences, as OpenAI.
const MAX_STOPS: usize = 4;
/// Completions' default `max_tokens`, as OpenAI.
const COMPLETIONS_DEFAULT_MAX_TOKENS: usize = 16;

/// Fields whose presence asks for something plumb cannot do yet, with why.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("tools", " (no tool calling)"),
    ("tool_choice", " (no tool calling)"),
    ("functions", " (no function calling)"),
    ("function_call", " (no function calling)"),
    ("audio", " (text only)"),
    ("prediction", " (no predicted outputs)"),
    ("suffix", " (no fill-in-the-middle)"),
    ("web_search_options", ""),
];

/// One generation request in engine terms.
#[derive(Clone, Debug)]
pub struct Job {
    /// Each prompt's token ids (chat: one).
    pub prompts: Vec<Vec<u32>>,
    /// Answers per prompt.
    pub n: usize,
    /// None: what the context leaves.
    pub max_tokens: Option<usize>,
    /// Choice 0's parameters; choice i > 0 derives its seed from this one.
    pub params: SamplingParams,
    pub stops: Vec<String>,
    /// Alternatives per token when log-probabilities are asked for.
    pub logprobs: Option<usize>,
    pub echo: bool,
    pub stream: bool,
    pub include_usage: bool,
}

impl Job {
    /// The seed of answer `i` of a prompt, so `n` answers differ and each is reproducible.
    pub fn seed_of(&self, i: usize) -> u64 {
        choice_seed(self.params.seed, i)
    }
}

/// The seed of answer `i` of a request seeded with `seed` (answer 0 keeps `seed`; the others
/// take a SplitMix64 mix of it).
pub fn choice_seed(seed: u64, i: usize) -> u64 {
    if i == 0 {
        return seed;
    }
    let mut z = seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Deserializes `T` from `body`, naming the field at fault.
fn typed<T: DeserializeOwned>(body: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let message = if path == "." { inner } else { format!("{path}: {inner}") };
        ApiError::BadParam { message, param: (path != ".").then_some(path) }
    })
}

/// The refusals every generation route shares.
fn refuse_unsupported(body: &Value) -> Result<(), ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::BadParam { message: "the request body must be a JSON object".into(), param: None });
    };
    for (field, why) in UNSUPPORTED {
        if obj.get(*field).is_some_and(|v| !v.is_null()) {
            return Err(ApiError::unsupported(field, why));
        }
    }
    if let Some(rf) = obj.get("response_format").filter(|v| !v.is_null())
        && rf.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(ApiError::unsupported("response_format", " (only {\"type\": \"text\"})"));
    }
    if let Some(m) = obj.get("modalities").filter(|v| !v.is_null())
        && m.as_array().is_none_or(|a| a.iter().any(|x| x.as_str() != Some("text")))
    {
        return Err(ApiError::unsupported("modalities", " (only [\"text\"])"));
    }
    Ok(())
}

fn check_model(asked: &str, model: &LoadedModel) -> Result<(), ApiError> {
    if asked != model.name {
        return Err(ApiError::UnknownModel { asked: asked.into(), served: model.name.clone() });
    }
    Ok(())
}

/// Sampling fields → parameters, with OpenAI's ranges; an unset field takes the model's default,
/// else OpenAI's.
fn sampling(f: &SamplingFields, model: &LoadedModel) -> Result<(SamplingParams, Vec<String>, usize), ApiError> {
    let range = |name: &str, v: Option<f32>, ok: &dyn Fn(f32) -> bool, what: &str| match v {
        Some(x) if !ok(x) => Err(ApiError::param(format!("{name} must be {what}, got {x}"), name)),
        _ => Ok(()),
    };
    range("temperature", f.temperature, &|x| (0.0..=2.0).contains(&x), "between 0 and 2")?;
    range("top_p", f.top_p, &|x| x > 0.0 && x <= 1.0, "in (0, 1]")?;
    range("min_p", f.min_p, &|x| (0.0..=1.0).contains(&x), "between 0 and 1")?;
    range("presence_penalty", f.presence_penalty, &|x| (-2.0..=2.0).contains(&x), "between -2 and 2")?;
    range("frequency_penalty", f.frequency_penalty, &|x| (-2.0..=2.0).contains(&x), "between -2 and 2")?;
    range("repetition_penalty", f.repetition_penalty, &|x| x > 0.0 && x.is_finite(), "positive")?;
    let n = f.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::param(format!("n must be between 1 and {MAX_N}, got {n}"), "n"));
    }
    let mut logit_bias = Vec::new();
    for (key, &bias) in f.logit_bias.iter().flatten() {
        let token = key.trim().parse::<u32>().ok().filter(|&t| (t as usize) < model.handle.vocab_size());
        let Some(token) = token else {
            let message = format!("logit_bias key `{key}` is not a token id below {}", model.handle.vocab_size());
            return Err(ApiError::param(message, "logit_bias"));
        };
        if !(-100.0..=100.0).contains(&bias) {
            return Err(ApiError::param(
                format!("logit_bias values must be between -100 and 100, got {bias}"),
                "logit_bias",
            ));
        }
        logit_bias.push((token, bias));
    }
    logit_bias.sort_by_key(|b| b.0);
    if let Some(w) = logit_bias.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ApiError::param(format!("logit_bias names token {} twice", w[0].0), "logit_bias"));
    }
    let stops = match &f.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stops.len() > MAX_STOPS {
        return Err(ApiError::param(format!("stop takes at most {MAX_STOPS} sequences, got {}", stops.len()), "stop"));
    }
    let seed = f.seed.map_or_else(random_seed, |s| s as u64);
    let params = SamplingParams {
        temperature: f.temperature.or(model.sampling.temperature).unwrap_or(1.0),
        top_k: f.top_k.map(|k| k as usize).or(model.sampling.top_k).unwrap_or(0),
        top_p: f.top_p.or(model.sampling.top_p).unwrap_or(1.0),
        min_p: f.min_p.or(model.sampling.min_p).unwrap_or(0.0),
        repetition_penalty: f.repetition_penalty.or(model.sampling.repetition_penalty).unwrap_or(1.0),
        frequency_penalty: f.frequency_penalty.unwrap_or(0.0),
        presence_penalty: f.presence_penalty.unwrap_or(0.0),
        seed,
        logit_bias,
    };
    Ok((params, stops.into_iter().filter(|s| !s.is_empty()).collect(), n as usize))
}

fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

fn stream_flags(f: &SamplingFields) -> Result<(bool, bool), ApiError> {
    let stream = f.stream.unwrap_or(false);
    let include_usage = f.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::param("stream_options is only allowed when stream is true", "stream_options"));
    }
    Ok((stream, include_usage))
}

fn positive(v: Option<u32>, name: &str) -> Result<Option<usize>, ApiError> {
    match v {
        Some(0) => Err(ApiError::param(format!("{name} must be at least 1"), name)),
        v => Ok(v.map(|x| x as usize)),
    }
}

/// `POST /v1/chat/completions`'s body.
pub fn chat(body: &Value, model: &LoadedModel) -> Result<Job, ApiError> {
    refuse_unsupported(body)?;
    let fields: SamplingFields = typed(body)?;
    let req: ChatCompletionRequest = typed(body)?;
    check_model(&req.model, model)?;
    let (params, stops, n) = sampling(&fields, model)?;
    let (stream, include_usage) = stream_flags(&fields)?;
    if req.messages.is_empty() {
        return Err(ApiError::param("messages must hold at least one message", "messages"));
    }
    let mut messages = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            "tool" | "function" => {
                return Err(ApiError::unsupported(&format!("messages[{i}].role"), " (no tool calling)"));
            }
            other => {
                let message = format!("messages[{i}].role `{other}` is not one of system, developer, user, assistant");
                return Err(ApiError::param(message, &format!("messages[{i}].role")));
            }
        };
        let mut content = String::new();
        match &m.content {
            None => {}
            Some(MessageContent::Text(t)) => content.push_str(t),
            Some(MessageContent::Parts(parts)) => {
                for (j, p) in parts.iter().enumerate() {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => content.push_str(t),
                        ("text", None) => {
                            let param = format!("messages[{i}].content[{j}].text");
                            return Err(ApiError::param(format!("{param} is missing"), &param));
                        }
                        (kind, _) => {
                            let param = format!("messages[{i}].content[{j}].type");
                            return Err(ApiError::unsupported(&param, &format!(" (`{kind}` parts; only text)")));
                        }
                    }
                }
            }
        }
        messages.push(ChatMessage::new(role, &content));
    }
    let Some(template) = &model.template else {
        return Err(ApiError::param("this model has no chat template; use /v1/completions", "messages"));
    };
    let text = template
        .render(&messages, true)
        .map_err(|e| ApiError::param(format!("the chat template refused these messages: {e}"), "messages"))?;
    let prompt = model.tokenizer.encode(&text, true, true);
    let max_tokens = match (
        positive(req.max_tokens, "max_tokens")?,
        positive(req.max_completion_tokens, "max_completion_tokens")?,
    ) {
        (Some(a), Some(b)) if a != b => {
            let message = "give max_tokens or max_completion_tokens, not both with different values";
            return Err(ApiError::param(message, "max_completion_tokens"));
        }
        (a, b) => a.or(b),
    };
    let logprobs = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(k)) if k > 0 => return Err(ApiError::param("top_logprobs needs logprobs: true", "top_logprobs")),
        (true, k) if k.unwrap_or(0) as usize > MAX_LOGPROBS => {
            return Err(ApiError::param(format!("top_logprobs must be at most {MAX_LOGPROBS}"), "top_logprobs"));
        }
        (true, k) => Some(k.unwrap_or(0) as usize),
        (false, _) => None,
    };
    Ok(Job { prompts: vec![prompt], n, max_tokens, params, stops, logprobs, echo: false, stream, include_usage })
}

/// `POST /v1/completions`'s body.
pub fn completion(body: &Value, model: &LoadedModel) -> Result<Job, ApiError> {
    refuse_unsupported(body)?;
    let fields: SamplingFields = typed(body)?;
    let req: CompletionRequest = typed(body)?;
    check_model(&req.model, model)?;
    let (params, stops, n) = sampling(&fields, model)?;
    let (stream, include_usage) = stream_flags(&fields)?;
    let vocab = model.handle.vocab_size();
    let prompts: Vec<Vec<u32>> = match req.prompt {
        Prompt::Text(t) => vec![model.tokenizer.encode(&t, true, false)],
        Prompt::Texts(ts) => ts.iter().map(|t| model.tokenizer.encode(t, true, false)).collect(),
        Prompt::Tokens(ids) => vec![ids],
        Prompt::TokenLists(lists) => lists,
    };
    if prompts.is_empty() {
        return Err(ApiError::param("prompt must not be an empty list", "prompt"));
    }
    for p in &prompts {
        if p.is_empty() {
            return Err(ApiError::param("prompt must not be empty", "prompt"));
        }
        if let Some(&id) = p.iter().find(|&&t| t as usize >= vocab) {
            return Err(ApiError::param(
                format!("prompt token id {id} is outside the vocabulary of {vocab} tokens"),
                "prompt",
            ));
        }
    }
    if req.best_of.is_some_and(|b| b as usize != n && b != 1) {
        return Err(ApiError::unsupported("best_of", " (only 1 or equal to n: plumb does not rank extra candidates)"));
    }
    let logprobs = req.logprobs.map(|k| k as usize);
    if logprobs.is_some_and(|k| k > MAX_LOGPROBS) {
        return Err(ApiError::param(format!("logprobs must be at most {MAX_LOGPROBS}"), "logprobs"));
    }
    let echo = req.echo.unwrap_or(false);
    if echo && logprobs.is_some() {
        return Err(ApiError::unsupported("echo", " together with logprobs (prompt log-probabilities)"));
    }
    let max_tokens = Some(positive(req.max_tokens, "max_tokens")?.unwrap_or(COMPLETIONS_DEFAULT_MAX_TOKENS));
    Ok(Job { prompts, n, max_tokens, params, stops, logprobs, echo, stream, include_usage })
}
