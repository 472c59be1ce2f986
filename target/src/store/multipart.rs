//! Multipart uploads (the S3 protocol's, exposed to proxies through `/v1/mpu/`): parts are
//! staged on the mountpath that will own the final object, then concatenated into it by one
//! ordinary crash-safe PUT. Staging lives in `<mountpath>/mpu/<upload-id>/` and survives
//! restarts; an aborted or completed upload removes its directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::{ApiError, Bck, ErrorKind};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;

use crate::store::error::StoreError;
use crate::store::{ETAG_KEY, PutOptions, Store, now_ns};

/// Custom-metadata key of a multipart object's part sizes (comma-separated, in part order).
pub const PARTS_KEY: &str = "x-grist-parts";
/// Custom-metadata key of a multipart object's part checksums (base64, in part order), when
/// its upload had a checksum algorithm: answered on `?partNumber=` reads.
pub const PART_CHECKSUMS_KEY: &str = "x-grist-part-checksums";

/// Highest part number S3 allows.
pub const MAX_PART_NUMBER: u32 = 10_000;
/// Smallest size of any part but the last.
pub const MIN_PART_SIZE: u64 = 5 << 20;

/// What is known about an upload in progress.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UploadInfo {
    pub upload_id: String,
    pub key: String,
    pub bucket: String,
    pub initiated_ns: i64,
    /// Metadata the final object will carry (content type, user metadata...).
    #[serde(default)]
    pub custom: BTreeMap<String, String>,
    /// The S3 checksum the object gets, when the upload was created with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<UploadChecksum>,
}

/// An upload's S3 checksum: the algorithm (`CRC32`, `CRC32C`, `SHA1`, `SHA256`, `CRC64NVME`)
/// and how the object's value is made from its parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadChecksum {
    pub algorithm: String,
    /// `COMPOSITE`: the checksum of the parts' checksums, `-N` appended (S3's default for
    /// CRC32, CRC32C, SHA1 and SHA256). `FULL_OBJECT`: the checksum of the whole object
    /// (always for CRC64NVME; CRC32 and CRC32C on request).
    pub kind: String,
}

impl UploadChecksum {
    /// Validates what CreateMultipartUpload asked for, filling in S3's default type.
    pub fn new(algorithm: &str, kind: Option<&str>) -> Result<Self, ApiError> {
        let algorithm = algorithm.to_ascii_uppercase();
        let composite_ok = matches!(algorithm.as_str(), "CRC32" | "CRC32C" | "SHA1" | "SHA256");
        let full_ok = matches!(algorithm.as_str(), "CRC32" | "CRC32C" | "CRC64NVME");
        if !(composite_ok || full_ok) {
            return Err(ApiError::bad_request(format!(
                "unknown checksum algorithm {algorithm:?} (CRC32, CRC32C, SHA1, SHA256, CRC64NVME)"
            )));
        }
        let kind = match kind.map(str::to_ascii_uppercase) {
            None if composite_ok => "COMPOSITE".to_owned(),
            None => "FULL_OBJECT".to_owned(),
            Some(k) if k == "COMPOSITE" && composite_ok => k,
            Some(k) if k == "FULL_OBJECT" && full_ok => k,
            Some(k) => {
                return Err(ApiError::bad_request(format!(
                    "checksum type {k} is not supported with {algorithm}"
                )));
            }
        };
        Ok(Self { algorithm, kind })
    }

    /// The custom-metadata key of its value (`x-amz-checksum-sha256`, ...).
    pub fn key(&self) -> String {
        format!("x-amz-checksum-{}", self.algorithm.to_ascii_lowercase())
    }
}

/// One stored part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PartInfo {
    pub part: u32,
    /// MD5 of the part, hex (no quotes).
    pub etag: String,
    pub size: u64,
    pub mtime_ns: i64,
    /// S3 checksums of the part, by header name (`x-amz-checksum-sha256`: base64).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub checksums: BTreeMap<String, String>,
    /// SSE-C uploads: the IV the S3 front encrypted this part with (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse_iv: Option<String>,
}

