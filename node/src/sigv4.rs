//! AWS Signature Version 4 checks of S3 requests signed in the `Authorization` header, with
//! the signing key cached per (access key, day, region, service): deriving it takes four
//! HMACs, and it changes once a day, so a warm request costs two hashes and one HMAC.
//!
//! Only the header form is checked here (`AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
//! Signature=…`); presigned URLs, SigV2 and streaming payload signatures are left to the S3
//! front (`s3s`), which a caller falls back to whenever [`Verifier::verify`] says no.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use aws_lc_rs::{constant_time, digest, hmac};

/// How far a request's `x-amz-date` may be from this node's clock (S3's own limit).
pub const MAX_SKEW_SECS: i64 = 15 * 60;

/// Signing keys kept; the cache starts over when it is full (a new day renews them anyway).
/// Only keys that signed a request correctly are kept, so strangers cannot fill it.
const MAX_CACHED_KEYS: usize = 4096;
/// Longest region name and access key an `Authorization` header may carry here.
const MAX_REGION_LEN: usize = 32;
const MAX_ACCESS_KEY_LEN: usize = 128;

/// The parts of an `Authorization: AWS4-HMAC-SHA256 …` header.
#[derive(Debug, PartialEq, Eq)]
pub struct Authorization<'a> {
    /// The whole `Credential=` value (the signing key's cache key).
    pub credential: &'a str,
    pub access_key: &'a str,
    /// `YYYYMMDD` of the credential scope.
    pub day: &'a str,
    pub region: &'a str,
    pub service: &'a str,
    /// Lowercase names, `;`-separated, sorted (as the client signed them).
    pub signed_headers: &'a str,
    /// Lowercase hex.
    pub signature: &'a str,
}

impl<'a> Authorization<'a> {
    /// `None` for anything but a well-formed SigV4 header.
    pub fn parse(value: &'a str) -> Option<Self> {
        let rest = value.strip_prefix("AWS4-HMAC-SHA256")?.trim_start();
        let (mut credential, mut signed_headers, mut signature) = (None, None, None);
        for field in rest.split(',') {
            let (k, v) = field.trim().split_once('=')?;
            match k {
                "Credential" => credential = Some(v),
                "SignedHeaders" => signed_headers = Some(v),
                "Signature" => signature = Some(v),
                _ => return None,
            }
        }
        let credential = credential?;
        let mut scope = credential.splitn(5, '/');
        let access_key = scope.next()?;
        let day = scope.next()?;
        let region = scope.next()?;
        let service = scope.next()?;
        // Only S3's scope, with a region name of a sane size: anything else is the S3 front's
        // to refuse (and a scope of the client's choosing never reaches the key cache).
        let region_ok = (1..=MAX_REGION_LEN).contains(&region.len())
            && region
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if scope.next()? != "aws4_request"
            || day.len() != 8
            || !day.bytes().all(|b| b.is_ascii_digit())
            || service != "s3"
            || !region_ok
            || access_key.is_empty()
            || access_key.len() > MAX_ACCESS_KEY_LEN
        {
            return None;
        }
        Some(Self {
            credential,
            access_key,
            day,
            region,
            service,
            signed_headers: signed_headers?,
            signature: signature?,
        })
    }
}

/// Why a request's signature was not accepted (for logs; the S3 front gives clients the
/// S3 error).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("x-amz-date is missing or malformed, or not the credential's day")]
    Date,
    #[error("the request was signed more than 15 minutes from now")]
    Skewed,
    #[error("x-amz-content-sha256 is missing, or neither a SHA-256 nor UNSIGNED-PAYLOAD")]
    PayloadHash,
    #[error("a signed header is missing, or host is not signed")]
    Headers,
    #[error("the signature does not match")]
    Mismatch,
}

/// Checks header-signed requests, keeping derived signing keys by credential
/// (`key/day/region/service/aws4_request`, looked up without an allocation).
#[derive(Default)]
pub struct Verifier {
    keys: Mutex<HashMap<String, (String, hmac::Key)>>,
}

