//! The fixed object set (names, sizes, contents) and the schedule that hands operations to
//! workers.
//!
//! Contents are deterministic per name: every object is a slice of one pseudo-random pool (a
//! fixed splitmix64 stream) at an offset derived from the name's hash. A PUT body is a
//! zero-copy `Bytes` slice of that pool, and a GET can be checked against the same slice
//! without storing anything per object.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use bytes::Bytes;
use xxhash_rust::xxh64::xxh64;

use crate::config::Order;

/// Offsets into the content pool range over this many bytes, so two objects of the same size
/// almost never share content.
const POOL_SLACK: usize = 1 << 20;
/// Seeds of the per-name hashes (size, content offset).
const SIZE_SEED: u64 = 0x5151;
const OFFSET_SEED: u64 = 0x0ff5;
/// Seed of the content pool stream.
const POOL_SEED: u64 = 0x6772_6973_746d_696c;

/// Names, sizes and contents of the objects a run works on.
#[derive(Debug)]
pub struct ObjectSet {
    names: Vec<String>,
    sizes: Vec<u64>,
    offsets: Vec<usize>,
    pool: Bytes,
}

impl ObjectSet {
    /// `count` objects named `<prefix>00000000`, `<prefix>00000001`, ...; each one's size is in
    /// `min..=max`, chosen by its name's hash.
    pub fn new(prefix: &str, count: usize, min: u64, max: u64) -> Self {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i:08}")).collect();
        let sizes = names
            .iter()
            .map(|n| {
                let span = max - min;
                if span == 0 {
                    min
                } else {
                    min + xxh64(n.as_bytes(), SIZE_SEED) % (span + 1)
                }
            })
            .collect();
        let offsets = names
            .iter()
            .map(|n| (xxh64(n.as_bytes(), OFFSET_SEED) % POOL_SLACK as u64) as usize)
            .collect();
        let pool_len = usize::try_from(max).unwrap_or(usize::MAX) + POOL_SLACK;
        Self {
            names,
            sizes,
            offsets,
            pool: content_pool(pool_len),
        }
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn name(&self, i: usize) -> &str {
        &self.names[i]
    }

    pub fn size(&self, i: usize) -> u64 {
        self.sizes[i]
    }

    /// The object's bytes (a cheap slice of the shared pool).
    pub fn content(&self, i: usize) -> Bytes {
        let start = self.offsets[i];
        self.pool.slice(start..start + self.sizes[i] as usize)
    }

    /// Writes every object as `<dir>/<name>` (directories as needed), fsyncing nothing: the
    /// files feed baseline servers, they are not a durability test.
    pub fn write_files(&self, dir: &Path) -> anyhow::Result<u64> {
        let mut bytes = 0;
        for i in 0..self.len() {
            let path = dir.join(self.name(i));
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
            }
            std::fs::write(&path, self.content(i))
                .with_context(|| format!("writing {}", path.display()))?;
            bytes += self.size(i);
        }
        Ok(bytes)
    }
}

/// A deterministic pseudo-random byte stream (splitmix64), the same on every run and machine.
fn content_pool(len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len + 8);
    let mut state = POOL_SEED;
    while v.len() < len {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        v.extend_from_slice(&z.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

/// Hands out operations: ticket `t` is object `perm(t / n)[t % n]` of pass `t / n`, until the
/// optional limit. Shared by all workers; lock-free.
#[derive(Debug)]
pub struct Schedule {
    objects: u64,
    order: Order,
    seed: u64,
    limit: Option<u64>,
    next: AtomicU64,
}

impl Schedule {
    pub fn new(objects: usize, order: Order, seed: u64, limit: Option<u64>) -> Self {
        Self {
            objects: objects as u64,
            order,
            seed,
            limit,
            next: AtomicU64::new(0),
        }
    }

    /// The next object index to operate on, or `None` when the limit is reached.
    pub fn next(&self) -> Option<usize> {
        let t = self.next.fetch_add(1, Ordering::Relaxed);
        if self.limit.is_some_and(|l| t >= l) {
            return None;
        }
        let (epoch, i) = (t / self.objects, t % self.objects);
        Some(match self.order {
            Order::Seq => i,
            Order::Random => permute(self.objects, self.seed ^ epoch, i),
        } as usize)
    }
}

/// A pseudo-random permutation of `0..n` (affine map `a*i + b mod n` with `gcd(a, n) = 1`):
/// cheap, stateless, and visits every index exactly once per pass.
fn permute(n: u64, seed: u64, i: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    let h1 = xxh64(&seed.to_le_bytes(), 1);
    let h2 = xxh64(&seed.to_le_bytes(), 2);
    let mut a = 1 + h1 % (n - 1);
    while gcd(a, n) != 1 {
        a = if a + 1 >= n { 1 } else { a + 1 };
    }
    let b = h2 % n;
    ((a as u128 * i as u128 + b as u128) % n as u128) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_is_deterministic_and_sized() {
        let a = ObjectSet::new("p/", 50, 100, 5000);
        let b = ObjectSet::new("p/", 50, 100, 5000);
        for i in 0..a.len() {
            assert_eq!(a.name(i), format!("p/{i:08}"));
            assert!((100..=5000).contains(&a.size(i)));
            assert_eq!(a.content(i).len() as u64, a.size(i));
            assert_eq!(a.content(i), b.content(i));
        }
        assert_ne!(a.content(0), a.content(1));
        let fixed = ObjectSet::new("p/", 3, 16384, 16384);
        assert!((0..3).all(|i| fixed.size(i) == 16384));
    }

    #[test]
    fn write_files_matches_content() {
        let dir = tempfile::tempdir().unwrap();
        let set = ObjectSet::new("a/b-", 5, 10, 2000);
        let total = set.write_files(dir.path()).unwrap();
        assert_eq!(total, (0..5).map(|i| set.size(i)).sum::<u64>());
        for i in 0..5 {
            let got = std::fs::read(dir.path().join(set.name(i))).unwrap();
            assert_eq!(got, set.content(i));
        }
    }

    #[test]
    fn every_pass_visits_every_object_once() {
        for n in [1usize, 2, 7, 12, 100, 1000] {
            for order in [Order::Seq, Order::Random] {
                let s = Schedule::new(n, order, 42, Some(3 * n as u64));
                for _ in 0..3 {
                    let mut seen = vec![false; n];
                    for _ in 0..n {
                        let i = s.next().unwrap();
                        assert!(!seen[i], "n={n} {order:?}: {i} twice in a pass");
                        seen[i] = true;
                    }
                }
                assert_eq!(s.next(), None);
            }
        }
    }

    #[test]
    fn random_order_is_shuffled() {
        let s = Schedule::new(100, Order::Random, 7, None);
        let pass: Vec<usize> = (0..100).map(|_| s.next().unwrap()).collect();
        assert_ne!(pass, (0..100).collect::<Vec<_>>());
    }
}
