#![no_main]
//! See `gristmill_core_fuzz::auth_tokens`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gristmill_core_fuzz::auth_tokens(data));
