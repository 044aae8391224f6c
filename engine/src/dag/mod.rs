//! The step graph of a validated pipeline, and its plan.
//!
//! [`graph`] checks what needs the whole graph (cycles, references that must point
//! upstream) and orders the steps; [`plan`] expands fan-out steps into the step instances a
//! run will hold (`NAME[0]`, `NAME[1]`, ...).

pub mod graph;
pub mod plan;

pub use graph::Dag;
pub use plan::Plan;
