//! What an attempt's programs print: each line into the attempt's log with its time and
//! stream, and the last lines of standard error that a failure's reason quotes.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::sync::Mutex;

use crate::time::now_rfc3339;

/// How many of the last lines of a program's standard error a failure's reason quotes, and
/// how many characters of them at most: enough for Python's exception line and the two above
/// it, short enough for a status table.
const TAIL_LINES: usize = 3;
const TAIL_CHARS: usize = 300;

/// The last non-empty lines of one worker's standard error.
#[derive(Default)]
pub(super) struct ErrTail(Mutex<VecDeque<String>>);

impl ErrTail {
    pub(super) fn push(&self, line: &str) {
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        if let Ok(mut q) = self.0.lock() {
            if q.len() == TAIL_LINES {
                q.pop_front();
            }
            // Each line bounded too (a progress bar's carriage returns make one long line).
            q.push_back(last_chars(line, TAIL_CHARS));
        }
    }

    pub(super) fn lines(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|q| q.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// `why` followed by the last lines of standard error, joined by ` | ` and cut from the front
/// to [`TAIL_CHARS`] characters: `exit code 2: python3: can't open file 'x.py'`.
pub(super) fn with_tail(why: String, tail: &[String]) -> String {
    if tail.is_empty() {
        return why;
    }
    format!("{why}: {}", last_chars(&tail.join(" | "), TAIL_CHARS))
}

/// The end of `text`, at most `max` characters: cut ones are replaced by a leading `…`.
fn last_chars(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().skip(count - max + 1).collect();
    format!("…{kept}")
}

/// Writes lines of the program's output to the log, each with its time and stream. The file
/// is created at the first line: a step that prints nothing costs no file.
pub(super) struct Log {
    pub(super) path: PathBuf,
    pub(super) file: Mutex<Option<std::fs::File>>,
}

impl Log {
    pub(super) fn line(&self, stream: &str, text: &str) {
        if let Ok(mut guard) = self.file.lock() {
            if guard.is_none() {
                *guard = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)
                    .ok();
            }
            if let Some(f) = guard.as_mut() {
                let _ = writeln!(f, "{} {stream} {text}", now_rfc3339());
            }
        }
    }
}

/// A child's standard output or error, read the same way.
pub(super) enum Stream {
    Out(std::process::ChildStdout),
    Err(std::process::ChildStderr),
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Out(o) => o.read(buf),
            Stream::Err(e) => e.read(buf),
        }
    }
}

pub(super) fn read_lines(mut r: impl Read, mut each: impl FnMut(&str)) {
    let mut reader = BufReader::new(&mut r);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let text = String::from_utf8_lossy(&buf);
                each(text.trim_end_matches(['\n', '\r']));
            }
        }
    }
}
