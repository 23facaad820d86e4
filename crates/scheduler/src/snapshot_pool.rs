//! Snapshot slots of per-lane state for the prefix cache of models with lane state (linear
//! attention): the state a lane had after the last token of a cached block. Such a model can
//! resume only where a snapshot exists, so a hit ends at the last hit block that has one.
//! Invariant: a slot is free, pending (taken by a planned step of one running sequence, listed
//! in its `pending_snapshots`), or attached to exactly one cached block, and `of_block` mirrors
//! the attachments. Dropping a snapshot drops no KV: its block stays cached, still usable inside
//! a longer hit. This file owns slot ids and eviction order; which boundaries to snapshot and
//! when blocks are cached belong to the block manager.

/// How a state model's prefix cache keeps snapshots.
///
/// A snapshot costs one lane's whole state (`LaneStateSpec::bytes_per_slot`, megabytes for real
/// models), so they are kept sparsely, within a fixed pool: during a step, a lane's state is
/// saved at the last block boundary its rows reach (so every prefill chunk and every decode step
/// that completes a block leaves one: a conversation's next turn resumes at the last full block
/// of the previous one), and at every `every_blocks`-th block boundary (so prompts that share a
/// long prefix, such as a system prompt, resume near its end even when it ended mid-chunk).
/// When the pool is full, the least recently used snapshot is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateSnapshots {
    /// Snapshot slots (each one lane's state).
    pub num_snapshots: usize,
    /// Also snapshot at every boundary after a multiple of this many blocks (1: every block).
    pub every_blocks: usize,
}

impl StateSnapshots {
    /// The default for an engine of `max_lanes` lanes: two snapshots per lane, and a snapshot
    /// every 16 blocks (256 positions at plumb's block size of 16).
    pub fn for_lanes(max_lanes: usize) -> Self {
        StateSnapshots { num_snapshots: 2 * max_lanes, every_blocks: 16 }
    }
}

#[derive(Debug)]
pub(crate) struct SnapshotPool {
    pub every_blocks: usize,
    /// Per snapshot: the cached block it is attached to.
    block: Vec<Option<u32>>,
    /// Per snapshot: taken by a planned step, not attached yet.
    pending: Vec<bool>,
    /// Per block: its snapshot.
    of_block: Vec<Option<u32>>,
    free: Vec<u32>,
    /// Per snapshot: the clock when it was taken or last hit.
    last_used: Vec<u64>,
    clock: u64,
    /// Snapshots allocated since start.
    pub num_taken: u64,
}

impl SnapshotPool {
    pub fn new(config: StateSnapshots, num_blocks: usize) -> Self {
        assert!(config.every_blocks > 0, "snapshots every 0 blocks");
        let n = config.num_snapshots;
        SnapshotPool {
            every_blocks: config.every_blocks,
            block: vec![None; n],
            pending: vec![false; n],
            of_block: vec![None; num_blocks],
            free: (0..n as u32).rev().collect(),
            last_used: vec![0; n],
            clock: 0,
            num_taken: 0,
        }
    }

    /// Snapshots attached to cached blocks.
    pub fn num_attached(&self) -> usize {
        self.block.iter().filter(|b| b.is_some()).count()
    }

    /// A slot for a snapshot a planned step takes: a free one, else the least recently used
    /// attached one (detached from its block). `None` when every slot is pending.
    pub fn allocate(&mut self) -> Option<u32> {
        let s = match self.free.pop() {
            Some(s) => s,
            None => {
                let lru =
                    (0..self.block.len()).filter(|&s| self.block[s].is_some()).min_by_key(|&s| self.last_used[s])?;
                self.detach(lru as u32);
                self.free.pop().expect("just freed")
            }
        };
        self.pending[s as usize] = true;
        self.touch(s);
        self.num_taken += 1;
        Some(s)
    }

