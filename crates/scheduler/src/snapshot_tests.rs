//! Scheduler tests of lane-state snapshots with exact block and snapshot ids (block_size 4):
//! which boundaries a step snapshots, where a hit ends, and that evicted blocks drop theirs.

use crate::*;

fn scheduler(num_blocks: usize, max_batch_tokens: usize, snapshots: StateSnapshots) -> Scheduler {
    let config = SchedulerConfig {
        block_size: 4,
        num_blocks,
        max_lanes: 2,
        max_batch_tokens,
        max_model_len: 64,
        max_waiting: 16,
        enable_prefix_cache: true,
    };
    Scheduler::new(config).with_state_snapshots(snapshots)
}

fn step(s: &mut Scheduler) -> StepPlan {
    let plan = s.schedule();
    s.check_integrity().unwrap();
    let sampled = vec![7; plan.items.iter().filter(|i| i.sample).count()];
    s.update(&plan, &sampled);
    s.check_integrity().unwrap();
    plan
}

fn add(s: &mut Scheduler, id: u64, prompt: Vec<u32>, max_tokens: usize) {
    s.add(Sequence::new(SeqId(id), prompt, max_tokens, vec![])).unwrap();
}

fn snapshot_of(s: &Scheduler, block: u32) -> Option<u32> {
    s.blocks.snapshots.as_ref().unwrap().of_block(block)
}

#[test]
fn steps_snapshot_their_last_boundary_and_every_nth_and_hits_end_at_a_snapshot() {
    let mut s = scheduler(16, 11, StateSnapshots { num_snapshots: 4, every_blocks: 2 });
    add(&mut s, 1, (1..=14).collect(), 3);
    // Rows 0..11 cross boundaries 4 and 8: 8 is the last one (and the 2nd block); 4 is neither.
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].end, &p.items[0].snapshots), (0, 11, &vec![(8, 0)]));
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].end, &p.items[0].snapshots), (11, 14, &vec![(12, 1)]));
    assert_eq!(step(&mut s).items[0].snapshots, []);
    // The decode that completes block 3 snapshots it; the sequence then finishes.
    assert_eq!(step(&mut s).items[0].snapshots, [(16, 2)]);
    assert!(!s.has_work());
    assert_eq!([0, 1, 2, 3].map(|b| snapshot_of(&s, b)), [None, Some(0), Some(1), Some(2)]);

    // Shares blocks 0 and 1 (tokens 1..=8) and part of block 2: resumes at 8 from snapshot 0.
    add(&mut s, 2, [(1..=10).collect::<Vec<u32>>(), vec![50, 51, 52]].concat(), 1);
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].restore), (8, Some(0)));
    assert_eq!(s.stats().prefix_cache_hit_tokens, 8);
    // Shares only block 0, which has no snapshot: no hit at all for a state model.
    add(&mut s, 3, [(1..=5).collect::<Vec<u32>>(), vec![60; 6]].concat(), 1);
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].restore), (0, None));
    assert_eq!(s.stats().prefix_cache_hit_tokens, 8);
}

#[test]
fn the_pool_evicts_the_least_recent_snapshot_and_a_block_leaving_the_cache_drops_its_own() {
    let mut s = scheduler(8, 64, StateSnapshots { num_snapshots: 1, every_blocks: 1 });
    add(&mut s, 1, (1..=9).collect(), 1);
    assert_eq!(step(&mut s).items[0].snapshots, [(8, 0)]);
    assert_eq!(snapshot_of(&s, 1), Some(0));
    // The one slot goes to the newest boundary; block 1 keeps its KV, not its snapshot.
    add(&mut s, 2, (20..=32).collect(), 1);
    assert_eq!(step(&mut s).items[0].snapshots, [(12, 0)]);
    assert_eq!((snapshot_of(&s, 1), snapshot_of(&s, 4), s.stats().num_blocks_cached), (None, Some(0), 5));
    // Sequence 1's prompt again: blocks 0 and 1 are cached without a snapshot, so no hit; its
    // step snapshots the boundary at 8 again, onto the cached copy (block 1).
    add(&mut s, 3, (1..=9).collect(), 1);
    let p = step(&mut s);
    assert_eq!((p.items[0].start, p.items[0].restore, &p.items[0].snapshots), (0, None, &vec![(8, 0)]));
    assert_eq!((snapshot_of(&s, 1), snapshot_of(&s, 4)), (Some(0), None));
    // A 28-token prompt takes 7 of the 8 blocks, evicting cached block 1 and its snapshot.
    add(&mut s, 4, (40..=67).collect(), 1);
    assert_eq!(step(&mut s).items[0].snapshots, [(28, 0)]);
    assert_eq!((snapshot_of(&s, 1), snapshot_of(&s, 3)), (None, Some(0)));
    assert_eq!((s.stats().num_state_snapshots_cached, s.stats().num_state_snapshots_taken), (1, 4));
}
