//! Bytes admitted for cache fills still streaming: counted against the quotas and the cache
//! limit until their objects commit (the store's usage then counts them) or the fill fails,
//! so concurrent fills cannot together pass a limit each was admitted under.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Reserved bytes by (bucket uname, mountpath).
#[derive(Debug, Default, Clone)]
pub(super) struct Reserved(Arc<Mutex<HashMap<(String, usize), u64>>>);

impl Reserved {
    pub fn lock(&self) -> MutexGuard<'_, HashMap<(String, usize), u64>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reserves `size` bytes in the (locked) map; released when the returned guard drops.
    pub fn take(
        &self,
        map: &mut HashMap<(String, usize), u64>,
        bucket: &str,
        mountpath: usize,
        size: u64,
    ) -> Reservation {
        let key = (bucket.to_owned(), mountpath);
        *map.entry(key.clone()).or_default() += size;
        Reservation {
            reserved: self.clone(),
            key,
            size,
        }
    }

    /// Every reservation now: (bucket uname, mountpath, bytes).
    pub fn snapshot(&self) -> Vec<(String, usize, u64)> {
        self.lock()
            .iter()
            .map(|((b, mp), n)| (b.clone(), *mp, *n))
            .collect()
    }
}

/// Bytes of one admitted fill, reserved until this drops (hold it until the object commits
/// or the fill fails; the store's usage counts it from the commit, so for a moment both do —
/// the safe side).
#[must_use = "the reservation ends when this drops"]
#[derive(Debug)]
pub struct Reservation {
    reserved: Reserved,
    key: (String, usize),
    size: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut map = self.reserved.lock();
        if let Some(n) = map.get_mut(&self.key) {
            *n = n.saturating_sub(self.size);
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// Sum of the reservations that match.
pub(super) fn sum(
    map: &HashMap<(String, usize), u64>,
    matches: impl Fn(&str, usize) -> bool,
) -> u64 {
    map.iter()
        .filter(|((b, mp), _)| matches(b, *mp))
        .map(|(_, n)| n)
        .sum()
}
