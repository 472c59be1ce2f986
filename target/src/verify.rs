//! Corrupt bytes are never served: verified reads, quarantine and repair, and the scrub job.
//!
//! - **Verified reads** (bucket property `checksum.validate_warm_get`, on by default, or
//!   `?validate_checksum=true` per request): a GET of a small object (read whole with its
//!   lookup) checks size and xxhash before any byte is sent; a streamed whole-object GET hashes
//!   as it reads and holds back its last chunk until the hash is checked, so a mismatch ends
//!   the body with an error (the client sees a broken response, never a complete one with
//!   wrong bytes). Both are verified once per cached record (the first whole read after a
//!   write, a restart or the record's eviction marks it, [`crate::store::hot`]); later reads,
//!   and range reads of streamed objects, are not (they go zero-copy on plain HTTP — a small
//!   object is then not read into memory at all, [`small_object`]; the scrub job covers
//!   them). `?validate_checksum=true` always verifies.
//! - **Corruption**: the copy is quarantined ([`crate::store::Store::quarantine`]: the data
//!   file moves to `<mountpath>/quarantine/`, the index record goes), counted in `/metrics`,
//!   then repaired: from another holder of the object's HRW set (`mirror.copies > 1`; the
//!   fetched bytes are checked against the holder's checksum as they are stored), or by a cold
//!   GET from the remote of a cached bucket. A native object with no replica is an error.
//! - **Scrub** (job kind `scrub`): each target re-reads every object it holds (owned copies and
//!   replicas) sequentially on the blocking pool, checks size and checksum, and repairs (or,
//!   with `no_repair`, only reports) what is corrupt. At its end it deletes quarantined copies
//!   older than `GRISTD_QUARANTINE_KEEP_DAYS` (default 7).

use crate::Target;
use crate::read::cold::Start;
use crate::store::CKSUM_XXHASH;
use crate::store::meta::ObjectMeta;
use bytes::Bytes;
use gristmill_core::api::{header as h, query as q};
use gristmill_core::{ApiError, Bck, ErrorKind};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use xxhash_rust::xxh64::Xxh64;

/// Chunk sizes of verified streamed reads (as the plain ones: a small first chunk).
/// Files are checked (by scrub and verified reads) in chunks of this size.
pub(crate) const SCRUB_CHUNK: usize = 1024 * 1024;

pub(crate) const FIRST_CHUNK: u64 = 256 * 1024;

pub(crate) const STREAM_CHUNK: u64 = 1024 * 1024;

/// Counter names of a scrub's snapshot.
pub(crate) const CORRUPT: &str = "corrupt";

pub(crate) const REPAIRED: &str = "repaired";

pub(crate) const UNREPAIRABLE: &str = "unrepairable";

/// Whether a GET of `bck` verifies checksums: the bucket property, or the request asks.
pub(crate) fn validates(t: &Target, bck: &Bck, params: &HashMap<String, String>) -> bool {
    explicit(params)
        || t.bmd()
            .get(bck)
            .is_none_or(|r| r.props.checksum.validate_warm_get)
}

/// How a GET wants a small object opened: its bytes left in the file when it can send them
/// zero-copy (a plain-HTTP connection) and nothing will check them — validation off, or on
/// and the cached record already verified by an earlier whole read (the policy of streamed
/// reads, see the module doc); read into memory otherwise.
pub(crate) fn small_object(
    t: &Target,
    bck: &Bck,
    req: &crate::read::local::ReadRequest<'_>,
) -> crate::store::SmallObject {
    use crate::store::SmallObject;
    if req.zero_copy.is_none() || explicit(req.params) {
        SmallObject::Read
    } else if validates(t, bck, req.params) {
        SmallObject::FromFileIfVerified
    } else {
        SmallObject::FromFile
    }
}

/// `?validate_checksum=true`: verify even a range (the whole file is read first).
pub(crate) fn explicit(params: &HashMap<String, String>) -> bool {
    params
        .get(q::VALIDATE_CHECKSUM)
        .is_some_and(|v| v == "true" || v == "1")
}