    /// Attaches pending snapshot `s` to cached `block`; if the block has one already (the same
    /// state: equal prefixes give equal bits), `s` is freed instead.
    pub fn attach(&mut self, s: u32, block: u32) {
        assert!(self.pending[s as usize], "snapshot {s} is not pending");
        self.pending[s as usize] = false;
        match self.of_block[block as usize] {
            Some(_) => self.free.push(s),
            None => {
                self.block[s as usize] = Some(block);
                self.of_block[block as usize] = Some(s);
            }
        }
    }

    /// Frees a pending snapshot whose step will not attach it (the sequence was preempted,
    /// aborted or its block was not cached).
    pub fn release_pending(&mut self, s: u32) {
        assert!(std::mem::take(&mut self.pending[s as usize]), "snapshot {s} is not pending");
        self.free.push(s);
    }

    /// Drops the snapshot of a block that leaves the prefix cache.
    pub fn forget_block(&mut self, block: u32) {
        if let Some(s) = self.of_block[block as usize] {
            self.detach(s);
        }
    }

    /// The snapshot of cached `block`, if any.
    pub fn of_block(&self, block: u32) -> Option<u32> {
        self.of_block[block as usize]
    }

    /// Marks `s` used now (a hit), so it is evicted last.
    pub fn touch(&mut self, s: u32) {
        self.clock += 1;
        self.last_used[s as usize] = self.clock;
    }

    fn detach(&mut self, s: u32) {
        let block = self.block[s as usize].take().expect("attached");
        self.of_block[block as usize] = None;
        self.free.push(s);
    }

    /// The invariant, given which blocks are cached and which snapshots running sequences hold.
    pub fn check(&self, is_cached: impl Fn(u32) -> bool, pending: &[u32]) -> Result<(), String> {
        let n = self.block.len();
        let mut state = vec![0u8; n];
        for &s in &self.free {
            state[s as usize] += 1;
        }
        for &s in pending {
            state[s as usize] += 1;
            if !self.pending[s as usize] {
                return Err(format!("snapshot {s} is held by a sequence but not pending"));
            }
        }
        for (s, b) in self.block.iter().enumerate() {
            let Some(b) = *b else { continue };
            state[s] += 1;
            if self.of_block[b as usize] != Some(s as u32) || !is_cached(b) {
                return Err(format!("snapshot {s} is attached to block {b}, which is uncached or points elsewhere"));
            }
        }
        if let Some(s) = state.iter().position(|&c| c != 1) {
            return Err(format!("snapshot {s} is in {} of free, pending and attached", state[s]));
        }
        if self.pending.iter().filter(|&&p| p).count() != pending.len() {
            return Err("a pending snapshot is held by no sequence".into());
        }
        let attached = self.of_block.iter().filter(|s| s.is_some()).count();
        if attached != self.num_attached() {
            return Err(format!("{attached} blocks name a snapshot, {} snapshots are attached", self.num_attached()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_snapshot_is_evicted_and_its_block_forgets_it() {
        let mut p = SnapshotPool::new(StateSnapshots { num_snapshots: 2, every_blocks: 1 }, 4);
        let (a, b) = (p.allocate().unwrap(), p.allocate().unwrap());
        assert_eq!(p.allocate(), None, "both pending: nothing to evict");
        p.attach(a, 3);
        p.attach(b, 1);
        p.touch(a);
        let c = p.allocate().unwrap();
        assert_eq!((c, p.of_block(1), p.of_block(3)), (b, None, Some(a)), "b was used least recently");
        p.attach(c, 3);
        assert_eq!(p.of_block(3), Some(a), "a block keeps its first snapshot; the copy is freed");
        p.forget_block(3);
        assert_eq!(p.num_attached(), 0);
        p.check(|_| true, &[]).unwrap();
        let d = p.allocate().unwrap();
        assert!(p.check(|_| true, &[]).is_err(), "a pending snapshot no sequence holds");
        p.release_pending(d);
        p.check(|_| true, &[]).unwrap();
    }
}
