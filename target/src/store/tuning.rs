//! How much memory the store's caches may use (set per node by `gristd`: `[target]`).

/// Memory the store may use for caches: set per node (`[target]` in gristd's config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreTuning {
    /// Entries of the hot-record cache (0 turns the warm-GET fast path off); each costs a
    /// few hundred bytes, so the default bounds it to about 30 MiB.
    pub meta_cache_entries: usize,
    /// Data files the hot-record cache keeps open (0 = none); never more than a quarter of
    /// the descriptor limit, which connections need.
    pub open_files: usize,
    /// Page cache of each mountpath's index (redb's own default is 1 GiB per database,
    /// which a target with millions of objects fills).
    pub index_cache_bytes: usize,
}

impl Default for StoreTuning {
    fn default() -> Self {
        Self {
            meta_cache_entries: 100_000,
            open_files: 4096,
            index_cache_bytes: 64 << 20,
        }
    }
}

impl StoreTuning {
    /// `open_files`, capped at a quarter of `RLIMIT_NOFILE`.
    pub(super) fn kept_open_files(&self) -> usize {
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let quarter = usize::try_from(limit / 4).unwrap_or(usize::MAX);
        self.open_files.min(quarter)
    }
}