/// Whether this metadata carries a checksum we can verify.
pub(crate) fn has_xxhash(meta: &ObjectMeta) -> bool {
    meta.cksum_type == CKSUM_XXHASH && !meta.cksum_value.is_empty()
}

/// The verdict on `size` bytes hashing to `digest` against the metadata: `Err(why)` if they
/// differ.
pub(crate) fn judge(meta: &ObjectMeta, size: u64, digest: u64) -> Result<(), String> {
    if size != meta.size {
        return Err(format!("size {size} differs from the stored {}", meta.size));
    }
    let got = format!("{digest:016x}");
    if has_xxhash(meta) && !got.eq_ignore_ascii_case(&meta.cksum_value) {
        return Err(format!(
            "checksum mismatch: stored xxhash {}, computed {got}",
            meta.cksum_value
        ));
    }
    Ok(())
}

/// Checks an object read whole (a small one) against its metadata.
pub(crate) fn check_bytes(meta: &ObjectMeta, data: &[u8]) -> Result<(), String> {
    let mut hasher = Xxh64::new(0);
    hasher.update(data);
    judge(meta, data.len() as u64, hasher.digest())
}

/// Reads a whole data file (blocking, positioned reads from 0) and checks it: `Ok(Err(why))`
/// when corrupt.
pub(crate) fn check_file(
    file: &std::fs::File,
    meta: &ObjectMeta,
) -> std::io::Result<Result<(), String>> {
    use std::os::unix::fs::FileExt;
    let mut hasher = Xxh64::new(0);
    let mut buf = vec![0u8; SCRUB_CHUNK];
    let mut size = 0u64;
    loop {
        let n = match file.read_at(&mut buf, size) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
    Ok(judge(meta, size, hasher.digest()))
}

/// Checks an opened object's whole file off the runtime (`?validate_checksum=true` on a
/// range of a streamed object).
pub(crate) async fn check_open(
    open: &crate::store::OpenObject,
) -> Result<Result<(), String>, ApiError> {
    let file = open
        .file
        .try_clone()
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let meta = open.meta.clone();
    tokio::task::spawn_blocking(move || check_file(&file, &meta))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("reading {}: {e}", open.meta.name)))
}

/// State of a verified streamed read.
pub(crate) struct Verifying {
    file: Arc<std::fs::File>,
    offset: u64,
    hasher: Option<Xxh64>,
    /// The chunk read last: sent only once the next one is read, or the hash checked.
    held: Option<Bytes>,
    /// Bytes found past the recorded size (checked with the last read, in the same trip).
    extra: usize,
    done: bool,
    meta: Arc<ObjectMeta>,
    /// Marked verified when the whole object checked out.
    record: Option<Arc<crate::store::hot::Cached>>,
    on_mismatch: Option<Box<dyn FnOnce(String) + Send>>,
}

