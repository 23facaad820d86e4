//! The gate's model runners: a model on one backend with its own KV cache, driven solo (one lane)
//! or with several lanes joining and leaving mid-stream in one batch. Each lane owns a fixed range
//! of blocks, so lanes never share KV and a lane's logits can be compared with its solo run.

use plumb_checkpoint::CheckpointRef;
use plumb_core::{ForwardBatch, FullBackend, LaneView};
use plumb_models::{CausalLm, ModelError};

/// Where a non-finite value first appeared in a forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct NonFinite {
    pub tensor: String,
    pub layer: Option<usize>,
    pub row: usize,
}

/// A model on a backend with its own KV cache.
pub struct Runner<'a, B: FullBackend> {
    pub backend: &'a B,
    pub model: Box<dyn CausalLm<B>>,
    kv: B::KvCache,
    block_size: usize,
    /// Blocks each lane owns (lane i: blocks i·per_lane .. (i+1)·per_lane).
    blocks_per_lane: usize,
    num_lanes: usize,
}

impl<'a, B: FullBackend + 'static> Runner<'a, B> {
    /// Room for `num_lanes` lanes of up to `max_len` positions each.
    pub fn new(file: CheckpointRef<'_>, backend: &'a B, max_len: usize, num_lanes: usize) -> Result<Self, ModelError> {
        let model = plumb_models::load_model_with(file, backend, None)?;
        let block_size = 16;
        let blocks_per_lane = max_len.div_ceil(block_size);
        let kv = backend.new_kv_cache(&model.kv_spec_for_lanes(block_size, blocks_per_lane * num_lanes, num_lanes));
        Ok(Runner { backend, model, kv, block_size, blocks_per_lane, num_lanes })
    }

    fn lane_view(&self, lane: usize) -> LaneView {
        assert!(lane < self.num_lanes, "lane {lane} of {}", self.num_lanes);
        let first = (lane * self.blocks_per_lane) as u32;
        LaneView { block_table: (first..first + self.blocks_per_lane as u32).collect() }
    }

    /// Runs one batch and returns its logits ([logits rows, vocab] in float64). With `check`,
    /// every named intermediate is checked for NaN and infinity; the first one found is returned.
    fn run(&mut self, batch: &ForwardBatch, check: bool) -> (Vec<f64>, Option<NonFinite>) {
        batch.validate().expect("the gate builds valid batches");
        let mut found: Option<NonFinite> = None;
        let backend = self.backend;
        let mut inspect = |name: &str, layer: Option<usize>, t: &B::Tensor| {
            if found.is_none() {
                let cols = plumb_core::Shape::cols(t).max(1);
                if let Some(i) = backend.download(t).iter().position(|v| !v.is_finite()) {
                    found = Some(NonFinite { tensor: name.into(), layer, row: i / cols });
                }
            }
        };
        let trace: Option<plumb_models::Trace<'_, B>> = if check { Some(&mut inspect) } else { None };
        let logits = self.model.forward(self.backend, batch, &mut self.kv, trace);
        (self.backend.download_f64(&logits), found)
    }

    /// Logits for `tokens` at positions `start..` of lane 0, every row.
    pub fn forward(&mut self, tokens: &[u32], start: usize) -> Vec<f64> {
        self.forward_checked(tokens, start, false).0
    }

    fn forward_checked(&mut self, tokens: &[u32], start: usize, check: bool) -> (Vec<f64>, Option<NonFinite>) {
        assert!(
            start + tokens.len() <= self.blocks_per_lane * self.block_size,
            "control longer than the gate's context"
        );
        let batch = ForwardBatch::single_lane(tokens, start, self.block_size, self.lane_view(0).block_table);
        self.run(&batch, check)
    }

    /// Teacher-forced logits of `tokens` in chunks of `chunk` rows, on lane 0. With `check`,
    /// also the first non-finite intermediate (its row counted from the start of `tokens`).
    pub fn teacher_forced(&mut self, tokens: &[u32], chunk: usize, check: bool) -> (Vec<f64>, Option<NonFinite>) {
        let mut out = Vec::new();
        let mut first_bad = None;
        for start in (0..tokens.len()).step_by(chunk) {
            let end = (start + chunk).min(tokens.len());
            let (logits, bad) = self.forward_checked(&tokens[start..end], start, check);
            out.extend(logits);
            if first_bad.is_none() {
                first_bad = bad.map(|b| NonFinite { row: b.row + start, ..b });
            }
        }
        (out, first_bad)
    }

    /// Teacher-forces every sequence at once on lanes 0..n: sequence i joins at step i (staggered
    /// arrivals), each step takes up to `chunk_of(i, step)` rows of every joined sequence, and a
    /// sequence leaves when it is done (different lengths leave at different steps). Hands each
    /// step's logits of sequence i to `rows(i, logits)` in order, every row of the sequence in
    /// turn, as they would come from a solo run (streamed: a 248k vocabulary over every control
    /// would not fit in memory twice).
    pub fn teacher_forced_lanes(
        &mut self,
        seqs: &[&[u32]],
        chunk_of: impl Fn(usize, usize) -> usize,
        mut rows: impl FnMut(usize, &[f64]),
    ) {
        assert!(seqs.len() <= self.num_lanes, "{} sequences for {} lanes", seqs.len(), self.num_lanes);
        let mut done = vec![0usize; seqs.len()];
        let mut step = 0;
        while done.iter().zip(seqs).any(|(d, s)| *d < s.len()) {
            let mut batch = ForwardBatch { block_size: self.block_size, ..Default::default() };
            let mut rows_of = Vec::new();
            for (i, seq) in seqs.iter().enumerate() {
                if i > step || done[i] == seq.len() {
                    continue;
                }
                let lane = batch.lanes.len();
                batch.lanes.push(self.lane_view(i));
                // Lane i's state slot is i, as its blocks are its own (solo runs use lane 0's).
                batch.state_slots.push(i as u32);
                let end = (done[i] + chunk_of(i, step).max(1)).min(seq.len());
                for pos in done[i]..end {
                    batch.logits_rows.push(batch.num_rows() as u32);
                    batch.push_row(lane, seq[pos], pos);
                }
                rows_of.push((i, end - done[i]));
                done[i] = end;
            }
            step += 1;
            if rows_of.is_empty() {
                continue;
            }
            let (logits, _) = self.run(&batch, false);
            let vocab = logits.len() / batch.num_rows();
            let mut at = 0;
            for (i, n) in rows_of {
                rows(i, &logits[at * vocab..(at + n) * vocab]);
                at += n;
            }
        }
    }

    /// Greedy generation on lane 0: the sequence (prompt + generated) and the logits of every
    /// position whose next token is in the sequence.
    pub fn greedy(&mut self, prompt: &[u32], gen_len: usize, vocab: usize) -> (Vec<u32>, Vec<f64>) {
        let mut seq = prompt.to_vec();
        let mut logits = self.forward(prompt, 0);
        for _ in 0..gen_len {
            let next = argmax(&logits[logits.len() - vocab..]);
            seq.push(next);
            if seq.len() == prompt.len() + gen_len {
                break;
            }
            let step = self.forward(&[next], seq.len() - 1);
            logits.extend(step);
        }
        (seq, logits)
    }
}

/// Index of the largest value, the lowest among equals. NaN never wins; the gate fails on
/// non-finite logits before it relies on an argmax.
pub fn argmax(row: &[f64]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] || row[best].is_nan() {
            best = i;
        }
    }
    best as u32
}

/// The gap between the largest and second-largest value.
pub fn top2_gap(row: &[f64]) -> f64 {
    let (mut a, mut b) = (f64::NEG_INFINITY, f64::NEG_INFINITY);
    for &v in row {
        if v > a {
            b = a;
            a = v;
        } else if v > b {
            b = v;
        }
    }
    a - b
}

/// The first position (row of `vocab` values) holding a NaN or an infinity.
pub fn first_non_finite(logits: &[f64], vocab: usize) -> Option<usize> {
    logits.iter().position(|v| !v.is_finite()).map(|i| i / vocab.max(1))
}