fn no_such_upload(id: &str) -> StoreError {
    ApiError::new(
        ErrorKind::NoSuchUpload,
        format!("upload {id:?} does not exist (completed, aborted, or never created)"),
    )
    .into()
}

fn valid_upload_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// Prefix of an upload's directory while it is handed over to a new owner (never an upload
/// id: those are alphanumeric).
const HANDOVER: &str = "handover-";
/// Prefix of the directory an adopted upload is received in.
const ADOPTING: &str = "adopting-";

/// The upload recorded in `dir`, if it is `upload_id` of `bck/key`.
async fn read_upload(
    dir: &Path,
    bck: &Bck,
    key: &str,
    upload_id: &str,
) -> Result<UploadInfo, StoreError> {
    let bytes = tokio::fs::read(dir.join("upload.json"))
        .await
        .map_err(|_| no_such_upload(upload_id))?;
    let info: UploadInfo = serde_json::from_slice(&bytes)
        .map_err(|e| StoreError::Corrupt(format!("upload {upload_id}: {e}")))?;
    if info.key != key || info.bucket != bck.uname() {
        return Err(no_such_upload(upload_id));
    }
    Ok(info)
}

/// A file of an upload's directory that may travel to a new owner.
fn valid_upload_file(name: &str) -> bool {
    name == "upload.json"
        || name.strip_prefix("part-").is_some_and(|rest| {
            let digits = rest.strip_suffix(".json").unwrap_or(rest);
            digits.len() == 5 && digits.bytes().all(|b| b.is_ascii_digit())
        })
}

/// How long a completed upload's answer is kept for retries of its completion.
pub const COMPLETED_KEEP: std::time::Duration = std::time::Duration::from_secs(3600);

/// The file in an upload's directory that records its completion.
const COMPLETED: &str = "completed.json";

/// What a completion answered: a retry with the same part list gets the same answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Completed {
    pub bucket: String,
    pub key: String,
    /// The part list as completed (numbers and ETags without quotes, lowercase).
    pub parts: Vec<(u32, String)>,
    /// The object's ETag (no quotes).
    pub etag: String,
    pub completed_ns: i64,
}

impl Completed {
    /// Whether `parts` is the list this upload was completed with.
    pub fn same_parts(&self, parts: &[(u32, String)]) -> bool {
        self.parts.len() == parts.len()
            && self
                .parts
                .iter()
                .zip(parts)
                .all(|(a, b)| a.0 == b.0 && a.1.eq_ignore_ascii_case(b.1.trim_matches('"')))
    }
}

/// A completed upload's object, written but not committed, and its parts' directory.
pub struct Assembled {
    pub pending: crate::store::PendingWrite,
    pub dir: PathBuf,
    /// The completion's answer, to keep once the object is committed.
    pub done: Completed,
}

impl Store {
    fn upload_dir(&self, bck: &Bck, key: &str, upload_id: &str) -> Result<PathBuf, StoreError> {
        if !valid_upload_id(upload_id) {
            return Err(no_such_upload(upload_id));
        }
        // Where the upload began: its HRW mountpath then, which a mountpath change may
        // have moved since.
        let dirs: Vec<PathBuf> = self
            .lookup_order(bck, key)
            .iter()
            .map(|m| m.path.join("mpu").join(upload_id))
            .collect();
        Ok(dirs.iter().find(|d| d.exists()).unwrap_or(&dirs[0]).clone())
    }

    /// Where an upload handed over to another target waits until that target has it.
    fn handover_dir(&self, bck: &Bck, key: &str, upload_id: &str) -> Result<PathBuf, StoreError> {
        let dir = self.upload_dir(bck, key, upload_id)?;
        let dirs: Vec<PathBuf> = self
            .lookup_order(bck, key)
            .iter()
            .map(|m| m.path.join("mpu").join(format!("{HANDOVER}{upload_id}")))
            .collect();
        Ok(dirs
            .iter()
            .find(|d| d.exists())
            .cloned()
            .unwrap_or_else(|| dir.with_file_name(format!("{HANDOVER}{upload_id}"))))
    }

