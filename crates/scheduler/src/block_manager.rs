//! Sequences' KV blocks: allocation through the pool, sharing through the prefix cache, release,
//! scratch reservations. Invariant: each block's reference count equals the number of block
//! tables and reservations holding it.
//!
//! Free-queue order (head = allocated next, evicted first):
//! - at start, every block in id order;
//! - a released block holding no cached KV joins the head (it has nothing worth keeping);
//! - a released cached block joins the tail, so cached blocks are evicted least recently
//!   released first, and only once no uncached free block is left;
//! - a sequence releases its table last block first: its uncached blocks end at the head in
//!   table order, and its deeper cached blocks (less likely to be shared) are evicted before
//!   its first ones;
//! - a prefix-cache hit on a free block takes it out of the queue.
//!
//! With lane-state snapshots (`snapshots`), a block leaving the cache drops its snapshot, and a
//! hit ends at the last hit block that has one.

use crate::block_pool::{BlockPool, FreeEnd};
use crate::prefix_cache::{BlockHasher, Parent, PrefixCache};
use crate::sequence::Sequence;
use crate::snapshot_pool::SnapshotPool;

/// Cached blocks a waiting sequence can start from, longest chain first-to-last.
#[derive(Debug, Default)]
pub(crate) struct Hit {
    blocks: Vec<u32>,
    prefix_ids: Vec<u64>,
    /// How many of `blocks` sit in the free queue (taking them lowers the free count).
    num_free: usize,
    /// The lane-state snapshot after the last hit block (state models only).
    restore: Option<u32>,
}

impl Hit {
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }
}

#[derive(Debug)]
pub(crate) struct BlockManager {
    block_size: usize,
    enable_prefix_cache: bool,
    pub(crate) pool: BlockPool,
    pub(crate) cache: PrefixCache,
    pub(crate) reserved: Vec<bool>,
    /// Lane-state snapshots of cached blocks, for models with lane state.
    pub(crate) snapshots: Option<SnapshotPool>,
}

impl BlockManager {
    pub fn new(num_blocks: usize, block_size: usize, enable_prefix_cache: bool, hasher: BlockHasher) -> Self {
        BlockManager {
            block_size,
            enable_prefix_cache,
            pool: BlockPool::new(num_blocks),
            cache: PrefixCache::new(num_blocks, hasher),
            reserved: vec![false; num_blocks],
            snapshots: None,
        }
    }

    pub fn num_free(&self) -> usize {
        self.pool.num_free()
    }

    /// New blocks `seq` needs so its table covers positions 0..end.
    pub fn num_needed(&self, seq: &Sequence, end: usize) -> usize {
        end.div_ceil(self.block_size).saturating_sub(seq.block_table.len())
    }

    /// The longest chain of cached full blocks of `seq`'s tokens, leaving at least one token to
    /// compute. Takes nothing.
    pub fn lookup(&self, seq: &mut Sequence) -> Hit {
        let mut hit = Hit::default();
        if !self.enable_prefix_cache {
            return hit;
        }
        let max_blocks = (seq.tokens().len() - 1) / self.block_size;
        self.extend_hashes(seq, max_blocks);
        for i in 0..max_blocks {
            let parent = self.parent(seq, &hit.prefix_ids, i);
            let Some((block, prefix_id)) = self.cache.find(seq.block_hashes[i], parent, self.block_tokens(seq, i))
            else {
                break;
            };
            hit.blocks.push(block);
            hit.prefix_ids.push(prefix_id);
            hit.num_free += usize::from(self.pool.ref_count(block) == 0);
        }
        if let Some(snapshots) = &self.snapshots {
            // A state model resumes only from a snapshot: cut the hit back to the last one.
            let keep = hit.blocks.iter().rposition(|&b| snapshots.of_block(b).is_some()).map_or(0, |i| i + 1);
            for &b in &hit.blocks[keep..] {
                hit.num_free -= usize::from(self.pool.ref_count(b) == 0);
            }
            hit.blocks.truncate(keep);
            hit.prefix_ids.truncate(keep);
            hit.restore = hit.blocks.last().and_then(|&b| snapshots.of_block(b));
        }
        hit
    }

