//! Sweeps: the search space and the algorithms that propose trials.
//!
//! Work in progress for the sweep issue: the space, grid, random, Sobol and TPE (with its
//! quality tests), ASHA's promotion rule, Hyperband's brackets and the median stopping rule
//! exist, and `spec::sweep` validates sweeps; running sweeps does not yet, and `sluice run`
//! still refuses them.

pub mod algorithm;
pub mod asha;
pub mod early_stop;
pub mod space;
pub mod tpe;
