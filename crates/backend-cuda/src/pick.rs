//! `Backend::pick` on the device (kernels/pick.cu): a step's logit edits in one launch, then a
//! row's argmax over up to 64 blocks and a one-warp fold of their parts, or one block a row for
//! its top-k, so only token ids (and k candidates) come back.
//! `Backend::logprobs` likewise: one block per token for its row's log-sum-exp, its logit and its
//! alternatives.
//! Off with `PLUMB_CUDA_PICK=0` (the engine then reads whole rows), for measuring and for the
//! test that both paths sample the same tokens.

use crate::launch::Launch;
use crate::{CudaBackend, CudaTensor, grid_1d};
use cudarc::driver::LaunchConfig;
use plumb_core::pick::{MAX_DEVICE_TOP_K, Pick, PickRow, Picked};
use plumb_core::{LogprobRow, MAX_LOGPROBS, TokenLogprobs};

/// Threads per row of the pick kernels (`PICK_THREADS`).
const PICK_THREADS: u32 = 1024;

/// Threads of a `pick_argmax_part` block (`ARGMAX_THREADS`), the columns a thread scans at most,
/// and the most blocks a row's argmax is split over.
const ARGMAX_THREADS: u32 = 256;
const ARGMAX_PER_THREAD: usize = 16;
const ARGMAX_MAX_SPLITS: usize = 64;

/// How many blocks a row of `cols` logits is split over for its argmax, and the columns each
/// takes (the last fewer): 4,096 a block up to 64 blocks (Llama 3's 128,256 logits: 32 blocks,
/// the default model's 49,152: 12), longer spans past that. Any split gives the same result.
fn argmax_splits(cols: usize) -> (usize, usize) {
    let per_block = ARGMAX_THREADS as usize * ARGMAX_PER_THREAD;
    let splits = cols.div_ceil(per_block).clamp(1, ARGMAX_MAX_SPLITS);
    (splits, cols.div_ceil(splits).max(1))
}

/// Words of one edit in `apply_logit_edits`.
const EDIT_WORDS: usize = 9;

