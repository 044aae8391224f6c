//! Runs: submission, the driver that moves steps through their states, and the attempts it
//! launches under `sluice-runtime`.
//!
//! `run` is the only module that changes a run's state, and it commits each change to the
//! store before acting on it: an attempt is recorded (and its resources reserved) before its
//! runtime is started, and an attempt's end is committed before the steps after it start.

pub mod admission;
pub mod cache;
pub mod cluster;
pub mod driver;
pub mod engine;
pub mod history;
pub mod launch;
pub mod reap;
pub mod state;
pub mod submit;
pub mod transitions;

pub use driver::{Driver, Ending, Interrupt};
pub use submit::{Origin, submit};
