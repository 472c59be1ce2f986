//! Access times of reads not yet written to the index, for LRU.
//!
//! Every warm GET records one, so this is on the hottest path there is: the map is split into
//! shards by a hash of the object's name (no global lock), and a read of an object already
//! pending updates its time in place (no allocation; only the first read since the last flush
//! copies the names).
//!
//! A flush takes the pending times and writes them to the index; until that commit is done
//! they stay visible to [`Atimes::get`] (see [`Flushing`]), so an eviction pass that asks
//! whether an object was read since it was picked never falls into the gap between the two.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Independently locked shards.
const SHARDS: usize = 16;

/// One pending access time.
#[derive(Debug)]
struct Pending {
    bucket: String,
    name: String,
    atime_ns: i64,
}

/// Pending access times, by a 64-bit hash of (bucket uname, name).
#[derive(Debug, Default)]
pub(crate) struct Atimes {
    shards: [Mutex<HashMap<u64, Pending>>; SHARDS],
    /// Times taken by flushes whose index commit has not finished: (flush id, time by key).
    flushing: Mutex<Vec<(u64, HashMap<u64, i64>)>>,
    next_flush: AtomicU64,
}

/// The times one flush took, visible to [`Atimes::get`] until this is dropped (after the
/// flush's index commit, or when it failed).
pub(crate) struct Flushing<'a> {
    atimes: &'a Atimes,
    id: u64,
    /// (bucket uname, name, access time) of every read taken.
    pub(crate) entries: Vec<(String, String, i64)>,
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        self.atimes
            .flushing
            .lock()
            .expect("atimes flushing lock")
            .retain(|(id, _)| *id != self.id);
    }
}

fn key(bucket: &str, name: &str) -> u64 {
    // Seeded apart from the mountpath and HRW hashes, which take the same names.
    let mut h = xxhash_rust::xxh3::Xxh3::with_seed(0x6174_696d_6573);
    h.update(bucket.as_bytes());
    h.update(&[0]);
    h.update(name.as_bytes());
    h.digest()
}

impl Atimes {
    fn shard(&self, key: u64) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
        self.shards[(key % SHARDS as u64) as usize]
            .lock()
            .expect("atimes lock")
    }

    /// Records a read at `atime_ns`; answers how many reads the shard holds (a flush is due
    /// when shards fill up).
    pub(crate) fn touch(&self, bucket: &str, name: &str, atime_ns: i64) -> usize {
        let k = key(bucket, name);
        let mut shard = self.shard(k);
        match shard.get_mut(&k) {
            Some(p) if p.bucket == bucket && p.name == name => p.atime_ns = atime_ns,
            // New, or (vanishingly rare) another object with the same hash: that one's
            // read is forgotten, which only makes it look older to LRU.
            _ => {
                shard.insert(
                    k,
                    Pending {
                        bucket: bucket.to_owned(),
                        name: name.to_owned(),
                        atime_ns,
                    },
                );
            }
        }
        shard.len()
    }

    /// The pending access time of an object, if any: a read not yet written to the index, or
    /// one a flush is writing now.
    pub(crate) fn get(&self, bucket: &str, name: &str) -> Option<i64> {
        let k = key(bucket, name);
        let pending = self
            .shard(k)
            .get(&k)
            .filter(|p| p.bucket == bucket && p.name == name)
            .map(|p| p.atime_ns);
        let flushing = self
            .flushing
            .lock()
            .expect("atimes flushing lock")
            .iter()
            .filter_map(|(_, times)| times.get(&k).copied())
            .max();
        pending.max(flushing)
    }

    /// Takes every pending access time for a flush; they stay visible to [`Atimes::get`]
    /// until the returned batch is dropped.
    pub(crate) fn drain(&self) -> Flushing<'_> {
        let mut entries = Vec::new();
        let mut times = HashMap::new();
        for shard in &self.shards {
            let taken = std::mem::take(&mut *shard.lock().expect("atimes lock"));
            times.reserve(taken.len());
            for (k, p) in taken {
                times.insert(k, p.atime_ns);
                entries.push((p.bucket, p.name, p.atime_ns));
            }
        }
        let id = self.next_flush.fetch_add(1, Ordering::Relaxed);
        if !times.is_empty() {
            self.flushing
                .lock()
                .expect("atimes flushing lock")
                .push((id, times));
        }
        Flushing {
            atimes: self,
            id,
            entries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Atimes;

    #[test]
    fn reads_update_in_place_and_drain_takes_them_all() {
        let a = Atimes::default();
        assert_eq!(a.touch("ais/b", "x", 1), 1);
        assert_eq!(
            a.touch("ais/b", "x", 5),
            1,
            "the same object again: updated"
        );
        a.touch("ais/b", "y", 2);
        a.touch("ais/c", "x", 3);
        assert_eq!(a.get("ais/b", "x"), Some(5));
        assert_eq!(a.get("ais/c", "x"), Some(3));
        assert_eq!(a.get("ais/c", "y"), None);
        let mut all = std::mem::take(&mut a.drain().entries);
        all.sort();
        assert_eq!(
            all,
            vec![
                ("ais/b".into(), "x".into(), 5),
                ("ais/b".into(), "y".into(), 2),
                ("ais/c".into(), "x".into(), 3),
            ]
        );
        assert!(a.drain().entries.is_empty());
    }

    /// An eviction pass asks whether an object was read since it was picked: a read being
    /// flushed still counts until its index commit is done (it used to vanish at the drain,
    /// before the commit).
    #[test]
    fn a_read_being_flushed_stays_visible_until_its_flush_ends() {
        let a = Atimes::default();
        a.touch("ais/b", "x", 7);
        let flushing = a.drain();
        assert_eq!(flushing.entries, vec![("ais/b".into(), "x".into(), 7)]);
        assert_eq!(a.get("ais/b", "x"), Some(7), "visible while its flush runs");
        a.touch("ais/b", "x", 9);
        let second = a.drain();
        assert_eq!(a.get("ais/b", "x"), Some(9), "the newest of two flushes");
        drop(flushing);
        assert_eq!(a.get("ais/b", "x"), Some(9));
        drop(second);
        assert_eq!(a.get("ais/b", "x"), None, "written: the index has it");
    }
}
