//! The pool of KV blocks: a reference count per block and one free queue. Invariant: a block is
//! in the free queue exactly when its count is 0, and then exactly once. Allocation takes from
//! the head; the caller says which end a released block joins. The pool knows nothing of hashes.
//! Releasing a block that holds no reference is a scheduler bug and panics, in release builds too.

/// Marks "no block" in the queue links.
const NONE: u32 = u32::MAX;

/// Which end of the free queue a block whose count drops to 0 joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeEnd {
    /// Allocated next: the block holds nothing worth keeping.
    Head,
    /// Allocated last: the block holds cached KV, least recently released is evicted first.
    Tail,
}

/// Reference-counted KV blocks with an intrusive doubly linked free queue (O(1) removal of any
/// block, as a prefix-cache hit on a free block needs).
#[derive(Debug)]
pub struct BlockPool {
    ref_cnt: Vec<u32>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    num_free: usize,
}

impl BlockPool {
    /// `num_blocks` free blocks, queued in id order.
    pub fn new(num_blocks: usize) -> Self {
        assert!(num_blocks < NONE as usize, "at most {} blocks", NONE - 1);
        let n = num_blocks as u32;
        let prev = (0..n).map(|b| if b == 0 { NONE } else { b - 1 }).collect();
        let next = (0..n).map(|b| if b + 1 == n { NONE } else { b + 1 }).collect();
        let (head, tail) = if n == 0 { (NONE, NONE) } else { (0, n - 1) };
        BlockPool { ref_cnt: vec![0; num_blocks], prev, next, head, tail, num_free: num_blocks }
    }

    /// Blocks in the pool, free or not.
    pub fn num_blocks(&self) -> usize {
        self.ref_cnt.len()
    }

    /// Blocks with no reference (some may still hold cached KV).
    pub fn num_free(&self) -> usize {
        self.num_free
    }

    /// References held on `block`.
    pub fn ref_count(&self, block: u32) -> u32 {
        self.ref_cnt[self.index(block)]
    }

