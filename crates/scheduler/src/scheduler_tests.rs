//! Scheduler unit tests with exact block ids (block_size 4 throughout).

use crate::*;

fn config(num_blocks: usize, max_lanes: usize, max_batch_tokens: usize) -> SchedulerConfig {
    SchedulerConfig {
        block_size: 4,
        num_blocks,
        max_lanes,
        max_batch_tokens,
        max_model_len: 64,
        max_waiting: 16,
        enable_prefix_cache: true,
    }
}

fn seq(id: u64, prompt: &[u32], max_tokens: usize) -> Sequence {
    Sequence::new(SeqId(id), prompt.to_vec(), max_tokens, vec![])
}

fn item(id: u64, start: usize, end: usize, sample: bool) -> PlanItem {
    PlanItem { seq_id: SeqId(id), start, end, sample, drafts: vec![], restore: None, snapshots: vec![] }
}

fn table(s: &Scheduler, id: u64) -> Vec<u32> {
    s.get(SeqId(id)).unwrap().block_table().to_vec()
}

/// Schedules, checks integrity, and samples `token` for every sampling item.
fn step(s: &mut Scheduler, token: u32) -> (StepPlan, Vec<SeqUpdate>) {
    let plan = s.schedule();
    s.check_integrity().unwrap();
    let sampled = vec![token; plan.items.iter().filter(|i| i.sample).count()];
    let updates = s.update(&plan, &sampled);
    s.check_integrity().unwrap();
    (plan, updates)
}

/// Free-queue order, head first, read through the pool without taking anything.
fn free_queue(s: &Scheduler) -> Vec<u32> {
    s.blocks.pool.free_queue().collect()
}

#[test]
fn prefill_is_chunked_then_decodes_one_token() {
    let mut s = Scheduler::new(config(8, 1, 6));
    s.add(seq(1, &[1; 10], 3)).unwrap();
    let (p, u) = step(&mut s, 42);
    assert_eq!(p.items, [item(1, 0, 6, false)]);
    assert_eq!(table(&s, 1), [0, 1]);
    assert!(u.is_empty());
    let (p, u) = step(&mut s, 42);
    assert_eq!(p.items, [item(1, 6, 10, true)]);
    assert_eq!(table(&s, 1), [0, 1, 2]);
    assert_eq!(u, [SeqUpdate { seq_id: SeqId(1), token: 42, finished: None }]);
    let (p, _) = step(&mut s, 43);
    assert_eq!(p.items, [item(1, 10, 11, true)]);
    assert_eq!(table(&s, 1), [0, 1, 2]);
    let (p, u) = step(&mut s, 44);
    assert_eq!(p.items, [item(1, 11, 12, true)]);
    assert_eq!(u[0].finished, Some(FinishReason::Length));
    assert_eq!(s.num_free_blocks(), 8);
    assert!(!s.has_work());
}

#[test]
fn decodes_come_before_prefill_chunks_and_admissions() {
    let mut s = Scheduler::new(config(8, 3, 4));
    s.add(seq(1, &[1, 2], 6)).unwrap();
    step(&mut s, 7);
    s.add(seq(2, &[3; 9], 5)).unwrap();
    s.add(seq(3, &[4; 2], 5)).unwrap();
    let (p, _) = step(&mut s, 7);
    assert_eq!(p.items, [item(1, 2, 3, true), item(2, 0, 3, false)]);
    let (p, _) = step(&mut s, 7);
    assert_eq!(p.items, [item(1, 3, 4, true), item(2, 3, 6, false)]);
    let (p, _) = step(&mut s, 7);
    assert_eq!(p.items, [item(1, 4, 5, true), item(2, 6, 9, true)]);
    let (p, _) = step(&mut s, 7);
    assert_eq!(p.items, [item(1, 5, 6, true), item(2, 9, 10, true), item(3, 0, 2, true)]);
    assert_eq!((table(&s, 1), table(&s, 2), table(&s, 3)), (vec![0, 3], vec![1, 2, 4], vec![5]));
}

