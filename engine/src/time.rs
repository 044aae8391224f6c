//! Wall-clock time as the store and the JSON shapes write it: RFC 3339 in UTC, millisecond
//! precision, `Z`. The runtime writes the same format, so one implementation (on chrono)
//! serves both. What reads the time should take a [`crate::clock::Clock`]; `now_ms` and
//! `now_rfc3339` are the system clock's, for code that does not take one yet.

pub use sluice_runtime::time::{
    BadTimestamp, format, now_ms, now_rfc3339, parse, parse_ms, parse_rfc3339,
};
