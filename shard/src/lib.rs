//! `gristmill-shard`: archive formats, sample grouping, batch streams and reshard planning.
//! Pure (no networking). Nothing is implemented yet; see `README.md`.
