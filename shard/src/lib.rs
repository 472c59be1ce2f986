//! `gristmill-shard`: reading and writing the archives ("shards") that pack many small files
//! for training: tar, tgz/tar.gz, tar.lz4 and zip. Pure and blocking (`std::io`); servers run
//! it on blocking threads.
//!
//! How data flows:
//! - [`Format`] is the one table of formats: names (`.tar`, `tar.gz`, ...), extensions and
//!   magic bytes.
//! - [`ShardReader`] reads any format: members in order with streamed data ([`Entry`]), one
//!   member by name (`archpath`), a listing, the members a [`Selector`] matches (`archregx`
//!   + `archmode`) copied into a new shard, or WebDataset [`Sample`]s.
//! - [`TarIndex`] records where each member of an uncompressed tar is, built by seeking over
//!   the data; [`read_member_at`] then reads a member with one seek.
//! - [`ShardWriter`] writes any format, deterministically, from readers of known size.
//! - Everything read is untrusted: names are checked ([`validate_member_name`]), links and
//!   devices refused, and [`Limits`] bound members, sizes, expansion and ratio, so a hostile
//!   archive costs bounded memory and work and ends in a [`ShardError`] whose
//!   [`ShardError::kind`] is a 4xx.

#![deny(missing_docs)]

mod error;
mod format;
mod index;
mod limits;
mod member;
mod reader;
mod sample;
mod select;
mod tarball;
mod writer;
mod zipfile;

pub use error::{Result, ShardError};
pub use format::{Format, MAGIC_LEN};
pub use index::{IndexEntry, MemberAt, TarIndex, read_member_at};
pub use limits::{Limits, MAX_NAME_LEN, RATIO_FLOOR, validate_member_name};
pub use member::{Member, MemberKind};
pub use reader::{Entry, ShardReader, list_members};
pub use sample::{Sample, SampleData, SampleFile, Samples, group_samples, wds_key};
pub use select::{MatchMode, Selector};
pub use writer::ShardWriter;