#[test]
fn stop_tokens_finish() {
    let mut s = Scheduler::new(config(8, 1, 6));
    s.add(Sequence::new(SeqId(1), vec![1; 2], 10, vec![9])).unwrap();
    assert_eq!(step(&mut s, 9).1[0].finished, Some(FinishReason::Stop));
    assert_eq!(s.num_free_blocks(), 8);
}

#[test]
fn prefix_hit_reuses_exactly_the_earlier_blocks() {
    let mut s = Scheduler::new(config(8, 1, 16));
    let prompt: Vec<u32> = (1..=10).collect();
    s.add(seq(1, &prompt, 1)).unwrap();
    step(&mut s, 99);
    // Blocks 0 and 1 are full and cached; the partial block 2 went back to the head.
    assert_eq!(free_queue(&s), [2, 3, 4, 5, 6, 7, 1, 0]);
    assert_eq!(s.stats().num_blocks_cached, 2);
    let mut b = prompt[..8].to_vec();
    b.extend([50, 51, 52]);
    s.add(seq(2, &b, 1)).unwrap();
    let p = s.schedule();
    assert_eq!(p.items, [item(2, 8, 11, true)]);
    assert_eq!(table(&s, 2), [0, 1, 2]);
    assert_eq!(s.get(SeqId(2)).unwrap().num_computed_tokens(), 8);
    let st = s.stats();
    assert_eq!((st.prefix_cache_queried_tokens, st.prefix_cache_hit_tokens), (10 + 11, 8));
}

#[test]
fn hit_leaves_one_token_to_compute() {
    let mut s = Scheduler::new(config(8, 1, 16));
    let prompt: Vec<u32> = (1..=8).collect();
    s.add(seq(1, &prompt, 1)).unwrap();
    step(&mut s, 99);
    assert_eq!(free_queue(&s), [2, 3, 4, 5, 6, 7, 1, 0]);
    s.add(seq(2, &prompt, 1)).unwrap();
    let (p, _) = step(&mut s, 99);
    // Both blocks are cached, but the last one is recomputed (into a new block) to get logits.
    assert_eq!(p.items, [item(2, 4, 8, true)]);
    // The recomputed block equals cached block 1, which stays the cached copy: block 2 is
    // released to the head, block 0 back to the tail.
    assert_eq!(free_queue(&s), [2, 3, 4, 5, 6, 7, 1, 0]);
}

#[test]
fn a_partly_shared_block_is_not_reused() {
    let mut s = Scheduler::new(config(8, 1, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7, 8], 1)).unwrap();
    step(&mut s, 99);
    s.add(seq(2, &[1, 2, 3, 4, 5, 6, 77, 78, 79], 1)).unwrap();
    let p = s.schedule();
    assert_eq!(p.items, [item(2, 4, 9, true)]);
    assert_eq!(table(&s, 2), [0, 2, 3]);
}

#[test]
fn generated_tokens_are_cached_for_the_next_turn() {
    let mut s = Scheduler::new(config(8, 1, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6], 4)).unwrap();
    let mut reply = Vec::new();
    for t in 20.. {
        let (_, u) = step(&mut s, t);
        reply.push(u[0].token);
        if u[0].finished.is_some() {
            break;
        }
    }
    // 6 + 3 computed tokens: blocks 0 (prompt) and 1 (prompt + two replies) are cached.
    assert_eq!(s.stats().num_blocks_cached, 2);
    let mut turn = vec![1, 2, 3, 4, 5, 6];
    turn.extend(&reply);
    turn.extend([7, 8, 9]);
    s.add(seq(2, &turn, 1)).unwrap();
    let p = s.schedule();
    assert_eq!(p.items, [item(2, 8, 13, true)]);
    assert_eq!(table(&s, 2)[..2], [0, 1]);
}

#[test]
fn salts_keep_prefixes_apart() {
    let mut s = Scheduler::new(config(8, 1, 16));
    let prompt: Vec<u32> = (1..=9).collect();
    s.add(seq(1, &prompt, 1).with_cache_salt(5)).unwrap();
    step(&mut s, 99);
    s.add(seq(2, &prompt, 1).with_cache_salt(6)).unwrap();
    assert_eq!(s.schedule().items, [item(2, 0, 9, true)]);
}

