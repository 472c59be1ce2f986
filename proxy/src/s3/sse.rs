//! SSE-C: objects encrypted with the client's own key (AES-256, CTR mode), by this front, so
//! targets only ever store ciphertext and never see a key (`gristmill_core::sse` has what
//! they keep). A read needs the same key: without one it is refused (400 InvalidRequest), with
//! another one too (400: the key's salted hash is compared before any byte is sent).
//!
//! CTR turns each byte's position into its keystream, so a range read decrypts from where it
//! starts. A single PUT has one random IV; each part of a multipart upload is encrypted on
//! its own with a random IV that the target keeps with the part (a part uploaded again gets
//! a new one: no keystream covers two plaintexts), and the completed object records them in
//! order, so its segments decrypt one after another. The stored size equals the
//! plaintext's (listings stay exact); ETags are the ciphertext's MD5 (S3's SSE-C ETags are
//! not the plaintext's MD5 either). S3 checksums of SSE-C objects are verified on the
//! plaintext as it arrives but not kept (a target would compute them over ciphertext).
//!
//! Not supported, and refused rather than ignored: copies from or into SSE-C (`x-amz-copy-
//! source-server-side-encryption-customer-*`, CopyObject / UploadPartCopy of an encrypted
//! source). Native-API reads of an SSE-C object return its ciphertext.

use super::common::*;
use aes::Aes256;
use base64::Engine as _;
use bytes::Bytes;
use ctr::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use futures::{Stream, StreamExt};
use gristmill_core::sse::{ALGORITHM_KEY, IV_KEY, KEY_CHECK_KEY, KEY_MD5_KEY, PART_IVS_KEY};
use s3s::{S3Result, s3_error};
use sha2::Digest as _;

type Cipher = ctr::Ctr128BE<Aes256>;

const ALGORITHM: &str = "AES256";
const H_ALGORITHM: &str = "x-amz-server-side-encryption-customer-algorithm";
const H_KEY: &str = "x-amz-server-side-encryption-customer-key";
const H_KEY_MD5: &str = "x-amz-server-side-encryption-customer-key-md5";

/// A customer key from a request, checked against its MD5.
#[derive(Clone)]
pub(super) struct CustomerKey {
    key: [u8; 32],
    md5: String,
}

impl CustomerKey {
    /// The key's salted hash, kept with the object to recognize the key later.
    pub(super) fn check(&self) -> String {
        let mut h = sha2::Sha256::new();
        h.update(b"gristmill sse-c key check v1\0");
        h.update(self.key);
        hex::encode(h.finalize())
    }

    /// The base64 MD5 of the key (S3 answers it).
    pub(super) fn md5(&self) -> &str {
        &self.md5
    }

    /// The custom metadata an object (or upload) encrypted with this key keeps: without `iv`
    /// for an upload, whose parts take theirs from the upload id.
    pub(super) fn metadata(&self, iv: Option<[u8; 16]>) -> Vec<(String, String)> {
        let mut md = vec![
            (ALGORITHM_KEY.to_owned(), ALGORITHM.to_owned()),
            (KEY_MD5_KEY.to_owned(), self.md5.clone()),
            (KEY_CHECK_KEY.to_owned(), self.check()),
        ];
        if let Some(iv) = iv {
            md.push((IV_KEY.to_owned(), hex::encode(iv)));
        }
        md
    }
}

fn invalid(msg: &str) -> s3s::S3Error {
    s3_error!(InvalidArgument, "{msg}")
}

