#![no_main]
//! Gzip-compressed tar: the decoder with its expansion limits, and the parser behind it.

use gristmill_shard::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gristmill_shard_fuzz::exercise_compressed(Format::Tgz, data));