#[test]
fn cached_blocks_are_evicted_least_recently_released_first() {
    let mut s = Scheduler::new(config(4, 1, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7, 8], 1)).unwrap();
    step(&mut s, 99);
    s.add(seq(2, &[11, 12, 13, 14, 15, 16, 17, 18], 1)).unwrap();
    step(&mut s, 99);
    assert_eq!(free_queue(&s), [1, 0, 3, 2]);
    // Sequence 1's deeper block goes first, then its first; then sequence 2's deeper block.
    let scratch = s.reserve(3).unwrap();
    assert_eq!(scratch, [1, 0, 3]);
    assert_eq!(s.stats().num_blocks_cached, 1);
    s.check_integrity().unwrap();
    s.unreserve(&scratch);
    assert_eq!(free_queue(&s), [1, 0, 3, 2]);
    // Sequence 2's first block survived.
    s.add(seq(3, &[11, 12, 13, 14, 15, 16, 17, 18], 1)).unwrap();
    assert_eq!(s.schedule().items, [item(3, 4, 8, true)]);
    assert_eq!(table(&s, 3), [2, 1]);
}

#[test]
fn uncached_blocks_are_reused_before_any_cached_one() {
    let mut s = Scheduler::new(config(4, 1, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5], 1)).unwrap();
    step(&mut s, 99);
    assert_eq!(free_queue(&s), [1, 2, 3, 0]);
    s.add(seq(2, &[9, 9, 9, 9, 9, 9, 9, 9, 9], 1)).unwrap();
    s.schedule();
    assert_eq!(table(&s, 2), [1, 2, 3]);
    assert_eq!(s.stats().num_blocks_cached, 1);
}

#[test]
fn preemption_takes_the_youngest_and_its_recompute_hits_the_cache() {
    let mut s = Scheduler::new(config(4, 2, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7], 3)).unwrap();
    s.add(seq(2, &[11, 12, 13, 14], 4)).unwrap();
    s.add(seq(3, &[21], 1)).unwrap();
    let (p, _) = step(&mut s, 30);
    assert_eq!(p.items, [item(1, 0, 7, true), item(2, 0, 4, true)]);
    assert_eq!((table(&s, 1), table(&s, 2)), (vec![0, 1], vec![2]));
    let (p, _) = step(&mut s, 31);
    assert_eq!(p.items, [item(1, 7, 8, true), item(2, 4, 5, true)]);
    assert_eq!(table(&s, 2), [2, 3]);
    assert_eq!(s.num_free_blocks(), 0);
    // Sequence 1 needs a third block: sequence 2 (the most recently admitted) is preempted.
    // Its cached block 2 goes to the tail, its uncached block 3 to the head, and 1 takes 3.
    let p = s.schedule();
    assert_eq!(p.items, [item(1, 8, 9, true)]);
    assert_eq!(p.preempted, [SeqId(2)]);
    assert_eq!(table(&s, 1), [0, 1, 3]);
    assert_eq!(free_queue(&s), [2]);
    let two = s.get(SeqId(2)).unwrap();
    assert_eq!(
        (two.tokens(), two.num_computed_tokens(), two.block_table()),
        (&[11, 12, 13, 14, 30, 31][..], 0, &[][..])
    );
    assert_eq!(s.stats().num_preemptions_total, 1);
    let u = s.update(&p, &[32]);
    assert_eq!(u[0].finished, Some(FinishReason::Length));
    // Sequence 2 is back at the front of the queue, ahead of 3, and recomputes from its cached
    // first block: exactly the rows of positions 4..6, then it samples position 6.
    assert_eq!(free_queue(&s), [3, 2, 1, 0]);
    let (p, _) = step(&mut s, 33);
    assert_eq!(p.items, [item(2, 4, 6, true), item(3, 0, 1, true)]);
    assert_eq!(table(&s, 2), [2, 3]);
    assert_eq!(s.get(SeqId(2)).unwrap().tokens(), [11, 12, 13, 14, 30, 31, 33]);
}

