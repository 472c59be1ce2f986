//! The candidates of one eviction pass: for each limit that needs room, only the oldest
//! cached objects that together free what it needs. A pass holds these instead of every
//! evictable object, so its memory follows what it evicts, not the object count.

use std::collections::HashMap;

use gristmill_core::Bck;

/// One cached object a pass may evict.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub atime: i64,
    pub mp: usize,
    pub bck: Bck,
    pub name: String,
    pub size: u64,
}

/// Orders candidates by access time, newest on top of a max-heap.
struct Newest(Candidate);

impl Newest {
    fn key(&self) -> (i64, usize, &str, &str) {
        (
            self.0.atime,
            self.0.mp,
            self.0.bck.name.as_str(),
            &self.0.name,
        )
    }
}
impl PartialEq for Newest {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}
impl Eq for Newest {}
impl PartialOrd for Newest {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Newest {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// The oldest candidates of one limit that together free what it needs (and no newer one).
pub(super) struct Oldest {
    need: u64,
    held: u64,
    heap: std::collections::BinaryHeap<Newest>,
}

impl Oldest {
    pub fn new(need: i128) -> Self {
        Self {
            need: need.clamp(0, u64::MAX as i128) as u64,
            held: 0,
            heap: Default::default(),
        }
    }

    fn offer(&mut self, c: &Candidate) {
        if self.need == 0
            || (self.held >= self.need
                && self.heap.peek().is_some_and(|top| top.0.atime <= c.atime))
        {
            return;
        }
        self.held += c.size.max(1);
        self.heap.push(Newest(c.clone()));
        // Drop the newest while the rest still cover the need.
        while let Some(top) = self.heap.peek() {
            let size = top.0.size.max(1);
            if self.held - size < self.need {
                break;
            }
            self.held -= size;
            self.heap.pop();
        }
    }
}

/// What each limit of a pass keeps.
pub(super) struct Limits {
    pub mountpaths: Vec<Oldest>,
    pub cache: Oldest,
    pub buckets: HashMap<String, Oldest>,
}

impl Limits {
    pub fn offer(&mut self, c: Candidate) {
        if let Some(o) = self.mountpaths.get_mut(c.mp) {
            o.offer(&c);
        }
        self.cache.offer(&c);
        if let Some(o) = self.buckets.get_mut(&c.bck.uname()) {
            o.offer(&c);
        }
    }

    /// Every kept candidate once, oldest access first: a limit's oldest come before any
    /// newer one, so the pass meets each need as a walk of every candidate would.
    pub fn union(self) -> Vec<Candidate> {
        let mut all: Vec<Candidate> = self
            .mountpaths
            .into_iter()
            .chain([self.cache])
            .chain(self.buckets.into_values())
            .flat_map(|o| o.heap.into_vec().into_iter().map(|n| n.0))
            .collect();
        all.sort_by(|a, b| {
            (a.atime, a.mp, &a.name)
                .cmp(&(b.atime, b.mp, &b.name))
                .then_with(|| a.bck.uname().cmp(&b.bck.uname()))
        });
        all.dedup_by(|a, b| a.mp == b.mp && a.bck == b.bck && a.name == b.name);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(atime: i64, mp: usize, bucket: &str, name: &str, size: u64) -> Candidate {
        Candidate {
            atime,
            mp,
            bck: Bck::new(bucket, gristmill_core::Provider::Aws).unwrap(),
            name: name.into(),
            size,
        }
    }

    #[test]
    fn each_limit_keeps_the_oldest_that_cover_its_need() {
        let mut limits = Limits {
            mountpaths: vec![Oldest::new(250), Oldest::new(0)],
            cache: Oldest::new(0),
            buckets: HashMap::from([(c(0, 0, "b", "x", 0).bck.uname(), Oldest::new(100))]),
        };
        // Offered in walk (key) order, not access order.
        for x in [
            c(50, 0, "a", "a5", 100),
            c(10, 0, "a", "a1", 100),
            c(40, 0, "a", "a4", 100),
            c(20, 0, "a", "a2", 100),
            c(30, 1, "b", "b3", 100),
            c(60, 1, "b", "b6", 100),
            c(5, 1, "a", "a0", 100),
        ] {
            limits.offer(x);
        }
        let kept: Vec<String> = limits.union().into_iter().map(|c| c.name).collect();
        // Mountpath 0 needs 250: its three oldest (a1, a2, a4); bucket b needs 100: b3.
        // Mountpath 1 and the cache need nothing: a0 and the newer ones stay.
        assert_eq!(kept, ["a1", "a2", "b3", "a4"]);
    }

    #[test]
    fn a_candidate_two_limits_keep_is_evicted_once() {
        let mut limits = Limits {
            mountpaths: vec![Oldest::new(100)],
            cache: Oldest::new(100),
            buckets: HashMap::new(),
        };
        limits.offer(c(1, 0, "a", "x", 100));
        limits.offer(c(2, 0, "a", "y", 100));
        let kept: Vec<String> = limits.union().into_iter().map(|c| c.name).collect();
        assert_eq!(kept, ["x"]);
    }

    #[test]
    fn empty_objects_still_bound_what_is_kept() {
        let mut o = Oldest::new(10);
        for i in 0..1000 {
            o.offer(&c(i, 0, "a", &format!("e{i}"), 0));
        }
        assert_eq!(o.heap.len(), 10);
    }
}