impl Verifier {
    /// Whether `parts` carries a valid signature by `secret` for `auth`, made within
    /// [`MAX_SKEW_SECS`] of `now` (Unix seconds).
    pub fn verify(
        &self,
        parts: &http::request::Parts,
        auth: &Authorization<'_>,
        secret: &str,
        now: i64,
    ) -> Result<(), Rejected> {
        let amz_date = header(&parts.headers, "x-amz-date").ok_or(Rejected::Date)?;
        if amz_date.get(..8) != Some(auth.day) {
            return Err(Rejected::Date);
        }
        let signed_at = parse_amz_date(amz_date).ok_or(Rejected::Date)?;
        if (signed_at - now).abs() > MAX_SKEW_SECS {
            return Err(Rejected::Skewed);
        }
        let payload =
            header(&parts.headers, "x-amz-content-sha256").ok_or(Rejected::PayloadHash)?;
        // The forms of a request without a signed body (streaming and trailer forms are the
        // S3 front's to judge).
        let hash = payload.len() == 64 && payload.bytes().all(|b| b.is_ascii_hexdigit());
        if !hash && payload != "UNSIGNED-PAYLOAD" {
            return Err(Rejected::PayloadHash);
        }
        let canonical = canonical_request(parts, auth.signed_headers, payload)?;
        let mut to_sign = String::with_capacity(160);
        let _ = write!(
            to_sign,
            "AWS4-HMAC-SHA256\n{amz_date}\n{}/{}/{}/aws4_request\n{}",
            auth.day,
            auth.region,
            auth.service,
            hex::encode(digest::digest(&digest::SHA256, canonical.as_bytes()))
        );
        let cached = self.cached_key(auth, secret);
        let key = cached.clone().unwrap_or_else(|| derive_key(auth, secret));
        let tag = hmac::sign(&key, to_sign.as_bytes());
        let expected = hex::encode(tag.as_ref());
        constant_time::verify_slices_are_equal(expected.as_bytes(), auth.signature.as_bytes())
            .map_err(|_| Rejected::Mismatch)?;
        if cached.is_none() {
            let mut keys = self.keys.lock().expect("signing keys");
            if keys.len() >= MAX_CACHED_KEYS {
                keys.clear();
            }
            keys.insert(auth.credential.to_owned(), (secret.to_owned(), key));
        }
        Ok(())
    }

    /// The cached signing key of `auth`'s scope, unless the secret changed since.
    fn cached_key(&self, auth: &Authorization<'_>, secret: &str) -> Option<hmac::Key> {
        let keys = self.keys.lock().expect("signing keys");
        keys.get(auth.credential)
            .filter(|(s, _)| s == secret)
            .map(|(_, key)| key.clone())
    }

    /// Signing keys held.
    #[cfg(test)]
    fn cached_keys(&self) -> usize {
        self.keys.lock().expect("signing keys").len()
    }
}

/// The signing key of `auth`'s scope: four HMACs, outside the cache's lock.
fn derive_key(auth: &Authorization<'_>, secret: &str) -> hmac::Key {
    let mac = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
    };
    let k = mac(format!("AWS4{secret}").as_bytes(), auth.day);
    let k = mac(k.as_ref(), auth.region);
    let k = mac(k.as_ref(), auth.service);
    let k = mac(k.as_ref(), "aws4_request");
    hmac::Key::new(hmac::HMAC_SHA256, k.as_ref())
}