#[test]
fn a_preempted_sequence_blocks_the_queue_until_it_fits() {
    let mut s = Scheduler::new(config(5, 2, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7], 5)).unwrap();
    s.add(seq(2, &[11, 12, 13, 14, 15, 16, 17], 5)).unwrap();
    s.add(seq(3, &[21], 1)).unwrap();
    step(&mut s, 30);
    step(&mut s, 31);
    assert_eq!((table(&s, 1), table(&s, 2)), (vec![0, 1], vec![2, 3]));
    // 1 takes the last free block; 2 then needs one and preempts itself.
    let (p, _) = step(&mut s, 32);
    assert_eq!((p.items, p.preempted), (vec![item(1, 8, 9, true)], vec![SeqId(2)]));
    assert_eq!(table(&s, 1), [0, 1, 4]);
    assert_eq!(free_queue(&s), [3, 2]);
    // 2 would reuse blocks 2 and 3 but needs a third: it waits, and 3 waits behind it (FIFO).
    let (p, _) = step(&mut s, 33);
    assert_eq!(p.items, [item(1, 9, 10, true)]);
    let (p, u) = step(&mut s, 34);
    assert_eq!(p.items, [item(1, 10, 11, true)]);
    assert_eq!(u[0].finished, Some(FinishReason::Length));
    let (p, _) = step(&mut s, 36);
    assert_eq!(p.items, [item(2, 8, 9, true), item(3, 0, 1, true)]);
    assert_eq!(table(&s, 2), [2, 3, 4]);
}

#[test]
fn abort_releases_everything_in_any_state() {
    let mut s = Scheduler::new(config(4, 2, 16));
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7], 3)).unwrap();
    s.add(seq(2, &[11, 12, 13, 14], 4)).unwrap();
    s.add(seq(3, &[21], 1)).unwrap();
    step(&mut s, 30);
    step(&mut s, 31);
    let p = s.schedule();
    assert_eq!(p.preempted, [SeqId(2)]);
    // Aborted between schedule and update: its item is skipped, the others keep their tokens.
    assert!(s.abort(SeqId(1)));
    assert!(s.update(&p, &[32]).is_empty());
    assert!(s.abort(SeqId(2)), "preempted");
    assert!(s.abort(SeqId(3)), "waiting");
    assert!(!s.abort(SeqId(3)));
    assert!(!s.has_work());
    assert_eq!(s.num_free_blocks(), 4);
    let st = s.stats();
    assert_eq!((st.num_waiting, st.num_running, st.num_blocks_in_use), (0, 0, 0));
    s.check_integrity().unwrap();
}

#[test]
fn update_skips_aborted_items_but_keeps_token_order() {
    let mut s = Scheduler::new(config(8, 2, 16));
    s.add(seq(1, &[1, 2], 3)).unwrap();
    s.add(seq(2, &[3, 4], 3)).unwrap();
    let p = s.schedule();
    s.abort(SeqId(1));
    assert_eq!(s.update(&p, &[10, 20]), [SeqUpdate { seq_id: SeqId(2), token: 20, finished: None }]);
}

#[test]
fn bad_requests_are_refused() {
    let mut s = Scheduler::new(config(8, 1, 6));
    assert_eq!(s.max_len(), 32);
    assert_eq!(s.add(seq(1, &[], 1)), Err(RequestError::EmptyPrompt));
    assert_eq!(s.add(seq(3, &[1], 0)), Err(RequestError::ZeroMaxTokens));
    let err = s.add(seq(2, &[1; 30], 5)).unwrap_err();
    assert_eq!(err, RequestError::TooLong { prompt_len: 30, max_tokens: 5, max_len: 32 });
    let err = s.add(seq(4, &[1; 3], usize::MAX)).unwrap_err();
    assert_eq!(err, RequestError::TooLong { prompt_len: 3, max_tokens: usize::MAX, max_len: 32 });
    s.add(seq(5, &[1; 30], 2)).unwrap();
    assert_eq!(s.add(seq(5, &[1], 1)), Err(RequestError::DuplicateId { id: SeqId(5) }));
    assert_eq!(s.stats().num_waiting, 1);
}

