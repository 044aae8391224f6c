//! A step's runtime estimate from its history, for EASY backfill when it sets no `timeout`.
//!
//! The longest of its latest successful attempts (in earlier runs of the same pipeline of
//! the same team), plus a quarter: a step that ran five times in about an hour is expected to
//! end within 75 minutes. Unlike a `timeout` it is not enforced, so a step that runs longer
//! than its history says delays the starving gang whose reserved nodes it used by as much
//! (Slurm's EASY uses time limits the job is killed at; with history alone, as here, the
//! gang's start is a forecast, not a promise). Set a `timeout` for the promise.

/// How many of the latest successful attempts count.
pub const LATEST: i64 = 5;

/// The estimate, in ms, from the durations of the latest successful attempts (any order);
/// None without any.
pub fn estimate(durations: &[u64]) -> Option<u64> {
    let longest = *durations.iter().max()?;
    Some(longest.saturating_add(longest / 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_plus_a_quarter_and_none_without_history() {
        assert_eq!(estimate(&[]), None);
        assert_eq!(estimate(&[40_000, 60_000, 52_000]), Some(75_000));
        assert_eq!(estimate(&[u64::MAX]), Some(u64::MAX));
    }
}
