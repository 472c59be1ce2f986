//! Where each item of a get-batch is (a local object, a member of a local shard, another\n//! target), opened and sized before the answer starts.

//! get-batch (AIStore's "moss"): one request names many objects and/or members of shards, in
//! any buckets; the designated target (the proxy redirects there) answers with one archive
//! holding them **in request order**.
//!
//! Assembly: the designated target groups the items by owner (HRW). Items it owns it reads
//! itself; for every other owner it opens one *part* request (`POST /v1/shards/part`) listing
//! that owner's items in request order, and the owner streams them back as frames. All part
//! streams run at once, each owner reading ahead of the assembler by a bounded pipe plus the
//! socket buffers, so latency overlaps while the output keeps request order: the assembler
//! takes item *i* from its own disk or from the next frame of its owner's stream.
//!
//! Up front, before the first byte of the answer: remote-bucket items that are not cached are
//! cold-fetched; every local item is checked (object exists, member exists — through the
//! shard's index or member list); every owner checks its items before answering its part
//! request and reports a size or an error per item in a summary frame. Without `coer` any
//! missing item fails the whole request with its 4xx; with `coer` it becomes an empty
//! `__404__/bucket/obj[/archpath]` entry.
//!
//! The same machinery builds shards for the archive and reshard jobs ([`Assembly`] written to
//! any `Write`).
use super::catalog::{self, Catalog};
use super::io::{self, BlockingBody, FileRange};
use super::*;
use crate::Target;
use crate::shards::State as ShardState;
use crate::store::Store;
use crate::store::meta::ObjectMeta;
use axum::body::Bytes;
use frame::{PartReq, Summary, error_of, read_frame};
use futures::StreamExt;
use gristmill_core::{ApiError, ErrorKind};
use gristmill_shard::{Format, Limits, ShardReader};
use std::collections::HashMap;
use std::fs::File;
use std::io::{self as stdio, Read};
use std::sync::Arc;

/// Objects opened during one assembly, so many members of one shard cost one open and one
/// index lookup each.
#[derive(Default)]
pub(crate) struct Opened {
    pub(crate) map: HashMap<(String, String), OpenShard>,
}

pub(crate) struct OpenShard {
    pub(crate) meta: ObjectMeta,
    pub(crate) file: Arc<File>,
    pub(crate) catalog: Option<(Format, Arc<Catalog>)>,
}

/// Where an item's bytes are.
pub(crate) enum Where {
    Range {
        file: Arc<File>,
        offset: u64,
        len: u64,
    },
    Scan {
        file: Arc<File>,
        shard_size: u64,
        format: Format,
        member: String,
        skip: u64,
        len: u64,
    },
}

impl Where {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Where::Range { len, .. } | Where::Scan { len, .. } => *len,
        }
    }
}

/// The bytes `start..start+length` of something `size` bytes long.
pub(crate) fn slice(item: &Item, size: u64) -> Result<(u64, u64), ApiError> {
    let what = || {
        if item.archpath.is_empty() {
            format!("{}/{}", item.bck, item.name)
        } else {
            format!("{}/{}/{}", item.bck, item.name, item.archpath)
        }
    };
    if item.start > size {
        return Err(ApiError::new(
            ErrorKind::RangeNotSatisfiable,
            format!(
                "start {} is past the end of {} ({size} bytes)",
                item.start,
                what()
            ),
        ));
    }
    let rest = size - item.start;
    match item.length {
        0 | -1 => Ok((item.start, rest)),
        n if n > 0 && (n as u64) <= rest => Ok((item.start, n as u64)),
        n if n > 0 => Err(ApiError::new(
            ErrorKind::RangeNotSatisfiable,
            format!(
                "{n} bytes from {} are past the end of {} ({size} bytes)",
                item.start,
                what()
            ),
        )),
        n => Err(ApiError::bad_request(format!(
            "invalid length {n} for {}",
            what()
        ))),
    }
}

pub(crate) fn locate(
    store: &Store,
    shards: &ShardState,
    opened: &mut Opened,
    item: &Item,
) -> Result<Where, ApiError> {
    let key = (item.bck.uname(), item.name.clone());
    if !opened.map.contains_key(&key) {
        let (meta, file) = io::open_local(store, &item.bck, &item.name)?;
        opened.map.insert(
            key.clone(),
            OpenShard {
                meta,
                file: Arc::new(file),
                catalog: None,
            },
        );
    }
    let Some(o) = opened.map.get_mut(&key) else {
        return Err(ApiError::internal("opened object vanished"));
    };
    if item.archpath.is_empty() {
        let (offset, len) = slice(item, o.meta.size)?;
        return Ok(Where::Range {
            file: o.file.clone(),
            offset,
            len,
        });
    }
    if o.catalog.is_none() {
        let format = crate::shards::format_of(&o.meta.name, None, &o.file)?;
        let cat = catalog::load(store, &shards.catalogs, &item.bck, &o.meta, &o.file, format)?;
        o.catalog = Some((format, cat));
    }
    let Some((format, cat)) = o.catalog.as_ref() else {
        return Err(ApiError::internal("shard catalog vanished"));
    };
    let missing = || {
        ApiError::not_found(format!(
            "{}/{} has no file {:?}",
            item.bck, item.name, item.archpath
        ))
    };
    match &**cat {
        Catalog::Tar(idx) => {
            let e = idx
                .get(&item.archpath)
                .filter(|e| e.kind == gristmill_shard::MemberKind::File)
                .ok_or_else(missing)?;
            let (start, len) = slice(item, e.size)?;
            Ok(Where::Range {
                file: o.file.clone(),
                offset: e.data_offset + start,
                len,
            })
        }
        Catalog::Members(_) => {
            let size = cat.file_size(&item.archpath).ok_or_else(missing)?;
            let (skip, len) = slice(item, size)?;
            Ok(Where::Scan {
                file: o.file.clone(),
                shard_size: o.meta.size,
                format: *format,
                member: item.archpath.clone(),
                skip,
                len,
            })
        }
    }
}

