//! Choosing members by name: AIStore's `archregx` + `archmode`.

use std::fmt;
use std::str::FromStr;

use regex::{Regex, RegexBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{Result, ShardError};
use crate::sample::wds_key;

/// How [`Selector`] compares its expression with member names (AIStore's `archmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchMode {
    /// The expression is a regular expression found anywhere in the name (unanchored, as
    /// Go's `regexp.MatchString`; anchor with `^...$`). AIStore's default.
    #[default]
    Regexp,
    /// The name starts with the expression.
    Prefix,
    /// The name ends with the expression.
    Suffix,
    /// The name contains the expression.
    Substr,
    /// The name's WebDataset key ([`wds_key`]) equals the expression: every file of one
    /// sample.
    WdsKey,
}

impl MatchMode {
    /// The wire spelling: `regexp`, `prefix`, `suffix`, `substr`, `wdskey`.
    pub fn as_str(self) -> &'static str {
        match self {
            MatchMode::Regexp => "regexp",
            MatchMode::Prefix => "prefix",
            MatchMode::Suffix => "suffix",
            MatchMode::Substr => "substr",
            MatchMode::WdsKey => "wdskey",
        }
    }
}

impl fmt::Display for MatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MatchMode {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "regexp" | "regex" => Ok(MatchMode::Regexp),
            "prefix" => Ok(MatchMode::Prefix),
            "suffix" => Ok(MatchMode::Suffix),
            "substr" => Ok(MatchMode::Substr),
            "wdskey" => Ok(MatchMode::WdsKey),
            _ => Err(ShardError::Invalid(format!(
                "archmode {s:?} (want regexp, prefix, suffix, substr or wdskey)"
            ))),
        }
    }
}

/// Longest expression accepted: it arrives in a query string.
const MAX_EXPR_LEN: usize = 4096;
/// Compiled-regex budget: regexes are linear-time, this bounds their memory.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A compiled member filter.
#[derive(Debug, Clone)]
pub struct Selector {
    mode: MatchMode,
    expr: String,
    regex: Option<Regex>,
}

impl Selector {
    /// Compiles `expr` for `mode`. A bad or oversized regular expression is
    /// [`ShardError::Invalid`] (a 400 for the caller).
    pub fn new(mode: MatchMode, expr: &str) -> Result<Self> {
        if expr.len() > MAX_EXPR_LEN {
            return Err(ShardError::Invalid(format!(
                "expression of {} bytes (limit {MAX_EXPR_LEN})",
                expr.len()
            )));
        }
        let regex = match mode {
            MatchMode::Regexp => Some(
                RegexBuilder::new(expr)
                    .size_limit(REGEX_SIZE_LIMIT)
                    .dfa_size_limit(REGEX_SIZE_LIMIT)
                    .build()
                    .map_err(|e| ShardError::Invalid(format!("bad regular expression: {e}")))?,
            ),
            _ => None,
        };
        Ok(Selector {
            mode,
            expr: expr.to_owned(),
            regex,
        })
    }

    /// The match mode.
    pub fn mode(&self) -> MatchMode {
        self.mode
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// Whether a member name is selected.
    pub fn matches(&self, name: &str) -> bool {
        match self.mode {
            MatchMode::Regexp => self.regex.as_ref().is_some_and(|r| r.is_match(name)),
            MatchMode::Prefix => name.starts_with(&self.expr),
            MatchMode::Suffix => name.ends_with(&self.expr),
            MatchMode::Substr => name.contains(&self.expr),
            MatchMode::WdsKey => wds_key(name).0 == self.expr,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        let names = [
            "a/0001.jpg",
            "a/0001.cls",
            "a/0002.jpg",
            "b/0001.jpg",
            "a/0001.seg.png",
        ];
        let pick = |mode: MatchMode, expr: &str| -> Vec<&str> {
            let s = Selector::new(mode, expr).unwrap();
            names.iter().copied().filter(|n| s.matches(n)).collect()
        };
        assert_eq!(
            pick(MatchMode::Regexp, r"\.jpg$"),
            ["a/0001.jpg", "a/0002.jpg", "b/0001.jpg"]
        );
        assert_eq!(pick(MatchMode::Regexp, "0002"), ["a/0002.jpg"]);
        assert_eq!(pick(MatchMode::Prefix, "b/"), ["b/0001.jpg"]);
        assert_eq!(pick(MatchMode::Suffix, ".cls"), ["a/0001.cls"]);
        assert_eq!(
            pick(MatchMode::Substr, "0001"),
            ["a/0001.jpg", "a/0001.cls", "b/0001.jpg", "a/0001.seg.png"]
        );
        assert_eq!(
            pick(MatchMode::WdsKey, "a/0001"),
            ["a/0001.jpg", "a/0001.cls", "a/0001.seg.png"]
        );
        assert!(pick(MatchMode::WdsKey, "a/0001.seg").is_empty());
    }

    #[test]
    fn parsing_and_errors() {
        for m in [
            MatchMode::Regexp,
            MatchMode::Prefix,
            MatchMode::Suffix,
            MatchMode::Substr,
            MatchMode::WdsKey,
        ] {
            assert_eq!(m.to_string().parse::<MatchMode>().unwrap(), m);
        }
        assert_eq!("WDSKEY".parse::<MatchMode>().unwrap(), MatchMode::WdsKey);
        assert!(matches!(
            "glob".parse::<MatchMode>(),
            Err(ShardError::Invalid(_))
        ));
        assert!(matches!(
            Selector::new(MatchMode::Regexp, "(unclosed"),
            Err(ShardError::Invalid(_))
        ));
        assert!(matches!(
            Selector::new(MatchMode::Regexp, "a{10000}{10000}"),
            Err(ShardError::Invalid(_))
        ));
        assert!(matches!(
            Selector::new(MatchMode::Prefix, &"x".repeat(5000)),
            Err(ShardError::Invalid(_))
        ));
        // A prefix is literal, not a pattern.
        assert!(Selector::new(MatchMode::Prefix, "(").unwrap().matches("(x"));
    }
}
