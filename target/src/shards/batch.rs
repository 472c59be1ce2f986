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

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self as stdio, Read, Write};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures::StreamExt;
use gristmill_core::etl::MAX_ETL_OBJECT;
use gristmill_core::shards::{MISSING_DIR, MossIn, MossOut, MossReq, MossResp};
use gristmill_core::{ApiError, Bck, ErrorKind, Namespace, validate_object_name};
use gristmill_shard::{Format, Limits, ShardReader, ShardWriter};
use serde::{Deserialize, Serialize};

use super::State as ShardState;
use super::catalog::{self, Catalog};
use super::io::{self, BlockingBody, FileRange};
use crate::Target;
use crate::store::Store;
use crate::store::meta::ObjectMeta;

type Params = Query<HashMap<String, String>>;
type ApiResult = Result<Response, ApiError>;

/// Largest get-batch request body (JSON), and most items in one request.
const MAX_REQUEST: usize = 64 << 20;
const MAX_ITEMS: usize = 1_000_000;
/// Remote-bucket items cold-fetched at once while preparing.
const FETCH_CONCURRENCY: usize = 8;

/// One thing to read: an object, a byte range of one, or a member (or a range of a member)
/// of a shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Item {
    pub(crate) bck: Bck,
    pub(crate) name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) archpath: String,
    #[serde(default)]
    pub(crate) start: u64,
    /// 0 = to the end (from `start`), -1 = to the end, > 0 = exactly this many bytes.
    #[serde(default)]
    pub(crate) length: i64,
}

impl Item {
    pub(crate) fn object(bck: &Bck, name: &str) -> Self {
        Item {
            bck: bck.clone(),
            name: name.to_owned(),
            archpath: String::new(),
            start: 0,
            length: 0,
        }
    }
}

/// What to write and how: the items, their names in the output, and what to do with the ones
/// that cannot be read.
pub(crate) struct Assembly {
    pub(crate) items: Vec<Item>,
    /// Entry name of each item in the output.
    pub(crate) names: Vec<String>,
    /// Entry name standing for each item that could not be read (`coer`); ignored when
    /// `skip_missing`.
    pub(crate) missing: Vec<String>,
    pub(crate) coer: bool,
    /// With `coer`: leave unreadable items out instead of writing empty entries.
    pub(crate) skip_missing: bool,
    pub(crate) format: Format,
    /// Modification time stamped on every entry.
    pub(crate) mtime: u64,
    /// get-batch with `etl_name`: every item goes through these ETLs.
    pub(crate) etl: Option<BatchEtl>,
}

/// Where each item comes from, once prepared.
enum Source {
    /// This target reads it.
    Local,
    /// The next frame of owner stream `n`: that owner's item `k` (items its summary called
    /// unreadable get no frame).
    Remote(usize, u64),
    /// Known to be unreadable (with `coer`).
    Failed(ApiError),
}

/// An assembly's sources, checked and with every owner's stream open.
pub(crate) struct Prepared {
    sources: Vec<Source>,
    streams: Vec<BlockingBody>,
    /// Size of each readable item (for the multipart metadata).
    sizes: Vec<u64>,
}

/// The frame header of a part stream: item `i` of the part request follows with `size`
/// bytes, or could not be read (`err`, with its HTTP status).
#[derive(Debug, Serialize, Deserialize)]
struct Frame {
    i: u64,
    #[serde(default)]
    size: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    err: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    status: u16,
}

fn is_zero(v: &u16) -> bool {
    *v == 0
}

/// The first frame of a part stream: every item's size or error, known before any data.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Summary {
    items: Vec<Frame>,
}

/// Body of `POST /v1/shards/part`.
#[derive(Debug, Serialize, Deserialize)]
struct PartReq {
    items: Vec<Item>,
    #[serde(default)]
    coer: bool,
}

