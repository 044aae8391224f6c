//! Sweeps: the search space and the algorithms that propose trials.
//!
//! Work in progress for the sweep issue: the space, grid, random, Sobol and TPE (with its
//! quality tests), ASHA's promotion rule and the median stopping rule exist, and
//! `spec::sweep` validates sweeps; hyperband and running sweeps do not yet, and `sluice run`
//! still refuses them.

pub mod algorithm;
pub mod asha;
pub mod early_stop;
pub mod space;
pub mod tpe;
