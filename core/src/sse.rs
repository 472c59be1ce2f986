//! SSE-C (server-side encryption with customer-provided keys) as the cluster records it. The
//! S3 front encrypts and decrypts (AES-256 in CTR mode, so any byte range decrypts on its
//! own); targets store ciphertext and never see a key. What they keep in an object's custom
//! metadata is enough to refuse a wrong key and to find each byte's keystream position:
//! the algorithm and key MD5 (S3 answers them), a salted SHA-256 of the key, and the object's
//! IV or, for a multipart object, each part's (each part is encrypted on its own, with a
//! random IV of its own).

/// `AES256`, as sent.
pub const ALGORITHM_KEY: &str = "x-amz-server-side-encryption-customer-algorithm";
/// The key's MD5 (base64), as sent and as S3 answers it.
pub const KEY_MD5_KEY: &str = "x-amz-server-side-encryption-customer-key-md5";
/// Hex SHA-256 of a fixed salt and the key: checks a key without keeping it. Also the header
/// an S3 front sends with each part of an encrypted upload, which the target compares with
/// the upload's (a part under another key, or none, is refused).
pub const KEY_CHECK_KEY: &str = "x-grist-sse-c-key-check";
/// A single-part object's IV (hex, 16 bytes). Also the header an S3 front sends with each
/// part of an encrypted upload: the part's own random IV, which the target keeps with it.
pub const IV_KEY: &str = "x-grist-sse-c-iv";
/// A multipart object's part IVs (hex, in object order, comma-separated): recorded at
/// completion of an encrypted upload. A part uploaded again gets a new IV, so no keystream
/// ever covers two different plaintexts.
pub const PART_IVS_KEY: &str = "x-grist-sse-c-part-ivs";