fn header<'h>(headers: &'h http::HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// SigV4's canonical request: method, the path as sent (S3 signs it encoded once, as clients
/// send it), the sorted query, the signed headers' trimmed values, and the payload hash.
fn canonical_request(
    parts: &http::request::Parts,
    signed_headers: &str,
    payload: &str,
) -> Result<String, Rejected> {
    let mut out = String::with_capacity(256);
    out.push_str(parts.method.as_str());
    out.push('\n');
    out.push_str(parts.uri.path());
    out.push('\n');
    canonical_query(parts.uri.query().unwrap_or(""), &mut out);
    out.push('\n');
    let mut host_signed = false;
    for name in signed_headers.split(';') {
        host_signed |= name == "host";
        let mut values = parts.headers.get_all(name).iter().peekable();
        if values.peek().is_none() {
            return Err(Rejected::Headers);
        }
        out.push_str(name);
        out.push(':');
        for (i, v) in values.enumerate() {
            if i > 0 {
                out.push(',');
            }
            let v = v.to_str().map_err(|_| Rejected::Headers)?;
            // Trimmed, with runs of spaces made one.
            for (j, word) in v.split_whitespace().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                out.push_str(word);
            }
        }
        out.push('\n');
    }
    if !host_signed {
        return Err(Rejected::Headers);
    }
    out.push('\n');
    out.push_str(signed_headers);
    out.push('\n');
    out.push_str(payload);
    Ok(out)
}

/// The query's pairs decoded, encoded again the way SigV4 wants (unreserved characters
/// kept, everything else `%XX`), sorted by key and value, `&`-joined.
fn canonical_query(query: &str, out: &mut String) {
    if query.is_empty() {
        return;
    }
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (encode(&decode(k)), encode(&decode(v)))
        })
        .collect();
    pairs.sort();
    for (i, (k, v)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        out.push_str(k);
        out.push('=');
        out.push_str(v);
    }
}

fn decode(s: &str) -> Vec<u8> {
    // `+` in a query is a space to form encoders; SigV4 clients never send it unencoded.
    percent_encoding::percent_decode_str(s).collect()
}

fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `YYYYMMDDTHHMMSSZ` as Unix seconds.
fn parse_amz_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, m, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (hh, mm, ss) = (num(9..11)?, num(11..13)?, num(13..15)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    Some(days_from_civil(y, m, d) * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's worked example "GET Object" (S3 API reference, "Signature calculations for the
    /// Authorization header").
    fn example() -> (http::request::Parts, String) {
        let auth = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41";
        let req = http::Request::get("/test.txt")
            .header("host", "examplebucket.s3.amazonaws.com")
            .header("range", "bytes=0-9")
            .header(
                "x-amz-content-sha256",
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            )
            .header("x-amz-date", "20130524T000000Z")
            .header("authorization", auth)
            .body(())
            .unwrap();
        (req.into_parts().0, auth.to_owned())
    }

    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";

    #[test]
    fn aws_example_verifies_and_its_key_is_cached() {
        let (parts, header) = example();
        let auth = Authorization::parse(&header).unwrap();
        assert_eq!(auth.access_key, "AKIAIOSFODNN7EXAMPLE");
        assert_eq!(auth.region, "us-east-1");
        let now = parse_amz_date("20130524T000500Z").unwrap();
        let v = Verifier::default();
        assert_eq!(v.verify(&parts, &auth, SECRET, now), Ok(()));
        assert_eq!(v.cached_keys(), 1);
        // Again from the cached key.
        assert_eq!(v.verify(&parts, &auth, SECRET, now), Ok(()));
        // Another secret for the same key is not answered from the cache.
        assert_eq!(
            v.verify(&parts, &auth, "other", now),
            Err(Rejected::Mismatch)
        );
        assert_eq!(v.verify(&parts, &auth, SECRET, now), Ok(()));
    }

    #[test]
    fn changed_requests_and_stale_dates_are_rejected() {
        let (parts, header) = example();
        let auth = Authorization::parse(&header).unwrap();
        let now = parse_amz_date("20130524T000000Z").unwrap();
        let v = Verifier::default();
        let mut other_range = parts.clone();
        other_range
            .headers
            .insert("range", http::HeaderValue::from_static("bytes=0-10"));
        assert_eq!(
            v.verify(&other_range, &auth, SECRET, now),
            Err(Rejected::Mismatch)
        );
        let mut other_path = parts.clone();
        other_path.uri = "/test.txt?x=1".parse().unwrap();
        assert_eq!(
            v.verify(&other_path, &auth, SECRET, now),
            Err(Rejected::Mismatch)
        );
        let mut no_range = parts.clone();
        no_range.headers.remove("range");
        assert_eq!(
            v.verify(&no_range, &auth, SECRET, now),
            Err(Rejected::Headers)
        );
        assert_eq!(
            v.verify(&parts, &auth, SECRET, now + MAX_SKEW_SECS + 1),
            Err(Rejected::Skewed)
        );
        let unsigned_host = header.replace("host;", "");
        let auth = Authorization::parse(&unsigned_host).unwrap();
        assert_eq!(v.verify(&parts, &auth, SECRET, now), Err(Rejected::Headers));
    }

    #[test]
    fn malformed_headers_do_not_parse() {
        let long_region = format!(
            "AWS4-HMAC-SHA256 Credential=AK/20130524/{}/s3/aws4_request,SignedHeaders=host,Signature=00",
            "r".repeat(33)
        );
        for bad in [
            "AWS AKIA:sig",
            "AWS4-HMAC-SHA256 Credential=AK/2013/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/other,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/s3/aws4_request,Signature=00",
            // Another service, a region of the client's invention, a day not of digits.
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us-east-1/sts/aws4_request,SignedHeaders=host,Signature=00",
            long_region.as_str(),
            "AWS4-HMAC-SHA256 Credential=AK/20130524/us east/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=AK/2013052x/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
            "AWS4-HMAC-SHA256 Credential=/20130524/us-east-1/s3/aws4_request,SignedHeaders=host,Signature=00",
        ] {
            assert_eq!(Authorization::parse(bad), None, "{bad}");
        }
    }

    /// A signing key is kept only once it signed a request correctly: requests with made-up
    /// signatures (and scopes) cannot fill the cache or push out the keys in use.
    #[test]
    fn only_keys_that_verified_are_cached() {
        let (parts, header) = example();
        let now = parse_amz_date("20130524T000000Z").unwrap();
        let v = Verifier::default();
        for region in ["eu-west-1", "eu-west-2", "ap-south-1"] {
            let forged = header
                .replace("us-east-1", region)
                .replace("Signature=f0", "Signature=00");
            let auth = Authorization::parse(&forged).unwrap();
            assert_eq!(
                v.verify(&parts, &auth, SECRET, now),
                Err(Rejected::Mismatch)
            );
        }
        let auth = Authorization::parse(&header).unwrap();
        assert_eq!(
            v.verify(&parts, &auth, "not the secret", now),
            Err(Rejected::Mismatch)
        );
        assert_eq!(v.cached_keys(), 0, "nothing that failed is kept");
        assert_eq!(v.verify(&parts, &auth, SECRET, now), Ok(()));
        assert_eq!(v.cached_keys(), 1);
    }

    /// `x-amz-content-sha256` is a SHA-256 or `UNSIGNED-PAYLOAD`; other forms (streaming,
    /// made-up values) are the S3 front's to judge.
    #[test]
    fn payload_hashes_of_other_forms_are_not_judged_here() {
        let (parts, header) = example();
        let auth = Authorization::parse(&header).unwrap();
        let now = parse_amz_date("20130524T000000Z").unwrap();
        let v = Verifier::default();
        for other in ["foo", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD", ""] {
            let mut p = parts.clone();
            p.headers.insert(
                "x-amz-content-sha256",
                http::HeaderValue::from_static(other),
            );
            assert_eq!(
                v.verify(&p, &auth, SECRET, now),
                Err(Rejected::PayloadHash),
                "{other}"
            );
        }
    }

    #[test]
    fn queries_are_sorted_and_encoded_again() {
        let mut out = String::new();
        canonical_query("x-id=GetObject&a=b%20c&a=%2F&empty", &mut out);
        assert_eq!(out, "a=%2F&a=b%20c&empty=&x-id=GetObject");
        assert_eq!(parse_amz_date("19700101T000001Z"), Some(1));
        assert_eq!(parse_amz_date("20130524T000000Z"), Some(1_369_353_600));
    }
}
