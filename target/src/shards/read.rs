//! `GET /v1/objects/{b}/{shard}?archpath=member` (one member, streamed, with its size as
//! `Content-Length`; `Range` works inside the member of a tar) and
//! `?archregx=EXPR&archmode=regexp|prefix|suffix|substr|wdskey` (a tar of the matching
//! members). Uncompressed tars are read through their index; tgz and tar.lz4 are scanned as a
//! stream; zip members are found through the central directory. A remote shard is cold-fetched
//! first.

use std::collections::HashMap;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gristmill_core::shards::query as aq;
use gristmill_core::{ApiError, Bck};
use gristmill_shard::{Format, Limits, MatchMode, ShardReader, ShardWriter};

use super::catalog::{self, Catalog};
use super::io::{self, FileRange};
use crate::Target;

type ApiResult = Result<Response, ApiError>;

/// Where a requested member's bytes are.
enum Located {
    /// A byte range of the shard file (indexed tar); small ones already read.
    Range {
        offset: u64,
        size: u64,
        data: Option<Bytes>,
    },
    /// Inside a compressed tar or a zip: read by a reader of that format.
    Scan(Format),
}

pub(crate) async fn get(
    t: &Target,
    bck: &Bck,
    name: &str,
    params: &HashMap<String, String>,
    headers: &HeaderMap,
) -> ApiResult {
    let open = crate::read::local::open_or_fetch(t, bck, name).await?;
    if t.store.touch(&open.meta.bucket, &open.meta.name) {
        t.space.nudge();
    }
    let archmime = params.get(aq::ARCHMIME).cloned();
    match params.get(aq::ARCHPATH).filter(|p| !p.is_empty()) {
        Some(path) => member(t, bck, open, path, archmime, headers).await,
        None => {
            let expr = params.get(aq::ARCHREGX).cloned().unwrap_or_default();
            let mode: MatchMode = match params.get(aq::ARCHMODE).filter(|m| !m.is_empty()) {
                Some(m) => m.parse()?,
                None => MatchMode::default(),
            };
            matching(t, bck, open, &expr, mode, archmime).await
        }
    }
}

fn not_found(bck: &Bck, name: &str, member: &str) -> ApiError {
    ApiError::not_found(format!("{bck}/{name} has no file {member:?}"))
}

