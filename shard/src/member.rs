//! What a listing says about one archive member.

use serde::{Deserialize, Serialize};

/// Regular file or directory. Links, devices and FIFOs are never members: readers refuse
/// archives that contain them ([`crate::ShardError::Unsafe`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberKind {
    /// A regular file: it has data.
    File,
    /// A directory entry: no data. Listed because Python's `tarfile`/`zipfile` list them.
    Dir,
}

/// One member of an archive, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The path inside the archive, exactly as Python's `tarfile.getnames()` /
    /// `zipfile.namelist()` report it: tar directories without a trailing `/`, zip
    /// directories with one. Always passes [`crate::validate_member_name`].
    pub name: String,
    /// Uncompressed size in bytes (0 for directories).
    pub size: u64,
    /// Permission bits (`0o7777` mask); zip entries without Unix attributes get 0o644/0o755.
    pub mode: u32,
    /// Modification time, Unix seconds (zip's DOS time is read as UTC).
    pub mtime: u64,
    /// File or directory.
    pub kind: MemberKind,
}

impl Member {
    /// Whether this member is a regular file (has data that can be read or selected).
    pub fn is_file(&self) -> bool {
        self.kind == MemberKind::File
    }
}
