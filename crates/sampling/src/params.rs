//! Sampling parameters and their validation (a bad value is a request error, not a panic).

/// How to pick tokens. Defaults are greedy-free sampling at temperature 1 with no filters.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingParams {
    /// 0 means greedy.
    pub temperature: f32,
    /// 0 means off.
    pub top_k: usize,
    /// 1 means off.
    pub top_p: f32,
    /// 0 means off.
    pub min_p: f32,
    /// 1 means off (Hugging Face / CTRL style, over prompt and output).
    pub repetition_penalty: f32,
    /// OpenAI style, over generated tokens.
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    pub seed: u64,
    /// Added to a token's logit before penalties and sampling (OpenAI `logit_bias`, -100..100);
    /// sorted by token id, one entry per token.
    pub logit_bias: Vec<(u32, f32)>,
}

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
            logit_bias: Vec::new(),
        }
    }
}

/// An invalid sampling parameter.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SamplingError {
    #[error("{name} must be {range}, got {value}")]
    OutOfRange { name: &'static str, range: &'static str, value: f32 },
    #[error("logit_bias for token {token} must be between -100 and 100, got {value}")]
    BadLogitBias { token: u32, value: f32 },
    #[error("logit_bias names token {token} more than once")]
    RepeatedLogitBias { token: u32 },
}

impl SamplingParams {
    pub fn greedy() -> Self {
        SamplingParams { temperature: 0.0, ..Self::default() }
    }

    /// Whether any penalty changes the logits.
    pub fn has_penalties(&self) -> bool {
        !self.logit_bias.is_empty()
            || self.repetition_penalty != 1.0 || self.frequency_penalty != 0.0 || self.presence_penalty != 0.0
    }

    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0
    }

    pub fn validate(&self) -> Result<(), SamplingError> {
        let checks: [(&'static str, f32, &'static str, bool); 6] = [
            ("temperature", self.temperature, "between 0 and 100", (0.0..=100.0).contains(&self.temperature)),
            ("top_p", self.top_p, "in (0, 1]", self.top_p > 0.0 && self.top_p <= 1.0),
            ("min_p", self.min_p, "in [0, 1]", (0.0..=1.0).contains(&self.min_p)),
            (
                "repetition_penalty",
                self.repetition_penalty,
                "positive and finite",
                self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite(),
            ),
            (
                "frequency_penalty",
                self.frequency_penalty,
                "between -2 and 2",
                (-2.0..=2.0).contains(&self.frequency_penalty),
            ),
            (
                "presence_penalty",
                self.presence_penalty,
                "between -2 and 2",
                (-2.0..=2.0).contains(&self.presence_penalty),
            ),
        ];
        if let Some((name, value, range, _)) = checks.into_iter().find(|c| !c.3) {
            return Err(SamplingError::OutOfRange { name, range, value });
        }
        if let Some(&(token, value)) = self.logit_bias.iter().find(|b| !(-100.0..=100.0).contains(&b.1)) {
            return Err(SamplingError::BadLogitBias { token, value });
        }
        if let Some(w) = self.logit_bias.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(SamplingError::RepeatedLogitBias { token: w[1].0 });
        }
        Ok(())
    }
}