async fn member(
    t: &Target,
    bck: &Bck,
    open: crate::store::OpenObject,
    path: &str,
    archmime: Option<String>,
    headers: &HeaderMap,
) -> ApiResult {
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let meta = open.meta;
    let file = open.file;
    let wants_range = headers.contains_key(header::RANGE);
    let located = {
        let (bck, meta, file, path) = (bck.clone(), meta.clone(), file.clone(), path.to_owned());
        tokio::task::spawn_blocking(move || -> Result<Located, ApiError> {
            let format = super::format_of(&meta.name, archmime.as_deref(), &file)?;
            // The member list first (a compressed shard is scanned once, within the limits,
            // and the list kept): a missing member or a hostile archive is a clean 4xx
            // before any byte is sent.
            let cat = catalog::load(&store, &shards.catalogs, &bck, &meta, &file, format)?;
            let Catalog::Tar(idx) = &*cat else {
                if cat.file_size(&path).is_none() {
                    return Err(not_found(&bck, &meta.name, &path));
                }
                return Ok(Located::Scan(format));
            };
            let e = idx
                .get(&path)
                .filter(|e| e.kind == gristmill_shard::MemberKind::File)
                .ok_or_else(|| not_found(&bck, &meta.name, &path))?;
            let data = if e.size <= io::INLINE_MAX && !wants_range {
                Some(io::read_exact_at(&file, e.data_offset, e.size)?)
            } else {
                None
            };
            Ok(Located::Range {
                offset: e.data_offset,
                size: e.size,
                data,
            })
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??
    };
    match located {
        Located::Range { offset, size, data } => {
            let range = match crate::read::local::request_range(headers, size) {
                Ok(r) => r,
                Err(resp) => return resp,
            };
            let (start, len) = range.map_or((0, size), |r| (r.start, r.len()));
            let body = match data {
                Some(d) => Body::from(d),
                None => Body::from_stream(io::range_stream(file, offset + start, len)),
            };
            let mut resp = member_response(body, len);
            if let Some(r) = range {
                *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
                if let Ok(v) = HeaderValue::from_str(&r.content_range(size)) {
                    resp.headers_mut().insert(header::CONTENT_RANGE, v);
                }
            }
            Ok(resp)
        }
        Located::Scan(format) => {
            let (bck, path) = (bck.clone(), path.to_owned());
            let (rx, stream) = io::pipe(move |ready, out| {
                let src = FileRange::whole(file, meta.size);
                let mut reader = ShardReader::open(format, src, Limits::default())?;
                let mut entry = reader.find(&path).map_err(|e| match e {
                    gristmill_shard::ShardError::NotFound(_) => not_found(&bck, &meta.name, &path),
                    other => other.into(),
                })?;
                ready.send(entry.member().size);
                io::copy(&mut entry, out).map_err(io::io_err)?;
                Ok(())
            });
            let size = io::ready(rx).await?;
            Ok(member_response(Body::from_stream(stream), size))
        }
    }
}

fn member_response(body: Body, len: u64) -> Response {
    let mut resp = Response::new(body);
    let h = resp.headers_mut();
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

async fn matching(
    t: &Target,
    bck: &Bck,
    open: crate::store::OpenObject,
    expr: &str,
    mode: MatchMode,
    archmime: Option<String>,
) -> ApiResult {
    let selector = gristmill_shard::Selector::new(mode, expr)?;
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let (bck, meta, file) = (bck.clone(), open.meta, open.file);
    let mtime = (meta.mtime_ns.max(0) / 1_000_000_000) as u64;
    let (rx, stream) = io::pipe(move |ready, out| {
        let none = || {
            ApiError::not_found(format!(
                "no file of {bck}/{} matches {} {:?}",
                meta.name,
                selector.mode(),
                selector.expr()
            ))
        };
        let format = super::format_of(&meta.name, archmime.as_deref(), &file)?;
        if format == Format::Tar {
            let cat = catalog::load(&store, &shards.catalogs, &bck, &meta, &file, format)?;
            let Catalog::Tar(idx) = &*cat else {
                return Err(ApiError::internal("tar shard without a tar index"));
            };
            let selected: Vec<_> = idx.select(&selector).collect();
            if selected.is_empty() {
                return Err(none());
            }
            ready.send(());
            let mut w = ShardWriter::new(Format::Tar, &mut *out, mtime);
            for e in selected {
                let mut data = FileRange::new(file.clone(), e.data_offset, e.size);
                w.append(&e.name, e.size, &mut data)?;
            }
            w.finish()?;
            return Ok(());
        }
        // The member list first: no match, or a hostile archive, is a 4xx before any byte.
        let cat = catalog::load(&store, &shards.catalogs, &bck, &meta, &file, format)?;
        if !cat.files_sorted().iter().any(|(n, _)| selector.matches(n)) {
            return Err(none());
        }
        let src = FileRange::whole(file.clone(), meta.size);
        let mut reader = ShardReader::open(format, src, Limits::default())?;
        let matches = |m: &gristmill_shard::Member| m.is_file() && selector.matches(&m.name);
        // The first match decides that the answer is a success.
        let mut w = loop {
            let Some(mut entry) = reader.next_entry()? else {
                return Err(none());
            };
            if !matches(entry.member()) {
                continue;
            }
            ready.send(());
            let (name, size) = (entry.member().name.clone(), entry.member().size);
            let mut w = ShardWriter::new(Format::Tar, &mut *out, mtime);
            w.append(&name, size, &mut entry)?;
            break w;
        };
        while let Some(mut entry) = reader.next_entry()? {
            if matches(entry.member()) {
                let (name, size) = (entry.member().name.clone(), entry.member().size);
                w.append(&name, size, &mut entry)?;
            }
        }
        w.finish()?;
        Ok(())
    });
    io::ready(rx).await?;
    let mut resp = Body::from_stream(stream).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    Ok(resp)
}
