//! A write in progress: a temp file, hashed as it is written, committed to the index (or\n//! dropped) as one step.

use super::*;
use crate::store::error::StoreError;
use crate::store::index::IndexOp;
use crate::store::meta::ObjectMeta;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use gristmill_core::ApiError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use xxhash_rust::xxh64::Xxh64;

/// An object being written: a temp file that grows chunk by chunk (readers may follow it through
/// [`PendingWrite::path`]), checksummed as it goes. [`commit`](Self::commit) makes it the
/// object; [`abort`](Self::abort) or dropping it leaves nothing behind.
pub struct PendingWrite {
    pub(super) mp: Arc<Mountpath>,
    /// Mountpaths to clear of older copies after the commit (only while a mountpath change
    /// is not yet resilvered).
    pub(super) others: Vec<Arc<Mountpath>>,
    /// Counts this write as in flight (the resilver waits for writes older than a change).
    pub(super) _ticket: mountset::WriteTicket,
    pub(super) usage: Arc<Usage>,
    pub(super) bucket: String,
    pub(super) name: String,
    pub(super) generation: u64,
    /// `None` once flushed and closed for the commit.
    pub(super) out: Option<tokio::io::BufWriter<tokio::fs::File>>,
    pub(super) xxhash: Xxh64,
    pub(super) md5: Option<md5::Md5>,
    pub(super) s3: Option<s3s::checksum::ChecksumHasher>,
    pub(super) size: u64,
    pub(super) opts: PutOptions,
    /// The temp file; `None` once it was renamed into place or removed.
    pub(super) tmp: Option<PathBuf>,
}

impl std::fmt::Debug for PendingWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingWrite")
            .field("bucket", &self.bucket)
            .field("name", &self.name)
            .field("size", &self.size)
            .finish()
    }
}

impl PendingWrite {
    /// The in-progress temp file. Bytes appear in it as [`flush`](Self::flush) pushes them.
    pub fn path(&self) -> &Path {
        self.tmp.as_deref().unwrap_or_else(|| Path::new(""))
    }

    /// Bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Options the commit will apply (e.g. to record a remote ETag learned after the write).
    pub fn opts_mut(&mut self) -> &mut PutOptions {
        &mut self.opts
    }

    /// Hands the temp file to a writer of the caller's own (e.g. a blocking thread fed by a
    /// download), which writes it from the start and computes the checksums; it reports them
    /// with [`set_written`](Self::set_written) before the commit. Nothing may have been
    /// written through [`write_chunk`](Self::write_chunk).
    pub async fn take_file(&mut self) -> Result<std::fs::File, StoreError> {
        if self.size > 0 || self.s3.is_some() {
            return Err(StoreError::Index(
                "take_file after write_chunk, or with S3 checksums to compute".into(),
            ));
        }
        let out = self
            .out
            .take()
            .ok_or_else(|| StoreError::Index("the write's file was already taken".into()))?;
        Ok(out.into_inner().into_std().await)
    }

    /// What a writer of [`take_file`](Self::take_file) wrote: the size and the checksum
    /// states over exactly those bytes; `md5` exactly when the options asked for it. The
    /// writer also syncs the file if it must be durable.
    pub fn set_written(
        &mut self,
        size: u64,
        xxhash: Xxh64,
        md5: Option<md5::Md5>,
    ) -> Result<(), StoreError> {
        if self.md5.is_some() != md5.is_some() {
            return Err(StoreError::Index(
                "the writer's MD5 does not match the write's options".into(),
            ));
        }
        self.size = size;
        self.xxhash = xxhash;
        self.md5 = md5;
        Ok(())
    }

