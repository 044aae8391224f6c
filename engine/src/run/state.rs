//! State names, exactly as the CLI contract spells them.

/// Step states.
pub mod step {
    pub const PENDING: &str = "Pending";
    pub const QUEUED: &str = "Queued";
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const CACHED: &str = "Cached";
    pub const SKIPPED: &str = "Skipped";
    pub const CANCELLED: &str = "Cancelled";
    /// A sweep's trial stopped early (median rule, the sweep's target or maxDuration reached):
    /// neither a failure nor a candidate beyond what it reported.
    pub const STOPPED: &str = "Stopped";

    /// A step in one of these states will not change again (until `sluice retry`; an ASHA
    /// trial's promotion also takes it from `Succeeded` back to `Queued`).
    pub fn is_terminal(s: &str) -> bool {
        matches!(
            s,
            SUCCEEDED | FAILED | CACHED | SKIPPED | CANCELLED | STOPPED
        )
    }

    /// States that satisfy `needs`.
    pub fn satisfies(s: &str) -> bool {
        matches!(s, SUCCEEDED | CACHED | SKIPPED)
    }
}

/// Attempt states.
pub mod attempt {
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const TIMEOUT: &str = "Timeout";
    pub const PREEMPTED: &str = "Preempted";
    pub const LOST: &str = "Lost";
    pub const CANCELLED: &str = "Cancelled";
}

/// Run states.
pub mod run {
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
    pub const CANCELLED: &str = "Cancelled";
    /// Being removed (`sluice delete`, `sluice gc`): seen only when a delete was cut off, which
    /// running it again finishes.
    pub const DELETING: &str = "Deleting";
}