/// Opens the bytes of a located item and hands them to `use_it`. The outer error means the
/// item could not be opened (nothing was written yet); the inner one is `use_it`'s.
pub(crate) fn read_where<T>(
    wh: Where,
    use_it: impl FnOnce(u64, &mut dyn Read) -> Result<T, ApiError>,
) -> Result<Result<T, ApiError>, ApiError> {
    match wh {
        Where::Range { file, offset, len } => {
            let mut r = FileRange::new(file, offset, len);
            Ok(use_it(len, &mut r))
        }
        Where::Scan {
            file,
            shard_size,
            format,
            member,
            skip,
            len,
        } => {
            let src = FileRange::whole(file, shard_size);
            let mut reader = ShardReader::open(format, src, Limits::default())?;
            let mut entry = reader.find(&member)?;
            if skip > 0 {
                stdio::copy(&mut (&mut entry).take(skip), &mut stdio::sink())
                    .map_err(io::io_err)?;
            }
            let mut data = entry.take(len);
            Ok(use_it(len, &mut data))
        }
    }
}

/// Cold-fetches the remote-bucket items among `idx` that are not cached here; returns the
/// ones that failed.
pub(crate) async fn fetch_remote(
    t: &Target,
    items: &[Item],
    idx: &[usize],
) -> HashMap<usize, ApiError> {
    let mut seen = std::collections::HashSet::new();
    let todo: Vec<usize> = idx
        .iter()
        .copied()
        .filter(|&i| items[i].bck.is_remote())
        .filter(|&i| seen.insert((items[i].bck.uname(), items[i].name.clone())))
        .collect();
    let failed: Vec<(usize, ApiError)> = futures::stream::iter(todo)
        .map(|i| async move {
            let it = &items[i];
            if t.store.head(&it.bck, &it.name).is_ok() {
                return None;
            }
            match crate::read::local::open_or_fetch(t, &it.bck, &it.name).await {
                Ok(_) => None,
                Err(e) => Some((i, e)),
            }
        })
        .buffer_unordered(FETCH_CONCURRENCY)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    // Every item naming a failed object fails.
    let bad: HashMap<(String, String), ApiError> = failed
        .into_iter()
        .map(|(i, e)| ((items[i].bck.uname(), items[i].name.clone()), e))
        .collect();
    idx.iter()
        .filter_map(|&i| {
            bad.get(&(items[i].bck.uname(), items[i].name.clone()))
                .map(|e| (i, e.clone()))
        })
        .collect()
}

