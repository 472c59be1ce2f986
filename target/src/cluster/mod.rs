//! The target in its cluster: joining and keepalives ([`membership`]), writes admitted under
//! one map versus the next map's rebalance ([`gate`]),
//! catching up with the primary's metadata ([`metadata`]), where copies may be while the map
//! changes ([`placement`]), moving them ([`rebalance`]), replicas ([`replicas`]), mountpath
//! changes ([`resilver`]), multipart uploads whose owner changed ([`uploads`]), and the
//! small pieces of node-to-node calls ([`peer`]).

pub(crate) mod gate;
pub(crate) mod lease;
pub(crate) mod membership;
pub(crate) mod metadata;
pub(crate) mod peer;
pub(crate) mod placement;
pub(crate) mod rebalance;
pub(crate) mod replicas;
pub(crate) mod resilver;
pub(crate) mod uploads;