/// The whole object from `file` as a stream of chunks (positioned reads and hashing on the
/// blocking pool) whose last chunk is released only when size and checksum match; on a
/// mismatch the stream ends with an error instead and `on_mismatch` runs (once). A match marks
/// `record` verified.
pub(crate) fn verified_stream(
    file: impl Into<Arc<std::fs::File>>,
    meta: impl Into<Arc<ObjectMeta>>,
    record: Option<Arc<crate::store::hot::Cached>>,
    on_mismatch: impl FnOnce(String) + Send + 'static,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let state = Verifying {
        file: file.into(),
        offset: 0,
        hasher: Some(Xxh64::new(0)),
        held: None,
        extra: 0,
        done: false,
        meta: meta.into(),
        record,
        on_mismatch: Some(Box::new(on_mismatch)),
    };
    futures::stream::unfold(state, |mut st| async move {
        use std::os::unix::fs::FileExt;
        if st.done {
            return None;
        }
        loop {
            let left = st.meta.size.saturating_sub(st.offset);
            if left == 0 {
                st.done = true;
                // Bytes beyond the recorded size mean the file is not what was stored.
                let extra = st.extra;
                let digest = st.hasher.take().map_or(0, |h| h.digest());
                let verdict = if extra > 0 {
                    Err(format!(
                        "the data file is longer than the stored size {}",
                        st.meta.size
                    ))
                } else {
                    judge(&st.meta, st.offset, digest)
                };
                return match verdict {
                    Ok(()) => {
                        if let Some(record) = &st.record {
                            record.mark_verified();
                        }
                        st.held.take().map(|b| (Ok(b), st))
                    }
                    Err(why) => {
                        if let Some(f) = st.on_mismatch.take() {
                            f(why.clone());
                        }
                        let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why);
                        Some((Err(e), st))
                    }
                };
            }
            let want = left.min(if st.offset == 0 {
                FIRST_CHUNK
            } else {
                STREAM_CHUNK
            });
            let (file, at) = (st.file.clone(), st.offset);
            let last = want == left;
            let mut hasher = st.hasher.take().unwrap_or_else(|| Xxh64::new(0));
            let read = tokio::task::spawn_blocking(move || {
                let mut buf = vec![0u8; want as usize];
                let r = file.read_exact_at(&mut buf, at);
                if r.is_ok() {
                    hasher.update(&buf);
                }
                // With the last chunk, in the same trip: is there anything past the end?
                let mut one = [0u8; 1];
                let extra = if last {
                    file.read_at(&mut one, at + want).unwrap_or(0)
                } else {
                    0
                };
                r.map(|()| (Bytes::from(buf), hasher, extra))
            })
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
            match read {
                Ok((chunk, hasher, extra)) => {
                    st.hasher = Some(hasher);
                    st.extra = extra;
                    st.offset += want;
                    if let Some(prev) = st.held.replace(chunk) {
                        return Some((Ok(prev), st));
                    }
                }
                Err(e) => {
                    st.done = true;
                    // A file shorter than its record is corrupt too.
                    if e.kind() == std::io::ErrorKind::UnexpectedEof
                        && let Some(f) = st.on_mismatch.take()
                    {
                        f(format!(
                            "the data file is shorter than the stored size {}",
                            st.meta.size
                        ));
                    }
                    return Some((Err(e), st));
                }
            }
        }
    })
}

/// Repairs serialized per object on this target (two GETs that find the same corrupt copy
/// repair it once).
pub(crate) fn repair_lock(key: String) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        std::sync::LazyLock::new(Default::default);
    let mut locks = LOCKS.lock().expect("repair locks");
    locks.retain(|_, l| Arc::strong_count(l) > 1);
    locks.entry(key).or_default().clone()
}

/// A corrupt copy was found (`why`): quarantines it and restores a good copy from another
/// holder or the remote. `Ok(bytes)` once a good copy is in place (0 when someone else
/// repaired or overwrote it meanwhile); an error (500) when nothing could repair it.
pub(crate) async fn quarantine_and_repair(
    t: &Target,
    bck: &Bck,
    meta: &ObjectMeta,
    why: &str,
    found_by: &'static str,
) -> Result<u64, ApiError> {
    let lock = repair_lock(format!("{}\0{}\0{}", t.id, meta.bucket, meta.name));
    let _guard = lock.lock().await;
    let quarantined = t.store.quarantine(bck, meta).await?;
    if quarantined {
        metrics::counter!("grist_corrupt_objects_total", "found_by" => found_by).increment(1);
        tracing::warn!(
            bucket = %bck, object = %meta.name, file = %meta.file, why,
            "corrupt copy quarantined"
        );
    } else if t.store.head(bck, &meta.name).is_ok() {
        // Repaired (or overwritten) by someone else while we waited.
        return Ok(0);
    }
    let result = repair(t, bck, meta).await;
    match &result {
        Ok(_) => {
            metrics::counter!("grist_repaired_objects_total").increment(1);
            tracing::info!(bucket = %bck, object = %meta.name, "corrupt copy repaired");
        }
        Err(e) => {
            metrics::counter!("grist_unrepairable_objects_total").increment(1);
            tracing::error!(bucket = %bck, object = %meta.name, error = %e.message, "corrupt copy not repaired");
        }
    }
    result
}

