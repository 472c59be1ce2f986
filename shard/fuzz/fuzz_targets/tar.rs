#![no_main]
//! Uncompressed tar: the header parser, seekable and streamed.

use gristmill_shard::Format;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gristmill_shard_fuzz::exercise(Format::Tar, data));
