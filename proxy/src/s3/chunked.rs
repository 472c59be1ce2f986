//! Decoding of unsigned `aws-chunked` bodies (`x-amz-content-sha256:
//! STREAMING-UNSIGNED-PAYLOAD-TRAILER`). `s3s` decodes aws-chunked bodies while verifying
//! signatures, so signed uploads arrive decoded; anonymous ones arrive framed, and are decoded
//! here: `<hex size>[;ext]\r\n<data>\r\n ... 0\r\n<name>:<value>\r\n...\r\n`.

use std::sync::{Arc, Mutex};

use bytes::{Buf, Bytes, BytesMut};
use futures::{Stream, StreamExt};

/// The content-sha256 value that marks an unsigned aws-chunked body.
pub(super) const UNSIGNED_TRAILER: &str = "STREAMING-UNSIGNED-PAYLOAD-TRAILER";

/// Longest chunk header or trailer line accepted.
const MAX_LINE: usize = 4096;

/// Trailers decoded from the end of the body, as `(lowercase name, value)`.
pub(super) type Trailers = Arc<Mutex<Vec<(String, String)>>>;

enum State {
    Header,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

fn bad(why: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("aws-chunked body: {why}"),
    )
}

/// Decodes a framed body; trailers land in `trailers` once the body has been read to its end.
pub(super) fn decode<S, E>(
    body: S,
    trailers: Trailers,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: Stream<Item = Result<Bytes, E>> + Send + Unpin + 'static,
    E: std::fmt::Display,
{
    let state = (body, BytesMut::new(), State::Header, trailers, false);
    futures::stream::unfold(
        state,
        |(mut body, mut buf, mut st, trailers, mut eof)| async move {
            loop {
                match st {
                    State::Done => return None,
                    State::Data(0) => st = State::DataEnd,
                    State::Data(left) if !buf.is_empty() => {
                        let n = (left as usize).min(buf.len());
                        let out = buf.split_to(n).freeze();
                        return Some((
                            Ok(out),
                            (body, buf, State::Data(left - n as u64), trailers, eof),
                        ));
                    }
                    _ => {}
                }
                // Parse what is buffered; read more when a line is incomplete.
                let line_end = buf.windows(2).position(|w| w == b"\r\n");
                match (&st, line_end) {
                    (State::Header, Some(i)) => {
                        let line = String::from_utf8_lossy(&buf[..i]).into_owned();
                        buf.advance(i + 2);
                        let size = line.split(';').next().unwrap_or("").trim();
                        match u64::from_str_radix(size, 16) {
                            Ok(0) => st = State::Trailers,
                            Ok(n) => st = State::Data(n),
                            Err(_) => {
                                return Some((
                                    Err(bad("invalid chunk size")),
                                    (body, buf, State::Done, trailers, eof),
                                ));
                            }
                        }
                        continue;
                    }
                    (State::DataEnd, Some(0)) => {
                        buf.advance(2);
                        st = State::Header;
                        continue;
                    }
                    (State::DataEnd, Some(_)) => {
                        return Some((
                            Err(bad("missing CRLF after a chunk")),
                            (body, buf, State::Done, trailers, eof),
                        ));
                    }
                    (State::Trailers, Some(0)) => {
                        buf.advance(2);
                        st = State::Done;
                        continue;
                    }
                    (State::Trailers, Some(i)) => {
                        let line = String::from_utf8_lossy(&buf[..i]).into_owned();
                        buf.advance(i + 2);
                        if let Some((k, v)) = line.split_once(':') {
                            trailers
                                .lock()
                                .expect("trailers lock")
                                .push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
                        }
                        continue;
                    }
                    _ if buf.len() > MAX_LINE && !matches!(st, State::Data(_)) => {
                        return Some((
                            Err(bad("line too long")),
                            (body, buf, State::Done, trailers, eof),
                        ));
                    }
                    _ => {}
                }
                if eof {
                    // A body that ends after the last chunk without trailers is accepted.
                    if matches!(st, State::Trailers) && buf.is_empty() {
                        return None;
                    }
                    return Some((
                        Err(bad("truncated")),
                        (body, buf, State::Done, trailers, eof),
                    ));
                }
                match body.next().await {
                    Some(Ok(b)) => buf.extend_from_slice(&b),
                    Some(Err(e)) => {
                        return Some((
                            Err(std::io::Error::other(e.to_string())),
                            (body, buf, State::Done, trailers, eof),
                        ));
                    }
                    None => eof = true,
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn decodes_chunks_and_trailers_across_splits() {
        let framed = b"5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:abc==\r\n\r\n";
        for split in 1..framed.len() {
            let parts: Vec<Result<Bytes, std::io::Error>> = framed
                .chunks(split)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let trailers = Trailers::default();
            let out: Vec<_> = decode(futures::stream::iter(parts), trailers.clone())
                .collect()
                .await;
            let data: Vec<u8> = out.into_iter().flat_map(|r| r.unwrap().to_vec()).collect();
            assert_eq!(data, b"hello world", "split {split}");
            assert_eq!(
                trailers.lock().unwrap().as_slice(),
                [("x-amz-checksum-crc32".to_string(), "abc==".to_string())]
            );
        }
    }

    #[tokio::test]
    async fn rejects_garbage() {
        let parts = vec![Ok::<_, std::io::Error>(Bytes::from_static(b"zz\r\nabc"))];
        let out: Vec<_> = decode(futures::stream::iter(parts), Trailers::default())
            .collect()
            .await;
        assert!(out.iter().any(|r| r.is_err()));
    }
}
