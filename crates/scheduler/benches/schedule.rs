//! `cargo bench -p plumb-scheduler`: the cost of planning a step. One `schedule()` call with
//! 1,000 running decoding requests (block size 16, prefix cache on), timed alone; `update` runs
//! between calls, untimed. Prints microseconds per call.

use plumb_scheduler::{Scheduler, SchedulerConfig, SeqId, Sequence};
use std::time::{Duration, Instant};

const NUM_RUNNING: usize = 1000;
const PROMPT_LEN: usize = 16;
const CALLS: usize = 1000;

fn main() {
    let config = SchedulerConfig {
        block_size: 16,
        num_blocks: NUM_RUNNING * (PROMPT_LEN + CALLS + 64).div_ceil(16),
        max_lanes: NUM_RUNNING,
        max_batch_tokens: 8192,
        max_model_len: 4096,
        max_waiting: NUM_RUNNING,
        enable_prefix_cache: true,
    };
    let mut s = Scheduler::new(config);
    for i in 0..NUM_RUNNING as u32 {
        let prompt = (0..PROMPT_LEN as u32).map(|t| i * 31 + t).collect();
        s.add(Sequence::new(SeqId(u64::from(i)), prompt, 2 * CALLS, vec![])).unwrap();
    }
    // Admit and prefill everyone; afterwards every step is 1,000 one-row decodes.
    loop {
        let plan = s.schedule();
        let sampled = vec![0; plan.items.iter().filter(|i| i.sample).count()];
        s.update(&plan, &sampled);
        if plan.items.len() == NUM_RUNNING && plan.items.iter().all(|i| i.end - i.start == 1) {
            break;
        }
    }
    let mut total = Duration::ZERO;
    let mut best = Duration::MAX;
    for step in 0..CALLS {
        let start = Instant::now();
        let plan = s.schedule();
        let took = start.elapsed();
        total += took;
        best = best.min(took);
        assert_eq!(plan.items.len(), NUM_RUNNING);
        let sampled = vec![step as u32; plan.items.len()];
        s.update(&plan, &sampled);
    }
    let mean = total.as_secs_f64() / CALLS as f64 * 1e6;
    println!(
        "schedule() with {NUM_RUNNING} running decoding requests: {mean:.1} us/call (best {:.1} us)",
        best.as_secs_f64() * 1e6
    );
}
