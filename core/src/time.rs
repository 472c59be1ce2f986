//! Timestamp formatting without a calendar dependency.

/// Formats Unix nanoseconds as RFC 3339 UTC (`2026-11-30T04:33:27.123456789Z`).
pub fn rfc3339_from_ns(ns: i64) -> String {
    let secs = ns.div_euclid(1_000_000_000);
    let nanos = ns.rem_euclid(1_000_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Parses a duration such as `90s`, `30m`, `2h`, `1d`, `500ms` or `0` (seconds when no unit).
pub fn parse_duration(s: &str) -> Result<std::time::Duration, crate::ApiError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad =
        || crate::ApiError::bad_request(format!("invalid duration {s:?} (e.g. 90s, 30m, 2h)"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = |mult: u64| {
        n.checked_mul(mult)
            .map(std::time::Duration::from_secs)
            .ok_or_else(bad)
    };
    match unit {
        "" | "s" => secs(1),
        "ms" => Ok(std::time::Duration::from_millis(n)),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        _ => Err(bad()),
    }
}

/// Parses a byte size such as `1048576`, `64KiB`, `10MB`, `2GiB`, `1T` (K/M/G/T are 1024-based
/// as in AIStore's CLI; `KB`/`MB`/... are 1000-based).
pub fn parse_size(s: &str) -> Result<u64, crate::ApiError> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let bad = || crate::ApiError::bad_request(format!("invalid size {s:?} (e.g. 512MiB, 10GB)"));
    let n: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        _ => return Err(bad()),
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(v as u64)
}

/// Days since 1970-01-01 to (year, month, day); Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_and_sizes() {
        use std::time::Duration;
        assert_eq!(
            super::parse_duration("90s").unwrap(),
            Duration::from_secs(90)
        );
        assert_eq!(
            super::parse_duration("2h").unwrap(),
            Duration::from_secs(7200)
        );
        assert_eq!(super::parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(
            super::parse_duration("5ms").unwrap(),
            Duration::from_millis(5)
        );
        assert!(super::parse_duration("h").is_err() && super::parse_duration("3x").is_err());
        assert_eq!(super::parse_size("64KiB").unwrap(), 65536);
        assert_eq!(super::parse_size("10MB").unwrap(), 10_000_000);
        assert_eq!(super::parse_size("1.5G").unwrap(), 1_610_612_736);
        assert!(super::parse_size("-1").is_err() && super::parse_size("3 parsecs").is_err());
    }

    #[test]
    fn formats() {
        assert_eq!(super::rfc3339_from_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            super::rfc3339_from_ns(1_796_013_207_000_000_001),
            "2026-11-30T04:33:27.000000001Z"
        );
    }
}