    pub async fn write_chunk(&mut self, chunk: &[u8]) -> Result<(), StoreError> {
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| StoreError::Index("write after the write was closed".into()))?;
        self.xxhash.update(chunk);
        if let Some(m) = self.md5.as_mut() {
            md5::Digest::update(m, chunk);
        }
        if let Some(h) = self.s3.as_mut() {
            h.update(chunk);
        }
        self.size += chunk.len() as u64;
        out.write_all(chunk).await?;
        Ok(())
    }

    /// Pushes buffered bytes to the file, so readers of [`path`](Self::path) see them.
    pub async fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(out) = self.out.as_mut() {
            out.flush().await?;
        }
        Ok(())
    }

    /// Writes a whole request body.
    pub async fn write_stream<S, E>(&mut self, body: S) -> Result<(), StoreError>
    where
        S: Stream<Item = Result<Bytes, E>> + Send,
        E: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                StoreError::Api(ApiError::bad_request(format!("reading request body: {e}")))
            })?;
            self.write_chunk(&chunk).await?;
        }
        self.flush().await
    }

    /// The xxhash checksum (hex) of the bytes written so far.
    pub fn xxhash_hex(&self) -> String {
        format!("{:016x}", self.xxhash.digest())
    }

    /// Changes how the object will be committed (a staged replica learns its generation,
    /// version and mtime only when the owner commits).
    pub fn options_mut(&mut self) -> &mut PutOptions {
        &mut self.opts
    }

    /// Closes the temp file, fsyncs it when durable, and checks size and checksum against
    /// what the sender declared: after it, the write is on disk and only the commit is left.
    /// On a mismatch the temp file is removed. Idempotent.
    pub async fn verify(&mut self) -> Result<(), StoreError> {
        self.flush().await?;
        if let Some(out) = self.out.take() {
            let file = out.into_inner();
            if self.opts.durable {
                file.sync_data().await?;
            }
        }
        let size = self.size;
        let cksum = self.xxhash_hex();
        let opts = &self.opts;
        let mismatch = if opts.expected_size.is_some_and(|want| want != size) {
            Some(format!(
                "received {size} bytes, expected {}",
                opts.expected_size.unwrap_or_default()
            ))
        } else if let Some(want) = opts.expected_xxhash.as_deref()
            && !want.eq_ignore_ascii_case(&cksum)
        {
            Some(format!(
                "checksum mismatch: got xxhash {cksum}, expected {want}"
            ))
        } else {
            None
        };
        if let Some(why) = mismatch {
            self.remove_tmp().await;
            return Err(ApiError::bad_request(why).into());
        }
        Ok(())
    }

    /// Checks size and checksum against what the sender declared, fsyncs when durable, moves
    /// the file into place and commits its metadata. On any error nothing of it remains.
    pub async fn commit(mut self) -> Result<ObjectMeta, StoreError> {
        self.verify().await?;
        let size = self.size;
        let cksum = self.xxhash_hex();
        let md5 = self
            .md5
            .take()
            .map(|m| hex::encode(md5::Digest::finalize(m)));
        if let (Some(want), Some(got)) = (self.opts.expected_md5.clone(), md5.as_deref())
            && want != got
        {
            self.remove_tmp().await;
            return Err(ApiError::new(
                gristmill_core::ErrorKind::BadGateway,
                format!("checksum mismatch: received MD5 {got}, the remote's ETag says {want}"),
            )
            .into());
        }

        let mp = self.mp.clone();
        let rel = data_file_name(&self.bucket, &self.name, self.generation);
        let now = now_ns();
        let mut custom = self.opts.custom.clone();
        if let Some(md5) = md5 {
            custom.insert(ETAG_KEY.into(), md5);
        }
        if let Some(h) = self.s3.take() {
            for (name, v) in gristmill_node::s3::checksum_values(h.finalize()) {
                custom.insert(name.to_owned(), v);
            }
        }
        let meta = ObjectMeta {
            bucket: self.bucket.clone(),
            name: self.name.clone(),
            size,
            cksum_type: CKSUM_XXHASH.into(),
            cksum_value: cksum,
            version: self.opts.version.clone(),
            atime_ns: now,
            mtime_ns: self.opts.mtime_ns.unwrap_or(now),
            file: rel.clone(),
            custom,
            generation: 0,
        };
        let Some(tmp) = self.tmp.take() else {
            return Err(StoreError::Index("commit of a removed write".into()));
        };
        let dest = mp.path.join(&rel);
        let encoded = meta.encode();
        let durable = self.opts.durable;
        let placed = tokio::task::spawn_blocking(move || -> Result<(), StoreError> {
            set_meta_xattr(&tmp, &encoded);
            let dir = dest
                .parent()
                .expect("data files live in a fan-out directory");
            let moved = create_fan_out_dir(dir, durable).and_then(|_| std::fs::rename(&tmp, &dest));
            if let Err(e) = moved {
                let _ = std::fs::remove_file(&tmp);
                return Err(e.into());
            }
            if durable {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })
        .await
        .map_err(|e| StoreError::Index(e.to_string()))?;
        placed?;

        let rule = self.opts.generation;
        let put = IndexOp::Put {
            meta,
            generation: rule,
            condition: self.opts.condition.clone(),
        };
        let applied = match if self.opts.relaxed_index {
            mp.index.apply_relaxed(put).await
        } else {
            mp.index.apply(put).await
        } {
            Ok(a) => a,
            Err(e) => {
                let _ = tokio::fs::remove_file(mp.path.join(&rel)).await;
                return Err(e);
            }
        };
        if let Some(unmet) = applied.unmet {
            let _ = tokio::fs::remove_file(mp.path.join(&rel)).await;
            return Err(StoreError::Api(crate::store::index::unmet_error(unmet)));
        }
        if applied.stored.is_none()
            && let crate::store::index::GenRule::IfNewer(_) = rule
        {
            // A newer generation (or its tombstone) is here: this copy is not wanted.
            let _ = tokio::fs::remove_file(mp.path.join(&rel)).await;
            let current = applied
                .replaced
                .as_ref()
                .map_or(0, ObjectMeta::effective_gen);
            let tomb = mp.index.tombstone(&self.bucket, &self.name)?.unwrap_or(0);
            return Err(StoreError::Stale {
                current: current.max(tomb),
            });
        }
        self.usage.account(
            &self.bucket,
            applied.stored.as_ref(),
            applied.replaced.as_ref(),
        );
        if applied.demoted {
            // The version this write replaced is noncurrent now.
            self.usage.moved_current(&self.bucket, false);
        }
        if let Some(old) = applied.replaced {
            remove_data_file(&mp, &old.file).await;
        }
        for old in &applied.freed {
            remove_data_file(&mp, &old.file).await;
            self.usage.account(&self.bucket, None, Some(old));
        }
        if !self.others.is_empty() {
            mountset::drop_other_copies(&self.others, &self.usage, &self.bucket, &self.name)
                .await?;
        }
        applied
            .stored
            .ok_or_else(|| StoreError::Index("put committed without a record".into()))
    }

    /// The S3 checksums of everything written so far, final: they are kept for the commit
    /// (nothing more may be written). A multipart completion checks them against the ones
    /// the client declared before anything is staged.
    pub fn finish_s3_checksums(&mut self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(h) = self.s3.take() {
            for (name, v) in gristmill_node::s3::checksum_values(h.finalize()) {
                self.opts.custom.insert(name.to_owned(), v.clone());
                out.push((name.to_owned(), v));
            }
        }
        out
    }

    /// Gives the write up: the temp file is removed.
    pub async fn abort(mut self) {
        self.out.take();
        self.remove_tmp().await;
    }

    async fn remove_tmp(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            // Dropped mid-write (error or cancelled request): unlinking is one quick syscall.
            let _ = std::fs::remove_file(tmp);
        }
    }
}
