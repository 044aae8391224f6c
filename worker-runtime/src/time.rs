//! Wall-clock time in RFC 3339, UTC, millisecond precision: how the engine and the runtime
//! write every timestamp (store rows, result files, log lines), on chrono.
//!
//! The written form is fixed: `2026-12-02T19:00:00.123Z` (always three fraction digits and
//! `Z`), so that timestamps sort as text and older homes read the same. Reading accepts any
//! RFC 3339 time (another offset is converted to UTC); anything else is an error, never a
//! default.

use chrono::{DateTime, SecondsFormat, Utc};

/// A timestamp that is not RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{value}' is not an RFC 3339 time: {why}")]
pub struct BadTimestamp {
    pub value: String,
    pub why: String,
}

/// Unix time in milliseconds.
pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}

/// Now, as [`format`] writes it.
pub fn now_rfc3339() -> String {
    format(Utc::now())
}

/// `2026-12-02T19:00:00.123Z`: UTC, milliseconds, `Z`.
pub fn format(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// An RFC 3339 time (as [`format`] writes it, or with another offset or precision) in UTC.
pub fn parse(s: &str) -> Result<DateTime<Utc>, BadTimestamp> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| BadTimestamp {
            value: s.to_owned(),
            why: e.to_string(),
        })
}

/// Unix milliseconds of an RFC 3339 time.
pub fn parse_ms(s: &str) -> Result<i64, BadTimestamp> {
    parse(s).map(|t| t.timestamp_millis())
}

/// Unix milliseconds of an RFC 3339 time, or `None` for one that is not. For callers that
/// have not moved to [`parse_ms`] yet, which says what is wrong: prefer that.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    parse_ms(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("in range")
    }

    #[test]
    fn writes_milliseconds_and_z() {
        assert_eq!(format(at(1_764_702_000_123)), "2025-12-02T19:00:00.123Z");
        assert_eq!(format(at(0)), "1970-01-01T00:00:00.000Z");
        // Whole seconds keep their three digits: the text sorts as the time does.
        assert_eq!(format(at(951_782_400_000)), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn round_trips() {
        for ms in [0, 1_764_702_000_123, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_ms(&format(at(ms))), Ok(ms), "{}", format(at(ms)));
        }
    }

    #[test]
    fn reads_other_offsets_and_precisions() {
        assert_eq!(parse_ms("2025-12-02T20:00:00+01:00"), Ok(1_764_702_000_000));
        assert_eq!(
            parse_ms("2025-12-02T19:00:00.123456Z"),
            Ok(1_764_702_000_123)
        );
    }

    #[test]
    fn a_bad_timestamp_is_an_error() {
        for bad in [
            "",
            "yesterday",
            "2025-12-02",
            "2025-13-02T19:00:00.000Z",
            "2025-12-02T19:00:00.000",
        ] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e.value, bad);
            assert_eq!(parse_rfc3339(bad), None);
        }
    }
}