/// Restores a good copy of a quarantined object.
pub(crate) async fn repair(t: &Target, bck: &Bck, meta: &ObjectMeta) -> Result<u64, ApiError> {
    let name = &meta.name;
    if bck.is_remote() {
        // Cached object: fetch it again through the cold-GET path.
        let backend = t.backend(bck)?;
        return match t.fills.join(t, backend, bck, name, false).await {
            Ok(fill) => fill.wait().await.map_err(|why| {
                ApiError::internal(format!(
                    "object {bck}/{name} is corrupt and re-fetching it from the remote failed: {why}"
                ))
            }),
            Err(Start::Cached) => Ok(0),
            Err(Start::Failed(e)) => Err(ApiError::internal(format!(
                "object {bck}/{name} is corrupt and re-fetching it from the remote failed: {}",
                e.message
            ))),
        };
    }
    let copies = t.bmd().get(bck).map_or(1, |r| r.props.mirror.copies());
    if copies <= 1 {
        return Err(ApiError::internal(format!(
            "object {bck}/{name} is corrupt and has no replica (mirror.copies = 1); its copy was quarantined"
        )));
    }
    let smap = t.smap();
    let holders: Vec<gristmill_core::Node> = smap
        .owners(&bck.object_uname(name), copies)
        .into_iter()
        .filter(|n| n.daemon_id != t.id)
        .cloned()
        .collect();
    let mut why = Vec::new();
    for node in &holders {
        match fetch_copy(t, node, bck, name).await {
            Ok(n) => return Ok(n),
            Err(e) => why.push(format!("{}: {}", node.daemon_id, e.message)),
        }
    }
    Err(ApiError::internal(format!(
        "object {bck}/{name} is corrupt and no replica could repair it ({})",
        why.join("; ")
    )))
}

