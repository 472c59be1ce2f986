//! Crash-safe persistence of small metadata files (cluster map, bucket metadata, node id):
//! write a temp file, fsync it, rename over the old one, fsync the directory. A crash leaves
//! either the old file or the new one.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Atomically replaces `path` with `bytes`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Writes a value as pretty JSON, atomically.
pub fn save_json<T: Serialize>(path: &Path, value: &T) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    write_atomic(path, &bytes)
}

/// Reads a JSON value; `Ok(None)` if the file does not exist.
pub fn load_json<T: DeserializeOwned>(path: &Path) -> std::io::Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the node id stored in `state_dir/node_id`, or creates one with the given prefix
/// (`p` for proxies, `t` for targets, like AIStore) and stores it.
pub fn load_or_create_node_id(state_dir: &Path, prefix: &str) -> std::io::Result<String> {
    let path = state_dir.join("node_id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let raw = uuid::Uuid::new_v4().simple().to_string();
    let id = format!("{prefix}{}", &raw[..8]);
    write_atomic(&path, id.as_bytes())?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_id_persists() {
        let dir = std::env::temp_dir().join(format!("gm-persist-{}", std::process::id()));
        let a = load_or_create_node_id(&dir, "t").unwrap();
        assert_eq!(load_or_create_node_id(&dir, "t").unwrap(), a);
        assert!(a.starts_with('t') && a.len() == 9);
        save_json(&dir.join("x.json"), &vec![1, 2]).unwrap();
        assert_eq!(
            load_json::<Vec<i32>>(&dir.join("x.json")).unwrap(),
            Some(vec![1, 2])
        );
        assert_eq!(load_json::<Vec<i32>>(&dir.join("none.json")).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
