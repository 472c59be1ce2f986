//! Object-name rules, enforced on every node before a name touches placement or storage.

use crate::error::ApiError;

/// Longest object name accepted, in bytes (S3's limit).
pub const MAX_OBJECT_NAME: usize = 1024;

/// Rejects names that are empty, too long, carry NUL or other control bytes, or have `.`/`..`
/// path segments. Names never reach the filesystem (data files are named by hash), but
/// clients that mirror objects to disk must not be handed an escaping path either.
/// Characters escaped in object names inside URL paths (`/` is kept).
const PATH: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'/')
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// An object name as it goes into a URL path (`/v1/objects/b/<here>`).
pub fn encode_path(name: &str) -> String {
    percent_encoding::utf8_percent_encode(name, PATH).to_string()
}

/// Custom-metadata key of a versioned bucket's records: the S3 version id (absent: "null").
pub const VERSION_ID_KEY: &str = "ais-version-id";
/// Custom-metadata key of a delete marker's record ("true").
pub const DELETE_MARKER_KEY: &str = "ais-delete-marker";
/// The null version's id: objects written while versioning was off or suspended.
pub const NULL_VERSION_ID: &str = "null";

/// Whether a client's version id could name a version here: "null", or 32 hex digits (the
/// generation and a random part, as a target mints them).
pub fn is_version_id(id: &str) -> bool {
    id == NULL_VERSION_ID || (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Noncurrent versions and delete markers of a versioned bucket are stored under names of
/// their own: the object's name, NUL, and 16 hex digits that sort newest first. A client's name
/// never holds a NUL, so these never collide with one, and they sort right after the current
/// version of the same name and before any other name.
pub fn version_slot(name: &str, generation: u64) -> String {
    format!("{name}\0{:016x}", u64::MAX - generation)
}

/// The object name of a stored name and whether it is a [`version_slot`].
pub fn split_version_slot(stored: &str) -> (&str, bool) {
    match stored.split_once('\0') {
        Some((name, _)) => (name, true),
        None => (stored, false),
    }
}

/// What placement hashes (HRW across targets and mountpaths): a stored name without its
/// [`version_slot`] suffix, so every version lives with its object — wherever a rebalance
/// or resilver moves it. Identical to the name for every client name (bit-compatible with
/// AIStore's placement).
pub fn placement_name(name_or_uname: &str) -> &str {
    split_version_slot(name_or_uname).0
}

/// Like [`validate_object_name`], also accepting a [`version_slot`] name: for node-to-node
/// routes, which move and read every stored record.
pub fn validate_stored_name(name: &str) -> Result<(), ApiError> {
    match name.split_once('\0') {
        None => validate_object_name(name),
        Some((base, slot)) if slot.len() == 16 && slot.bytes().all(|b| b.is_ascii_hexdigit()) => {
            validate_object_name(base)
        }
        Some(_) => Err(ApiError::bad_request("invalid object name: contains NUL")),
    }
}

pub fn validate_object_name(name: &str) -> Result<(), ApiError> {
    let bad = |why: &str| -> Result<(), ApiError> {
        Err(ApiError::bad_request(format!("invalid object name: {why}")))
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > MAX_OBJECT_NAME {
        return bad(&format!(
            "{} bytes, over the {MAX_OBJECT_NAME}-byte limit",
            name.len()
        ));
    }
    if name.bytes().any(|b| b == 0) {
        return bad("contains NUL");
    }
    if name.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return bad("contains control characters");
    }
    if name.split('/').any(|seg| seg == ".." || seg == ".") {
        return bad("contains a '.' or '..' path segment");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for ok in [
            "a",
            "dir/sub/file.jpg",
            "naïve ünïcode",
            "a..b",
            ".hidden",
            "x/",
        ] {
            validate_object_name(ok).unwrap();
        }
    }

    #[test]
    fn version_slots_sort_newest_first_after_their_object_and_place_with_it() {
        let (older, newer) = (version_slot("a/b", 7), version_slot("a/b", 9));
        assert!("a/b" < newer.as_str() && newer < older && older.as_str() < "a/b!");
        assert_eq!(split_version_slot(&older), ("a/b", true));
        assert_eq!(split_version_slot("a/b"), ("a/b", false));
        assert_eq!(
            placement_name(&format!("ais/@#/bk/{older}")),
            "ais/@#/bk/a/b"
        );
        validate_stored_name(&older).unwrap();
        assert!(validate_object_name(&older).is_err());
        assert!(validate_stored_name("a\0zz").is_err());
    }

    #[test]
    fn rejects_bad_names() {
        let long = "x".repeat(1025);
        for bad in [
            "",
            "../etc/passwd",
            "a/../b",
            "a/..",
            "./a",
            "nul\0byte",
            "tab\tname",
            &long,
        ] {
            assert!(validate_object_name(bad).is_err(), "{bad:?}");
        }
        validate_object_name(&"x".repeat(1024)).unwrap();
    }
}
