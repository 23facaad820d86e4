//! The scheduler's integrity check: every invariant of the pool, the prefix cache, the queues
//! and the block tables, recomputed from scratch. Owns no state; `update` runs it under
//! `debug_assertions`, tests run it after every step.

use crate::Scheduler;
use crate::sequence::Status;
use std::collections::HashSet;

impl Scheduler {
    /// Checks: no block both free and referenced; each block's reference count equals the
    /// number of block tables (running sequences) and reservations holding it; every cached hash
    /// maps to a block whose stored tokens and parent are consistent with the chain; the free
    /// queue has no duplicates and free + in use = total; uncached free blocks come before cached
    /// ones; queues, lanes and sequence states agree.
    pub fn check_integrity(&self) -> Result<(), String> {
        let bs = self.config.block_size;
        let pool = &self.blocks.pool;
        pool.check()?;
        self.blocks.cache.check(bs)?;
        if let Some(snapshots) = &self.blocks.snapshots {
            let pending: Vec<u32> =
                self.seqs.values().flat_map(|s| s.pending_snapshots.iter().map(|&(_, slot)| slot)).collect();
            snapshots.check(|b| self.blocks.cache.is_cached(b), &pending)?;
        } else if self.seqs.values().any(|s| !s.pending_snapshots.is_empty()) {
            return Err("a sequence holds lane-state snapshots without a snapshot pool".into());
        }
        let in_use = (0..pool.num_blocks() as u32).filter(|&b| pool.ref_count(b) > 0).count();
        if pool.num_free() + in_use != pool.num_blocks() {
            return Err(format!("{} free + {in_use} in use != {} blocks", pool.num_free(), pool.num_blocks()));
        }
        let mut seen_cached = false;
        for b in pool.free_queue() {
            let cached = self.blocks.cache.is_cached(b);
            if seen_cached && !cached {
                return Err(format!("uncached free block {b} queued behind a cached one"));
            }
            seen_cached |= cached;
        }

        let mut refs = vec![0u32; pool.num_blocks()];
        for (b, &r) in self.blocks.reserved.iter().enumerate() {
            refs[b] += u32::from(r);
        }
        if self.running.len() > self.config.max_lanes {
            return Err(format!("{} running in {} lanes", self.running.len(), self.config.max_lanes));
        }
        let mut slots: Vec<u32> = self.free_slots.clone();
        slots.extend(self.running.iter().filter_map(|id| self.seqs.get(id).and_then(|s| s.lane_slot)));
        slots.sort_unstable();
        if slots != (0..self.config.max_lanes as u32).collect::<Vec<_>>() {
            return Err(format!("lane slots of running sequences and free slots are not 0..max_lanes: {slots:?}"));
        }
        if let Some(id) = self.waiting.iter().find(|id| self.seqs.get(id).is_some_and(|s| s.lane_slot.is_some())) {
            return Err(format!("waiting sequence {} holds a lane slot", id.0));
        }
        let running: HashSet<_> = self.running.iter().collect();
        let waiting: HashSet<_> = self.waiting.iter().collect();
        if running.len() != self.running.len() || waiting.len() != self.waiting.len() {
            return Err("a sequence is queued twice".into());
        }
        if running.len() + waiting.len() != self.seqs.len() || running.iter().any(|id| waiting.contains(id)) {
            return Err(format!(
                "{} running + {} waiting for {} sequences",
                running.len(),
                waiting.len(),
                self.seqs.len()
            ));
        }
        for (id, seq) in &self.seqs {
            let want = if running.contains(id) { Status::Running } else { Status::Waiting };
            if seq.status != want || seq.id != *id {
                return Err(format!("sequence {id:?} is {:?} but queued as {want:?}", seq.status));
            }
            let table = &seq.block_table;
            if seq.status == Status::Waiting && (!table.is_empty() || seq.num_computed_tokens != 0) {
                return Err(format!("waiting sequence {id:?} holds blocks or computed tokens"));
            }
            let covered = table.len() * bs;
            // Between `schedule` and `update` a table may also cover planned drafts, never past
            // the sequence's longest length; `update` trims it back to its tokens.
            let longest = seq.prompt_len() + seq.max_tokens;
            if covered < seq.num_computed_tokens || table.len() > longest.div_ceil(bs) {
                return Err(format!(
                    "sequence {id:?}: {} blocks for {} computed tokens",
                    table.len(),
                    seq.num_computed_tokens
                ));
            }
            let mut own = HashSet::new();
            for &b in table {
                if !own.insert(b) || b as usize >= refs.len() {
                    return Err(format!("sequence {id:?}: block {b} twice or unknown"));
                }
                refs[b as usize] += 1;
            }
            if seq.prefix_ids.len() > seq.num_computed_tokens / bs || seq.block_hashes.len() * bs > seq.tokens().len() {
                return Err(format!("sequence {id:?}: more cached blocks than computed"));
            }
            for (i, &prefix_id) in seq.prefix_ids.iter().enumerate() {
                let entry = self.blocks.cache.entry(table[i]);
                if entry.is_some_and(|(p, tokens)| p == prefix_id && tokens != &seq.tokens()[i * bs..(i + 1) * bs]) {
                    return Err(format!("sequence {id:?}: cached block {} holds other tokens", table[i]));
                }
            }
            for (i, &h) in seq.block_hashes.iter().enumerate() {
                let parent = i.checked_sub(1).map(|p| seq.block_hashes[p]);
                let tokens = &seq.tokens()[i * bs..(i + 1) * bs];
                if self.blocks.cache.hash_raw(parent, tokens, seq.cache_salt) != h {
                    return Err(format!("sequence {id:?}: block hash {i} does not match its tokens"));
                }
            }
        }
        for (b, &r) in refs.iter().enumerate() {
            if pool.ref_count(b as u32) != r {
                return Err(format!("block {b}: {} references counted, {r} held", pool.ref_count(b as u32)));
            }
        }
        Ok(())
    }
}
