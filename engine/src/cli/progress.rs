//! The live view of a run: a progress bar on a terminal, plain timestamped lines elsewhere
//! (CI logs stay readable). Always on standard error.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::run::driver::Watcher;
use crate::run::state::step as st;
use crate::store::StepRow;

pub enum Progress {
    /// The bar counts steps, or a sweep's trials once one reports (`true`).
    Bar(ProgressBar, bool),
    /// Plain lines; a sweep's summary at most every few seconds.
    Lines(Option<std::time::Instant>),
    Quiet,
}

/// How often plain output repeats a sweep's summary line.
const SWEEP_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl Progress {
    pub fn new(quiet: bool) -> Self {
        if quiet {
            return Progress::Quiet;
        }
        if std::io::stderr().is_terminal() {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} steps  {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            Progress::Bar(bar, false)
        } else {
            Progress::Lines(None)
        }
    }

    pub fn finish(&self) {
        if let Progress::Bar(b, _) = self {
            b.finish_and_clear();
        }
    }
}

fn clock() -> String {
    let t = crate::time::now_rfc3339();
    t.get(11..23).unwrap_or("").to_owned()
}

impl Watcher for Progress {
    fn step(&mut self, row: &StepRow, total: usize, done: usize) {
        match self {
            Progress::Bar(b, sweeping) => {
                if *sweeping {
                    if matches!(row.state.as_str(), st::FAILED) {
                        b.println(format!(
                            "{} failed: {}",
                            row.name,
                            row.reason.as_deref().unwrap_or("")
                        ));
                    }
                    return;
                }
                b.set_length(total as u64);
                if done > 0 {
                    b.set_position(done as u64);
                } else if st::is_terminal(&row.state) {
                    b.inc(1);
                }
                b.set_message(format!("{} {}", row.name, row.state));
                if matches!(row.state.as_str(), st::FAILED) {
                    b.println(format!(
                        "{} failed: {}",
                        row.name,
                        row.reason.as_deref().unwrap_or("")
                    ));
                }
            }
            Progress::Lines(_) => {
                let mut line = format!("{} {} {}", clock(), row.name, row.state);
                if row.state == st::RUNNING {
                    line.push_str(&format!(" (attempt {})", row.attempts));
                }
                if let Some(r) = &row.reason {
                    line.push_str(&format!(": {r}"));
                }
                super::output::say(line);
            }
            Progress::Quiet => {}
        }
    }

    fn sweep(&mut self, done: u64, total: u64, line: &str) {
        match self {
            Progress::Bar(b, sweeping) => {
                if !*sweeping {
                    *sweeping = true;
                    b.set_style(
                        ProgressStyle::with_template(
                            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} trials  {msg}",
                        )
                        .unwrap_or_else(|_| ProgressStyle::default_bar()),
                    );
                }
                b.set_length(total);
                b.set_position(done);
                b.set_message(line.to_owned());
            }
            Progress::Lines(last) => {
                if last.is_none_or(|t| t.elapsed() >= SWEEP_LINE_EVERY) {
                    *last = Some(std::time::Instant::now());
                    super::output::say(format_args!("{} {line}", clock()));
                }
            }
            Progress::Quiet => {}
        }
    }

    fn note(&mut self, text: &str) {
        match self {
            Progress::Bar(b, _) => b.println(text),
            Progress::Lines(_) => super::output::say(format_args!("{} {text}", clock())),
            Progress::Quiet => {}
        }
    }
}
