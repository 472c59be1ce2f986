//! Bounds enforced while reading untrusted archives, and the rules for member names.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

use crate::error::{Result, ShardError};

/// Longest member name accepted, in bytes (Linux `PATH_MAX`). Names are kept in memory
/// (listings, the duplicate check, indexes), so they are bounded like everything else.
pub const MAX_NAME_LEN: usize = 4096;

/// Largest tar extension record read into memory (a pax header or a GNU long name).
pub(crate) const MAX_EXTENSION_SIZE: u64 = 1 << 20;

/// The compression ratio is only judged past this much output: tiny archives of empty
/// files legitimately compress very well, and the point is to stop bombs early, not them.
pub const RATIO_FLOOR: u64 = 1 << 20;

/// Bounds on what reading one archive may cost. Every reader enforces them as it goes,
/// so memory and work stay bounded whatever the input claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most members (files and directories) in one archive.
    pub max_members: u64,
    /// Largest single member, in bytes (its declared, uncompressed size).
    pub max_member_size: u64,
    /// Most bytes the archive may expand to: the sum of member sizes and, for compressed
    /// formats, the decompressed stream.
    pub max_total_expanded: u64,
    /// Highest compression ratio (expanded / compressed) allowed once more than
    /// [`RATIO_FLOOR`] bytes came out; deflate cannot exceed ~1032:1 in one layer and real
    /// data stays far below 100:1.
    pub max_ratio: u64,
}

impl Default for Limits {
    /// Generous for training shards (AIStore's are a few GiB), far below what hurts a node.
    fn default() -> Self {
        Limits {
            max_members: 1_000_000,
            max_member_size: 16 << 30,
            max_total_expanded: 64 << 30,
            max_ratio: 500,
        }
    }
}

impl Limits {
    /// Checks a new member's declared size against the per-member and total bounds and the
    /// member count, updating the running totals.
    pub(crate) fn admit(&self, tally: &mut Tally, name: &str, size: u64) -> Result<()> {
        tally.members += 1;
        if tally.members > self.max_members {
            return Err(ShardError::limit(format!(
                "more than {} members",
                self.max_members
            )));
        }
        if size > self.max_member_size {
            return Err(ShardError::limit(format!(
                "member {name:?} is {size} bytes, over the {}-byte limit",
                self.max_member_size
            )));
        }
        tally.declared = tally.declared.saturating_add(size);
        if tally.declared > self.max_total_expanded {
            return Err(ShardError::limit(format!(
                "members total more than {} bytes",
                self.max_total_expanded
            )));
        }
        Ok(())
    }

    /// Checks the expansion of a compressed stream: `out` bytes produced from `consumed`.
    pub(crate) fn check_expansion(&self, out: u64, consumed: u64) -> Result<()> {
        if out > self.max_total_expanded {
            return Err(ShardError::limit(format!(
                "archive expands to more than {} bytes",
                self.max_total_expanded
            )));
        }
        if out > RATIO_FLOOR && out / consumed.max(1) > self.max_ratio {
            return Err(ShardError::limit(format!(
                "compression ratio over {}:1 (a decompression bomb?)",
                self.max_ratio
            )));
        }
        Ok(())
    }
}

/// Running totals for [`Limits::admit`].
#[derive(Debug, Default)]
pub(crate) struct Tally {
    members: u64,
    declared: u64,
}

/// Names seen so far, to refuse duplicates. Keeps two independent 64-bit hashes per name
/// rather than the name itself, so a million long names cost 16 MiB, not gigabytes; with
/// per-process random keys a false "duplicate" is out of reach (2^-128 per pair).
#[derive(Debug, Default)]
pub(crate) struct NameSet {
    a: RandomState,
    b: RandomState,
    seen: HashSet<u128>,
}

impl NameSet {
    /// Records `name`; false if it was already there.
    pub(crate) fn insert(&mut self, name: &str) -> bool {
        let key = (u128::from(self.a.hash_one(name)) << 64) | u128::from(self.b.hash_one(name));
        self.seen.insert(key)
    }
}

/// Checks that a member name is safe to hand on as a path or object name: not empty, no
/// NUL, not absolute, no `..` component (with `/` or `\` as separator, so a Windows client
/// extracting it cannot escape either), at most [`MAX_NAME_LEN`] bytes.
/// A trailing `/` (a zip directory) is allowed; `.` components are allowed (tar's `./a`).
pub fn validate_member_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "/" {
        return Err(ShardError::unsafe_member(name, "empty name"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(ShardError::limit(format!(
            "member name of {} bytes, over the {MAX_NAME_LEN}-byte limit",
            name.len()
        )));
    }
    if name.contains('\0') {
        return Err(ShardError::unsafe_member(name, "NUL in name"));
    }
    if name.starts_with('/') || name.starts_with('\\') {
        return Err(ShardError::unsafe_member(name, "absolute path"));
    }
    if name.split(['/', '\\']).any(|c| c == "..") {
        return Err(ShardError::unsafe_member(name, "'..' path component"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in [
            "a",
            "a/b.jpg",
            "./a.jpg",
            ".",
            "dir/",
            "a..b",
            "..a",
            "naïve/ünï.txt",
            "c:x",
        ] {
            validate_member_name(ok).unwrap();
        }
        for bad in [
            "",
            "/",
            "/etc/passwd",
            "\\x",
            "..",
            "../x",
            "a/../b",
            "a/..",
            "a\\..\\b",
            "nul\0",
        ] {
            assert!(
                matches!(validate_member_name(bad), Err(ShardError::Unsafe { .. })),
                "{bad:?}"
            );
        }
        assert!(matches!(
            validate_member_name(&"x".repeat(MAX_NAME_LEN + 1)),
            Err(ShardError::LimitExceeded(_))
        ));
    }

    #[test]
    fn name_set_finds_duplicates() {
        let mut s = NameSet::default();
        assert!(s.insert("a"));
        assert!(s.insert("b"));
        assert!(!s.insert("a"));
    }

    #[test]
    fn admit_counts_and_bounds() {
        let l = Limits {
            max_members: 2,
            max_member_size: 10,
            max_total_expanded: 15,
            max_ratio: 10,
        };
        let mut t = Tally::default();
        l.admit(&mut t, "a", 10).unwrap();
        assert!(l.admit(&mut t, "b", 11).is_err());
        let mut t = Tally::default();
        l.admit(&mut t, "a", 10).unwrap();
        assert!(l.admit(&mut t, "b", 6).is_err());
        let mut t = Tally::default();
        l.admit(&mut t, "a", 1).unwrap();
        l.admit(&mut t, "b", 1).unwrap();
        assert!(l.admit(&mut t, "c", 1).is_err());
        l.check_expansion(RATIO_FLOOR, 1).unwrap_err();
        let l = Limits::default();
        l.check_expansion(RATIO_FLOOR, 1).unwrap();
        l.check_expansion(RATIO_FLOOR * 600, RATIO_FLOOR)
            .unwrap_err();
        l.check_expansion(RATIO_FLOOR * 100, RATIO_FLOOR).unwrap();
    }
}
