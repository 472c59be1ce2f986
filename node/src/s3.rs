//! S3 checksum helpers shared by the proxy's S3 front (which verifies what clients declare) and
//! targets (which record the checksums with the object). Feature `s3`.

use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;

/// A hasher for the given algorithms (`CRC32`, `CRC32C`, `SHA1`, `SHA256`, `CRC64NVME`, any
/// case); `None` when none of them is known.
pub fn checksum_hasher(algorithms: &[String]) -> Option<ChecksumHasher> {
    let mut h = ChecksumHasher::default();
    let mut any = false;
    for a in algorithms {
        match a.to_ascii_uppercase().as_str() {
            "CRC32" => h.crc32 = Some(s3s::crypto::Crc32::new()),
            "CRC32C" => h.crc32c = Some(s3s::crypto::Crc32c::new()),
            "SHA1" => h.sha1 = Some(s3s::crypto::Sha1::new()),
            "SHA256" => h.sha256 = Some(s3s::crypto::Sha256::new()),
            "CRC64NVME" => h.crc64nvme = Some(s3s::crypto::Crc64Nvme::new()),
            _ => continue,
        }
        any = true;
    }
    any.then_some(h)
}

/// The computed values by header name (`x-amz-checksum-crc32`, ...), base64.
pub fn checksum_values(c: s3s::dto::Checksum) -> Vec<(&'static str, String)> {
    [
        ("x-amz-checksum-crc32", c.checksum_crc32),
        ("x-amz-checksum-crc32c", c.checksum_crc32c),
        ("x-amz-checksum-sha1", c.checksum_sha1),
        ("x-amz-checksum-sha256", c.checksum_sha256),
        ("x-amz-checksum-crc64nvme", c.checksum_crc64nvme),
    ]
    .into_iter()
    .filter_map(|(name, v)| v.map(|v| (name, v)))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_requested_algorithms_only() {
        let algos = [
            "crc32".to_string(),
            "bogus".to_string(),
            "SHA256".to_string(),
        ];
        let mut h = checksum_hasher(&algos).unwrap();
        h.update(b"hello");
        let names: Vec<_> = checksum_values(h.finalize())
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["x-amz-checksum-crc32", "x-amz-checksum-sha256"]);
        assert!(checksum_hasher(&["md5".to_string()]).is_none());
    }
}
