//! The credential file: where `grist auth login` keeps the token and where every client looks
//! for it. The caller names the file or the directories to derive it from (this crate reads
//! no environment): `grist` passes `$GRIST_TOKEN_FILE`, else `$XDG_CONFIG_HOME/grist/token`,
//! else `~/.config/grist/token`. Written with mode 0600 (on Unix) through a temp file and a
//! rename.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// Where the saved token lives: `token_file` when given, else `grist/token` under the
/// configuration directory (`xdg_config_home`, else `<home>/.config`, else `.`).
pub fn token_path(
    token_file: Option<PathBuf>,
    xdg_config_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> PathBuf {
    if let Some(p) = token_file.filter(|p| !p.as_os_str().is_empty()) {
        return p;
    }
    let base = xdg_config_home
        .filter(|p| !p.as_os_str().is_empty())
        .or_else(|| home.map(|h| h.join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("grist").join("token")
}

/// The token saved at `path`, if there is a non-empty one.
pub fn saved_token(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
}

/// Saves `token` at `path` for later clients; returns the path.
pub fn save_token(path: &Path, token: &str) -> anyhow::Result<PathBuf> {
    let path = path.to_path_buf();
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
