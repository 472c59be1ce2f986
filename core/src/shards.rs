//! Wire types of shard operations: the list-objects flags that expand archives, get-batch
//! requests (AIStore's "moss": `GET /v1/ml/moss`), and the options of the archive and
//! reshard jobs. The archive formats themselves live in `gristmill-shard`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ApiError;

/// List-objects flag: list the members of every shard as `shard.tar/member` entries right
/// after the shard (AIStore's `LsArchDir`, bit 3).
pub const LS_ARCH_DIR: u64 = 1 << 3;
/// Entry flag: the entry is a member inside a shard (AIStore's `EntryInArch`).
pub const ENTRY_IN_ARCH: u32 = 1 << 7;
/// Entry flag: the entry is a shard whose members follow (AIStore's `EntryIsArchive`).
pub const ENTRY_IS_ARCHIVE: u32 = 1 << 9;
/// Joins a shard's name and a member's name in the sort keys and continuation tokens of an
/// expanded listing. Neither object nor member names may contain NUL, and NUL sorts before
/// every other byte, so `shard\0member` orders every member right after its shard and before
/// any other object — plain byte order of these keys is the listing order.
pub const ARCH_KEY_SEP: char = '\0';

/// Query parameters of reads inside shards.
pub mod query {
    /// `GET ...?archpath=member`: one member.
    pub const ARCHPATH: &str = "archpath";
    /// `GET ...?archregx=EXPR`: a tar of the matching members.
    pub const ARCHREGX: &str = "archregx";
    /// How `archregx` matches: `regexp` (default), `prefix`, `suffix`, `substr`, `wdskey`.
    pub const ARCHMODE: &str = "archmode";
    /// The shard's format when its name does not say (`.tar`, `.tgz`, `.tar.lz4`, `.zip`).
    pub const ARCHMIME: &str = "archmime";
}

/// Prefix of the in-band names of items that could not be read (`coer`).
pub const MISSING_DIR: &str = "__404__";

/// A get-batch request (AIStore's `MossReq`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MossReq {
    /// The items, in the order the output must have.
    #[serde(rename = "in", default)]
    pub items: Vec<MossIn>,
    /// Output format: `.tar` (default), `.tgz`/`.tar.gz`, `.tar.lz4`, `.zip`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mime: String,
    /// Continue on error: a missing item becomes an empty `__404__/...` entry instead of
    /// failing the request.
    #[serde(default)]
    pub coer: bool,
    /// Name entries by object name only (`obj`), not `bucket/obj`.
    #[serde(default)]
    pub onob: bool,
    /// Streaming output (one archive). `false` asks for AIStore's multipart answer: a JSON
    /// part describing every item, then the archive.
    #[serde(default)]
    pub strm: bool,
}

/// One item of a get-batch request (AIStore's `MossIn`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MossIn {
    #[serde(default)]
    pub objname: String,
    /// Bucket name; empty = the request's default bucket (`/v1/ml/moss/<bucket>`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// `provider/@uuid#ns/bucket/object`: names bucket and object in one string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uname: String,
    /// A member of the object (a shard) instead of the whole object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archpath: String,
    /// Caller's data, returned unchanged in the multipart metadata.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub opaque: String,
    /// Byte range: offset into the object (or the member).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub start: u64,
    /// Byte range length; 0 = the whole object (from `start`), -1 = from `start` to the end.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub length: i64,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Per-item metadata of a multipart (non-streaming) get-batch answer (AIStore's `MossOut`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MossOut {
    pub objname: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub archpath: String,
    pub bucket: String,
    pub provider: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub opaque: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub err_msg: String,
    pub size: u64,
}

/// The metadata part of a multipart get-batch answer (AIStore's `MossResp`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MossResp {
    pub out: Vec<MossOut>,
    pub uuid: String,
}

/// Options of an archive job (AIStore's `ArchiveMsg`, plus the series form).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchiveOpts {
    /// Output shard name in the destination bucket; with `shard_size`, a series template
    /// such as `out-{0000..}.tar`.
    pub archname: String,
    /// Output format; empty = from `archname`'s extension (`.tar` when it has none).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mime: String,
    /// Series form: cut a new shard when one reaches this many bytes (0 = one shard).
    #[serde(default)]
    pub shard_size: u64,
    /// Name members `bucket/object` instead of `object` (AIStore's `isbn`).
    #[serde(default)]
    pub include_bucket: bool,
    /// Append to `archname` if it exists (AIStore's `aate`), instead of replacing it.
    #[serde(default)]
    pub append: bool,
}

/// How reshard orders samples (AIStore's dsort `algorithm`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshardAlgorithm {
    /// `alphanumeric` (default: by sample key), `shuffle` (by a seeded hash of the key),
    /// `none` (input order: shard by shard as listed, samples in archive order).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Alphanumeric: descending.
    #[serde(default)]
    pub decreasing: bool,
    /// Shuffle: the seed (any string; empty = a fixed default). Same seed, same output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub seed: String,
}

