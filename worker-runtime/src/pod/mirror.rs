//! While a pod's attempt runs: its log printed on standard output line by line (the pod's
//! log), and `started.json`, `heartbeat` and `metrics.jsonl` kept up to date under the
//! worker's key. Two threads: printing never waits on the object store.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Body, HEARTBEAT_KEY, STARTED_KEY, Target};
use crate::contract::{self, Started};

/// How often the log is looked at for new lines.
const PRINT_EVERY: Duration = Duration::from_millis(50);
/// How often the lock is looked at for the start.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// `metrics.jsonl` is uploaded at least this often while it grows (or every heartbeat when
/// that is more often).
const METRICS_EVERY: Duration = Duration::from_secs(2);
/// One upload of the mirror may take this long; a failed one is tried again at its next turn.
const MIRROR_TRY: Duration = Duration::from_secs(5);

pub(super) struct Mirror {
    stop_print: mpsc::Sender<()>,
    stop_upload: mpsc::Sender<()>,
    printer: JoinHandle<()>,
    uploader: JoinHandle<bool>,
}

impl Mirror {
    pub(super) fn start(target: Target, dir: &Path, heartbeat_ms: u64) -> Mirror {
        let (stop_print, print_rx) = mpsc::channel();
        let (stop_upload, upload_rx) = mpsc::channel();
        let mut tail = LogTail::new(dir.join(contract::LOG_FILE));
        let printer = std::thread::spawn(move || {
            let mut out = std::io::stdout();
            while let Err(mpsc::RecvTimeoutError::Timeout) = print_rx.recv_timeout(PRINT_EVERY) {
                tail.poll(&mut out);
            }
            tail.poll(&mut out);
            tail.rest(&mut out);
        });
        let dir = dir.to_owned();
        let beat = Duration::from_millis(heartbeat_ms.max(50));
        let uploader = std::thread::spawn(move || upload(&target, &dir, beat, &upload_rx));
        Mirror {
            stop_print,
            stop_upload,
            printer,
            uploader,
        }
    }

    /// Stops both threads once the attempt ended (every line printed); whether
    /// `started.json` was uploaded.
    pub(super) fn stop(self) -> bool {
        drop(self.stop_print);
        drop(self.stop_upload);
        let _ = self.printer.join();
        self.uploader.join().unwrap_or(false)
    }
}

/// The [`Started`] JSON in the attempt's lock, once the program was spawned.
pub(super) fn started(dir: &Path) -> Option<Vec<u8>> {
    let bytes = std::fs::read(dir.join(contract::LOCK_FILE)).ok()?;
    serde_json::from_slice::<Started>(&bytes)
        .ok()
        .map(|_| bytes)
}

/// The uploader: `started.json` once, the heartbeat every `beat`, `metrics.jsonl` when it
/// grew, every `beat` or [`METRICS_EVERY`], whichever is shorter. Returns whether
/// `started.json` was uploaded.
fn upload(target: &Target, dir: &Path, beat: Duration, stop: &mpsc::Receiver<()>) -> bool {
    let metrics_every = beat.min(METRICS_EVERY);
    let metrics = dir.join(contract::METRICS_FILE);
    let mut started_sent = false;
    let mut metrics_sent = 0;
    let mut next_beat = Instant::now();
    let mut next_metrics = Instant::now() + metrics_every;
    let say = |name: &str, e: String| {
        eprintln!(
            "sluice-runtime: cannot upload {}/{name}, will retry: {e}",
            target.key
        );
    };
    loop {
        if !started_sent && let Some(bytes) = started(dir) {
            match target.put(STARTED_KEY, &Body::Bytes(&bytes), MIRROR_TRY) {
                Ok(()) => started_sent = true,
                Err(e) => say(STARTED_KEY, e),
            }
        }
        if Instant::now() >= next_beat {
            let now = crate::time::now_rfc3339();
            if let Err(e) = target.put(HEARTBEAT_KEY, &Body::Bytes(now.as_bytes()), MIRROR_TRY) {
                say(HEARTBEAT_KEY, e);
            }
            next_beat = Instant::now() + beat;
        }
        if Instant::now() >= next_metrics {
            // Whole lines only: the program may be half-way through one.
            let lines = complete_lines(&metrics);
            if lines.len() != metrics_sent {
                match target.put(contract::METRICS_FILE, &Body::Bytes(&lines), MIRROR_TRY) {
                    Ok(()) => metrics_sent = lines.len(),
                    Err(e) => say(contract::METRICS_FILE, e),
                }
            }
            next_metrics = Instant::now() + metrics_every;
        }
        let mut until = next_beat.min(next_metrics);
        if !started_sent {
            until = until.min(Instant::now() + LOOK_EVERY);
        }
        let wait = until.saturating_duration_since(Instant::now());
        if let Err(mpsc::RecvTimeoutError::Disconnected) | Ok(()) = stop.recv_timeout(wait) {
            return started_sent;
        }
    }
}

/// The file's bytes up to its last newline (nothing when there is no file).
fn complete_lines(path: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap_or_default();
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    bytes.truncate(end);
    bytes
}

/// Follows `output.log` (created at the program's first line), copying each whole new line
/// to an output as it is.
struct LogTail {
    path: PathBuf,
    file: Option<std::fs::File>,
    partial: Vec<u8>,
}

impl LogTail {
    fn new(path: PathBuf) -> LogTail {
        LogTail {
            path,
            file: None,
            partial: Vec::new(),
        }
    }

    /// Copies the whole lines written since the last call.
    fn poll(&mut self, out: &mut impl Write) {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        if file.read_to_end(&mut self.partial).is_err() {
            return;
        }
        if let Some(i) = self.partial.iter().rposition(|b| *b == b'\n') {
            let rest = self.partial.split_off(i + 1);
            // A closed standard output loses the copy, never the log.
            let _ = out.write_all(&self.partial).and_then(|()| out.flush());
            self.partial = rest;
        }
    }

    /// What is left of a last line without its newline, ended by one.
    fn rest(&mut self, out: &mut impl Write) {
        if !self.partial.is_empty() {
            self.partial.push(b'\n');
            let _ = out.write_all(&self.partial).and_then(|()| out.flush());
            self.partial.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_is_copied_in_whole_lines_as_written() {
        let dir = std::env::temp_dir().join(format!("sluice-pod-tail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("output.log");
        let mut tail = LogTail::new(path.clone());
        let mut out = Vec::new();
        tail.poll(&mut out);
        assert!(out.is_empty(), "no log yet");
        let mut log = std::fs::File::create(&path).expect("create");
        log.write_all(b"T out one\nT out tw").expect("write");
        tail.poll(&mut out);
        assert_eq!(out, b"T out one\n");
        log.write_all(b"o\nT err three").expect("write");
        tail.poll(&mut out);
        assert_eq!(out, b"T out one\nT out two\n");
        tail.rest(&mut out);
        assert_eq!(out, b"T out one\nT out two\nT err three\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn metrics_are_read_up_to_their_last_whole_line() {
        let dir = std::env::temp_dir().join(format!("sluice-pod-lines-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let path = dir.join("metrics.jsonl");
        assert!(complete_lines(&path).is_empty());
        std::fs::write(&path, b"{\"a\":1}\n{\"a\"").expect("write");
        assert_eq!(complete_lines(&path), b"{\"a\":1}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
