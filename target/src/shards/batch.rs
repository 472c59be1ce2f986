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
use super::State as ShardState;
use super::catalog::{self};
use super::io::{self, BlockingBody};
use crate::Target;
use crate::store::Store;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, header};
use axum::response::Response;
use gristmill_core::etl::MAX_ETL_OBJECT;
use gristmill_core::shards::{MISSING_DIR, MossIn, MossOut, MossReq, MossResp};
use gristmill_core::{ApiError, Bck, ErrorKind, Namespace, validate_object_name};
use gristmill_shard::{Format, ShardWriter};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::io::{self as stdio, Read, Write};
use std::sync::Arc;
mod frame;
pub(crate) use frame::{Frame, PartReq, Summary, error_of, frame_error, write_frame};

mod locate;
pub(crate) use locate::{Opened, check_local, locate, prepare, read_where, sizes};
#[cfg(test)]
mod tests;

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

// ---------------------------------------------------------------------------------------
// Locating and reading items (blocking).

// ---------------------------------------------------------------------------------------
// Preparing.

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
