//! Access times of reads not yet written to the index, for LRU.
//!
//! Every warm GET records one, so this is on the hottest path there is: the map is split into
//! shards by a hash of the object's name (no global lock), and a read of an object already
//! pending updates its time in place (no allocation; only the first read since the last flush
//! copies the names).

use std::collections::HashMap;
use std::sync::Mutex;

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

    /// The pending access time of an object, if any.
    pub(crate) fn get(&self, bucket: &str, name: &str) -> Option<i64> {
        let k = key(bucket, name);
        self.shard(k)
            .get(&k)
            .filter(|p| p.bucket == bucket && p.name == name)
            .map(|p| p.atime_ns)
    }

    /// Takes every pending access time.
    pub(crate) fn drain(&self) -> Vec<(String, String, i64)> {
        let mut out = Vec::new();
        for shard in &self.shards {
            let taken = std::mem::take(&mut *shard.lock().expect("atimes lock"));
            out.extend(taken.into_values().map(|p| (p.bucket, p.name, p.atime_ns)));
        }
        out
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
        let mut all = a.drain();
        all.sort();
        assert_eq!(
            all,
            vec![
                ("ais/b".into(), "x".into(), 5),
                ("ais/b".into(), "y".into(), 2),
                ("ais/c".into(), "x".into(), 3),
            ]
        );
        assert!(a.drain().is_empty());
    }
}
