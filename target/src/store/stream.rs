//! A data file as a stream of chunks: positioned reads on the blocking pool.

use axum::body::Bytes;
use std::sync::Arc;

/// Chunk size of streamed reads; the first chunk is smaller so the first byte leaves sooner.
pub(crate) const STREAM_CHUNK: u64 = 1024 * 1024;

pub(crate) const FIRST_CHUNK: u64 = 256 * 1024;

/// `len` bytes of `file` from `start` as a stream of chunks (positioned reads on the blocking
/// pool; the first chunk is small so the first byte leaves sooner).
pub(crate) fn file_stream(
    file: impl Into<Arc<std::fs::File>>,
    start: u64,
    len: u64,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    use std::os::unix::fs::FileExt;
    let file = file.into();
    futures::stream::unfold((file, start, len), move |(file, offset, left)| async move {
        if left == 0 {
            return None;
        }
        let want = left.min(if offset == start {
            FIRST_CHUNK
        } else {
            STREAM_CHUNK
        });
        let f = file.clone();
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = vec![0u8; want as usize];
            f.read_exact_at(&mut buf, offset).map(|()| Bytes::from(buf))
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())));
        match read {
            Ok(bytes) => Some((Ok(bytes), (file, offset + want, left - want))),
            Err(e) => Some((Err(e), (file, offset, 0))),
        }
    })
}
