//! sluice-runtime: runs one attempt of a step. The engine writes what to run into the
//! attempt's folder and starts `sluice-runtime exec DIR`; the runtime places inputs, runs
//! the program in its own process group, captures its output and metrics, enforces its
//! timeout, passes SIGTERM on with a grace period, copies its outputs to the object store and
//! writes the attempt's end. It shares nothing with the engine but files (see [`contract`]),
//! which is how attempts outlive an engine that dies.

pub mod checkpoint;
pub mod cli;
pub mod contract;
pub mod exec;
mod files;
pub mod install;
pub mod metrics;
pub mod objects;
pub mod pod;
pub mod serve;
pub mod stores;
pub mod time;
