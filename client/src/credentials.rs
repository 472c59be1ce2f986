//! The credential file: where `grist auth login` keeps the token and where every client looks
//! for it. `$GRIST_TOKEN_FILE`, else `$XDG_CONFIG_HOME/grist/token`, else
//! `~/.config/grist/token`; written with mode 0600 (on Unix) through a temp file and a rename.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context;

/// Environment variable naming the token file (overrides the default location).
pub const TOKEN_FILE_ENV: &str = "GRIST_TOKEN_FILE";

/// Where the saved token lives.
pub fn token_path() -> PathBuf {
    if let Some(p) = std::env::var_os(TOKEN_FILE_ENV) {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("grist").join("token")
}

/// The saved token, if there is a non-empty one.
pub fn saved_token() -> Option<String> {
    std::fs::read_to_string(token_path())
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Saves `token` for later clients; returns the file's path.
pub fn save_token(token: &str) -> anyhow::Result<PathBuf> {
    let path = token_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        writeln!(f, "{token}")?;
    }
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}