    /// Whether `seq` can start from `hit` with its table covering 0..end.
    pub fn can_admit(&self, hit: &Hit, end: usize) -> bool {
        let num_new = end.div_ceil(self.block_size) - hit.blocks.len();
        self.pool.num_free() - hit.num_free >= num_new
    }

    /// Gives a waiting `seq` the hit blocks (computed) and new blocks up to `end`; returns the
    /// snapshot its lane state must be restored from (state models with a hit).
    pub fn admit(&mut self, seq: &mut Sequence, hit: Hit, end: usize) -> Option<u32> {
        debug_assert!(seq.block_table.is_empty() && seq.num_computed_tokens == 0);
        if let (Some(snapshots), Some(s)) = (&mut self.snapshots, hit.restore) {
            snapshots.touch(s);
        }
        for &b in &hit.blocks {
            self.pool.share(b);
        }
        seq.num_computed_tokens = hit.blocks.len() * self.block_size;
        seq.block_table = hit.blocks;
        seq.prefix_ids = hit.prefix_ids;
        assert!(self.grow(seq, end), "admission checked the free blocks");
        hit.restore
    }

    /// Takes snapshot slots for the block boundaries of `seq`'s rows `start..end` whose lane
    /// state a step should save (the policy of `StateSnapshots`), latest first so a short pool
    /// keeps the most useful one; records them as pending and returns them as (tokens absorbed,
    /// snapshot). Empty for models without lane state.
    pub fn plan_snapshots(&mut self, seq: &mut Sequence, start: usize, end: usize) -> Vec<(usize, u32)> {
        let Some(snapshots) = &mut self.snapshots else { return Vec::new() };
        let bs = self.block_size;
        let last = end / bs * bs;
        let mut taken = Vec::new();
        for p in (start / bs + 1..=end / bs).rev().map(|i| i * bs) {
            if p != last && !(p / bs).is_multiple_of(snapshots.every_blocks) {
                continue;
            }
            let Some(s) = snapshots.allocate() else { break };
            taken.push((p, s));
        }
        taken.reverse();
        seq.pending_snapshots.extend(&taken);
        taken
    }

    /// Extends `seq`'s table to cover 0..end, evicting cached free blocks as needed; `false`
    /// (and nothing taken) when too few blocks are free.
    pub fn grow(&mut self, seq: &mut Sequence, end: usize) -> bool {
        let n = self.num_needed(seq, end);
        match self.allocate(n) {
            Some(blocks) => {
                seq.block_table.extend(blocks);
                true
            }
            None => false,
        }
    }

    /// Returns the blocks of `seq`'s table past its tokens (those taken for rejected drafts).
    /// They hold no registered KV: registration stops at computed tokens.
    pub fn shrink(&mut self, seq: &mut Sequence) {
        let keep = seq.tokens().len().div_ceil(self.block_size);
        while seq.block_table.len() > keep {
            let b = seq.block_table.pop().expect("longer than keep");
            debug_assert!(!self.cache.is_cached(b), "a block past the tokens was registered");
            self.pool.release(b, FreeEnd::Head);
        }
    }

    /// Registers every full block of computed tokens not registered yet.
    pub fn register_full_blocks(&mut self, seq: &mut Sequence) {
        if !self.enable_prefix_cache {
            self.attach_snapshots(seq);
            return;
        }
        let num_full = seq.num_computed_tokens / self.block_size;
        self.extend_hashes(seq, num_full);
        for i in seq.prefix_ids.len()..num_full {
            let parent = self.parent(seq, &seq.prefix_ids, i);
            let tokens = &seq.tokens()[i * self.block_size..(i + 1) * self.block_size];
            let r = self.cache.register(seq.block_table[i], seq.block_hashes[i], parent, tokens);
            if let Some(d) = r.displaced {
                if let Some(snapshots) = &mut self.snapshots {
                    snapshots.forget_block(d);
                }
                if self.pool.ref_count(d) == 0 {
                    self.pool.move_to_head(d);
                }
            }
            seq.prefix_ids.push(r.prefix_id);
        }
        self.attach_snapshots(seq);
    }

