//! `PUT /v1/objects/{b}/{shard}?archpath=member` (body = the member's bytes, with
//! `Content-Length`): adds a member to a shard, creating the shard if it does not exist.
//!
//! The result is a new version of the object written like any PUT (temp file, checksum,
//! rename, index commit), so readers see the old shard or the new one, never a half-appended
//! one. For a tar the old bytes up to the end-of-archive marker (from its index) are copied
//! and the member and a new trailer follow; other formats are rewritten member by member.
//! Appends to one shard are serialized on its owner; a name the shard already has is 409.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use gristmill_core::shards::query as aq;
use gristmill_core::{ApiError, Bck, ErrorKind};
use gristmill_shard::{Format, Limits, ShardReader, ShardWriter};

use super::catalog::{self, Catalog};
use super::io::{self, BlockingBody, FileRange};
use crate::Target;
use crate::store::PutOptions;

pub(crate) async fn append(
    t: &Arc<Target>,
    bck: &Bck,
    name: &str,
    params: &HashMap<String, String>,
    req: Request,
) -> Result<Response, ApiError> {
    if bck.is_remote() {
        return Err(ApiError::bad_request(format!(
            "appending to shards of remote buckets is not supported ({bck})"
        )));
    }
    if !crate::write::local::s3_versioning(t, bck).is_empty() {
        return Err(ApiError::bad_request(format!(
            "appending to shards of a versioned bucket is not supported ({bck}): PUT the whole shard, which makes a new version"
        )));
    }
    let member = params.get(aq::ARCHPATH).cloned().unwrap_or_default();
    gristmill_shard::validate_member_name(&member)?;
    if member.ends_with('/') {
        return Err(ApiError::bad_request(format!(
            "archpath {member:?} names a directory"
        )));
    }
    let size = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| {
            ApiError::new(
                ErrorKind::BadRequest,
                "appending to a shard needs Content-Length (the member's size goes in its header)",
            )
        })?;
    let lock = {
        let mut locks = t.shards.appends.lock().expect("append locks");
        locks.entry(bck.object_uname(name)).or_default().clone()
    };
    let _guard = lock.lock().await;
    let archmime = params.get(aq::ARCHMIME).cloned();
    let result = append_locked(t, bck, name, &member, size, archmime, req).await;
    {
        let mut locks = t.shards.appends.lock().expect("append locks");
        if Arc::strong_count(&lock) <= 2 {
            locks.remove(&bck.object_uname(name));
        }
    }
    result
}

/// What is already there.
enum Base {
    /// No shard yet.
    None,
    /// A tar: keep its first `end` bytes.
    Tar { file: Arc<std::fs::File>, end: u64 },
    /// Another format: copy its members.
    Rewrite {
        file: Arc<std::fs::File>,
        size: u64,
        format: Format,
    },
}

async fn append_locked(
    t: &Arc<Target>,
    bck: &Bck,
    name: &str,
    member: &str,
    size: u64,
    archmime: Option<String>,
    req: Request,
) -> Result<Response, ApiError> {
    let existing = match t.store.open_object(bck, name).await {
        Ok(o) => Some(o),
        Err(crate::StoreError::Api(e)) if e.kind == ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let (format, base) = {
        let (bck, name, member) = (bck.clone(), name.to_owned(), member.to_owned());
        tokio::task::spawn_blocking(move || -> Result<(Format, Base), ApiError> {
            let Some(open) = existing else {
                let format = match archmime.as_deref().filter(|m| !m.is_empty()) {
                    Some(m) => Format::parse(m)?,
                    None => Format::from_name(&name).unwrap_or(Format::Tar),
                };
                return Ok((format, Base::None));
            };
            let file = open.file;
            let format = super::format_of(&name, archmime.as_deref(), &file)?;
            let cat = catalog::load(&store, &shards.catalogs, &bck, &open.meta, &file, format)?;
            let taken = match &*cat {
                Catalog::Tar(idx) => idx.get(&member).is_some(),
                Catalog::Members(ms) => ms.iter().any(|m| m.name == member),
            };
            if taken {
                return Err(ApiError::new(
                    ErrorKind::Conflict,
                    format!("{bck}/{name} already has a member {member:?}"),
                ));
            }
            let base = match &*cat {
                Catalog::Tar(idx) => Base::Tar {
                    file,
                    end: idx.end_offset(),
                },
                Catalog::Members(_) => Base::Rewrite {
                    file,
                    size: open.meta.size,
                    format,
                },
            };
            Ok((format, base))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??
    };
    t.space.check_room(bck, name, size)?;
    let mut pending = t
        .store
        .begin_write(
            bck,
            name,
            PutOptions {
                durable: true,
                generation: crate::store::index::GenRule::Next {
                    floor: crate::cluster::placement::gen_floor(t, bck, name).await?,
                },
                ..Default::default()
            },
        )
        .await?;
    let body = BlockingBody::new(req.into_body().into_data_stream());
    let member = member.to_owned();
    let (rx, mut stream) = io::pipe(move |ready, out| {
        ready.send(());
        let mtime = crate::store::now_ns().max(0) as u64 / 1_000_000_000;
        let mut body = body;
        match base {
            Base::None => {
                let mut w = ShardWriter::new(format, &mut *out, mtime);
                w.append(&member, size, &mut body)?;
                w.finish()?;
            }
            Base::Tar { file, end } => {
                io::copy(&mut FileRange::new(file, 0, end), out).map_err(io::io_err)?;
                // A one-member tar written from the old end-of-archive marker on.
                let mut w = ShardWriter::new(Format::Tar, &mut *out, mtime);
                w.append(&member, size, &mut body)?;
                w.finish()?;
            }
            Base::Rewrite {
                file,
                size: old,
                format,
            } => {
                let mut r =
                    ShardReader::open(format, FileRange::whole(file, old), Limits::default())?;
                let mut w = ShardWriter::new(format, &mut *out, mtime);
                while let Some(mut e) = r.next_entry()? {
                    if !e.member().is_file() {
                        continue;
                    }
                    let (n, s) = (e.member().name.clone(), e.member().size);
                    w.append(&n, s, &mut e)?;
                }
                w.append(&member, size, &mut body)?;
                w.finish()?;
            }
        }
        Ok(())
    });
    io::ready(rx).await?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(io::io_err)?;
        pending.write_chunk(&chunk).await?;
    }
    let meta = pending.commit().await?;
    super::after_put(t, bck, name);
    tracing::info!(bucket = %bck, shard = name, size = meta.size, "member appended");
    let mut resp = StatusCode::OK.into_response();
    crate::read::local::object_headers(t, bck, &meta, resp.headers_mut());
    Ok(resp)
}
