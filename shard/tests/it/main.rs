//! Integration tests of `gristmill-shard`, in one binary (one link on small machines).

mod util;

mod hostile;
mod index;
mod python;
mod roundtrip;
