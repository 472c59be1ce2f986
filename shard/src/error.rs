//! The one error type of the crate. Each kind tells the server which 4xx (or 5xx) to answer.

use std::io;

use gristmill_core::{ApiError, ErrorKind};

/// Everything that can go wrong reading or writing a shard.
///
/// The kinds are coarse on purpose: a handler maps them to a status with [`ShardError::kind`]
/// and shows the message; nothing else about the archive leaks.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// The bytes are not a valid archive of the format: bad checksum, truncated, corrupt
    /// compression, inconsistent headers.
    #[error("malformed archive: {0}")]
    Malformed(String),
    /// A member that would be dangerous to hand on: a path that escapes (`..`, absolute),
    /// a link or device, a duplicate name, overlapping zip entries.
    #[error("unsafe archive member {name:?}: {reason}")]
    Unsafe {
        /// The member name as stored (lossy if not UTF-8).
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A [`crate::Limits`] bound was hit: too many members, a member or the whole expansion
    /// too large, or a compression ratio typical of a bomb.
    #[error("archive limit exceeded: {0}")]
    LimitExceeded(String),
    /// The requested member is not in the archive.
    #[error("not found in archive: {0}")]
    NotFound(String),
    /// A valid archive feature we do not read (sparse files, encryption, bzip2 in zip...), or
    /// an unknown format name.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A bad argument from the caller: an invalid regular expression, a member name that may
    /// not be written, data shorter than its declared size.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// The underlying reader or writer failed (disk, network): not the archive's fault.
    #[error("I/O error: {0}")]
    Io(io::Error),
}

/// Shorthand used across the crate.
pub type Result<T, E = ShardError> = std::result::Result<T, E>;

impl ShardError {
    /// The API error kind a server answers with.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ShardError::Malformed(_)
            | ShardError::Unsafe { .. }
            | ShardError::Unsupported(_)
            | ShardError::Invalid(_) => ErrorKind::BadRequest,
            ShardError::LimitExceeded(_) => ErrorKind::PayloadTooLarge,
            ShardError::NotFound(_) => ErrorKind::NotFound,
            ShardError::Io(_) => ErrorKind::Internal,
        }
    }

    pub(crate) fn malformed(msg: impl Into<String>) -> Self {
        ShardError::Malformed(msg.into())
    }

    pub(crate) fn limit(msg: impl Into<String>) -> Self {
        ShardError::LimitExceeded(msg.into())
    }

    pub(crate) fn unsafe_member(name: &str, reason: &'static str) -> Self {
        ShardError::Unsafe {
            name: name.to_owned(),
            reason,
        }
    }

    /// An I/O error met while reading archive bytes: truncation and decoder complaints
    /// (`InvalidData`, `InvalidInput`) are the archive's fault, not the disk's.
    pub(crate) fn from_archive_io(e: io::Error) -> Self {
        match ShardError::from(e) {
            ShardError::Io(e) => match e.kind() {
                io::ErrorKind::UnexpectedEof => ShardError::malformed("truncated archive"),
                io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
                    ShardError::Malformed(e.to_string())
                }
                _ => ShardError::Io(e),
            },
            other => other,
        }
    }

    /// Wraps this error in an `io::Error`, so it can travel through `Read::read` and come back
    /// out intact via `From<io::Error>`.
    pub(crate) fn into_io(self) -> io::Error {
        match self {
            ShardError::Io(e) => e,
            other => io::Error::other(other),
        }
    }
}

/// Recovers a `ShardError` that travelled inside an `io::Error` (from an [`crate::Entry`]'s
/// `read`); any other I/O error is [`ShardError::Io`].
impl From<io::Error> for ShardError {
    fn from(e: io::Error) -> Self {
        if e.get_ref().is_some_and(|inner| inner.is::<ShardError>()) {
            if let Some(inner) = e.into_inner() {
                return match inner.downcast::<ShardError>() {
                    Ok(shard) => *shard,
                    Err(other) => ShardError::Io(io::Error::other(other)),
                };
            }
            return ShardError::Io(io::Error::other("lost inner error"));
        }
        ShardError::Io(e)
    }
}

impl From<ShardError> for ApiError {
    fn from(e: ShardError) -> Self {
        ApiError::new(e.kind(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_errors_survive_a_trip_through_io_error() {
        let e = ShardError::limit("too many members").into_io();
        assert!(matches!(ShardError::from(e), ShardError::LimitExceeded(_)));
        let e = io::Error::new(io::ErrorKind::PermissionDenied, "disk");
        assert!(matches!(ShardError::from(e), ShardError::Io(_)));
    }

    #[test]
    fn decoder_errors_are_the_archives_fault() {
        let e = io::Error::new(io::ErrorKind::InvalidData, "corrupt deflate stream");
        assert!(matches!(
            ShardError::from_archive_io(e),
            ShardError::Malformed(_)
        ));
        let e = io::Error::from(io::ErrorKind::UnexpectedEof);
        assert!(matches!(
            ShardError::from_archive_io(e),
            ShardError::Malformed(_)
        ));
        assert_eq!(ShardError::NotFound("x".into()).kind(), ErrorKind::NotFound);
    }
}