/// Copies `node`'s copy of an object here. The holder verifies it as it sends (its own GET
/// path), and the store checks the received bytes against the holder's size and checksum.
pub(crate) async fn fetch_copy(
    t: &Target,
    node: &gristmill_core::Node,
    bck: &Bck,
    name: &str,
) -> Result<u64, ApiError> {
    let resp = t
        .relay
        .get(crate::cluster::peer::internal_url(node, bck, name))
        .query(&crate::cluster::peer::bucket_query(bck))
        .send()
        .await
        .map_err(|e| ApiError::unavailable(e.to_string()))?;
    if !resp.status().is_success() {
        return Err(ApiError::new(
            ErrorKind::from_status(resp.status()),
            format!("answered {}", resp.status()),
        ));
    }
    let headers = resp.headers().clone();
    let get = |k: &str| {
        headers
            .get(k)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned()
    };
    let mtime: i64 = get(h::MTIME).parse().unwrap_or(0);
    let generation = crate::cluster::peer::gen_of(&headers).max(1);
    let custom = match get(h::CUSTOM_MD_JSON).as_str() {
        "" => Default::default(),
        v => gristmill_core::api::decode_custom_md(v)?,
    };
    let cksum = get(h::CHECKSUM_VALUE);
    if cksum.is_empty() {
        return Err(ApiError::internal("the holder sent no checksum"));
    }
    let opts = crate::store::PutOptions {
        durable: true,
        version: get(h::VERSION),
        custom,
        expected_size: get("content-length").parse().ok(),
        expected_xxhash: Some(cksum),
        mtime_ns: Some(mtime).filter(|m| *m > 0),
        // A newer copy that landed here meanwhile (or its delete) wins.
        generation: crate::store::index::GenRule::IfNewer(generation),
        ..Default::default()
    };
    match t.store.put(bck, name, resp.bytes_stream(), opts).await {
        Ok(meta) => Ok(meta.size),
        Err(crate::StoreError::Stale { .. }) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// [`verified_stream`] of an opened object; a mismatch starts the copy's repair in the
/// background (the response is already broken by then).
pub(crate) fn verified_read(
    t: &Target,
    bck: &Bck,
    open: crate::store::OpenObject,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let (t2, bck2, meta) = (t.me.get().cloned(), bck.clone(), open.meta.clone());
    verified_stream(open.file, open.meta, open.record, move |why| {
        if let Some(t) = t2.and_then(|w| w.upgrade()) {
            repair_in_background(t, &bck2, meta, why);
        }
    })
}

/// Starts the repair of a copy found corrupt while streaming it (the response is already
/// broken; the next GET finds the repaired copy).
pub(crate) fn repair_in_background(t: Arc<Target>, bck: &Bck, meta: Arc<ObjectMeta>, why: String) {
    let bck = bck.clone();
    tokio::spawn(async move {
        let _ = quarantine_and_repair(&t, &bck, &meta, &why, "get").await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn meta_of(data: &[u8]) -> ObjectMeta {
        ObjectMeta {
            bucket: "ais/@#/b".into(),
            name: "o".into(),
            size: data.len() as u64,
            cksum_type: CKSUM_XXHASH.into(),
            cksum_value: format!("{:016x}", xxhash_rust::xxh64::xxh64(data, 0)),
            version: "1".into(),
            atime_ns: 0,
            mtime_ns: 0,
            file: "obj/x".into(),
            custom: Default::default(),
            generation: 1,
        }
    }

    fn file_with(data: &[u8]) -> (tempfile::NamedTempFile, std::fs::File) {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(data).unwrap();
        f.flush().unwrap();
        let handle = f.reopen().unwrap();
        (f, handle)
    }

    async fn drain(
        s: impl futures::Stream<Item = Result<Bytes, std::io::Error>>,
    ) -> (Vec<u8>, Option<std::io::Error>) {
        let mut s = std::pin::pin!(s);
        let mut out = Vec::new();
        while let Some(item) = s.next().await {
            match item {
                Ok(b) => out.extend_from_slice(&b),
                Err(e) => return (out, Some(e)),
            }
        }
        (out, None)
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[tokio::test]
    async fn verified_stream_passes_good_bytes() {
        let d = data(3 * 1024 * 1024 + 17);
        let (_keep, f) = file_with(&d);
        let hit = Arc::new(Mutex::new(None));
        let h = hit.clone();
        let (out, err) = drain(verified_stream(f, meta_of(&d), None, move |w| {
            *h.lock().unwrap() = Some(w)
        }))
        .await;
        assert!(err.is_none());
        assert_eq!(out, d);
        assert!(hit.lock().unwrap().is_none());
    }

    #[tokio::test]
    async fn verified_stream_never_completes_corrupt_bytes() {
        let d = data(2 * 1024 * 1024 + 5);
        let meta = meta_of(&d);
        let mut bad = d.clone();
        // Flip a byte in the last chunk: everything before it was already sent.
        let at = bad.len() - 3;
        bad[at] ^= 0xff;
        let (_keep, f) = file_with(&bad);
        let hit = Arc::new(Mutex::new(None));
        let h = hit.clone();
        let (out, err) = drain(verified_stream(f, meta.clone(), None, move |w| {
            *h.lock().unwrap() = Some(w)
        }))
        .await;
        let err = err.expect("a mismatch ends the stream with an error");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(out.len() < d.len(), "the last chunk is held back");
        assert_eq!(out[..], d[..out.len()]);
        assert!(
            hit.lock()
                .unwrap()
                .as_deref()
                .unwrap()
                .contains("checksum mismatch")
        );

        // A truncated file, and a file with extra bytes, fail as well.
        let (_keep, f) = file_with(&d[..d.len() - 1]);
        let (_, err) = drain(verified_stream(f, meta.clone(), None, |_| {})).await;
        assert!(err.is_some());
        let mut longer = d.clone();
        longer.push(0);
        let (_keep, f) = file_with(&longer);
        let (out, err) = drain(verified_stream(f, meta, None, |_| {})).await;
        assert!(err.is_some() && out.len() < d.len());
    }

    #[test]
    fn whole_checks() {
        let d = data(1000);
        let meta = meta_of(&d);
        assert!(check_bytes(&meta, &d).is_ok());
        let mut bad = d.clone();
        bad[10] ^= 1;
        assert!(check_bytes(&meta, &bad).unwrap_err().contains("mismatch"));
        assert!(check_bytes(&meta, &d[..999]).unwrap_err().contains("size"));
        let (_keep, f) = file_with(&bad);
        assert!(check_file(&f, &meta).unwrap().is_err());
        let (_keep, f) = file_with(&d);
        assert!(check_file(&f, &meta).unwrap().is_ok());
    }
}