impl CudaBackend {
    /// Turns sampling reductions on the device on or off (default: on unless `PLUMB_CUDA_PICK=0`).
    pub fn set_picks(&self, on: bool) {
        self.picks_enabled.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn pick_rows(&self, logits: &mut CudaTensor, rows: &[PickRow]) -> Vec<Picked> {
        let cols = logits.cols;
        let mut edits = Vec::new();
        for r in rows {
            assert!(r.row < logits.rows, "pick: row {} of {}", r.row, logits.rows);
            let p = &r.penalties;
            for e in &r.edits {
                assert!((e.token as usize) < cols, "pick: edit of token {} beyond {cols}", e.token);
                edits.extend([
                    r.row as u32,
                    e.token,
                    e.has_bias as u32,
                    e.bias.to_bits(),
                    e.repeated as u32,
                    e.count,
                    p.repetition.to_bits(),
                    p.frequency.to_bits(),
                    p.presence.to_bits(),
                ]);
            }
        }
        let num_edits = edits.len() / EDIT_WORDS;
        let edits_buf = (num_edits > 0).then(|| self.upload_words(&edits));
        if let Some(buf) = &edits_buf {
            let l = Launch::new(self.kernel("apply_logit_edits"), grid_1d(num_edits))
                .ptr(logits.ptr())
                .ptr(buf.ptr)
                .i32(num_edits as i32)
                .i32(cols as i32);
            self.submit(l);
        }
        let argmax: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].pick == Pick::Argmax).collect();
        let top_k: Vec<(usize, usize)> = (0..rows.len())
            .filter_map(|i| match rows[i].pick {
                Pick::TopK(k) => {
                    assert!((1..=MAX_DEVICE_TOP_K).contains(&k), "pick: top-k of {k}");
                    Some((i, k))
                }
                Pick::Argmax => None,
            })
            .collect();
        // Metadata: the argmax rows, the top-k rows, their k.
        let mut meta: Vec<u32> = argmax.iter().map(|&i| rows[i].row as u32).collect();
        meta.extend(top_k.iter().map(|&(i, _)| rows[i].row as u32));
        meta.extend(top_k.iter().map(|&(_, k)| k as u32));
        let meta_buf = self.upload_words(&meta);
        let out_words = argmax.len() + top_k.len() * 2 * MAX_DEVICE_TOP_K;
        let out = self.alloc(out_words * 4);
        let block = |n: usize| LaunchConfig {
            grid_dim: (n as u32, 1, 1),
            block_dim: (PICK_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // The argmax rows' parts (`pick_argmax_part`), kept until the words come back.
        let mut parts = None;
        if !argmax.is_empty() {
            let (splits, span) = argmax_splits(cols);
            let part = self.alloc(argmax.len() * splits * 8);
            let config = LaunchConfig {
                grid_dim: (argmax.len() as u32, splits as u32, 1),
                block_dim: (ARGMAX_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let l = Launch::new(self.kernel("pick_argmax_part"), config)
                .ptr(logits.ptr())
                .ptr(meta_buf.ptr)
                .i32(cols as i32)
                .i32(span as i32)
                .ptr(part.ptr);
            self.submit(l);
            let config =
                LaunchConfig { grid_dim: (argmax.len() as u32, 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
            let l = Launch::new(self.kernel("pick_argmax_fold"), config)
                .ptr(logits.ptr())
                .ptr(meta_buf.ptr)
                .i32(cols as i32)
                .ptr(part.ptr)
                .i32(splits as i32)
                .ptr(out.ptr);
            self.submit(l);
            parts = Some(part);
        }
        if !top_k.is_empty() {
            let at = (argmax.len() * 4) as u64;
            let l = Launch::new(self.kernel("pick_top_k"), block(top_k.len()))
                .ptr(logits.ptr())
                .ptr(meta_buf.ptr + at)
                .ptr(meta_buf.ptr + at + (top_k.len() * 4) as u64)
                .i32(cols as i32)
                .ptr(out.ptr + at);
            self.submit(l);
        }
        let words = self.download_words(out.ptr, out_words);
        drop((edits_buf, meta_buf, out, parts));
        let mut picked = vec![Picked::Argmax(0); rows.len()];
        for (b, &i) in argmax.iter().enumerate() {
            picked[i] = Picked::Argmax(words[b]);
        }
        for (b, &(i, k)) in top_k.iter().enumerate() {
            let o = &words[argmax.len() + b * 2 * MAX_DEVICE_TOP_K..];
            let n = k.min(cols);
            picked[i] = Picked::TopK((0..n).map(|j| (o[2 * j], f32::from_bits(o[2 * j + 1]))).collect());
        }
        picked
    }

    pub(crate) fn logprob_rows(&self, logits: &CudaTensor, rows: &[LogprobRow]) -> Vec<TokenLogprobs> {
        if rows.is_empty() {
            return Vec::new();
        }
        let cols = logits.cols;
        let mut meta = Vec::with_capacity(3 * rows.len());
        for r in rows {
            assert!(r.row < logits.rows, "logprobs: row {} of {}", r.row, logits.rows);
            assert!((r.token as usize) < cols, "logprobs: token {} beyond {cols}", r.token);
            assert!(r.top <= MAX_LOGPROBS, "logprobs: {} alternatives", r.top);
            meta.extend([r.row as u32, r.token, r.top as u32]);
        }
        let meta_buf = self.upload_words(&meta);
        let per_row = 4 + 2 * MAX_DEVICE_TOP_K;
        let out = self.alloc(rows.len() * per_row * 4);
        let config =
            LaunchConfig { grid_dim: (rows.len() as u32, 1, 1), block_dim: (PICK_THREADS, 1, 1), shared_mem_bytes: 0 };
        let l = Launch::new(self.kernel("row_logprobs"), config)
            .ptr(logits.ptr())
            .ptr(meta_buf.ptr)
            .i32(cols as i32)
            .ptr(out.ptr);
        self.submit(l);
        let words = self.download_words(out.ptr, rows.len() * per_row);
        drop((meta_buf, out));
        rows.iter()
            .zip(words.chunks_exact(per_row))
            .map(|(r, o)| {
                let lse = f64::from_bits(o[0] as u64 | (o[1] as u64) << 32);
                let top = (0..r.top.min(cols)).map(|j| (o[4 + 2 * j], f32::from_bits(o[5 + 2 * j]) as f64 - lse));
                TokenLogprobs { token: r.token, logprob: f32::from_bits(o[2]) as f64 - lse, top: top.collect() }
            })
            .collect()
    }
}
