//! Wall-clock time as the store and the JSON shapes write it: RFC 3339 in UTC, millisecond
//! precision, `Z`. The runtime writes the same format, so one implementation (on chrono)
//! serves both. What reads the time should take a [`crate::clock::Clock`]; `now_ms` and
//! `now_rfc3339` are the system clock's, for code that does not take one yet.

pub use sluice_runtime::time::{
    BadTimestamp, format, now_ms, now_rfc3339, parse, parse_ms, parse_rfc3339,
};

/// The last moment whose written form sorts as the time does: the store compares times as
/// text, which holds for four-digit years only (year 10000 is written `+10000-...`). A bound
/// given past it (`--until 9999-12-31`) is taken as this.
pub const LATEST_MS: i64 = 253_402_300_799_999; // 9999-12-31T23:59:59.999Z

/// Seconds in the two largest units that are not zero, as people read waits: `42s`,
/// `59m 50s`, `3h 30m`, `2d 4h` (the rest dropped; the JSON keeps exact seconds).
pub fn human(secs: u64) -> String {
    const UNITS: [(&str, u64); 4] = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];
    let Some(first) = UNITS.iter().position(|(_, size)| secs >= *size) else {
        return "0s".into();
    };
    let mut out = Vec::new();
    let mut left = secs;
    for (unit, size) in &UNITS[first..(first + 2).min(UNITS.len())] {
        let n = left / size;
        left %= size;
        if n > 0 {
            out.push(format!("{n}{unit}"));
        }
    }
    out.join(" ")
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn waits_read_in_their_two_largest_units() {
        let cases = [
            (0, "0s"),
            (42, "42s"),
            (60, "1m"),
            (3590, "59m 50s"),
            (3600, "1h"),
            (10_750, "2h 59m"),
            (12_600, "3h 30m"),
            (86_400 + 7_200 + 59, "1d 2h"),
            (86_400 + 59, "1d"),
        ];
        for (secs, want) in cases {
            assert_eq!(human(secs), want, "{secs}");
        }
    }
}
