//! Brace templates naming many objects at once, as AIStore's list-range selections:
//! `shard-{0000..0999}.tar`, `img-{0..100..5}.jpg`, `a{0..2}/b{00..10}` (ranges multiply).
//!
//! A range's width is its start token's when that token has a leading zero (`{0010..0200}`
//! pads to 4 digits), else the numbers are not padded. A template without braces names only
//! itself; callers that accept a prefix treat such a template as one.

use crate::ApiError;

/// Most names one template may expand to (about 1 GB of names would be far beyond any use).
pub const MAX_NAMES: u64 = 10_000_000;

/// A parsed template: literal text and numeric ranges, alternating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Range {
        start: u64,
        end: u64,
        step: u64,
        width: usize,
    },
}

impl Part {
    fn count(&self) -> u64 {
        match self {
            Part::Text(_) => 1,
            Part::Range {
                start, end, step, ..
            } => (end - start) / step + 1,
        }
    }
}

impl Template {
    /// Parses a template; a brace that does not open a valid `{a..b}` / `{a..b..step}` range is
    /// an error (a typo must not silently select one literal name).
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        let bad = |why: &str| ApiError::bad_request(format!("invalid template {s:?}: {why}"));
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_owned()));
            }
            let close = rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| bad("unclosed '{'"))?;
            let body = &rest[open + 1..close];
            let fields: Vec<&str> = body.split("..").collect();
            if !(2..=3).contains(&fields.len()) {
                return Err(bad("expected {start..end} or {start..end..step}"));
            }
            let num = |t: &str| {
                if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad(&format!("{t:?} is not a number")));
                }
                t.parse::<u64>().map_err(|_| bad("number too large"))
            };
            let (start, end) = (num(fields[0])?, num(fields[1])?);
            let step = if fields.len() == 3 {
                num(fields[2])?
            } else {
                1
            };
            if step == 0 {
                return Err(bad("step must be positive"));
            }
            if end < start {
                return Err(bad("range end is below its start"));
            }
            let width = if fields[0].len() > 1 && fields[0].starts_with('0') {
                fields[0].len()
            } else {
                0
            };
            parts.push(Part::Range {
                start,
                end,
                step,
                width,
            });
            rest = &rest[close + 1..];
        }
        if rest.contains('}') {
            return Err(bad("'}' without '{'"));
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_owned()));
        }
        let t = Self { parts };
        if t.len() > MAX_NAMES {
            return Err(bad(&format!("expands to more than {MAX_NAMES} names")));
        }
        Ok(t)
    }

    /// Whether the template has at least one range (else it is a plain name or prefix).
    pub fn has_ranges(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Range { .. }))
    }

    /// Number of names (saturating).
    pub fn len(&self) -> u64 {
        self.parts
            .iter()
            .fold(1u64, |n, p| n.saturating_mul(p.count()))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The text before the first range: every name starts with it.
    pub fn prefix(&self) -> &str {
        match self.parts.first() {
            Some(Part::Text(t)) => t,
            _ => "",
        }
    }

    /// Every name, in order (the last range varies fastest).
    pub fn names(&self) -> impl Iterator<Item = String> + '_ {
        let total = self.len();
        (0..total).map(move |mut i| {
            // Mixed-radix decomposition of `i`, last part least significant.
            let mut pieces: Vec<String> = Vec::with_capacity(self.parts.len());
            for p in self.parts.iter().rev() {
                match p {
                    Part::Text(t) => pieces.push(t.clone()),
                    Part::Range {
                        start, step, width, ..
                    } => {
                        let n = p.count();
                        let v = start + (i % n) * step;
                        i /= n;
                        pieces.push(format!("{v:0width$}", width = *width));
                    }
                }
            }
            pieces.reverse();
            pieces.concat()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand(s: &str) -> Vec<String> {
        Template::parse(s).unwrap().names().collect()
    }

    #[test]
    fn padded_and_stepped_ranges() {
        assert_eq!(
            expand("shard-{0000..0002}.tar"),
            ["shard-0000.tar", "shard-0001.tar", "shard-0002.tar"]
        );
        assert_eq!(expand("x{0..10..5}"), ["x0", "x5", "x10"]);
        assert_eq!(expand("{8..11}"), ["8", "9", "10", "11"]);
        assert_eq!(
            expand("a{0..1}/b{00..01}"),
            ["a0/b00", "a0/b01", "a1/b00", "a1/b01"]
        );
        assert_eq!(Template::parse("s-{0000..0999}.tar").unwrap().len(), 1000);
        assert_eq!(
            Template::parse("s-{0000..0999}.tar").unwrap().prefix(),
            "s-"
        );
    }

    #[test]
    fn plain_names_have_no_ranges() {
        let t = Template::parse("just/a/prefix").unwrap();
        assert!(!t.has_ranges());
        assert_eq!(t.names().collect::<Vec<_>>(), ["just/a/prefix"]);
    }

    #[test]
    fn malformed_templates_are_errors() {
        for bad in [
            "a{0..",
            "a{x..3}",
            "a{3..1}",
            "a{0..4..0}",
            "a{1}",
            "a}b",
            "a{0..1..2..3}",
            "{0..99999999999}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad} should be refused");
        }
    }
}
