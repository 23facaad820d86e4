//! Scoring a fixed token sequence: the log-probability of each next token (perplexity, gates).
//! Runs through the same model and KV cache path as generation, in chunks the scheduler's
//! batch limit allows, on a lane of its own.

use crate::{Engine, EngineError};
use plumb_core::{ForwardBatch, FullBackend, Shape};
use plumb_scheduler::RequestError;

impl<B: FullBackend> Engine<B> {
    /// Logits of every position of `tokens` ([tokens.len(), vocab], row-major), computed with
    /// the blocks the scheduler has free; they are returned afterwards.
    pub fn logits_all(&mut self, tokens: &[u32]) -> Result<Vec<f32>, EngineError> {
        let config = self.scheduler.config().clone();
        if tokens.is_empty() {
            return Err(RequestError::EmptyPrompt.into());
        }
        let vocab_size = self.model.config().vocab_size;
        if let Some(&id) = tokens.iter().find(|&&t| t as usize >= vocab_size) {
            return Err(EngineError::BadToken { id, vocab_size });
        }
        let limit = config.max_model_len.min(self.scheduler.num_free_blocks() * config.block_size);
        if tokens.len() > limit {
            return Err(RequestError::TooLong { prompt_len: tokens.len(), max_tokens: 0, max_model_len: limit }.into());
        }
        let num_blocks = tokens.len().div_ceil(config.block_size);
        // Blocks are taken from the top of the pool's id range that the scheduler hands out last;
        // scoring runs only while no request is in flight.
        assert!(!self.scheduler.has_work(), "scoring needs an idle engine");
        let first = config.num_blocks - num_blocks;
        let table: Vec<u32> = (first as u32..config.num_blocks as u32).collect();
        let mut out = Vec::with_capacity(tokens.len() * vocab_size);
        for start in (0..tokens.len()).step_by(config.max_batch_tokens) {
            let end = (start + config.max_batch_tokens).min(tokens.len());
            let batch = ForwardBatch::single_lane(&tokens[start..end], start, config.block_size, table.clone());
            let logits = self.model.forward(&self.backend, &batch, &mut self.kv, None);
            debug_assert_eq!(logits.cols(), vocab_size);
            out.extend(self.backend.download(&logits));
        }
        Ok(out)
    }
}
