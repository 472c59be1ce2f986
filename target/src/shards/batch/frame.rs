//! The frames of a get-batch answer in parts: a JSON head per part, then its bytes.

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
use super::*;
use gristmill_core::{ApiError, ErrorKind};
use serde::{Deserialize, Serialize};
use std::io::{self as stdio, Read, Write};

/// The frame header of a part stream: item `i` of the part request follows with `size`
/// bytes, or could not be read (`err`, with its HTTP status).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Frame {
    pub(crate) i: u64,
    #[serde(default)]
    pub(crate) size: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) err: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub(crate) status: u16,
}

pub(crate) fn is_zero(v: &u16) -> bool {
    *v == 0
}

/// The first frame of a part stream: every item's size or error, known before any data.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Summary {
    pub(crate) items: Vec<Frame>,
}

/// Body of `POST /v1/shards/part`.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct PartReq {
    pub(crate) items: Vec<Item>,
    #[serde(default)]
    pub(crate) coer: bool,
}

impl Frame {
    /// The binary form of an item's frame header: `i`, `size` (u64 BE), `status` (u16 BE),
    /// the error's length (u32 BE) and text.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let err = self.err.as_bytes();
        let mut out = Vec::with_capacity(22 + err.len());
        out.extend_from_slice(&self.i.to_be_bytes());
        out.extend_from_slice(&self.size.to_be_bytes());
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&(err.len() as u32).to_be_bytes());
        out.extend_from_slice(err);
        out
    }

    pub(crate) fn read(r: &mut dyn Read) -> Result<Frame, ApiError> {
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

pub(crate) fn frame_error(e: &ApiError, i: u64) -> Frame {
    Frame {
        i,
        size: 0,
        err: e.message.clone(),
        status: e.status().as_u16(),
    }
}

pub(crate) fn error_of(f: &Frame) -> ApiError {
    let kind = ErrorKind::from_status(
        http::StatusCode::from_u16(f.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR),
    );
    ApiError::new(kind, f.err.clone())
}

pub(crate) fn write_frame(out: &mut dyn Write, bytes: &[u8]) -> stdio::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| stdio::Error::other("frame too large"))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)
}

pub(crate) fn read_frame<T: serde::de::DeserializeOwned>(r: &mut dyn Read) -> Result<T, ApiError> {
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