/// A reshard (AIStore's dsort) request: read the samples of the input shards, order them and
/// write them into new shards of a target size, never splitting a sample.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReshardSpec {
    /// Input shards: a template (`in-{000..199}.tar`), a prefix, or names.
    #[serde(default)]
    pub input: crate::job::Selection,
    /// Output shard names: a template with one numeric range, open-ended allowed
    /// (`out-{0000..}`); `output_extension` is appended unless it already ends with one.
    pub output_format: String,
    /// `.tar` (default), `.tgz`, `.tar.lz4`, `.zip`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output_extension: String,
    /// Target size of each output shard in bytes, counting each file as its tar header plus
    /// its padded data (a shard closes at the first sample that reaches it). Ignored with an
    /// external key map.
    #[serde(default)]
    pub output_shard_size: u64,
    #[serde(default)]
    pub algorithm: ReshardAlgorithm,
    /// External key map: output shard name → the sample keys it holds (AIStore's EKM, with
    /// exact keys). Samples whose key is not mapped fail the job unless
    /// `ekm_missing_key` is `ignore` (they are then dropped).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ekm: BTreeMap<String, Vec<String>>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ekm_missing_key: String,
    /// Records (samples) the coordinator sorts in memory; beyond it, sorted runs spill to
    /// disk and are merged. 0 = the default (1,000,000).
    #[serde(default)]
    pub max_mem_records: u64,
    /// What to do when two samples share a key: `ignore` (keep both, default), `abort`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub duplicated_records: String,
    /// Plan only: count what would be written.
    #[serde(default)]
    pub dry_run: bool,
    /// Set by the proxy: the target that gathers, orders and assigns all records.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub coordinator: String,
    /// Set by the proxy: the targets taking part (every target must report its records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// Default in-memory record budget of a reshard coordinator.
pub const DEFAULT_MAX_MEM_RECORDS: u64 = 1_000_000;

impl ReshardSpec {
    /// The extension of output shards (with its dot).
    pub fn output_ext(&self) -> &str {
        if self.output_extension.is_empty() {
            ".tar"
        } else {
            &self.output_extension
        }
    }

    /// The series of output shard names.
    pub fn output_series(&self) -> Result<Series, ApiError> {
        let mut fmt = self.output_format.clone();
        let ext = self.output_ext().to_owned();
        let ext = if ext.starts_with('.') {
            ext
        } else {
            format!(".{ext}")
        };
        if !fmt
            .to_ascii_lowercase()
            .ends_with(&ext.to_ascii_lowercase())
        {
            fmt.push_str(&ext);
        }
        Series::parse(&fmt)
    }
}

/// A series of names from a template with one numeric range: `out-{0000..}.tar` (open-ended)
/// or `out-{0000..0999}.tar`; the width comes from the start token when it has leading zeros.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    prefix: String,
    start: u64,
    end: Option<u64>,
    width: usize,
    suffix: String,
}

impl Series {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("invalid name template {s:?}: {why}"));
        let open = s.find('{').ok_or_else(|| bad("no {start..} range"))?;
        let close = s[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or_else(|| bad("unclosed '{'"))?;
        if s[close + 1..].contains('{') {
            return Err(bad("only one range is allowed"));
        }
        let body = &s[open + 1..close];
        let (a, b) = body
            .split_once("..")
            .ok_or_else(|| bad("expected {start..} or {start..end}"))?;
        let start: u64 = a.parse().map_err(|_| bad("bad range start"))?;
        let end = if b.is_empty() {
            None
        } else {
            let e: u64 = b.parse().map_err(|_| bad("bad range end"))?;
            if e < start {
                return Err(bad("range end before start"));
            }
            Some(e)
        };
        let width = if a.len() > 1 && a.starts_with('0') {
            a.len()
        } else {
            0
        };
        Ok(Self {
            prefix: s[..open].to_owned(),
            start,
            end,
            width,
            suffix: s[close + 1..].to_owned(),
        })
    }

    /// The `i`-th name (0-based); an error past the end of a closed range.
    pub fn name(&self, i: u64) -> Result<String, ApiError> {
        let n = self
            .start
            .checked_add(i)
            .filter(|n| self.end.is_none_or(|e| *n <= e))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "output name template {}{{..}}{} has no room for shard #{i}",
                    self.prefix, self.suffix
                ))
            })?;
        Ok(format!(
            "{}{:0width$}{}",
            self.prefix,
            n,
            self.suffix,
            width = self.width
        ))
    }

    /// The text after the range (e.g. `.tar`).
    pub fn suffix(&self) -> &str {
        &self.suffix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_names() {
        let s = Series::parse("out-{0000..}.tar").unwrap();
        assert_eq!(s.name(0).unwrap(), "out-0000.tar");
        assert_eq!(s.name(12345).unwrap(), "out-12345.tar");
        let s = Series::parse("a/{7..9}").unwrap();
        assert_eq!(s.name(2).unwrap(), "a/9");
        assert!(s.name(3).is_err());
        assert!(Series::parse("plain.tar").is_err());
        assert!(Series::parse("{0..}{0..}").is_err());
        let spec = ReshardSpec {
            output_format: "new-{000..}".into(),
            ..Default::default()
        };
        assert_eq!(
            spec.output_series().unwrap().name(1).unwrap(),
            "new-001.tar"
        );
    }

    #[test]
    fn moss_request_parses_sdk_shape() {
        let r: MossReq = serde_json::from_str(
            r#"{"in":[{"objname":"a","bucket":"b","provider":"ais"},{"objname":"s.tar","archpath":"x/y.jpg","length":-1}],"mime":".tar","coer":true,"strm":true,"coloc":1}"#,
        )
        .unwrap();
        assert_eq!(r.items.len(), 2);
        assert_eq!(r.items[1].archpath, "x/y.jpg");
        assert_eq!(r.items[1].length, -1);
        assert!(r.coer && r.strm && !r.onob);
    }

    #[test]
    fn arch_keys_sort_members_after_their_shard() {
        let mut keys = [
            "a.tar-x".to_string(),
            format!("a.tar{ARCH_KEY_SEP}m2"),
            "a.tar".into(),
            format!("a.tar{ARCH_KEY_SEP}m1"),
            "a.tar/real".into(),
        ];
        keys.sort();
        assert_eq!(keys[0], "a.tar");
        assert!(keys[1].ends_with("m1") && keys[2].ends_with("m2"));
        assert_eq!(keys[3], "a.tar-x");
    }
}
