//! The live view of a run: a progress bar on a terminal, plain timestamped lines elsewhere
//! (CI logs stay readable). Always on standard error.
//!
//! The bar is one line no wider than the terminal (`{wide_msg}` takes what is left), so that
//! redrawing it never leaves a wrapped half behind. Until the run has a total it is a spinner
//! without a count (no full bar at `0/0`). Lines printed while it runs (a failed step, the
//! driver's notes) clear it, print with a real newline and let it redraw below, and it is
//! cleared when the run ends (or the view is dropped), so the final lines start on a clean
//! line. A bar relies on knowing the terminal's width; a terminal that does not say it (a
//! pseudo-terminal of size 0, as some harnesses give) gets the plain lines instead.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

use crate::run::driver::Watcher;
use crate::run::state::step as st;
use crate::store::StepRow;

pub enum Progress {
    Bar(Live),
    /// Plain lines; a sweep's summary at most every few seconds.
    Lines(Option<std::time::Instant>),
    Quiet,
}

/// The bar, and what it counts.
pub struct Live {
    bar: ProgressBar,
    /// Counting a sweep's trials (once one reports) rather than steps.
    sweeping: bool,
    /// The unit of the count shown, once there is a total (`steps`, `trials`); None: the
    /// spinner alone.
    counting: Option<&'static str>,
}

/// How often plain output repeats a sweep's summary line.
const SWEEP_LINE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Before there is a total: a spinner, the time and the latest news.
const WAITING: &str = "{spinner} [{elapsed_precise}] {wide_msg}";

fn counting(unit: &str) -> String {
    format!("{{spinner}} [{{elapsed_precise}}] {{bar:30}} {{pos}}/{{len}} {unit}  {{wide_msg}}")
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_spinner())
}

/// Writes one line to standard error; a closed standard error is not worth failing a run.
fn say(line: &str) {
    super::output::say(line);
}

/// Whether a bar can be drawn: standard error is a terminal that says how wide it is.
fn bar_fits() -> bool {
    std::io::stderr().is_terminal()
        && console::Term::stderr()
            .size_checked()
            .is_some_and(|(_, cols)| cols > 0)
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        if quiet {
            return Progress::Quiet;
        }
        if !bar_fits() {
            return Progress::Lines(None);
        }
        let bar = ProgressBar::new(0);
        bar.set_style(style(WAITING));
        bar.set_message("starting");
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Progress::Bar(Live {
            bar,
            sweeping: false,
            counting: None,
        })
    }

    /// Clears the bar: what is printed next starts on a clean line.
    pub fn finish(&self) {
        if let Progress::Bar(live) = self {
            live.bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// An early return (an error) must not leave the bar for the error to be printed over.
    fn drop(&mut self) {
        self.finish();
    }
}

impl Live {
    /// Shows `pos` of `len` in `unit`, or the spinner alone while `len` is 0.
    fn count(&mut self, pos: u64, len: u64, unit: &'static str) {
        if len == 0 {
            if self.counting.take().is_some() {
                self.bar.set_style(style(WAITING));
            }
            return;
        }
        if self.counting != Some(unit) {
            self.counting = Some(unit);
            self.bar.set_style(style(&counting(unit)));
        }
        self.bar.set_length(len);
        self.bar.set_position(pos.min(len));
    }

    /// A line above the bar, with a real newline (not one that relies on the bar's padding
    /// reaching the right margin).
    fn println(&self, line: &str) {
        self.bar.suspend(|| say(line));
    }
}

fn clock() -> String {
    let t = crate::time::now_rfc3339();
    t.get(11..23).unwrap_or("").to_owned()
}

fn failed_line(row: &StepRow) -> String {
    format!(
        "{} failed: {}",
        row.name,
        row.reason.as_deref().unwrap_or("")
    )
}

impl Watcher for Progress {
    fn step(&mut self, row: &StepRow, total: usize, done: usize) {
        match self {
            Progress::Bar(live) => {
                if !live.sweeping {
                    let pos = if done > 0 {
                        done as u64
                    } else {
                        live.bar.position() + u64::from(st::is_terminal(row.state))
                    };
                    live.count(pos, total as u64, "steps");
                    live.bar.set_message(format!("{} {}", row.name, row.state));
                }
                if row.state == st::FAILED {
                    live.println(&failed_line(row));
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
                say(&line);
            }
            Progress::Quiet => {}
        }
    }

    fn sweep(&mut self, done: u64, total: u64, line: &str) {
        match self {
            Progress::Bar(live) => {
                live.sweeping = true;
                live.count(done, total, "trials");
                live.bar.set_message(line.to_owned());
            }
            Progress::Lines(last) => {
                if last.is_none_or(|t| t.elapsed() >= SWEEP_LINE_EVERY) {
                    *last = Some(std::time::Instant::now());
                    say(&format!("{} {line}", clock()));
                }
            }
            Progress::Quiet => {}
        }
    }

    fn note(&mut self, text: &str) {
        match self {
            Progress::Bar(live) => live.println(text),
            Progress::Lines(_) => say(&format!("{} {text}", clock())),
            Progress::Quiet => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count appears only with a total, and goes back to the spinner without one.
    #[test]
    fn the_count_waits_for_a_total() {
        let mut live = Live {
            bar: ProgressBar::hidden(),
            sweeping: false,
            counting: None,
        };
        live.count(0, 0, "steps");
        assert_eq!(live.counting, None);
        live.count(1, 2, "steps");
        assert_eq!(live.counting, Some("steps"));
        assert_eq!((live.bar.position(), live.bar.length()), (1, Some(2)));
        live.count(3, 2, "trials");
        assert_eq!(live.counting, Some("trials"));
        assert_eq!(live.bar.position(), 2);
        live.count(0, 0, "trials");
        assert_eq!(live.counting, None);
    }
}
