//! AWS named profiles from the shared files (`~/.aws/credentials`, `~/.aws/config`, or
//! `AWS_SHARED_CREDENTIALS_FILE` / `AWS_CONFIG_FILE`): the credentials of one account, its
//! region and optional `endpoint_url`. Lets one cluster cache buckets of several accounts
//! (`s3://#acct/bucket` uses profile `acct`), as AIStore does with namespaces.

use std::collections::HashMap;
use std::path::PathBuf;

/// Where the shared files are (`AWS_SHARED_CREDENTIALS_FILE`, `AWS_CONFIG_FILE`, else
/// `~/.aws/...`, resolved by the caller); `None` = no such file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AwsFiles {
    pub credentials: Option<PathBuf>,
    pub config: Option<PathBuf>,
}

/// What a profile sets (empty = not set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
    pub region: String,
    pub endpoint: String,
}

/// Sections of an INI file: `[name]` → key → value (keys lowercased, values trimmed).
fn parse_ini(text: &str) -> HashMap<String, HashMap<String, String>> {
    let mut out: HashMap<String, HashMap<String, String>> = HashMap::new();
    let mut section = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.trim().to_owned();
            continue;
        }
        if let Some((k, v)) = line.split_once('=') {
            out.entry(section.clone())
                .or_default()
                .insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    out
}

/// Loads profile `name` from the shared credentials and config files; `None` if neither
/// mentions it.
pub fn load(name: &str, files: &AwsFiles) -> Option<Profile> {
    let read = |p: Option<PathBuf>| {
        p.and_then(|p| std::fs::read_to_string(p).ok())
            .map(|t| parse_ini(&t))
            .unwrap_or_default()
    };
    let creds = read(files.credentials.clone());
    let config = read(files.config.clone());
    let c = creds.get(name);
    // The config file names profiles `[profile x]`, except `[default]`.
    let f = config
        .get(&format!("profile {name}"))
        .or_else(|| config.get(name));
    if c.is_none() && f.is_none() {
        return None;
    }
    let get = |m: Option<&HashMap<String, String>>, k: &str| {
        m.and_then(|m| m.get(k)).cloned().unwrap_or_default()
    };
    let token = get(c, "aws_session_token");
    Some(Profile {
        access_key: get(c, "aws_access_key_id"),
        secret_key: get(c, "aws_secret_access_key"),
        session_token: (!token.is_empty()).then_some(token),
        region: get(f, "region"),
        endpoint: get(f, "endpoint_url"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ini_sections_and_keys() {
        let ini = parse_ini(
            "# c\n[default]\naws_access_key_id = A\n\n[profile acct]\nRegion=eu-west-1\nendpoint_url = http://x:9000\n",
        );
        assert_eq!(ini["default"]["aws_access_key_id"], "A");
        assert_eq!(ini["profile acct"]["region"], "eu-west-1");
        assert_eq!(ini["profile acct"]["endpoint_url"], "http://x:9000");
    }
}
