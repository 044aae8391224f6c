//! sluice: a workflow engine for machine-learning training on shared GPU clusters.
//!
//! The data flows one way (see `ARCHITECTURE.md` at the repository's root):
//! YAML -> [`spec`] (validated model) -> [`dag`] (ordered graph and plan) -> ... -> [`cli`].
//! Later stages (queue and admission, executors, state and object stores) plug in after
//! `dag`.

pub mod cli;
pub mod client;
pub mod clock;
pub mod dag;
pub mod executor;
pub mod run;
pub mod schedule;
pub mod scheduler;
pub mod server;
pub mod service;
pub mod spec;
pub mod store;
pub mod sweep;
pub mod time;
