//! Wall-clock time as the store and the JSON shapes write it: RFC 3339 in UTC. The runtime
//! writes the same format, so one implementation serves both.

pub use sluice_runtime::time::{now_ms, now_rfc3339, parse_rfc3339, rfc3339};