/// The SSE-C key a request carries (`None` without any SSE-C header); a malformed one is
/// S3's 400 InvalidArgument.
pub(super) fn customer_key(headers: &http::HeaderMap) -> S3Result<Option<CustomerKey>> {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let (algo, key, md5) = (get(H_ALGORITHM), get(H_KEY), get(H_KEY_MD5));
    if algo.is_none() && key.is_none() && md5.is_none() {
        return Ok(None);
    }
    let (Some(algo), Some(key), Some(md5)) = (algo, key, md5) else {
        return Err(invalid(
            "Requests specifying Server Side Encryption with Customer provided keys must provide the algorithm, the key and its MD5",
        ));
    };
    if algo != ALGORITHM {
        return Err(invalid(
            "The encryption algorithm specified is not valid: only AES256",
        ));
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(key)
        .map_err(|_| invalid("The secret key was invalid for the specified algorithm."))?;
    let key: [u8; 32] = raw
        .as_slice()
        .try_into()
        .map_err(|_| invalid("The secret key was invalid for the specified algorithm."))?;
    let computed =
        base64::engine::general_purpose::STANDARD.encode(<md5::Md5 as md5::Digest>::digest(key));
    if computed != md5 {
        return Err(invalid(
            "The calculated MD5 hash of the key did not match the hash that was provided.",
        ));
    }
    Ok(Some(CustomerKey {
        key,
        md5: md5.to_owned(),
    }))
}

/// A fresh IV for an object or a part.
pub(super) fn new_iv() -> [u8; 16] {
    rand::random()
}

/// Whether an object (its attributes) was stored with SSE-C.
pub(super) fn is_encrypted(attrs: &Attrs) -> bool {
    attrs.custom.contains_key(KEY_CHECK_KEY)
}

/// A read's key checked against the object's: `Some(key)` for an SSE-C object read with its
/// key, `None` for a plain object read without one, an error otherwise.
pub(super) fn key_for_read(
    attrs: &Attrs,
    request: Option<CustomerKey>,
) -> S3Result<Option<CustomerKey>> {
    match (attrs.custom.get(KEY_CHECK_KEY), request) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(s3_error!(
            InvalidRequest,
            "The encryption parameters are not applicable to this object."
        )),
        (Some(_), None) => Err(s3_error!(
            InvalidRequest,
            "The object was stored using a form of Server Side Encryption. The correct parameters must be provided to retrieve the object."
        )),
        (Some(stored), Some(key)) if *stored == key.check() => Ok(Some(key)),
        (Some(_), Some(_)) => Err(s3_error!(
            InvalidRequest,
            "The provided SSE-C key does not match the key the object was stored with."
        )),
    }
}

/// Refuses an SSE-C object as a copy source (its bytes would be copied as ciphertext).
pub(super) fn refuse_copy_of(attrs: &Attrs) -> S3Result<()> {
    if is_encrypted(attrs) {
        return Err(s3_error!(
            NotImplemented,
            "copying an object stored with SSE-C is not supported"
        ));
    }
    Ok(())
}

/// One stretch of an object encrypted under one IV: its first byte in the object, length.
struct Segment {
    start: u64,
    len: u64,
    iv: [u8; 16],
}

/// The keystream of an object (or of one part as it is uploaded), from any position on.
pub(super) struct Keystream {
    key: [u8; 32],
    segments: Vec<Segment>,
    /// Object offset of the next byte.
    pos: u64,
    /// The segment `pos` is in, and its cipher positioned at `pos`.
    current: Option<(usize, Cipher)>,
}

impl Keystream {
    /// One IV over everything: a single PUT, or one part being uploaded.
    pub(super) fn single(key: &CustomerKey, iv: [u8; 16]) -> Self {
        Self {
            key: key.key,
            segments: vec![Segment {
                start: 0,
                len: u64::MAX,
                iv,
            }],
            pos: 0,
            current: None,
        }
    }

    /// A stored object's keystream from byte `start`, as its metadata describes it.
    pub(super) fn of_object(key: &CustomerKey, attrs: &Attrs, start: u64) -> S3Result<Self> {
        let corrupt = || internal("the object's SSE-C metadata is incomplete");
        let segments = match attrs.custom.get(IV_KEY) {
            Some(iv) => {
                let iv: [u8; 16] = hex::decode(iv)
                    .ok()
                    .and_then(|v| v.try_into().ok())
                    .ok_or_else(corrupt)?;
                vec![Segment {
                    start: 0,
                    len: u64::MAX,
                    iv,
                }]
            }
            None => {
                let ivs: Vec<[u8; 16]> = attrs
                    .custom
                    .get(PART_IVS_KEY)
                    .ok_or_else(corrupt)?
                    .split(',')
                    .map(|iv| {
                        hex::decode(iv)
                            .ok()
                            .and_then(|v| v.try_into().ok())
                            .ok_or_else(corrupt)
                    })
                    .collect::<S3Result<_>>()?;
                let sizes = attrs.parts().ok_or_else(corrupt)?;
                if sizes.len() != ivs.len() {
                    return Err(corrupt());
                }
                let mut at = 0;
                sizes
                    .iter()
                    .zip(ivs)
                    .map(|(&len, iv)| {
                        let s = Segment { start: at, len, iv };
                        at += len;
                        s
                    })
                    .collect()
            }
        };
        Ok(Self {
            key: key.key,
            segments,
            pos: start,
            current: None,
        })
    }

