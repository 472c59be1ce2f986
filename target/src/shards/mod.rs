//! Shards on a target: reads inside archives (`?archpath=`, `?archregx=`), listings that
//! expand archives, get-batch (one ordered archive assembled from many objects and members,
//! pulled from their owners), appends to shards, and the archive and reshard jobs.
//!
//! How data flows: archive parsing and writing (`gristmill-shard`) is blocking, so every
//! archive operation runs on a blocking thread and streams its output through a bounded pipe
//! ([`io::pipe`]) into the response body; nothing holds a whole member or shard in memory.
//! Member offsets of uncompressed tars come from a per-shard index ([`catalog`]), so reading
//! a member is one positioned read.

mod append;
mod archive;
mod batch;
mod catalog;
mod io;
mod list;
mod read;
mod reshard;

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::{self, post};
use gristmill_core::shards::query as aq;
use gristmill_core::{ApiError, Bck};
use gristmill_shard::Format;

use crate::Target;

pub(crate) use append::append;
pub(crate) use archive::execute as execute_archive;
pub(crate) use list::list_objects;
pub(crate) use read::get;
pub(crate) use reshard::execute as execute_reshard;

/// Shard state of one target.
#[derive(Default)]
pub(crate) struct State {
    /// Member indexes and lists of recently used shards.
    catalogs: catalog::Cache,
    /// Appends in progress, one at a time per shard (by object uname).
    appends: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Reshard jobs this target takes part in.
    reshards: reshard::Sessions,
}

/// Routes of the shard API on a target: get-batch (as the designated target, reached by the
/// proxy's redirect or directly), and the internal endpoints targets use among themselves.
pub(crate) fn routes() -> Router<Arc<Target>> {
    Router::new()
        .route("/v1/ml/moss", routing::get(batch::handle))
        .route("/v1/ml/moss/{bucket}", routing::get(batch::handle_bucket))
        .route("/v1/shards/part", post(batch::part))
        .route(
            "/v1/shards/reshard/{job}/records",
            post(reshard::receive_records),
        )
        .route("/v1/shards/reshard/{job}/plan", post(reshard::receive_plan))
        // Item lists and plans are JSON and can be large (a 64 MiB output shard of small
        // samples is a few MB of records); the default 2 MB body limit is too small.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
}

/// Largest JSON body of the shard endpoints.
const MAX_BODY: usize = 256 << 20;

/// Whether a GET reads inside the object (a shard) rather than the object itself.
pub(crate) fn is_archive_read(params: &HashMap<String, String>) -> bool {
    [aq::ARCHPATH, aq::ARCHREGX]
        .iter()
        .any(|k| params.get(*k).is_some_and(|v| !v.is_empty()))
}

/// The format of a shard: `archmime` if given, else its name's extension, else its first
/// bytes. Blocking (may read 512 bytes).
pub(crate) fn format_of(
    name: &str,
    archmime: Option<&str>,
    file: &File,
) -> Result<Format, ApiError> {
    if let Some(m) = archmime.filter(|m| !m.is_empty()) {
        return Ok(Format::parse(m)?);
    }
    if let Some(f) = Format::from_name(name) {
        return Ok(f);
    }
    let mut head = vec![0u8; gristmill_shard::MAGIC_LEN];
    let mut got = 0;
    while got < head.len() {
        match file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) => return Err(ApiError::internal(format!("reading {name}: {e}"))),
        }
    }
    io::count_read(got as u64);
    Format::from_magic(&head[..got]).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{name} is not a shard: no archive extension (.tar, .tgz, .tar.gz, .tar.lz4, .zip) and no archive signature; pass ?archmime="
        ))
    })
}

/// After a PUT: index a new `.tar` right away (its headers are in the page cache), so the
/// first `archpath` read is already one seek.
pub(crate) fn after_put(t: &Arc<Target>, bck: &Bck, name: &str) {
    if Format::from_name(name) != Some(Format::Tar) {
        return;
    }
    let (t, bck, name) = (t.clone(), bck.clone(), name.to_owned());
    tokio::task::spawn_blocking(move || {
        let Ok((meta, file)) = io::open_local(&t.store, &bck, &name) else {
            return;
        };
        if let Err(e) = catalog::load(
            &t.store,
            &t.shards.catalogs,
            &bck,
            &meta,
            &Arc::new(file),
            Format::Tar,
        ) {
            tracing::debug!(bucket = %bck, object = %name, error = %e.message, "not indexed: not a valid tar");
        }
    });
}

/// After a DELETE: drop the shard's index.
pub(crate) fn after_delete(t: &Target, bck: &Bck, name: &str) {
    if Format::from_name(name).is_some() {
        catalog::remove(&t.store, &t.shards.catalogs, bck, name);
    }
}
