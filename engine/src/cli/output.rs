//! Everything the CLI prints to standard output goes through here: human text or one JSON
//! document (`--output json`). Diagnostics and progress go to standard error.

use std::io::{self, Write};

use clap::ValueEnum;
use serde::Serialize;

use crate::spec::Diagnostic;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum Format {
    #[default]
    Text,
    Json,
}

/// Writes `value` as one JSON document on standard output. A closed pipe is not an error.
pub fn json<T: Serialize>(value: &T) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let written = serde_json::to_writer(&mut out, value)
        .map_err(io::Error::from)
        .and_then(|()| writeln!(out))
        .and_then(|()| out.flush());
    ignore_broken_pipe(written)
}

/// Writes text on standard output through `f`. A closed pipe (`| head`) is not an error.
pub fn text(f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    ignore_broken_pipe(f(&mut out).and_then(|()| out.flush()))
}

/// Prints diagnostics in the pinned `PATH:LINE:COL: error: MESSAGE` form on standard error.
pub fn diagnostics(items: &[Diagnostic]) {
    let stderr = io::stderr();
    let mut err = io::BufWriter::new(stderr.lock());
    for d in items {
        let _ = writeln!(err, "{d}");
    }
    let _ = err.flush();
}

fn ignore_broken_pipe(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Writes one line on standard error. Unlike `eprintln!`, a closed or broken stream (the
/// terminal went away with SIGHUP, `2>&1 | head -1`) is not a panic: the line is dropped.
pub fn say(line: impl std::fmt::Display) {
    let stderr = io::stderr();
    let mut err = stderr.lock();
    let _ = writeln!(err, "{line}");
}

/// Standard error for the log: a closed stream drops what is written instead of failing
/// (tracing-subscriber answers a failed write with `eprintln!`, which panics on a broken pipe).
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = io::stderr().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let _ = io::stderr().flush();
        Ok(())
    }
}