/// Checks the items at `idx` on this target (after fetching remote ones): size or error each.
pub(crate) async fn check_local(
    t: &Target,
    items: &[Item],
    idx: Vec<usize>,
) -> Result<HashMap<usize, Result<u64, ApiError>>, ApiError> {
    let mut results: HashMap<usize, Result<u64, ApiError>> = HashMap::new();
    for (i, e) in fetch_remote(t, items, &idx).await {
        results.insert(i, Err(e));
    }
    let todo: Vec<(usize, Item)> = idx
        .into_iter()
        .filter(|i| !results.contains_key(i))
        .map(|i| (i, items[i].clone()))
        .collect();
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let checked = tokio::task::spawn_blocking(move || {
        let mut opened = Opened::default();
        todo.into_iter()
            .map(|(i, item)| {
                (
                    i,
                    locate(&store, &shards, &mut opened, &item).map(|w| w.len()),
                )
            })
            .collect::<Vec<_>>()
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?;
    results.extend(checked);
    Ok(results)
}

/// Checks every item and opens a part stream to every other owner. Without `coer` the first
/// unreadable item (in request order) is the error; with it, unreadable items are recorded.
pub(crate) async fn prepare(t: &Target, items: &[Item], coer: bool) -> Result<Prepared, ApiError> {
    let smap = t.smap();
    let mut local = Vec::new();
    // Owner id → (url, item positions in request order).
    let mut owners: Vec<(String, String, Vec<usize>)> = Vec::new();
    let mut owner_pos: HashMap<String, usize> = HashMap::new();
    for (i, it) in items.iter().enumerate() {
        match smap.owner(&it.bck.object_uname(&it.name)) {
            Some(o) if o.daemon_id != t.id => {
                let n = *owner_pos.entry(o.daemon_id.clone()).or_insert_with(|| {
                    owners.push((o.daemon_id.clone(), o.url().to_owned(), Vec::new()));
                    owners.len() - 1
                });
                owners[n].2.push(i);
            }
            _ => local.push(i),
        }
    }
    let parts = owners.iter().map(|(id, url, idx)| {
        let req = PartReq {
            items: idx.iter().map(|&i| items[i].clone()).collect(),
            coer,
        };
        open_part(t, id, url, req)
    });
    let (local_results, part_results) = tokio::join!(
        check_local(t, items, local),
        futures::future::join_all(parts)
    );
    let local_results = local_results?;

    let mut sources: Vec<Option<Source>> = (0..items.len()).map(|_| None).collect();
    let mut sizes = vec![0u64; items.len()];
    for (i, r) in local_results {
        match r {
            Ok(size) => {
                sizes[i] = size;
                sources[i] = Some(Source::Local);
            }
            Err(e) => sources[i] = Some(Source::Failed(e)),
        }
    }
    let mut streams = Vec::new();
    for ((_, _, idx), result) in owners.iter().zip(part_results) {
        match result {
            Ok((summary, stream)) => {
                let n = streams.len();
                streams.push(stream);
                for (k, &i) in idx.iter().enumerate() {
                    match summary.items.get(k) {
                        Some(f) if f.err.is_empty() => {
                            sizes[i] = f.size;
                            sources[i] = Some(Source::Remote(n, k as u64));
                        }
                        Some(f) => sources[i] = Some(Source::Failed(error_of(f))),
                        None => {
                            sources[i] = Some(Source::Failed(ApiError::unavailable(
                                "get-batch: part summary too short",
                            )))
                        }
                    }
                }
            }
            Err(e) => {
                for &i in idx {
                    sources[i] = Some(Source::Failed(e.clone()));
                }
            }
        }
    }
    let sources: Vec<Source> = sources
        .into_iter()
        .map(|s| s.unwrap_or_else(|| Source::Failed(ApiError::internal("item not prepared"))))
        .collect();
    if !coer
        && let Some(Source::Failed(e)) = sources.iter().find(|s| matches!(s, Source::Failed(_)))
    {
        return Err(e.clone());
    }
    Ok(Prepared {
        sources,
        streams,
        sizes,
    })
}

/// Sizes of items stored on this target (uncached remote ones are fetched first); `None` =
/// unreadable (without `coer`, the first unreadable item is the error).
pub(crate) async fn sizes(
    t: &Target,
    items: &[Item],
    coer: bool,
) -> Result<Vec<Option<u64>>, ApiError> {
    let checked = check_local(t, items, (0..items.len()).collect()).await?;
    let mut out = vec![None; items.len()];
    for (i, slot) in out.iter_mut().enumerate() {
        match checked.get(&i) {
            Some(Ok(size)) => *slot = Some(*size),
            Some(Err(e)) if !coer => return Err(e.clone()),
            _ => {}
        }
    }
    Ok(out)
}

/// Sends one owner its part request; returns its summary and the stream of its frames.
pub(crate) async fn open_part(
    t: &Target,
    id: &str,
    url: &str,
    req: PartReq,
) -> Result<(Summary, BlockingBody), ApiError> {
    let resp = t
        .relay
        .post(format!("{url}/v1/shards/part"))
        .json(&req)
        .send()
        .await
        .map_err(|e| ApiError::unavailable(format!("get-batch: target {id} unreachable: {e}")))?;
    if !resp.status().is_success() {
        return Err(crate::cluster::peer::peer_error(resp, "").await);
    }
    // Read the summary frame on the runtime; the rest of the stream goes to the assembler.
    let mut stream = resp.bytes_stream().boxed();
    let mut buf: Vec<u8> = Vec::new();
    let need = |buf: &Vec<u8>| -> Option<usize> {
        (buf.len() >= 4).then(|| 4 + u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize)
    };
    loop {
        if let Some(n) = need(&buf)
            && buf.len() >= n
        {
            break;
        }
        if buf.len() > MAX_REQUEST {
            return Err(ApiError::unavailable("get-batch: part summary too large"));
        }
        match stream.next().await {
            Some(Ok(chunk)) => buf.extend_from_slice(&chunk),
            Some(Err(e)) => {
                return Err(ApiError::unavailable(format!(
                    "get-batch: target {id}: {e}"
                )));
            }
            None => {
                return Err(ApiError::unavailable(format!(
                    "get-batch: target {id} ended its stream early"
                )));
            }
        }
    }
    let n = need(&buf).unwrap_or(4);
    let summary: Summary = read_frame(&mut &buf[..n])?;
    let rest = Bytes::copy_from_slice(&buf[n..]);
    let body =
        futures::stream::once(async move { Ok::<Bytes, reqwest::Error>(rest) }).chain(stream);
    Ok((summary, BlockingBody::new(body)))
}