    /// Attaches `seq`'s pending snapshots to the cached blocks they end (the block itself, or
    /// the equal block cached before it); frees those whose block is not cached.
    fn attach_snapshots(&mut self, seq: &mut Sequence) {
        let pending = std::mem::take(&mut seq.pending_snapshots);
        let targets: Vec<(u32, Option<u32>)> = pending
            .into_iter()
            .map(|(p, s)| {
                let i = p / self.block_size - 1;
                let found = (i < seq.prefix_ids.len())
                    .then(|| {
                        self.cache.find(
                            seq.block_hashes[i],
                            self.parent(seq, &seq.prefix_ids, i),
                            self.block_tokens(seq, i),
                        )
                    })
                    .flatten()
                    .filter(|&(_, prefix_id)| prefix_id == seq.prefix_ids[i]);
                (s, found.map(|(block, _)| block))
            })
            .collect();
        let Some(snapshots) = &mut self.snapshots else { return };
        for (s, block) in targets {
            match block {
                Some(block) => snapshots.attach(s, block),
                None => snapshots.release_pending(s),
            }
        }
    }

    /// Returns all of `seq`'s blocks (cached ones stay cached while unreferenced) and resets
    /// its computed tokens.
    pub fn release(&mut self, seq: &mut Sequence) {
        for (_, s) in std::mem::take(&mut seq.pending_snapshots) {
            self.snapshots.as_mut().expect("pending snapshots come from the pool").release_pending(s);
        }
        for &b in seq.block_table.iter().rev() {
            let end = if self.cache.is_cached(b) { FreeEnd::Tail } else { FreeEnd::Head };
            self.pool.release(b, end);
        }
        seq.block_table.clear();
        seq.prefix_ids.clear();
        seq.num_computed_tokens = 0;
    }

    /// `n` scratch blocks outside any sequence, or `None` (nothing taken).
    pub fn reserve(&mut self, n: usize) -> Option<Vec<u32>> {
        let blocks = self.allocate(n)?;
        for &b in &blocks {
            self.reserved[b as usize] = true;
        }
        Some(blocks)
    }

    /// Returns scratch blocks. Panics, before touching anything, on a block not reserved.
    pub fn unreserve(&mut self, blocks: &[u32]) {
        let mut seen = vec![false; self.reserved.len()];
        for &b in blocks {
            let ok =
                self.reserved.get(b as usize).is_some_and(|&r| r) && !std::mem::replace(&mut seen[b as usize], true);
            assert!(ok, "block {b} is not reserved (or is listed twice): a caller bug");
        }
        for &b in blocks.iter().rev() {
            self.reserved[b as usize] = false;
            self.pool.release(b, FreeEnd::Head);
        }
    }

    fn allocate(&mut self, n: usize) -> Option<Vec<u32>> {
        let blocks = self.pool.allocate(n)?;
        for &b in &blocks {
            self.cache.evict(b);
            if let Some(snapshots) = &mut self.snapshots {
                snapshots.forget_block(b);
            }
        }
        Some(blocks)
    }

    fn block_tokens<'s>(&self, seq: &'s Sequence, i: usize) -> &'s [u32] {
        &seq.tokens()[i * self.block_size..(i + 1) * self.block_size]
    }

    /// The parent of block `i` of `seq`, given the prefix ids of blocks 0..i.
    fn parent(&self, seq: &Sequence, prefix_ids: &[u64], i: usize) -> Parent {
        match i {
            0 => Parent::Root { salt: seq.cache_salt },
            _ => Parent::Block { hash: seq.block_hashes[i - 1], prefix_id: prefix_ids[i - 1] },
        }
    }

    /// Makes `seq.block_hashes` cover its first `n` full blocks.
    fn extend_hashes(&self, seq: &mut Sequence, n: usize) {
        while seq.block_hashes.len() < n {
            let i = seq.block_hashes.len();
            let parent = seq.block_hashes.last().copied();
            let h = self.cache.hash_raw(parent, self.block_tokens(seq, i), seq.cache_salt);
            seq.block_hashes.push(h);
        }
    }
}
