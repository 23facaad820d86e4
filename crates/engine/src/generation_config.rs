//! A checkpoint's generation defaults: the end-of-generation ids and sampling defaults of a
//! Hugging Face `generation_config.json`, or the `general.sampling.*` keys of a GGUF file. Only
//! what the file names is returned; what it leaves out stays `None` for the caller to fill.

use crate::load::LoadError;
use plumb_checkpoint::{CheckpointRef, GgufFile, MetaValue};
use plumb_sampling::SamplingDefaults;
use serde_json::Value;

/// What a `generation_config.json` says about generation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationConfig {
    /// `eos_token_id`: one id or a list.
    pub eos_ids: Vec<u32>,
    /// `temperature`, `top_k`, `top_p`, `min_p`, `repetition_penalty`; `do_sample: false` makes the
    /// default temperature 0 (greedy), as transformers does whatever the other fields say.
    pub sampling: SamplingDefaults,
}

impl GenerationConfig {
    /// Parses the text of `path` (named in errors).
    pub fn parse(text: &str, path: &std::path::Path) -> Result<Self, LoadError> {
        let file = path.display().to_string();
        let bad = |key: &'static str, why: String| LoadError::BadGenerationConfig { file: file.clone(), key, why };
        let v: Value = serde_json::from_str(text).map_err(|e| bad("(file)", format!("is not JSON: {e}")))?;
        if !v.is_object() {
            return Err(bad("(file)", "is not a JSON object".into()));
        }
        let field = |key: &'static str| v.get(key).filter(|x| !x.is_null());
        let id = |x: &Value| x.as_u64().and_then(|i| u32::try_from(i).ok());
        let eos_ids = match field("eos_token_id") {
            None => Vec::new(),
            Some(Value::Array(list)) => list
                .iter()
                .map(|x| id(x).ok_or_else(|| bad("eos_token_id", format!("holds {x}, not a token id"))))
                .collect::<Result<_, _>>()?,
            Some(x) => vec![id(x).ok_or_else(|| bad("eos_token_id", format!("is {x}, not a token id")))?],
        };
        let float = |key: &'static str| -> Result<Option<f32>, LoadError> {
            field(key)
                .map(|x| x.as_f64().map(|f| f as f32).ok_or_else(|| bad(key, format!("is {x}, not a number"))))
                .transpose()
        };
        let top_k = field("top_k")
            .map(|x| {
                x.as_u64()
                    .and_then(|k| usize::try_from(k).ok())
                    .ok_or_else(|| bad("top_k", format!("is {x}, not a count")))
            })
            .transpose()?;
        let do_sample = field("do_sample")
            .map(|x| x.as_bool().ok_or_else(|| bad("do_sample", format!("is {x}, not true or false"))))
            .transpose()?;
        let temperature = match do_sample {
            Some(false) => Some(0.0),
            _ => float("temperature")?,
        };
        let sampling = SamplingDefaults {
            temperature,
            top_k,
            top_p: float("top_p")?,
            min_p: float("min_p")?,
            repetition_penalty: float("repetition_penalty")?,
        };
        sampling.validate().map_err(|e| bad("(sampling)", e.to_string()))?;
        Ok(GenerationConfig { eos_ids, sampling })
    }
}

/// The sampling defaults a checkpoint names (none when it names none).
pub fn sampling_defaults(ckpt: CheckpointRef<'_>) -> Result<SamplingDefaults, LoadError> {
    match ckpt {
        CheckpointRef::Gguf(f) => gguf_sampling_defaults(f),
        CheckpointRef::Hf(h) => match h.read_optional("generation_config.json")? {
            Some(text) => Ok(GenerationConfig::parse(&text, &h.dir().join("generation_config.json"))?.sampling),
            None => Ok(SamplingDefaults::default()),
        },
    }
}

/// llama.cpp's `general.sampling.*` keys (its converter writes them from `generation_config.json`).
fn gguf_sampling_defaults(f: &GgufFile) -> Result<SamplingDefaults, LoadError> {
    let float = |key: &str| Ok::<_, LoadError>(f.opt(key, "a number", MetaValue::as_f64)?.map(|x| x as f32));
    let top_k = f.opt("general.sampling.top_k", "a count", MetaValue::as_u64)?.map(|k| k as usize);
    let d = SamplingDefaults {
        temperature: float("general.sampling.temp")?,
        top_k,
        top_p: float("general.sampling.top_p")?,
        min_p: float("general.sampling.min_p")?,
        repetition_penalty: float("general.sampling.penalty_repeat")?,
    };
    d.validate().map_err(|e| LoadError::BadGenerationConfig {
        file: "GGUF metadata".into(),
        key: "general.sampling",
        why: e.to_string(),
    })?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse(text: &str) -> Result<GenerationConfig, LoadError> {
        GenerationConfig::parse(text, Path::new("generation_config.json"))
    }

    #[test]
    fn qwen3_style_config_gives_stop_ids_and_sampling_defaults() {
        let g = parse(
            r#"{"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
                "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                "transformers_version": "4.51.0"}"#,
        )
        .unwrap();
        assert_eq!(g.eos_ids, [151645, 151643]);
        let s = g.sampling;
        assert_eq!(
            (s.temperature, s.top_k, s.top_p, s.min_p, s.repetition_penalty),
            (Some(0.6), Some(20), Some(0.95), None, None)
        );
    }

    #[test]
    fn do_sample_false_means_greedy_and_absent_fields_stay_unset() {
        let g =
            parse(r#"{"eos_token_id": 2, "do_sample": false, "temperature": 0.7, "repetition_penalty": 1.1}"#).unwrap();
        assert_eq!(g.eos_ids, [2]);
        assert_eq!(g.sampling.temperature, Some(0.0));
        assert_eq!(g.sampling.repetition_penalty, Some(1.1));
        assert_eq!(parse(r#"{"eos_token_id": null}"#).unwrap(), GenerationConfig::default());
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        for (text, key) in [
            (r#"{"temperature": "hot"}"#, "temperature"),
            (r#"{"top_k": -1}"#, "top_k"),
            (r#"{"top_p": 0}"#, "(sampling)"),
            (r#"{"do_sample": 1}"#, "do_sample"),
            (r#"{"eos_token_id": [1, "x"]}"#, "eos_token_id"),
            (r#"[1]"#, "(file)"),
            ("{", "(file)"),
        ] {
            match parse(text) {
                Err(LoadError::BadGenerationConfig { key: k, .. }) => assert_eq!(k, key, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }
}