impl Frame {
    /// The binary form of an item's frame header: `i`, `size` (u64 BE), `status` (u16 BE),
    /// the error's length (u32 BE) and text.
    fn encode(&self) -> Vec<u8> {
        let err = self.err.as_bytes();
        let mut out = Vec::with_capacity(22 + err.len());
        out.extend_from_slice(&self.i.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(err.len() as u32).to_be_bytes());
        out.extend_from_slice(err);
        out
    }

    fn read(r: &mut dyn Read) -> Result<Frame, ApiError> {
        let bad =
            |why: String| ApiError::unavailable(format!("get-batch: broken part stream: {why}"));
        let mut head = [0u8; 22];
        r.read_exact(&mut head).map_err(|e| bad(e.to_string()))?;
        let u64_at = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&head[i..i + 8]);
            u64::from_be_bytes(b)
        };
        let status = u16::from_be_bytes([head[16], head[17]]);
        let len = u32::from_be_bytes([head[18], head[19], head[20], head[21]]) as usize;
        if len > 1 << 20 {
            return Err(bad(format!("error text of {len} bytes")));
        }
        let mut err = vec![0u8; len];
        r.read_exact(&mut err).map_err(|e| bad(e.to_string()))?;
        Ok(Frame {
            i: u64_at(0),
            size: u64_at(8),
            err: String::from_utf8_lossy(&err).into_owned(),
            status,
        })
    }
}

fn frame_error(e: &ApiError, i: u64) -> Frame {
    Frame {
        i,
        size: 0,
        err: e.message.clone(),
        status: e.status().as_u16(),
    }
}

fn error_of(f: &Frame) -> ApiError {
    let kind = ErrorKind::from_status(
        http::StatusCode::from_u16(f.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
    );
    ApiError::new(kind, f.err.clone())
}

fn write_frame(out: &mut dyn Write, bytes: &[u8]) -> stdio::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| stdio::Error::other("frame too large"))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)
}

fn read_frame<T: serde::de::DeserializeOwned>(r: &mut dyn Read) -> Result<T, ApiError> {
    let bad = |why: String| ApiError::unavailable(format!("get-batch: broken part stream: {why}"));
    let mut len = [0u8; 4];
    r.read_exact(&mut len).map_err(|e| bad(e.to_string()))?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(bad(format!("frame of {len} bytes")));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf).map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(&buf).map_err(|e| bad(e.to_string()))
}

// ---------------------------------------------------------------------------------------
// Locating and reading items (blocking).

/// Objects opened during one assembly, so many members of one shard cost one open and one
/// index lookup each.
#[derive(Default)]
struct Opened {
    map: HashMap<(String, String), OpenShard>,
}

struct OpenShard {
    meta: ObjectMeta,
    file: Arc<File>,
    catalog: Option<(Format, Arc<Catalog>)>,
}

/// Where an item's bytes are.
enum Where {
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
    fn len(&self) -> u64 {
        match self {
            Where::Range { len, .. } | Where::Scan { len, .. } => *len,
        }
    }
}

