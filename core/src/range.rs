//! HTTP `Range: bytes=...` parsing for single ranges.

use crate::error::{ApiError, ErrorKind};

/// An inclusive byte range within an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    /// Inclusive.
    pub end: u64,
}

impl ByteRange {
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// `bytes start-end/size`, for `Content-Range`.
    pub fn content_range(&self, size: u64) -> String {
        format!("bytes {}-{}/{}", self.start, self.end, size)
    }
}

/// Parses a `Range` header against an object of `size` bytes.
///
/// Returns `Ok(None)` for headers to ignore (not `bytes=`, or several ranges, which we answer
/// with the whole object as RFC 9110 allows) and `RangeNotSatisfiable` for ranges that select
/// nothing.
pub fn parse_range(value: &str, size: u64) -> Result<Option<ByteRange>, ApiError> {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let unsatisfiable = || {
        Err(ApiError::new(
            ErrorKind::RangeNotSatisfiable,
            format!("range {value:?} not satisfiable for an object of {size} bytes"),
        ))
    };
    let invalid = || Err(ApiError::bad_request(format!("invalid range {value:?}")));
    let Some((first, last)) = spec.trim().split_once('-') else {
        return invalid();
    };
    let parse = |s: &str| s.trim().parse::<u64>().ok();
    match (first.trim().is_empty(), last.trim().is_empty()) {
        // bytes=-N: the last N bytes
        (true, false) => {
            let Some(n) = parse(last) else {
                return invalid();
            };
            if n == 0 || size == 0 {
                return unsatisfiable();
            }
            let n = n.min(size);
            Ok(Some(ByteRange {
                start: size - n,
                end: size - 1,
            }))
        }
        // bytes=S-
        (false, true) => {
            let Some(start) = parse(first) else {
                return invalid();
            };
            if start >= size {
                return unsatisfiable();
            }
            Ok(Some(ByteRange {
                start,
                end: size - 1,
            }))
        }
        (false, false) => {
            let (Some(start), Some(end)) = (parse(first), parse(last)) else {
                return invalid();
            };
            if end < start {
                return invalid();
            }
            if start >= size {
                return unsatisfiable();
            }
            Ok(Some(ByteRange {
                start,
                end: end.min(size - 1),
            }))
        }
        (true, true) => invalid(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        let r = |s| parse_range(s, 100).unwrap().map(|r| (r.start, r.end));
        assert_eq!(r("bytes=0-9"), Some((0, 9)));
        assert_eq!(r("bytes=90-200"), Some((90, 99)));
        assert_eq!(r("bytes=-10"), Some((90, 99)));
        assert_eq!(r("bytes=-1000"), Some((0, 99)));
        assert_eq!(r("bytes=50-"), Some((50, 99)));
        assert_eq!(r("bytes=0-1,5-6"), None);
        assert_eq!(r("items=0-1"), None);
        assert_eq!(
            parse_range("bytes=100-", 100).unwrap_err().kind,
            ErrorKind::RangeNotSatisfiable
        );
        assert_eq!(
            parse_range("bytes=5-1", 100).unwrap_err().kind,
            ErrorKind::BadRequest
        );
        assert!(parse_range("bytes=-0", 100).is_err());
        assert!(parse_range("bytes=0-0", 0).is_err());
    }
}
