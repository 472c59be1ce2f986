//! Errors of the storage node, and how each becomes an API error.

use gristmill_core::{ApiError, ErrorKind};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Api(#[from] ApiError),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata index error: {0}")]
    Index(String),
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    /// A copy sent by another node was not stored: this node holds a newer generation of the
    /// object, or a tombstone at least as new.
    #[error("a newer generation ({current}) of the object is here already")]
    Stale { current: u64 },
}

impl StoreError {
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        StoreError::Api(ApiError::not_found(format!("{what} does not exist")))
    }
}

macro_rules! index_error {
    ($($t:ty),*) => {$(
        impl From<$t> for StoreError {
            fn from(e: $t) -> Self { StoreError::Index(e.to_string()) }
        }
    )*};
}
index_error!(
    redb::Error,
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Api(api) => api,
            StoreError::Io(io) if io.raw_os_error() == Some(libc::ENOSPC) => {
                ApiError::new(ErrorKind::InsufficientStorage, "out of space")
            }
            StoreError::Stale { .. } => ApiError::new(ErrorKind::Conflict, e.to_string()),
            other => ApiError::internal(other.to_string()),
        }
    }
}
