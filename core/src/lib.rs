//! Core types shared by every Gristmill node and client: bucket identity, object-name rules,
//! HRW placement (bit-compatible with AIStore), the cluster map and bucket metadata, the wire
//! types of the native API, errors, and crash-safe persistence of small metadata files.
//!
//! Nothing here does networking; proxies and targets build on these types and talk HTTP.

pub mod api;
pub mod bmd;
pub mod bucket;
pub mod error;
pub mod etl;
pub mod hrw;
pub mod job;
pub mod limits;
pub mod name;
pub mod object_lock;
pub mod perf;
pub mod persist;
pub mod range;
pub mod shards;
pub mod smap;
pub mod sse;
pub mod template;
pub mod time;
pub mod users;

pub use bmd::{BucketMetadata, BucketRecord, MetaSync};
pub use bucket::{Bck, Namespace, Provider};
pub use error::{ApiError, ErrorBody, ErrorKind};
pub use name::{validate_object_name, validate_stored_name};
pub use smap::{ClusterMap, Node};