#[test]
fn the_waiting_queue_is_bounded() {
    let mut s = Scheduler::new(SchedulerConfig { max_waiting: 2, ..config(8, 1, 6) });
    s.add(seq(1, &[1], 1)).unwrap();
    s.add(seq(2, &[1], 1)).unwrap();
    assert_eq!(s.add(seq(3, &[1], 1)), Err(RequestError::QueueFull { limit: 2 }));
    s.schedule();
    s.add(seq(3, &[1], 1)).unwrap();
}

#[test]
fn reserve_takes_and_unreserve_returns_blocks() {
    let mut s = Scheduler::new(config(8, 1, 6));
    let r = s.reserve(3).unwrap();
    assert_eq!(r, [0, 1, 2]);
    assert_eq!(s.reserve(6), None);
    assert_eq!(s.num_free_blocks(), 5);
    s.add(seq(1, &[1; 5], 1)).unwrap();
    s.schedule();
    assert_eq!(table(&s, 1), [3, 4]);
    s.check_integrity().unwrap();
    s.unreserve(&r);
    assert_eq!(free_queue(&s), [0, 1, 2, 5, 6, 7]);
}

#[test]
#[should_panic(expected = "not reserved")]
fn unreserving_a_foreign_block_panics() {
    let mut s = Scheduler::new(config(8, 1, 6));
    s.add(seq(1, &[1; 5], 1)).unwrap();
    s.schedule();
    s.unreserve(&[0]);
}

#[test]
fn without_prefix_cache_nothing_is_shared() {
    let mut s = Scheduler::new(SchedulerConfig { enable_prefix_cache: false, ..config(8, 1, 16) });
    let prompt: Vec<u32> = (1..=9).collect();
    s.add(seq(1, &prompt, 1)).unwrap();
    step(&mut s, 99);
    assert_eq!(free_queue(&s), [0, 1, 2, 3, 4, 5, 6, 7]);
    s.add(seq(2, &prompt, 1)).unwrap();
    assert_eq!(s.schedule().items, [item(2, 0, 9, true)]);
    assert_eq!(s.stats().num_blocks_cached, 0);
}

#[test]
fn a_hash_collision_never_shares_kv() {
    fn collide(_: Option<u64>, _: &[u32], _: u64) -> u64 {
        1
    }
    let mut s = Scheduler::with_hasher(config(8, 1, 16), collide);
    s.add(seq(1, &[1, 2, 3, 4, 5, 6, 7, 8, 9], 1)).unwrap();
    step(&mut s, 99);
    s.add(seq(2, &[1, 2, 3, 4, 9, 9, 9, 9, 9], 1)).unwrap();
    // Block 1 of 2 hashes like every block, but its tokens differ: a miss.
    assert_eq!(s.schedule().items, [item(2, 0, 9, true)]);
}

#[test]
fn invalid_configs_are_named() {
    let c = SchedulerConfig { max_lanes: 0, ..config(8, 1, 6) };
    assert_eq!(c.validate(), Err(ConfigError::Zero { name: "max_lanes" }));
}

#[test]
fn a_preempted_sequence_recomputes_exactly_its_tokens_then_samples_the_next_position() {
    let mut s = Scheduler::new(SchedulerConfig { enable_prefix_cache: false, ..config(3, 2, 3) });
    s.add(seq(1, &[1, 2, 3], 4)).unwrap();
    s.add(seq(2, &[4, 5, 6, 7, 8], 4)).unwrap();
    let mut preempted_tokens = None;
    let mut rows = Vec::new();
    let mut sampled_after = false;
    for t in 100..120 {
        let (p, u) = step(&mut s, t);
        if p.preempted.contains(&SeqId(2)) {
            preempted_tokens = Some(s.get(SeqId(2)).unwrap().tokens().to_vec());
            continue;
        }
        let Some(tokens) = &preempted_tokens else { continue };
        for it in p.items.iter().filter(|it| it.seq_id == SeqId(2)) {
            rows.extend((it.start..it.end).map(|pos| (pos, tokens[pos])));
        }
        // Its first sample after the recompute is for position tokens.len(), as if never preempted.
        if let Some(u) = u.iter().find(|u| u.seq_id == SeqId(2)) {
            assert_eq!(u.token, t);
            assert_eq!(s.get(SeqId(2)).unwrap().tokens().len(), tokens.len() + 1);
            sampled_after = true;
            break;
        }
    }
    assert!(sampled_after);
    let tokens = preempted_tokens.expect("sequence 2 was preempted");
    let want: Vec<(usize, u32)> = tokens.iter().copied().enumerate().collect();
    assert_eq!(rows, want, "every position once, in order, with its token");
}

