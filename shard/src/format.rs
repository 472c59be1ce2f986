//! The table of archive formats: names, extensions and magic bytes in one place.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ShardError;

/// An archive format Gristmill reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Format {
    /// Uncompressed tar (ustar, pax, GNU). The only format with a seekable member index.
    #[serde(rename = ".tar")]
    Tar,
    /// Gzip-compressed tar (`.tgz`, `.tar.gz`).
    #[serde(rename = ".tgz")]
    Tgz,
    /// LZ4 (frame format) compressed tar.
    #[serde(rename = ".tar.lz4")]
    TarLz4,
    /// Zip, read through its central directory (needs a seekable source).
    #[serde(rename = ".zip")]
    Zip,
}

/// One row per format. Adding a format touches this table and one reader/writer module.
struct Spec {
    format: Format,
    /// Accepted extensions, canonical first; matched case-insensitively at the end of a name.
    extensions: &'static [&'static str],
}

const TABLE: [Spec; 4] = [
    Spec {
        format: Format::Tar,
        extensions: &[".tar"],
    },
    Spec {
        format: Format::Tgz,
        extensions: &[".tgz", ".tar.gz"],
    },
    Spec {
        format: Format::TarLz4,
        extensions: &[".tar.lz4"],
    },
    Spec {
        format: Format::Zip,
        extensions: &[".zip"],
    },
];

/// Bytes needed by [`Format::from_magic`] to recognise every format (one tar header block).
pub const MAGIC_LEN: usize = 512;

impl Format {
    /// Every format, in table order.
    pub const ALL: [Format; 4] = [Format::Tar, Format::Tgz, Format::TarLz4, Format::Zip];

    fn spec(self) -> &'static Spec {
        // The table is ordered like the enum; the fallback keeps this total without a panic.
        TABLE.iter().find(|s| s.format == self).unwrap_or(&TABLE[0])
    }

    /// The canonical extension, with its dot: `.tar`, `.tgz`, `.tar.lz4`, `.zip`
    /// (AIStore's "mime" strings).
    pub fn extension(self) -> &'static str {
        self.spec().extensions[0]
    }

    /// All extensions that name this format.
    pub fn extensions(self) -> &'static [&'static str] {
        self.spec().extensions
    }

    /// Whether this is one of the tar family (members stream in order).
    pub fn is_tar(self) -> bool {
        self != Format::Zip
    }

    /// The format an object name's extension says (`a/b.tar.gz` is [`Format::Tgz`]).
    pub fn from_name(name: &str) -> Option<Format> {
        let lower = name.to_ascii_lowercase();
        // Longest extension first, so `.tar.gz` wins over a hypothetical `.gz`.
        let mut best: Option<(usize, Format)> = None;
        for spec in &TABLE {
            for ext in spec.extensions {
                if lower.ends_with(ext)
                    && lower.len() > ext.len()
                    && best.is_none_or(|(len, _)| ext.len() > len)
                {
                    best = Some((ext.len(), spec.format));
                }
            }
        }
        best.map(|(_, f)| f)
    }

    /// Parses a format name as AIStore spells it (`archmime=`, `mime` in messages): with or
    /// without the leading dot, any case: `tar`, `.tgz`, `tar.gz`, `.tar.lz4`, `zip`.
    pub fn parse(mime: &str) -> Result<Format, ShardError> {
        let trimmed = mime.trim();
        let lower = trimmed.to_ascii_lowercase();
        let dotted = if lower.starts_with('.') {
            lower
        } else {
            format!(".{lower}")
        };
        TABLE
            .iter()
            .find(|s| s.extensions.contains(&dotted.as_str()))
            .map(|s| s.format)
            .ok_or_else(|| ShardError::Unsupported(format!("archive format {trimmed:?}")))
    }

    /// Recognises a format from the first bytes of an object ([`MAGIC_LEN`] are enough).
    /// Gzip and LZ4 streams are assumed to hold a tar. An uncompressed tar is recognised
    /// by `ustar` at offset 257, or, for old v7 archives, by a valid header checksum.
    pub fn from_magic(head: &[u8]) -> Option<Format> {
        if head.starts_with(&[0x1f, 0x8b]) {
            return Some(Format::Tgz);
        }
        if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
            return Some(Format::TarLz4);
        }
        if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
            return Some(Format::Zip);
        }
        if head.len() >= 262 && &head[257..262] == b"ustar" {
            return Some(Format::Tar);
        }
        if head.len() >= 512 && crate::tarball::header_checksum_ok(&head[..512]) {
            return Some(Format::Tar);
        }
        None
    }

    /// The name's extension if it has one, else the magic bytes.
    pub fn detect(name: &str, head: &[u8]) -> Option<Format> {
        Format::from_name(name).or_else(|| Format::from_magic(head))
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.extension())
    }
}

impl FromStr for Format {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Format::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_aistore_mime_names() {
        for (s, f) in [
            (".tar", Format::Tar),
            ("tar", Format::Tar),
            (".tgz", Format::Tgz),
            ("TGZ", Format::Tgz),
            (".tar.gz", Format::Tgz),
            ("tar.gz", Format::Tgz),
            (".tar.lz4", Format::TarLz4),
            ("tar.lz4", Format::TarLz4),
            (".zip", Format::Zip),
            ("zip", Format::Zip),
        ] {
            assert_eq!(Format::parse(s).unwrap(), f, "{s}");
            assert_eq!(s.parse::<Format>().unwrap(), f);
        }
        for bad in ["", ".", "gz", ".lz4", "rar", ".tar.bz2"] {
            assert!(matches!(
                Format::parse(bad),
                Err(ShardError::Unsupported(_))
            ));
        }
        for f in Format::ALL {
            assert_eq!(Format::parse(&f.to_string()).unwrap(), f);
        }
    }

    #[test]
    fn detects_by_extension() {
        assert_eq!(Format::from_name("a/b.tar"), Some(Format::Tar));
        assert_eq!(Format::from_name("b.TAR.GZ"), Some(Format::Tgz));
        assert_eq!(Format::from_name("b.tgz"), Some(Format::Tgz));
        assert_eq!(Format::from_name("b.tar.lz4"), Some(Format::TarLz4));
        assert_eq!(Format::from_name("x.zip"), Some(Format::Zip));
        assert_eq!(Format::from_name("x.gz"), None);
        assert_eq!(Format::from_name(".tar"), None);
        assert_eq!(Format::from_name("tar"), None);
        assert_eq!(Format::from_name("x.tar.bak"), None);
    }

    #[test]
    fn detects_by_magic() {
        assert_eq!(Format::from_magic(&[0x1f, 0x8b, 8, 0]), Some(Format::Tgz));
        assert_eq!(
            Format::from_magic(&[0x04, 0x22, 0x4d, 0x18, 0x64]),
            Some(Format::TarLz4)
        );
        assert_eq!(Format::from_magic(b"PK\x03\x04rest"), Some(Format::Zip));
        assert_eq!(Format::from_magic(b"PK\x05\x06rest"), Some(Format::Zip));
        let mut ustar = vec![0u8; 512];
        ustar[257..263].copy_from_slice(b"ustar\0");
        assert_eq!(Format::from_magic(&ustar), Some(Format::Tar));
        assert_eq!(Format::from_magic(&[0u8; 512]), None);
        assert_eq!(Format::from_magic(b"hello"), None);
        assert_eq!(Format::detect("x.zip", b"\x1f\x8b"), Some(Format::Zip));
        assert_eq!(Format::detect("x.bin", b"\x1f\x8b"), Some(Format::Tgz));
    }
}
