//! Many objects at once: `grist get ais://b --prefix p/ DIR` (or `--template`) downloads them
//! into a directory in parallel, and `grist rmo ais://b --prefix p/` (or `--template`) deletes
//! them after a confirmation (`-y` skips it). Progress bars show only on a terminal.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use futures::StreamExt;
use gristmill_client::Client;
use gristmill_core::Bck;
use gristmill_core::api::ListObjectsMsg;
use gristmill_core::template::Template;
use indicatif::{ProgressBar, ProgressStyle};

/// The object names a `--prefix` (listed) or `--template` (expanded, not listed) selects.
pub async fn selected_names(
    client: &Client,
    bck: &Bck,
    prefix: Option<&str>,
    template: Option<&str>,
) -> anyhow::Result<Vec<String>> {
    match (prefix, template) {
        (Some(_), Some(_)) => bail!("give --prefix or --template, not both"),
        (None, None) => bail!("give --prefix or --template"),
        (None, Some(t)) => Ok(Template::parse(t)?.names().collect()),
        (Some(p), None) => {
            let lso = ListObjectsMsg {
                prefix: p.to_owned(),
                props: "name".into(),
                ..Default::default()
            };
            let entries = client.list_entries(bck, lso, 0).await?;
            Ok(entries.into_iter().map(|e| e.name).collect())
        }
    }
}

/// A progress bar on stderr when it is a terminal; hidden otherwise.
pub fn progress(len: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{what} [{{bar:30}}] {{pos}}/{{len}} {{msg}} ({{elapsed}})"
        ))
        .expect("progress template")
        .progress_chars("=> "),
    );
    bar
}

/// Where object `name` lands under `dir`: its path relative to the selection's prefix, so
/// `--prefix train/` puts `train/a/1.jpg` at `DIR/a/1.jpg`. Names that would climb out of the
/// directory are refused.
fn local_path(dir: &Path, prefix: &str, name: &str) -> anyhow::Result<PathBuf> {
    let rel = name
        .strip_prefix(prefix)
        .unwrap_or(name)
        .trim_start_matches('/');
    let rel = if rel.is_empty() { name } else { rel };
    let path = Path::new(rel);
    if path
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        bail!("object name {name:?} is not a safe relative path; not downloaded");
    }
    Ok(dir.join(path))
}

/// Downloads `names` of `bck` into `dir`, `parallel` at a time (each to a temporary name,
/// renamed when whole); missing objects of a template are skipped and counted. Returns
/// (objects, bytes).
pub async fn get_many(
    client: &Client,
    bck: &Bck,
    names: Vec<String>,
    prefix: &str,
    dir: &Path,
    parallel: usize,
) -> anyhow::Result<(u64, u64, u64)> {
    tokio::fs::create_dir_all(dir)
        .await
        .with_context(|| format!("creating {}", dir.display()))?;
    let bar = progress(names.len() as u64, "GET");
    let results: Vec<anyhow::Result<Option<u64>>> = futures::stream::iter(names)
        .map(|name| {
            let bar = &bar;
            async move {
                let dest = local_path(dir, prefix, &name)?;
                if let Some(parent) = dest.parent() {
                    tokio::fs::create_dir_all(parent).await?;
                }
                let tmp = dest.with_extension(format!(
                    "{}grist-partial",
                    dest.extension()
                        .map(|e| format!("{}.", e.to_string_lossy()))
                        .unwrap_or_default()
                ));
                let mut f = tokio::fs::File::create(&tmp)
                    .await
                    .with_context(|| format!("creating {}", tmp.display()))?;
                let got = client.get_into(bck, &name, &mut f).await;
                drop(f);
                let out = match got {
                    Ok(n) => {
                        tokio::fs::rename(&tmp, &dest).await?;
                        Ok(Some(n))
                    }
                    Err(e) => {
                        let _ = tokio::fs::remove_file(&tmp).await;
                        if is_not_found(&e) {
                            Ok(None)
                        } else {
                            Err(e.context(format!("GET {bck}/{name}")))
                        }
                    }
                };
                bar.inc(1);
                out
            }
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    bar.finish_and_clear();
    let (mut objects, mut bytes, mut missing) = (0, 0, 0);
    for r in results {
        match r? {
            Some(n) => {
                objects += 1;
                bytes += n;
            }
            None => missing += 1,
        }
    }
    Ok((objects, bytes, missing))
}

fn is_not_found(e: &anyhow::Error) -> bool {
    e.downcast_ref::<gristmill_client::HttpError>()
        .is_some_and(|h| h.status == reqwest::StatusCode::NOT_FOUND)
}

/// Asks `question` on the terminal; true for "y"/"yes".
pub fn confirm(question: &str) -> anyhow::Result<bool> {
    eprint!("{question} [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_lowercase().as_str(), "y" | "yes"))
}

/// Deletes `names` of `bck`, `parallel` at a time; missing ones are skipped. Returns
/// (deleted, missing).
pub async fn rm_many(
    client: &Client,
    bck: &Bck,
    names: Vec<String>,
    parallel: usize,
) -> anyhow::Result<(u64, u64)> {
    let bar = progress(names.len() as u64, "DELETE");
    let results: Vec<anyhow::Result<bool>> = futures::stream::iter(names)
        .map(|name| {
            let bar = &bar;
            async move {
                let r = match client.delete_object(bck, &name).await {
                    Ok(()) => Ok(true),
                    Err(e) if is_not_found(&e) => Ok(false),
                    Err(e) => Err(e.context(format!("DELETE {bck}/{name}"))),
                };
                bar.inc(1);
                r
            }
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    bar.finish_and_clear();
    let (mut deleted, mut missing) = (0, 0);
    for r in results {
        if r? {
            deleted += 1;
        } else {
            missing += 1;
        }
    }
    Ok((deleted, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_paths_stay_inside_the_directory() {
        let d = Path::new("/out");
        assert_eq!(
            local_path(d, "train/", "train/a/1.jpg").unwrap(),
            Path::new("/out/a/1.jpg")
        );
        assert_eq!(local_path(d, "", "x.bin").unwrap(), Path::new("/out/x.bin"));
        assert_eq!(
            local_path(d, "x.bin", "x.bin").unwrap(),
            Path::new("/out/x.bin")
        );
        assert!(local_path(d, "", "../etc/passwd").is_err());
        // A leading slash stays inside the directory.
        assert_eq!(local_path(d, "", "/abs").unwrap(), Path::new("/out/abs"));
        assert!(local_path(d, "a/", "a/../../b").is_err());
    }
}