    async fn load_upload(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<(PathBuf, UploadInfo), StoreError> {
        let dir = self.upload_dir(bck, key, upload_id)?;
        let info = read_upload(&dir, bck, key, upload_id).await?;
        Ok((dir, info))
    }

    /// Starts an upload; returns its id.
    pub async fn mpu_create(
        &self,
        bck: &Bck,
        key: &str,
        custom: BTreeMap<String, String>,
        checksum: Option<UploadChecksum>,
    ) -> Result<UploadInfo, StoreError> {
        let upload_id = uuid::Uuid::new_v4().simple().to_string();
        let dir = self.upload_dir(bck, key, &upload_id)?;
        tokio::fs::create_dir_all(&dir).await?;
        let info = UploadInfo {
            upload_id,
            key: key.to_owned(),
            bucket: bck.uname(),
            initiated_ns: now_ns(),
            custom,
            checksum,
        };
        let json = serde_json::to_vec(&info).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        tokio::fs::write(dir.join("upload.json"), json).await?;
        Ok(info)
    }

    /// Stores one part (replacing an earlier upload of the same number), with its MD5 and
    /// the S3 checksums `algorithms` asks for plus the upload's own.
    #[allow(clippy::too_many_arguments)]
    pub async fn mpu_put_part<S, E>(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
        part: u32,
        body: S,
        expected_size: Option<u64>,
        algorithms: &[String],
        sse: Option<(&str, &str)>,
    ) -> Result<PartInfo, StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        if part == 0 || part > MAX_PART_NUMBER {
            return Err(ApiError::bad_request(format!(
                "part number {part} out of range 1..={MAX_PART_NUMBER}"
            ))
            .into());
        }
        let (dir, info) = self.load_upload(bck, key, upload_id).await?;
        // An SSE-C upload's parts are all under its key, each with an IV of its own (see
        // `gristmill_core::sse`); `sse` is the part's (key check, IV).
        let sse_key_check = sse.map(|(check, _)| check);
        if info
            .custom
            .get(gristmill_core::sse::KEY_CHECK_KEY)
            .map(String::as_str)
            != sse_key_check
        {
            return Err(ApiError::bad_request(if sse_key_check.is_none() {
                "the upload was created with SSE-C: each part needs the same customer key"
            } else {
                "the part's SSE-C customer key is not the one the upload was created with"
            })
            .into());
        }
        let mut algorithms = algorithms.to_vec();
        algorithms.extend(info.checksum.map(|c| c.algorithm));
        let mut s3 = gristmill_node::s3::checksum_hasher(&algorithms);
        let tmp = dir.join(format!(
            "part-{part:05}.{}.tmp",
            uuid::Uuid::new_v4().simple()
        ));
        let result = async {
            let mut f =
                tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::create(&tmp).await?);
            let mut md5 = <md5::Md5 as md5::Digest>::new();
            let mut size = 0u64;
            let mut body = std::pin::pin!(body);
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| {
                    StoreError::Api(ApiError::bad_request(format!("reading part body: {e}")))
                })?;
                md5::Digest::update(&mut md5, &chunk);
                if let Some(h) = s3.as_mut() {
                    h.update(&chunk);
                }
                size += chunk.len() as u64;
                f.write_all(&chunk).await?;
            }
            f.flush().await?;
            if let Some(want) = expected_size
                && want != size
            {
                return Err(StoreError::Api(ApiError::bad_request(format!(
                    "part body has {size} bytes, expected {want}"
                ))));
            }
            let info = PartInfo {
                part,
                etag: hex::encode(md5::Digest::finalize(md5)),
                size,
                mtime_ns: now_ns(),
                checksums: s3
                    .take()
                    .map(|h| gristmill_node::s3::checksum_values(h.finalize()))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                sse_iv: sse.map(|(_, iv)| iv.to_owned()),
            };
            tokio::fs::rename(&tmp, dir.join(format!("part-{part:05}"))).await?;
            let json = serde_json::to_vec(&info).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            tokio::fs::write(dir.join(format!("part-{part:05}.json")), json).await?;
            Ok(info)
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// The parts uploaded so far, by part number.
    pub async fn mpu_list_parts(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<PartInfo>, StoreError> {
        Ok(self.mpu_parts_and_info(bck, key, upload_id).await?.0)
    }

    /// The parts uploaded so far, by part number, and the upload's own record.
    pub async fn mpu_parts_and_info(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<(Vec<PartInfo>, UploadInfo), StoreError> {
        let (dir, info) = self.load_upload(bck, key, upload_id).await?;
        let mut parts = Vec::new();
        let mut rd = tokio::fs::read_dir(&dir).await?;
        while let Some(e) = rd.next_entry().await? {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("part-") && name.ends_with(".json") {
                let bytes = tokio::fs::read(e.path()).await?;
                if let Ok(p) = serde_json::from_slice::<PartInfo>(&bytes) {
                    parts.push(p);
                }
            }
        }
        parts.sort_by_key(|p| p.part);
        Ok((parts, info))
    }

    /// Concatenates the listed parts into the object's pending write — written and verified,
    /// not yet visible: the caller commits it (with its replicas) and then calls
    /// [`Store::mpu_finish`]. Parts must be in ascending order, each uploaded with the given
    /// ETag, and all but the last at least 5 MiB. When the upload has a checksum, `declared`
    /// holds the part checksums the client listed: each must be the stored one.
    #[allow(clippy::too_many_arguments)]
    pub async fn mpu_assemble(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
        declared: &BTreeMap<u32, String>,
        declared_object: &BTreeMap<String, String>,
        durable: bool,
        floor: u64,
    ) -> Result<Assembled, StoreError> {
        let (dir, info) = self.load_upload(bck, key, upload_id).await?;
        if parts.is_empty() {
            return Err(ApiError::new(ErrorKind::InvalidPart, "no parts listed").into());
        }
        if parts.windows(2).any(|w| w[0].0 > w[1].0) {
            return Err(ApiError::new(
                ErrorKind::InvalidPartOrder,
                "parts must be listed in ascending order of part number",
            )
            .into());
        }
        // A part number listed twice (a client that uploaded it again while the first upload
        // was still running): the last entry is the one meant, as S3 takes it.
        let parts: Vec<&(u32, String)> = parts
            .iter()
            .enumerate()
            .filter(|(i, p)| parts.get(i + 1).is_none_or(|next| next.0 != p.0))
            .map(|(_, p)| p)
            .collect();
        let stored: BTreeMap<u32, PartInfo> = self
            .mpu_list_parts(bck, key, upload_id)
            .await?
            .into_iter()
            .map(|p| (p.part, p))
            .collect();
        let mut md5s = Vec::with_capacity(parts.len() * 16);
        // The parts' own checksums, raw, for a composite checksum.
        let mut part_sums = Vec::new();
        // The same, base64 as stored, kept with the object for `?partNumber=` reads.
        let mut part_checksums: Vec<String> = Vec::new();
        let mut files = Vec::with_capacity(parts.len());
        let mut sizes = Vec::with_capacity(parts.len());
        let mut part_ivs = Vec::with_capacity(parts.len());
        for (i, (n, etag)) in parts.iter().enumerate() {
            let want = etag.trim_matches('"');
            let p = stored
                .get(n)
                .filter(|p| p.etag.eq_ignore_ascii_case(want))
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorKind::InvalidPart,
                        format!("part {n} was not uploaded with ETag {etag}"),
                    )
                })?;
            if i + 1 < parts.len() && p.size < MIN_PART_SIZE {
                return Err(ApiError::new(
                    ErrorKind::EntityTooSmall,
                    format!(
                        "part {n} is {} bytes; all parts but the last need 5 MiB",
                        p.size
                    ),
                )
                .into());
            }
            md5s.extend(hex::decode(&p.etag).map_err(|e| StoreError::Corrupt(e.to_string()))?);
            if let Some(c) = &info.checksum {
                let stored = p.checksums.get(&c.key()).ok_or_else(|| {
                    ApiError::new(
                        ErrorKind::InvalidPart,
                        format!("part {n} has no {} checksum", c.algorithm),
                    )
                })?;
                if declared.get(n).is_some_and(|d| d != stored) {
                    return Err(ApiError::new(
                        ErrorKind::InvalidPart,
                        format!(
                            "part {n}: the listed {} checksum is not the uploaded part's",
                            c.algorithm
                        ),
                    )
                    .into());
                }
                part_sums.extend(
                    base64::Engine::decode(&base64::engine::general_purpose::STANDARD, stored)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                );
                part_checksums.push(stored.clone());
            }
            files.push(dir.join(format!("part-{n:05}")));
            sizes.push(p.size.to_string());
            part_ivs.push(p.sse_iv.clone().unwrap_or_default());
        }
        let etag = format!(
            "{}-{}",
            hex::encode(<md5::Md5 as md5::Digest>::digest(&md5s)),
            parts.len()
        );
        let body = futures::stream::iter(files)
            .then(|path| async move {
                match tokio::fs::File::open(&path).await {
                    Ok(f) => tokio_util::io::ReaderStream::with_capacity(f, 1 << 20).left_stream(),
                    Err(e) => futures::stream::once(async move { Err(e) }).right_stream(),
                }
            })
            .flatten();
        let mut custom = info.custom.clone();
        custom.insert(ETAG_KEY.into(), etag.clone());
        if custom.contains_key(gristmill_core::sse::KEY_CHECK_KEY) {
            // Each part's keystream: its IV, in object order.
            custom.insert(gristmill_core::sse::PART_IVS_KEY.into(), part_ivs.join(","));
        }
        // Part boundaries, for `?partNumber=` reads and GetObjectAttributes.
        custom.insert(PARTS_KEY.into(), sizes.join(","));
        if !part_checksums.is_empty() {
            custom.insert(PART_CHECKSUMS_KEY.into(), part_checksums.join(","));
        }
        let mut s3_checksums = Vec::new();
        match &info.checksum {
            Some(c) if c.kind == "COMPOSITE" => {
                let mut h = gristmill_node::s3::checksum_hasher(std::slice::from_ref(&c.algorithm))
                    .ok_or_else(|| StoreError::Corrupt(format!("algorithm {}", c.algorithm)))?;
                h.update(&part_sums);
                if let Some((_, v)) = gristmill_node::s3::checksum_values(h.finalize()).pop() {
                    let suffix = format!("-{}", parts.len());
                    if let Some(want) = declared_object.get(&c.key())
                        && want.strip_suffix(&suffix).unwrap_or(want) != v
                    {
                        return Err(bad_digest(&c.key(), &format!("{v}{suffix}"), want));
                    }
                    custom.insert(c.key(), format!("{v}{suffix}"));
                }
            }
            // The whole object's, computed while it is written.
            Some(c) => s3_checksums.push(c.algorithm.clone()),
            None => {}
        }
        let mut pending = self
            .begin_write(
                bck,
                key,
                PutOptions {
                    durable,
                    custom,
                    s3_checksums,
                    generation: crate::store::index::GenRule::Next { floor },
                    ..Default::default()
                },
            )
            .await?;
        pending.write_stream(body).await?;
        // A full-object checksum the client declared: checked before anything is staged.
        for (name, have) in pending.finish_s3_checksums() {
            if let Some(want) = declared_object.get(&name)
                && *want != have
            {
                pending.abort().await;
                return Err(bad_digest(&name, &have, want));
            }
        }
        let done = Completed {
            bucket: bck.uname(),
            key: key.to_owned(),
            parts: parts
                .iter()
                .map(|(n, e)| (*n, e.trim_matches('"').to_ascii_lowercase()))
                .collect(),
            etag,
            completed_ns: 0,
        };
        Ok(Assembled { pending, dir, done })
    }

    /// Once its object is committed, the upload's parts go (a retry of a failed commit finds
    /// them still there) and its directory keeps only what the completion answered, for
    /// [`COMPLETED_KEEP`]: SDKs retry a CompleteMultipartUpload whose answer was lost, and S3
    /// answers that retry as it answered the first.
    pub async fn mpu_finish(&self, assembled_dir: &Path, done: &Completed) {
        let saved = async {
            let tmp = assembled_dir.join("completed.json.tmp");
            tokio::fs::write(
                &tmp,
                serde_json::to_vec(done).map_err(std::io::Error::other)?,
            )
            .await?;
            tokio::fs::rename(&tmp, assembled_dir.join(COMPLETED)).await?;
            tokio::fs::remove_file(assembled_dir.join("upload.json")).await?;
            let mut rd = tokio::fs::read_dir(assembled_dir).await?;
            while let Some(e) = rd.next_entry().await? {
                if e.file_name().to_string_lossy().starts_with("part-") {
                    tokio::fs::remove_file(e.path()).await?;
                }
            }
            Ok::<(), std::io::Error>(())
        };
        if let Err(e) = saved.await {
            tracing::warn!(dir = %assembled_dir.display(), error = %e, "completed upload: could not keep its answer");
            let _ = tokio::fs::remove_dir_all(assembled_dir).await;
        }
    }

    /// What a completed upload answered, if it completed within [`COMPLETED_KEEP`].
    pub async fn mpu_completed(&self, bck: &Bck, key: &str, upload_id: &str) -> Option<Completed> {
        let dir = self.upload_dir(bck, key, upload_id).ok()?;
        let bytes = tokio::fs::read(dir.join(COMPLETED)).await.ok()?;
        let done: Completed = serde_json::from_slice(&bytes).ok()?;
        let fresh = now_ns() - done.completed_ns < COMPLETED_KEEP.as_nanos() as i64;
        (done.key == key && done.bucket == bck.uname() && fresh).then_some(done)
    }

    /// Forgets completed uploads older than [`COMPLETED_KEEP`].
    pub async fn mpu_forget_completed(&self) {
        for mp in self.mountpaths() {
            let Ok(mut rd) = tokio::fs::read_dir(mp.path.join("mpu")).await else {
                continue;
            };
            while let Ok(Some(e)) = rd.next_entry().await {
                let Ok(bytes) = tokio::fs::read(e.path().join(COMPLETED)).await else {
                    continue;
                };
                let old = serde_json::from_slice::<Completed>(&bytes).map_or(true, |d| {
                    now_ns() - d.completed_ns >= COMPLETED_KEEP.as_nanos() as i64
                });
                if old {
                    let _ = tokio::fs::remove_dir_all(e.path()).await;
                }
            }
        }
    }

    pub async fn mpu_abort(&self, bck: &Bck, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let (dir, _) = self.load_upload(bck, key, upload_id).await?;
        tokio::fs::remove_dir_all(&dir).await?;
        Ok(())
    }

    /// Whether the upload is in progress on this target.
    pub async fn mpu_here(&self, bck: &Bck, key: &str, upload_id: &str) -> bool {
        self.load_upload(bck, key, upload_id).await.is_ok()
    }

    /// Hands an upload in progress over to the object's new owner (its owner changed since it
    /// began): its directory is renamed out of reach first, so no part can land here after
    /// the list of its files is answered; a handover interrupted earlier is answered again.
    /// The files: `upload.json`, then each part's data and record.
    pub async fn mpu_hand_over(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<String>, StoreError> {
        let handed = self.handover_dir(bck, key, upload_id)?;
        if tokio::fs::metadata(&handed).await.is_err() {
            let (dir, _) = self.load_upload(bck, key, upload_id).await?;
            let target = dir.with_file_name(format!("{HANDOVER}{upload_id}"));
            tokio::fs::rename(&dir, &target).await?;
        }
        let handed = self.handover_dir(bck, key, upload_id)?;
        read_upload(&handed, bck, key, upload_id).await?;
        let mut files = vec!["upload.json".to_owned()];
        let mut rd = tokio::fs::read_dir(&handed).await?;
        while let Some(e) = rd.next_entry().await? {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("part-") && !name.ends_with(".tmp") {
                files.push(name);
            }
        }
        files[1..].sort();
        Ok(files)
    }

    /// One file of an upload being handed over (see [`Store::mpu_hand_over`]).
    pub async fn mpu_handed_file(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
        file: &str,
    ) -> Result<tokio::fs::File, StoreError> {
        if !valid_upload_file(file) {
            return Err(ApiError::bad_request(format!("no such upload file {file:?}")).into());
        }
        let path = self.handover_dir(bck, key, upload_id)?.join(file);
        tokio::fs::File::open(&path)
            .await
            .map_err(|_| no_such_upload(upload_id))
    }

    /// The new owner has the upload: what was handed over goes.
    pub async fn mpu_handed_over(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        let dir = self.handover_dir(bck, key, upload_id)?;
        match tokio::fs::remove_dir_all(&dir).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// A fresh directory to receive a handed-over upload in (see [`Store::mpu_adopt`]).
    pub async fn mpu_adopting(
        &self,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<PathBuf, StoreError> {
        let dir = self.upload_dir(bck, key, upload_id)?;
        let tmp = dir.with_file_name(format!(
            "{ADOPTING}{upload_id}.{}",
            uuid::Uuid::new_v4().simple()
        ));
        tokio::fs::create_dir_all(&tmp).await?;
        Ok(tmp)
    }

    /// Makes a fully received upload (in `tmp`, from [`Store::mpu_adopting`]) this target's:
    /// its files are made durable, then the directory takes the upload's place at once.
    pub async fn mpu_adopt(
        &self,
        tmp: &Path,
        bck: &Bck,
        key: &str,
        upload_id: &str,
    ) -> Result<(), StoreError> {
        let dir = self.upload_dir(bck, key, upload_id)?;
        let (tmp, dir2) = (tmp.to_owned(), dir.clone());
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            for e in std::fs::read_dir(&tmp)? {
                std::fs::File::open(e?.path())?.sync_all()?;
            }
            std::fs::rename(&tmp, &dir2)?;
            if let Some(parent) = dir2.parent() {
                std::fs::File::open(parent)?.sync_all()?;
            }
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))??;
        Ok(())
    }

    /// Uploads in progress for a bucket on this target, by key then upload id.
    pub async fn mpu_list_uploads(&self, bck: &Bck) -> Result<Vec<UploadInfo>, StoreError> {
        let bucket = bck.uname();
        let mut out = Vec::new();
        for mp in self.mountpaths() {
            let Ok(mut rd) = tokio::fs::read_dir(mp.path.join("mpu")).await else {
                continue;
            };
            while let Some(e) = rd.next_entry().await? {
                if !valid_upload_id(&e.file_name().to_string_lossy()) {
                    continue; // handed over, or being received
                }
                let Ok(bytes) = tokio::fs::read(e.path().join("upload.json")).await else {
                    continue;
                };
                if let Ok(info) = serde_json::from_slice::<UploadInfo>(&bytes)
                    && info.bucket == bucket
                {
                    out.push(info);
                }
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key).then(a.upload_id.cmp(&b.upload_id)));
        Ok(out)
    }
}

/// The error for a whole-object checksum declared on completion that is not the object's.
fn bad_digest(name: &str, have: &str, want: &str) -> StoreError {
    ApiError::new(
        ErrorKind::BadDigest,
        format!("{name}: the completed object's is {have}, the request declared {want}"),
    )
    .into()
}
