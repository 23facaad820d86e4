//! A model's own sampling defaults (Hugging Face `generation_config.json`, GGUF
//! `general.sampling.*`): what a request that leaves a parameter unset gets. A parameter the
//! model does not name falls back to the caller's own default (the CLI's, OpenAI's).

use crate::{SamplingError, SamplingParams};

/// Per-parameter defaults; `None` = the model says nothing about it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SamplingDefaults {
    /// 0 = greedy (what `do_sample: false` means).
    pub temperature: Option<f32>,
    pub top_k: Option<usize>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
}

impl SamplingDefaults {
    /// Checks each value the model names against [`SamplingParams::validate`]'s ranges, so a bad
    /// file is refused when it is loaded, not when a request first uses it.
    pub fn validate(&self) -> Result<(), SamplingError> {
        let probe = SamplingParams {
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            min_p: self.min_p.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            ..SamplingParams::default()
        };
        probe.validate()
    }

    /// Whether the model names no default at all.
    pub fn is_empty(&self) -> bool {
        *self == SamplingDefaults::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_bad_value() {
        assert_eq!(SamplingDefaults::default().validate(), Ok(()));
        let d = SamplingDefaults { top_p: Some(0.0), ..Default::default() };
        assert!(matches!(d.validate(), Err(SamplingError::OutOfRange { name: "top_p", .. })));
        let d = SamplingDefaults { temperature: Some(-1.0), ..Default::default() };
        assert!(matches!(d.validate(), Err(SamplingError::OutOfRange { name: "temperature", .. })));
        let d = SamplingDefaults { repetition_penalty: Some(f32::NAN), ..Default::default() };
        assert!(matches!(d.validate(), Err(SamplingError::OutOfRange { name: "repetition_penalty", .. })));
    }
}
