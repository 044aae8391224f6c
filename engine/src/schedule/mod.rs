//! Schedules: when a `kind: Schedule` fires. `cron` reads its expression in its time zone.

pub mod cron;
pub mod plan;
