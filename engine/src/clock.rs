//! The wall clock, injected: whatever needs the time of day takes a [`Clock`], so that tests
//! (and, later, schedules and the simulator) can set it instead of sleeping.
//!
//! [`SystemClock`] is the real one; [`ManualClock`] stands still until a test moves it.
//! Times are chrono's `DateTime<Utc>`, so that time zones (schedules) come with the library;
//! they are written as [`crate::time::format`] writes them.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> DateTime<Utc>;

    /// Unix time in milliseconds.
    fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }

    /// Now as the store writes it (`2026-12-02T19:00:00.123Z`).
    fn now_rfc3339(&self) -> String {
        crate::time::format(self.now())
    }
}

/// The system's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock read from a file holding an RFC 3339 time (the system's time while the file
/// cannot be read): what `SLUICE_SCHEDULE_CLOCK_FILE` gives a server's schedule loop, so that
/// end-to-end tests move its time by writing the file. For tests only.
#[derive(Clone, Debug)]
pub struct FileClock {
    pub path: std::path::PathBuf,
}

impl Clock for FileClock {
    fn now(&self) -> DateTime<Utc> {
        std::fs::read_to_string(&self.path)
            .ok()
            .and_then(|t| crate::time::parse(t.trim()).ok())
            .unwrap_or_else(Utc::now)
    }
}

/// The system clock, shared: what every caller uses unless it is given another.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// A clock that only moves when told to (tests). Clones share the same time.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<Mutex<DateTime<Utc>>>,
}

impl ManualClock {
    pub fn new(at: DateTime<Utc>) -> Self {
        ManualClock {
            now: Arc::new(Mutex::new(at)),
        }
    }

    /// Sets the time (it may go back: a test of a clock that jumped).
    pub fn set(&self, at: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = at;
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        // A step past chrono's range (hundreds of thousands of years) stays at the end of it.
        let by = chrono::TimeDelta::from_std(by).unwrap_or(chrono::TimeDelta::MAX);
        *now = now
            .checked_add_signed(by)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told_and_its_clones_follow() {
        let start = crate::time::parse("2026-12-02T19:00:00.000Z").expect("valid");
        let clock = ManualClock::new(start);
        let seen_by_other = clock.clone();
        assert_eq!(clock.now_rfc3339(), "2026-12-02T19:00:00.000Z");
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(seen_by_other.now_rfc3339(), "2026-12-02T19:00:01.500Z");
        assert_eq!(seen_by_other.now_ms(), start.timestamp_millis() + 1_500);
        clock.set(start);
        assert_eq!(seen_by_other.now(), start);
    }

    #[test]
    fn the_system_clock_writes_what_the_store_reads() {
        let written = SystemClock.now_rfc3339();
        crate::time::parse_ms(&written).expect("its own format");
        assert_eq!(written.len(), "2026-12-02T19:00:00.000Z".len());
        assert!(written.ends_with('Z'), "{written}");
    }
}