    /// Encrypts or decrypts `buf`, the bytes at the current position, and moves past them;
    /// false if they run past the object's last segment (its metadata does not describe
    /// them: nothing past there may be answered).
    fn apply(&mut self, mut buf: &mut [u8]) -> bool {
        while !buf.is_empty() {
            let (i, cipher) = match self.current.as_mut() {
                Some((i, c)) => (*i, c),
                None => {
                    let Some(i) = self
                        .segments
                        .iter()
                        .position(|s| self.pos >= s.start && self.pos - s.start < s.len)
                    else {
                        return false;
                    };
                    let seg = &self.segments[i];
                    let mut c = Cipher::new(&self.key.into(), &seg.iv.into());
                    c.seek(self.pos - seg.start);
                    self.current = Some((i, c));
                    let (i, c) = self.current.as_mut().expect("just set");
                    (*i, c)
                }
            };
            let seg = &self.segments[i];
            let left_in_segment = seg.start.saturating_add(seg.len) - self.pos;
            let n = (buf.len() as u64).min(left_in_segment) as usize;
            let (now, rest) = buf.split_at_mut(n);
            cipher.apply_keystream(now);
            self.pos += n as u64;
            if n as u64 == left_in_segment {
                self.current = None;
            }
            buf = rest;
        }
        true
    }

    /// A stream of the same bytes passed through the keystream (an error for bytes past
    /// what the object's metadata describes).
    pub(super) fn wrap<S>(
        mut self,
        stream: S,
    ) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send
    where
        S: Stream<Item = Result<Bytes, std::io::Error>> + Send,
    {
        stream.map(move |chunk| {
            let mut v = chunk?.to_vec();
            if !self.apply(&mut v) {
                return Err(std::io::Error::other(
                    "SSE-C: bytes past the object's encrypted parts",
                ));
            }
            Ok(Bytes::from(v))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> CustomerKey {
        let key = [7u8; 32];
        CustomerKey {
            key,
            md5: base64::engine::general_purpose::STANDARD
                .encode(<md5::Md5 as md5::Digest>::digest(key)),
        }
    }

    fn attrs(custom: &[(&str, &str)], size: u64) -> Attrs {
        Attrs {
            size,
            etag: String::new(),
            mtime_ns: 0,
            custom: custom
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn any_range_of_a_multipart_object_decrypts_on_its_own() {
        let k = key();
        let sizes = [37u64, 16, 5];
        let ivs = [[1u8; 16], [2u8; 16], [3u8; 16]];
        let plain: Vec<u8> = (0..58u32).map(|i| i as u8).collect();
        // Encrypt each part as an upload would.
        let mut cipher = Vec::new();
        let mut at = 0usize;
        for (len, iv) in sizes.iter().zip(ivs) {
            let mut part = plain[at..at + *len as usize].to_vec();
            assert!(Keystream::single(&k, iv).apply(&mut part));
            cipher.extend(part);
            at += *len as usize;
        }
        assert_ne!(cipher, plain);
        let a = attrs(
            &[
                (
                    PART_IVS_KEY,
                    &ivs.iter().map(hex::encode).collect::<Vec<_>>().join(","),
                ),
                (PARTS, "37,16,5"),
            ],
            58,
        );
        for start in 0..58u64 {
            for chunk in [1usize, 3, 16, 40] {
                let mut ks = Keystream::of_object(&k, &a, start).unwrap();
                let mut out = Vec::new();
                for piece in cipher[start as usize..].chunks(chunk) {
                    let mut p = piece.to_vec();
                    assert!(ks.apply(&mut p));
                    out.extend(p);
                }
                assert!(!ks.apply(&mut [0u8]), "past the last part");
                assert_eq!(out, plain[start as usize..], "start {start} chunk {chunk}");
            }
        }
    }

    #[test]
    fn keys_are_checked_and_recognized() {
        let k = key();
        let mut h = http::HeaderMap::new();
        assert!(customer_key(&h).unwrap().is_none());
        h.insert(H_ALGORITHM, "AES256".parse().unwrap());
        h.insert(
            H_KEY,
            base64::engine::general_purpose::STANDARD
                .encode(k.key)
                .parse()
                .unwrap(),
        );
        assert!(customer_key(&h).is_err(), "the MD5 is required");
        h.insert(H_KEY_MD5, k.md5.parse().unwrap());
        let got = customer_key(&h).unwrap().unwrap();
        assert_eq!(got.check(), k.check());
        h.insert(H_KEY_MD5, "AAAAAAAAAAAAAAAAAAAAAA==".parse().unwrap());
        assert!(customer_key(&h).is_err(), "a wrong MD5 is refused");
        let stored = attrs(&[(KEY_CHECK_KEY, &k.check())], 0);
        assert!(key_for_read(&stored, Some(k.clone())).unwrap().is_some());
        assert!(key_for_read(&stored, None).is_err());
        let other = CustomerKey {
            key: [8u8; 32],
            md5: String::new(),
        };
        assert!(key_for_read(&stored, Some(other)).is_err());
        assert!(key_for_read(&attrs(&[], 0), Some(k)).is_err());
    }
}
