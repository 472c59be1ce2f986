//! The write path: PUT and DELETE on the owner ([`local`]) and write-through for remote
//! buckets ([`remote`]). Every write is ordered by generations, never by clocks
//! ([`crate::cluster::placement::gen_floor`]).

pub(crate) mod local;
pub(crate) mod remote;
