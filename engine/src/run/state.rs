//! The lifecycle's states, typed: a run's, a step's and an attempt's (and the kinds of a
//! run's event log). They are stored and
//! shown as exactly the names the CLI contract spells (`Succeeded`, `Cancelled`, ...), and
//! decoded when a row is read (`store::read`): a name no state has is an error naming the
//! row, not a string compared later.

/// Declares a state enum with its contract name for each variant.
macro_rules! states {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// Every state, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The name the contract spells, as stored and shown.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The state of that name, if one has it.
            pub fn parse(text: &str) -> Option<Self> {
                match text {
                    $($text => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownState;

            fn from_str(text: &str) -> Result<Self, UnknownState> {
                Self::parse(text).ok_or_else(|| UnknownState {
                    what: stringify!($name),
                    text: text.to_owned(),
                    known: Self::ALL.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
                })
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl From<$name> for String {
            fn from(s: $name) -> String {
                s.as_str().to_owned()
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}

/// A stored state name no state has (a store written by a newer sluice, or damaged).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a {what} (one of: {known})")]
pub struct UnknownState {
    pub what: &'static str,
    pub text: String,
    pub known: String,
}

states! {
    /// Where a step instance is in its life.
    #[derive(Default)]
    StepState {
        /// Waiting for what it needs.
        #[default]
        Pending = "Pending",
        /// Ready, waiting for room (or its backoff, its trial rate, the scheduler).
        Queued = "Queued",
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        /// Its outputs taken from an earlier run's identical step.
        Cached = "Cached",
        /// Its condition was false, or what it reads was skipped.
        Skipped = "Skipped",
        Cancelled = "Cancelled",
        /// A sweep's trial stopped early (median rule, the sweep's target or maxDuration
        /// reached): neither a failure nor a candidate beyond what it reported.
        Stopped = "Stopped",
    }
}

impl StepState {
    /// A step in one of these states will not change again (until `sluice retry`; an ASHA
    /// trial's promotion also takes it from `Succeeded` back to `Queued`).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            StepState::Succeeded
                | StepState::Failed
                | StepState::Cached
                | StepState::Skipped
                | StepState::Cancelled
                | StepState::Stopped
        )
    }

    /// States that satisfy `needs`.
    pub const fn satisfies(self) -> bool {
        matches!(
            self,
            StepState::Succeeded | StepState::Cached | StepState::Skipped
        )
    }
}

states! {
    /// How one attempt of a step went.
    #[derive(Default)]
    AttemptState {
        #[default]
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        /// Stopped at its step's timeout.
        Timeout = "Timeout",
        /// Stopped for a step of a higher priority, or a team taking back its quota.
        Preempted = "Preempted",
        /// Its runtime, pod or node went away without saying how it ended.
        Lost = "Lost",
        Cancelled = "Cancelled",
    }
}

states! {
    /// Where a run is in its life.
    RunState {
        Running = "Running",
        Succeeded = "Succeeded",
        Failed = "Failed",
        Cancelled = "Cancelled",
        /// Being removed (`sluice delete`, `sluice gc`): seen only when a delete was cut
        /// off, which running it again finishes.
        Deleting = "Deleting",
    }
}

impl RunState {
    /// Whether the run has ended (it may still be retried, which reopens it).
    pub const fn is_terminal(self) -> bool {
        !matches!(self, RunState::Running | RunState::Deleting)
    }
}

states! {
    /// What an entry of a run's append-only event log records (the `events` table's
    /// `kind`, kept for audits and post-mortems).
    EventKind {
        /// The run was submitted.
        Created = "created",
        /// An attempt was handed to the executor.
        AttemptStarted = "attempt-started",
        /// An attempt ended; its detail is the attempt's state.
        AttemptEnded = "attempt-ended",
        /// An attempt's executor lost it (its runtime, pod or node went away).
        AttemptLost = "attempt-lost",
        /// An attempt of a dead engine's run, collected by another process.
        AttemptCollected = "attempt-collected",
        /// A step was asked to stop for a step of a higher priority, or a quota's owner.
        Preempting = "preempting",
        /// A sweep's trial stopped early (median rule, the sweep's target reached).
        EarlyStop = "early-stop",
        /// `sluice retry` reopened the run.
        Retried = "retried",
        /// The run ended; its detail is the run's state.
        Ended = "ended",
    }
}

/// Step states, by the names the driver's code reads them with.
pub mod step {
    pub use super::StepState;

    pub const PENDING: StepState = StepState::Pending;
    pub const QUEUED: StepState = StepState::Queued;
    pub const RUNNING: StepState = StepState::Running;
    pub const SUCCEEDED: StepState = StepState::Succeeded;
    pub const FAILED: StepState = StepState::Failed;
    pub const CACHED: StepState = StepState::Cached;
    pub const SKIPPED: StepState = StepState::Skipped;
    pub const CANCELLED: StepState = StepState::Cancelled;
    pub const STOPPED: StepState = StepState::Stopped;

    /// See [`StepState::is_terminal`].
    pub const fn is_terminal(s: StepState) -> bool {
        s.is_terminal()
    }

    /// See [`StepState::satisfies`].
    pub const fn satisfies(s: StepState) -> bool {
        s.satisfies()
    }
}

/// Attempt states.
pub mod attempt {
    pub use super::AttemptState;

    pub const RUNNING: AttemptState = AttemptState::Running;
    pub const SUCCEEDED: AttemptState = AttemptState::Succeeded;
    pub const FAILED: AttemptState = AttemptState::Failed;
    pub const TIMEOUT: AttemptState = AttemptState::Timeout;
    pub const PREEMPTED: AttemptState = AttemptState::Preempted;
    pub const LOST: AttemptState = AttemptState::Lost;
    pub const CANCELLED: AttemptState = AttemptState::Cancelled;
}

/// Run states.
pub mod run {
    pub use super::RunState;

    pub const RUNNING: RunState = RunState::Running;
    pub const SUCCEEDED: RunState = RunState::Succeeded;
    pub const FAILED: RunState = RunState::Failed;
    pub const CANCELLED: RunState = RunState::Cancelled;
    pub const DELETING: RunState = RunState::Deleting;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_contract_name() {
        for s in StepState::ALL {
            assert_eq!(s.as_str().parse::<StepState>(), Ok(*s));
        }
        for s in AttemptState::ALL {
            assert_eq!(s.as_str().parse::<AttemptState>(), Ok(*s));
        }
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>(), Ok(*s));
        }
        for s in EventKind::ALL {
            assert_eq!(s.as_str().parse::<EventKind>(), Ok(*s));
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_listing_the_known_ones() {
        let e = "Done".parse::<StepState>().expect_err("no such state");
        assert_eq!(
            e.to_string(),
            "\"Done\" is not a StepState (one of: Pending, Queued, Running, Succeeded, Failed, Cached, Skipped, Cancelled, Stopped)"
        );
        // Names are the contract's, exactly: no case folding.
        assert!("succeeded".parse::<RunState>().is_err());
    }

    #[test]
    fn terminal_and_satisfying_states_are_the_contracts() {
        let terminal: Vec<_> = StepState::ALL.iter().filter(|s| s.is_terminal()).collect();
        assert_eq!(terminal.len(), 6);
        assert!(!StepState::Queued.is_terminal() && !StepState::Running.is_terminal());
        let satisfying: Vec<_> = StepState::ALL
            .iter()
            .filter(|s| s.satisfies())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(satisfying, ["Succeeded", "Cached", "Skipped"]);
    }
}