#[test]
fn drafts_take_rows_and_blocks_then_roll_back_to_the_kept_tokens() {
    let mut s = Scheduler::new(config(8, 2, 8));
    s.add(seq(1, &[1, 2, 3], 10)).unwrap();
    let (_, u) = step(&mut s, 4);
    assert_eq!(u.len(), 1);
    // Decoding at length 4: position 3 plus drafts for 4..9, capped by the 8-row budget.
    let p = s.schedule_with_drafts(|seq, max| {
        assert_eq!((seq.tokens().len(), max), (4, 7));
        vec![5, 6, 7, 8, 9, 10, 11, 12]
    });
    assert_eq!(
        p.items,
        [PlanItem {
            seq_id: SeqId(1),
            start: 3,
            end: 4,
            sample: true,
            drafts: vec![5, 6, 7, 8, 9, 10, 11],
            restore: None,
            snapshots: vec![],
        }]
    );
    assert_eq!(table(&s, 1), [0, 1, 2], "blocks cover the verify rows 4..11");
    s.check_integrity().unwrap();
    // Two drafts accepted, the third sampled as 70 instead of 7.
    let u = s.update_verified(&p, &[vec![5, 6, 70]]);
    assert_eq!(u.iter().map(|u| u.token).collect::<Vec<_>>(), [5, 6, 70]);
    let seq = s.get(SeqId(1)).unwrap();
    assert_eq!((seq.tokens(), seq.num_computed_tokens()), (&[1, 2, 3, 4, 5, 6, 70][..], 6));
    assert_eq!(table(&s, 1), [0, 1], "the block taken only for rejected rows is free again");
    s.check_integrity().unwrap();
}

#[test]
fn a_stop_token_among_accepted_drafts_ends_the_sequence_there() {
    let mut s = Scheduler::new(config(8, 1, 16));
    s.add(Sequence::new(SeqId(1), vec![1, 2, 3], 20, vec![9])).unwrap();
    step(&mut s, 4);
    let p = s.schedule_with_drafts(|_, _| vec![5, 9, 6]);
    let u = s.update_verified(&p, &[vec![5, 9, 6, 7]]);
    assert_eq!(u.len(), 2);
    assert_eq!(u[1], SeqUpdate { seq_id: SeqId(1), token: 9, finished: Some(FinishReason::Stop) });
    assert!(s.get(SeqId(1)).is_none());
    assert_eq!(s.num_free_blocks(), 8);
    s.check_integrity().unwrap();
}

#[test]
fn drafts_stop_short_of_max_tokens_and_leave_a_row_for_every_decode() {
    let mut s = Scheduler::new(config(16, 3, 6));
    s.add(seq(1, &[1], 3)).unwrap();
    s.add(seq(2, &[2], 30)).unwrap();
    s.add(seq(3, &[3], 30)).unwrap();
    step(&mut s, 4);
    let mut maxes = Vec::new();
    let p = s.schedule_with_drafts(|seq, max| {
        maxes.push((seq.id.0, max));
        vec![0; max]
    });
    // Sequence 1 may emit 2 more tokens (1 draft); 2 leaves a row for 3; 3 has its row only.
    assert_eq!(maxes, [(1, 1), (2, 2)]);
    assert_eq!(p.items.iter().map(|i| i.drafts.len()).collect::<Vec<_>>(), [1, 2, 0]);
    assert_eq!(p.items.iter().map(PlanItem::num_rows).sum::<usize>(), 6);
}