/// The bytes `start..start+length` of something `size` bytes long.
fn slice(item: &Item, size: u64) -> Result<(u64, u64), ApiError> {
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

fn locate(
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
        let format = super::format_of(&o.meta.name, None, &o.file)?;
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
fn read_where<T>(
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

// ---------------------------------------------------------------------------------------
// Preparing.

/// Cold-fetches the remote-bucket items among `idx` that are not cached here; returns the
/// ones that failed.
async fn fetch_remote(t: &Target, items: &[Item], idx: &[usize]) -> HashMap<usize, ApiError> {
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
async fn check_local(
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
async fn open_part(
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
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        let message = serde_json::from_str::<gristmill_core::ErrorBody>(&text)
            .map(|b| b.message)
            .unwrap_or(text);
        let kind = ErrorKind::from_status(
            http::StatusCode::from_u16(status.as_u16())
                .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
        );
        return Err(ApiError::new(kind, message));
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

// ---------------------------------------------------------------------------------------
// Writing.

/// What became of one item, for progress.
pub(crate) enum Outcome {
    Written(u64),
    Missing(ApiError),
}

/// Writes the assembly into `out` (blocking): items in order, each from disk or its owner's
/// stream (through the ETL first, if any); unreadable ones as `missing` entries (or skipped,
/// or — without `coer` — an error).
pub(crate) fn write<W: Write>(
    store: &Store,
    shards: &ShardState,
    asm: &Assembly,
    mut prep: Prepared,
    out: W,
    progress: &mut dyn FnMut(usize, Outcome),
) -> Result<W, ApiError> {
    let mut w = ShardWriter::new(asm.format, out, asm.mtime).allow_duplicate_names();
    let mut opened = Opened::default();
    if let Some(etl) = &asm.etl {
        let mut reader = ItemReader {
            store,
            shards,
            opened,
            prep,
        };
        write_transformed(&mut w, &mut reader, asm, etl, progress)?;
        return Ok(w.finish()?);
    }
    for (i, item) in asm.items.iter().enumerate() {
        let name = &asm.names[i];
        let got = read_item(
            store,
            shards,
            &mut opened,
            &mut prep,
            i,
            item,
            &mut |size, r| w.append(name, size, r).map_err(ApiError::from),
        )?;
        match got {
            Ok(size) => progress(i, Outcome::Written(size)),
            Err(e) => write_missing(&mut w, asm, i, e, progress)?,
        }
    }
    Ok(w.finish()?)
}

/// Item `i` could not be read (or transformed): an empty stand-in entry with `coer`, else
/// the error of the whole assembly.
fn write_missing<W: Write>(
    w: &mut ShardWriter<W>,
    asm: &Assembly,
    i: usize,
    e: ApiError,
    progress: &mut dyn FnMut(usize, Outcome),
) -> Result<(), ApiError> {
    if !asm.coer {
        return Err(e);
    }
    if !asm.skip_missing {
        w.append(&asm.missing[i], 0, &mut stdio::empty())?;
    }
    progress(i, Outcome::Missing(e));
    Ok(())
}

/// Reads item `i` from this target's disk or from the next frame of its owner's stream and
/// hands its bytes to `take`. `Ok(Err(e))`: the item is unreadable; `Err`: the assembly must
/// stop (a broken stream, or `take` failed).
fn read_item(
    store: &Store,
    shards: &ShardState,
    opened: &mut Opened,
    prep: &mut Prepared,
    i: usize,
    item: &Item,
    take: &mut dyn FnMut(u64, &mut dyn Read) -> Result<(), ApiError>,
) -> Result<Result<u64, ApiError>, ApiError> {
    match &prep.sources[i] {
        Source::Failed(e) => Ok(Err(e.clone())),
        Source::Local => match locate(store, shards, opened, item) {
            Err(e) => Ok(Err(e)),
            Ok(wh) => match read_where(wh, |size, r| take(size, r).map(|()| size)) {
                Err(e) => Ok(Err(e)),
                Ok(taken) => taken.map(Ok),
            },
        },
        Source::Remote(n, k) => {
            let stream = &mut prep.streams[*n];
            let frame = Frame::read(stream)?;
            if frame.i != *k {
                return Err(ApiError::internal(format!(
                    "get-batch: part stream out of order (item {} instead of {k})",
                    frame.i
                )));
            }
            if !frame.err.is_empty() {
                return Ok(Err(error_of(&frame)));
            }
            take(frame.size, &mut (&mut *stream).take(frame.size))?;
            Ok(Ok(frame.size))
        }
    }
}

/// The ETL (or pipeline) every item of a get-batch goes through.
pub(crate) struct BatchEtl {
    pub(crate) target: Arc<Target>,
    pub(crate) names: Vec<String>,
    pub(crate) args: String,
}

/// What [`read_item`] needs, held together for the transforming writer.
struct ItemReader<'a> {
    store: &'a Store,
    shards: &'a ShardState,
    opened: Opened,
    prep: Prepared,
}

/// An item handed to the ETL: its position, its transform (or why it has none), its input size.
type Pending = (
    usize,
    Result<tokio::task::JoinHandle<Result<Bytes, gristmill_etl::EtlError>>, ApiError>,
    u64,
);

/// Items transformed at once, ahead of the one being written, and the bytes they may hold.
const ETL_WINDOW: usize = 16;
const ETL_WINDOW_BYTES: u64 = 256 << 20;

/// The transforming writer: each item is read whole (ETL inputs are bounded by
/// [`MAX_ETL_OBJECT`]), handed to the ETL on the runtime, and written when its turn comes, so
/// up to [`ETL_WINDOW`] items are in the ETL's workers at once while the output keeps request
/// order. An item the ETL fails is unreadable (a stand-in entry with `coer`).
fn write_transformed<W: Write>(
    w: &mut ShardWriter<W>,
    reader: &mut ItemReader<'_>,
    asm: &Assembly,
    etl: &BatchEtl,
    progress: &mut dyn FnMut(usize, Outcome),
) -> Result<(), ApiError> {
    let rt = tokio::runtime::Handle::current();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut held = 0u64;
    // Writes the oldest pending item once its transform is done.
    let mut finish_one =
        |w: &mut ShardWriter<W>, pending: &mut VecDeque<Pending>, held: &mut u64| {
            let Some((i, job, len)) = pending.pop_front() else {
                return Ok(());
            };
            *held -= len;
            let result: Result<Bytes, ApiError> = job.and_then(|job| match rt.block_on(job) {
                Ok(Ok(out)) => Ok(out),
                Ok(Err(e)) => Err(ApiError::from(e)),
                Err(e) => Err(ApiError::internal(format!("ETL task: {e}"))),
            });
            match result {
                Ok(out) => {
                    w.append(&asm.names[i], out.len() as u64, &mut &out[..])?;
                    progress(i, Outcome::Written(out.len() as u64));
                    Ok(())
                }
                Err(e) => write_missing(w, asm, i, e, progress),
            }
        };
    for (i, item) in asm.items.iter().enumerate() {
        let mut data = Vec::new();
        let mut too_large = None;
        let got = read_item(
            reader.store,
            reader.shards,
            &mut reader.opened,
            &mut reader.prep,
            i,
            item,
            &mut |size, r| {
                if size > MAX_ETL_OBJECT {
                    // Drained, so the owner's stream stays in step.
                    stdio::copy(r, &mut stdio::sink()).map_err(io::io_err)?;
                    too_large = Some(size);
                } else {
                    data.reserve_exact(size as usize);
                    r.read_to_end(&mut data).map_err(io::io_err)?;
                }
                Ok(())
            },
        )?;
        let path = if item.archpath.is_empty() {
            item.name.clone()
        } else {
            format!("{}/{}", item.name, item.archpath)
        };
        let len = data.len() as u64;
        let job = match (got, too_large) {
            (Err(e), _) => Err(e),
            (Ok(_), Some(size)) => Err(ApiError::new(
                ErrorKind::PayloadTooLarge,
                format!("{path}: {size} bytes; ETLs take objects up to {MAX_ETL_OBJECT} bytes"),
            )),
            (Ok(_), None) => {
                let (t, names, args) = (etl.target.clone(), etl.names.clone(), etl.args.clone());
                Ok(rt.spawn(async move {
                    t.etls
                        .pipeline(&names, Bytes::from(data), &path, &args)
                        .await
                }))
            }
        };
        held += len;
        pending.push_back((i, job, len));
        while pending.len() > ETL_WINDOW || (held > ETL_WINDOW_BYTES && pending.len() > 1) {
            finish_one(w, &mut pending, &mut held)?;
        }
    }
    while !pending.is_empty() {
        finish_one(w, &mut pending, &mut held)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The part endpoint (owners).

/// `POST /v1/shards/part` `{"items": [...], "coer": bool}`: this target's items of a
/// get-batch, checked first (without `coer`, a missing item is the answer's 4xx), then
/// streamed: a JSON frame summarizing every item's size or error, then for every readable
/// item a binary header and its bytes (or an error header, if it became unreadable since).
pub(crate) async fn part(State(t): State<Arc<Target>>, body: Bytes) -> ApiResult {
    let req: PartReq = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid part request: {e}")))?;
    let all: Vec<usize> = (0..req.items.len()).collect();
    let checked = check_local(&t, &req.items, all).await?;
    let mut summary = Summary::default();
    for k in 0..req.items.len() {
        let f = match checked.get(&k) {
            Some(Ok(size)) => Frame {
                i: k as u64,
                size: *size,
                err: String::new(),
                status: 0,
            },
            Some(Err(e)) => {
                if !req.coer {
                    return Err(e.clone());
                }
                frame_error(e, k as u64)
            }
            None => frame_error(&ApiError::internal("item not checked"), k as u64),
        };
        summary.items.push(f);
    }
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let items = req.items;
    let (rx, stream) = io::pipe(move |ready, out| {
        ready.send(());
        let head = serde_json::to_vec(&summary).map_err(|e| ApiError::internal(e.to_string()))?;
        write_frame(out, &head).map_err(io::io_err)?;
        let mut opened = Opened::default();
        for (k, item) in items.iter().enumerate() {
            let k64 = k as u64;
            if !summary.items[k].err.is_empty() {
                // The summary told the assembler already: no frame.
                continue;
            }
            let opened_item = locate(&store, &shards, &mut opened, item).and_then(|wh| {
                read_where(wh, |size, r| {
                    let f = Frame {
                        i: k64,
                        size,
                        err: String::new(),
                        status: 0,
                    };
                    out.write_all(&f.encode()).map_err(io::io_err)?;
                    let copied = io::copy(&mut r.take(size), out).map_err(io::io_err)?;
                    if copied != size {
                        return Err(ApiError::internal(format!(
                            "{}/{}: {copied} of {size} bytes",
                            item.bck, item.name
                        )));
                    }
                    Ok(())
                })
            });
            match opened_item {
                // Written (or failed mid-data: the stream is cut).
                Ok(r) => r?,
                // Could not open it after all (deleted meanwhile): an error frame.
                Err(e) => {
                    out.write_all(&frame_error(&e, k64).encode())
                        .map_err(io::io_err)?;
                }
            }
        }
        Ok(())
    });
    io::ready(rx).await?;
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(resp)
}

// ---------------------------------------------------------------------------------------
// The get-batch endpoint (designated target).

/// `GET /v1/ml/moss` with a `MossReq` body.
pub(crate) async fn handle(
    State(t): State<Arc<Target>>,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    run(t, None, params, body).await
}

/// `GET /v1/ml/moss/{bucket}`: items without a bucket are in this one.
pub(crate) async fn handle_bucket(
    State(t): State<Arc<Target>>,
    Path(bucket): Path<String>,
    Query(params): Params,
    body: Bytes,
) -> ApiResult {
    run(t, Some(bucket), params, body).await
}

/// Parses `provider/@uuid#ns/bucket/object`.
fn parse_uname(uname: &str) -> Result<(Bck, String), ApiError> {
    let bad = || {
        ApiError::bad_request(format!(
            "invalid uname {uname:?} (want provider/@uuid#ns/bucket/object)"
        ))
    };
    let mut parts = uname.splitn(4, '/');
    let (Some(provider), Some(ns), Some(bucket), Some(name)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(bad());
    };
    let mut bck = Bck::new(bucket, provider.parse()?)?;
    bck.namespace = Namespace::parse(ns)?;
    Ok((bck, name.to_owned()))
}

fn item_of(m: &MossIn, default: Option<&Bck>, provider: Option<&str>) -> Result<Item, ApiError> {
    let (bck, name) = if !m.uname.is_empty() {
        parse_uname(&m.uname)?
    } else {
        let bck = if m.bucket.is_empty() {
            default.cloned().ok_or_else(|| {
                ApiError::bad_request(format!(
                    "item {:?} names no bucket, and the request has no default bucket (/v1/ml/moss/<bucket>)",
                    m.objname
                ))
            })?
        } else {
            let p = if m.provider.is_empty() {
                provider.unwrap_or("")
            } else {
                &m.provider
            };
            Bck::from_request(&m.bucket, Some(p), None)?
        };
        (bck, m.objname.clone())
    };
    validate_object_name(&name)?;
    if !m.archpath.is_empty() {
        gristmill_shard::validate_member_name(&m.archpath)?;
    }
    if m.length < -1 {
        return Err(ApiError::bad_request(format!(
            "invalid length {} for {name}",
            m.length
        )));
    }
    Ok(Item {
        bck,
        name,
        archpath: m.archpath.clone(),
        start: m.start,
        length: m.length,
    })
}

/// The entry name of an item: `bucket/obj[/archpath]`, or `obj[/archpath]` with `onob`.
fn entry_name(it: &Item, onob: bool) -> String {
    let mut s = if onob {
        it.name.clone()
    } else {
        format!("{}/{}", it.bck.name, it.name)
    };
    if !it.archpath.is_empty() {
        s.push('/');
        s.push_str(&it.archpath);
    }
    s
}

async fn run(
    t: Arc<Target>,
    bucket: Option<String>,
    params: HashMap<String, String>,
    body: Bytes,
) -> ApiResult {
    if body.is_empty() {
        return Err(ApiError::bad_request(
            "get-batch needs a JSON body: {\"in\": [{\"objname\": ...}, ...]}",
        ));
    }
    if body.len() > MAX_REQUEST {
        return Err(ApiError::new(
            ErrorKind::PayloadTooLarge,
            "get-batch request too large",
        ));
    }
    let req: MossReq = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("invalid get-batch request: {e}")))?;
    if req.items.is_empty() {
        return Err(ApiError::bad_request("get-batch request names no items"));
    }
    if req.items.len() > MAX_ITEMS {
        return Err(ApiError::new(
            ErrorKind::PayloadTooLarge,
            format!("{} items; at most {MAX_ITEMS} per request", req.items.len()),
        ));
    }
    let provider = params.get("provider").map(String::as_str);
    let default = match &bucket {
        Some(b) => Some(Bck::from_request(
            b,
            provider,
            params.get("namespace").map(String::as_str),
        )?),
        None => None,
    };
    let items = req
        .items
        .iter()
        .map(|m| item_of(m, default.as_ref(), provider))
        .collect::<Result<Vec<_>, _>>()?;
    let format = if req.mime.is_empty() {
        Format::Tar
    } else {
        Format::parse(&req.mime)?
    };
    let names: Vec<String> = items.iter().map(|it| entry_name(it, req.onob)).collect();
    let missing: Vec<String> = names.iter().map(|n| format!("{MISSING_DIR}/{n}")).collect();
    if format == Format::Zip {
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
            return Err(ApiError::bad_request(format!(
                "zip output cannot hold {dup:?} twice (use tar)"
            )));
        }
    }
    let mut buckets: Vec<&Bck> = items.iter().map(|i| &i.bck).collect();
    buckets.sort();
    buckets.dedup();
    for b in buckets {
        t.require_bucket(b).await?;
    }
    let etl = match crate::read::transform::etl_names(&params) {
        None => None,
        Some(names) => {
            if !req.strm {
                return Err(ApiError::bad_request(
                    "get-batch with an ETL needs streaming output (\"strm\": true): the multipart \
                     answer lists sizes before the transforms run",
                ));
            }
            t.etls.check(&names)?;
            Some(BatchEtl {
                target: t.clone(),
                names,
                args: params.get("etl_args").cloned().unwrap_or_default(),
            })
        }
    };
    metrics::counter!("grist_batch_requests_total").increment(1);
    metrics::counter!("grist_batch_items_total").increment(items.len() as u64);
    let prep = prepare(&t, &items, req.coer).await?;
    let meta = (!req.strm).then(|| multipart_meta(&req, &items, &prep));
    let asm = Assembly {
        items,
        names,
        missing,
        coer: req.coer,
        skip_missing: false,
        format,
        mtime: 0,
        etl,
    };
    let boundary = format!("gristmill-{}", uuid::Uuid::new_v4().simple());
    let (store, shards) = (t.store.clone(), t.shards.clone());
    let b = boundary.clone();
    let (rx, stream) = io::pipe(move |ready, out| {
        ready.send(());
        let archive_type = content_type(format);
        if let Some(meta) = &meta {
            write!(
                out,
                "--{b}\r\nContent-Type: application/json\r\n\r\n{meta}\r\n--{b}\r\nContent-Type: {archive_type}\r\n\r\n"
            )
            .map_err(io::io_err)?;
        }
        let out = write(&store, &shards, &asm, prep, &mut *out, &mut |_, _| {})?;
        if meta.is_some() {
            write!(out, "\r\n--{b}--\r\n").map_err(io::io_err)?;
        }
        Ok(())
    });
    io::ready(rx).await?;
    let mut resp = Response::new(Body::from_stream(stream));
    let ct = if req.strm {
        content_type(format).to_owned()
    } else {
        format!("multipart/mixed; boundary={boundary}")
    };
    if let Ok(v) = HeaderValue::from_str(&ct) {
        resp.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    Ok(resp)
}

fn content_type(format: Format) -> &'static str {
    match format {
        Format::Tar => "application/x-tar",
        Format::Tgz => "application/gzip",
        Format::TarLz4 => "application/x-lz4",
        Format::Zip => "application/zip",
    }
}

/// The JSON metadata part of a multipart answer.
fn multipart_meta(req: &MossReq, items: &[Item], prep: &Prepared) -> String {
    let out = req
        .items
        .iter()
        .zip(items)
        .enumerate()
        .map(|(i, (m, it))| {
            let err = match &prep.sources[i] {
                Source::Failed(e) => e.message.clone(),
                _ => String::new(),
            };
            MossOut {
                objname: it.name.clone(),
                archpath: it.archpath.clone(),
                bucket: it.bck.name.clone(),
                provider: it.bck.provider.as_str().to_owned(),
                opaque: m.opaque.clone(),
                size: if err.is_empty() { prep.sizes[i] } else { 0 },
                err_msg: err,
            }
        })
        .collect();
    serde_json::to_string(&MossResp {
        out,
        uuid: uuid::Uuid::new_v4().to_string(),
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_names_and_ranges() {
        let b = Bck::from_request("b", None, None).unwrap();
        let mut it = Item::object(&b, "dir/o.jpg");
        assert_eq!(entry_name(&it, false), "b/dir/o.jpg");
        it.archpath = "x/y".into();
        assert_eq!(entry_name(&it, true), "dir/o.jpg/x/y");
        it.start = 2;
        it.length = 3;
        assert_eq!(slice(&it, 10).unwrap(), (2, 3));
        it.length = -1;
        assert_eq!(slice(&it, 10).unwrap(), (2, 8));
        it.length = 9;
        assert!(slice(&it, 10).is_err());
        let (bck, name) = parse_uname("ais/@#/b/x/y.tar").unwrap();
        assert_eq!((bck.name.as_str(), name.as_str()), ("b", "x/y.tar"));
        assert!(parse_uname("ais/b").is_err());
    }

    #[test]
    fn frames_roundtrip() {
        let mut buf = Vec::new();
        let f = Frame {
            i: 3,
            size: 7,
            err: String::new(),
            status: 0,
        };
        write_frame(&mut buf, &serde_json::to_vec(&f).unwrap()).unwrap();
        let back: Frame = read_frame(&mut &buf[..]).unwrap();
        assert_eq!((back.i, back.size), (3, 7));
        let e = frame_error(&ApiError::not_found("gone"), 9);
        let back = Frame::read(&mut &e.encode()[..]).unwrap();
        assert_eq!((back.i, back.status, back.err.as_str()), (9, 404, "gone"));
    }
}
