#![no_main]
//! See `gristmill_core_fuzz::action_json`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gristmill_core_fuzz::action_json(data));
