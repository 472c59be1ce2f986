//! Value types of settings that read the same from a flag, an environment variable and the
//! TOML file, and fail at start when malformed: durations and sizes with units, and the S3
//! user list (JSON on the command line, an array of tables in the file).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration with a unit: `500ms`, `30s`, `10m`, `2h`, `1d` (bare numbers are seconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl FromStr for Dur {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        gristmill_core::time::parse_duration(s)
            .map(Dur)
            .map_err(|e| e.message)
    }
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}ms", self.0.as_millis())
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        number_or_text(d, |n| Ok(Dur(Duration::from_secs(n))))
    }
}

/// A byte count with an optional unit: `1048576`, `64KiB`, `16MiB`, `500GiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        gristmill_core::time::parse_size(s)
            .map(Size)
            .map_err(|e| e.message)
    }
}

impl Serialize for Size {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(self.0)
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        number_or_text(d, |n| Ok(Size(n)))
    }
}

/// A target's placement weight: a whole number above 0, or `capacity` (the mountpaths'
/// size in GiB). `weight = 200` and `weight = "capacity"` in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeightSetting(pub gristmill_target::Weight);

impl FromStr for WeightSetting {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "capacity" => Ok(Self(gristmill_target::Weight::Capacity)),
            n => match n.parse::<u32>() {
                Ok(w) if w > 0 => Ok(Self(gristmill_target::Weight::Fixed(w))),
                _ => Err(format!(
                    "weight {n:?}: a whole number above 0, or `capacity`"
                )),
            },
        }
    }
}

impl fmt::Display for WeightSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            gristmill_target::Weight::Capacity => f.write_str("capacity"),
            gristmill_target::Weight::Fixed(w) => write!(f, "{w}"),
        }
    }
}

impl Serialize for WeightSetting {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for WeightSetting {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        number_or_text(d, |n| n.to_string().parse())
    }
}

/// A setting the file may give as a bare number (`from_number`) or as text (its `FromStr`).
fn number_or_text<'de, D, T>(
    d: D,
    from_number: impl FnOnce(u64) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr<Err = String>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumberOrText {
        Number(u64),
        Text(String),
    }
    match NumberOrText::deserialize(d)? {
        NumberOrText::Number(n) => from_number(n),
        NumberOrText::Text(t) => t.parse(),
    }
    .map_err(serde::de::Error::custom)
}

/// The S3 users: `[{"access_key","secret_key","read":["*"],"write":["b1"]}]` as JSON on the
/// command line, `[[s3.users]]` tables in the file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct S3Users(pub Vec<gristmill_core::users::S3User>);

impl FromStr for S3Users {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_str(s)
            .map(S3Users)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_serde_and_refuse_nonsense() {
        let d: Dur = "2h".parse().unwrap();
        assert_eq!(d.0, Duration::from_secs(7200));
        let back: Dur = serde_json::from_value(serde_json::to_value(d).unwrap()).unwrap();
        assert_eq!(back, d);
        assert!("soon".parse::<Dur>().is_err());
        let s: Size = serde_json::from_str("\"16MiB\"").unwrap();
        assert_eq!(s.0, 16 << 20);
        assert_eq!(serde_json::from_str::<Size>("4096").unwrap().0, 4096);
        assert!("lots".parse::<Size>().is_err());
    }
}
