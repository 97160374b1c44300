//! Timestamps are Unix milliseconds (`i64`) everywhere; this module formats them.

/// `t` as Unix milliseconds (0 for times before 1970). The caller reads the clock.
pub fn unix_ms(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Formats Unix milliseconds as RFC 3339 in UTC, e.g. `2026-11-30T01:02:03Z`.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A short age such as `+12m` or `+3h` for `then` as seen at `now` (both Unix ms).
pub fn age(then: i64, now: i64) -> String {
    let s = ((now - then) / 1000).max(0);
    match s {
        0..=59 => format!("+{s}s"),
        60..=3599 => format!("+{}m", s / 60),
        3600..=86_399 => format!("+{}h", s / 3600),
        _ => format!("+{}d", s / 86_400),
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A span of `secs` seconds in words for a prompt: "45 seconds", "1 minute", "5 minutes"
/// (whole minutes from 90 seconds on).
pub fn span(secs: u64) -> String {
    match secs {
        1 => "1 second".to_string(),
        0..=89 => format!("{secs} seconds"),
        _ => match (secs + 30) / 60 {
            1 => "1 minute".to_string(),
            m => format!("{m} minutes"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_as_words() {
        assert_eq!(span(10), "10 seconds");
        assert_eq!(span(60), "60 seconds");
        assert_eq!(span(90), "2 minutes");
        assert_eq!(span(300), "5 minutes");
        assert_eq!(span(1), "1 second");
    }

    #[test]
    fn formats_epoch_and_a_leap_day() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_000_523_000), "2026-11-30T01:02:03Z");
    }

    #[test]
    fn unix_ms_counts_from_the_epoch_and_clamps_earlier_times() {
        let epoch = std::time::UNIX_EPOCH;
        assert_eq!(
            unix_ms(epoch + std::time::Duration::from_millis(1_500)),
            1_500
        );
        assert_eq!(unix_ms(epoch - std::time::Duration::from_secs(1)), 0);
    }

    #[test]
    fn ages_use_the_largest_whole_unit() {
        assert_eq!(age(0, 5_000), "+5s");
        assert_eq!(age(0, 12 * 60_000 + 500), "+12m");
        assert_eq!(age(0, 3 * 3_600_000), "+3h");
        assert_eq!(age(10_000, 0), "+0s");
    }
}
