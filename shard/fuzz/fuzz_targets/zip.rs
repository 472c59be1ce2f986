#![no_main]
//! Zip: the central directory, its checks (duplicates, overlaps, local headers), inflation.

use gristmill_shard::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gristmill_shard_fuzz::exercise(Format::Zip, data));
