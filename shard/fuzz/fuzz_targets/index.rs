#![no_main]
//! The tar index: built from arbitrary bytes it must round-trip through its encoding, and
//! arbitrary bytes must never decode into an index that points outside its shard.

use std::io::Cursor;

use gristmill_shard::{ShardError, TarIndex, read_member_at};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match TarIndex::build(Cursor::new(data), gristmill_shard_fuzz::limits()) {
        Ok(index) => {
            let bytes = index.to_bytes();
            assert_eq!(
                TarIndex::from_bytes(&bytes).expect("own encoding decodes"),
                index
            );
            for entry in index.entries() {
                assert!(entry.data_offset + entry.size <= data.len() as u64);
                let mut r = read_member_at(Cursor::new(data), entry).expect("seek in memory");
                let n = std::io::copy(&mut r, &mut std::io::sink()).expect("indexed data reads");
                assert_eq!(n, entry.size);
            }
        }
        Err(e) => assert!(!matches!(e, ShardError::Io(_)), "{e}"),
    }
    if let Ok(index) = TarIndex::from_bytes(data) {
        for e in index.entries() {
            assert!(
                e.data_offset
                    .checked_add(e.size)
                    .is_some_and(|end| end <= index.source_size())
            );
        }
    }
});
