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
            other => ApiError::internal(other.to_string()),
        }
    }
}
