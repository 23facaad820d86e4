//! Scoring a fixed token sequence: the logits of each position (perplexity, gates). Runs through
//! the same model and KV cache path as generation, in chunks the scheduler's batch limit allows,
//! on blocks reserved from the scheduler's pool (so it can share the engine with requests).

use crate::{Engine, EngineError};
use plumb_core::{ForwardBatch, FullBackend, Shape};
use plumb_scheduler::RequestError;

impl<B: FullBackend> Engine<B> {
    /// Logits of every position of `tokens` ([tokens.len(), vocab], row-major).
    pub fn logits_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let config = self.scheduler.config().clone();
        if tokens.is_empty() {
            return Err(RequestError::EmptyPrompt.into());
        }
        let vocab_size = self.model.config().vocab_size;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(EngineError::BadToken { id, vocab_size });
        }
        let max_len = config.max_model_len.min(self.scheduler.num_free_blocks() * config.block_size);
        let too_long = RequestError::TooLong { prompt_len: tokens.len(), max_tokens: 0, max_len };
        if tokens.len() > config.max_model_len {
            return Err(too_long.into());
        }
        let table = self.scheduler.reserve(tokens.len().div_ceil(config.block_size)).ok_or(too_long)?;
        let mut out = Vec::with_capacity(tokens.len() * vocab_size);
        for start in (0..tokens.len()).step_by(config.max_batch_tokens) {
            let end = (start + config.max_batch_tokens).min(tokens.len());
            let mut batch = ForwardBatch::single_lane(&tokens[start..end], start, config.block_size, table.clone());
            // The state slot past the lanes' own (see `Engine::new`), so scoring never touches a
            // running request's state.
            batch.state_slots = vec![config.max_lanes as u32];
            let logits = self.model.forward(&self.backend, &batch, &mut self.kv, None);
            debug_assert_eq!(logits.cols(), vocab_size);
            out.extend(self.backend.download(&logits));
        }
        self.scheduler.unreserve(&table);
        Ok(out)
    }
}