    /// `n` blocks from the head of the free queue, each with one reference, or `None` (and
    /// nothing taken) when fewer are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<u32>> {
        if self.num_free < n {
            return None;
        }
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            self.ref_cnt[b as usize] = 1;
            blocks.push(b);
        }
        Some(blocks)
    }

    /// One more reference on `block`; a free block leaves the queue.
    pub fn share(&mut self, block: u32) {
        let i = self.index(block);
        if self.ref_cnt[i] == 0 {
            self.unlink(block);
        }
        self.ref_cnt[i] += 1;
    }

    /// Drops one reference; at 0 the block joins the free queue at `end`. Returns whether it did.
    pub fn release(&mut self, block: u32, end: FreeEnd) -> bool {
        let i = self.index(block);
        assert!(self.ref_cnt[i] > 0, "block {block} released with no reference held (double free): a scheduler bug");
        self.ref_cnt[i] -= 1;
        if self.ref_cnt[i] > 0 {
            return false;
        }
        match end {
            FreeEnd::Head => self.push_head(block),
            FreeEnd::Tail => self.push_tail(block),
        }
        true
    }

    /// Moves a free block to the head (its cached KV was dropped).
    pub fn move_to_head(&mut self, block: u32) {
        assert_eq!(self.ref_count(block), 0, "block {block} is not free");
        self.unlink(block);
        self.push_head(block);
    }

    /// The free queue from head (allocated next) to tail. Stops after `num_blocks` steps so a
    /// corrupt queue cannot loop forever.
    pub fn free_queue(&self) -> impl Iterator<Item = u32> + '_ {
        let mut b = self.head;
        std::iter::from_fn(move || {
            let out = (b != NONE).then_some(b)?;
            b = self.next[b as usize];
            Some(out)
        })
        .take(self.num_blocks() + 1)
    }

    /// Checks the queue links against the counts: every free block once, no referenced block.
    pub fn check(&self) -> Result<(), String> {
        let mut seen = vec![false; self.num_blocks()];
        let mut prev = NONE;
        let mut len = 0;
        for b in self.free_queue() {
            let i = b as usize;
            if seen[i] {
                return Err(format!("block {b} is in the free queue twice"));
            }
            seen[i] = true;
            if self.ref_cnt[i] != 0 {
                return Err(format!("block {b} is free and referenced ({} refs)", self.ref_cnt[i]));
            }
            if self.prev[i] != prev {
                return Err(format!("block {b}: queue back link {} != {prev}", self.prev[i]));
            }
            prev = b;
            len += 1;
        }
        if prev != self.tail {
            return Err(format!("queue ends at {prev}, tail is {}", self.tail));
        }
        let num_zero = self.ref_cnt.iter().filter(|&&c| c == 0).count();
        if len != self.num_free || num_zero != self.num_free {
            return Err(format!("{len} queued, {num_zero} unreferenced, {} counted free", self.num_free));
        }
        Ok(())
    }

    fn index(&self, block: u32) -> usize {
        assert!((block as usize) < self.num_blocks(), "unknown block {block}: a scheduler bug");
        block as usize
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        match p {
            NONE => self.head = n,
            p => self.next[p as usize] = n,
        }
        match n {
            NONE => self.tail = p,
            n => self.prev[n as usize] = p,
        }
        self.prev[b as usize] = NONE;
        self.next[b as usize] = NONE;
        self.num_free -= 1;
    }

    fn push_head(&mut self, b: u32) {
        self.prev[b as usize] = NONE;
        self.next[b as usize] = self.head;
        match self.head {
            NONE => self.tail = b,
            h => self.prev[h as usize] = b,
        }
        self.head = b;
        self.num_free += 1;
    }

    fn push_tail(&mut self, b: u32) {
        self.next[b as usize] = NONE;
        self.prev[b as usize] = self.tail;
        match self.tail {
            NONE => self.head = b,
            t => self.next[t as usize] = b,
        }
        self.tail = b;
        self.num_free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(p: &BlockPool) -> Vec<u32> {
        p.free_queue().collect()
    }

    #[test]
    fn allocates_from_the_head_in_id_order() {
        let mut p = BlockPool::new(4);
        assert_eq!(p.allocate(3), Some(vec![0, 1, 2]));
        assert_eq!(p.allocate(2), None);
        assert_eq!(queue(&p), [3]);
        p.check().unwrap();
    }

    #[test]
    fn released_blocks_join_the_chosen_end() {
        let mut p = BlockPool::new(4);
        let b = p.allocate(4).unwrap();
        assert!(p.release(b[1], FreeEnd::Tail));
        assert!(p.release(b[3], FreeEnd::Tail));
        assert!(p.release(b[2], FreeEnd::Head));
        assert_eq!(queue(&p), [2, 1, 3]);
        assert_eq!(p.allocate(2), Some(vec![2, 1]));
        p.check().unwrap();
    }

    #[test]
    fn shared_block_is_free_only_after_the_last_release() {
        let mut p = BlockPool::new(2);
        let b = p.allocate(1).unwrap()[0];
        p.share(b);
        assert_eq!(p.ref_count(b), 2);
        assert!(!p.release(b, FreeEnd::Tail));
        assert_eq!(p.num_free(), 1);
        assert!(p.release(b, FreeEnd::Tail));
        assert_eq!(queue(&p), [1, 0]);
        // A hit on a free block takes it out of the middle of the queue.
        p.share(1);
        assert_eq!(queue(&p), [0]);
        p.check().unwrap();
    }

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_panics() {
        let mut p = BlockPool::new(2);
        let b = p.allocate(1).unwrap()[0];
        p.release(b, FreeEnd::Head);
        p.release(b, FreeEnd::Head);
    }

    #[test]
    #[should_panic(expected = "unknown block 7")]
    fn unknown_block_panics() {
        BlockPool::new(2).release(7, FreeEnd::Head);
    }
}
