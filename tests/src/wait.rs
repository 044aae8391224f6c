//! Bounded waits on the processes a test starts.
//!
//! A `sluice` that hangs must fail its test, naming the command, instead of hanging CI until
//! its job is killed with no word on which command it was. Every wait on a child of the
//! harness goes through here: [`output`] for a command run to its end, [`status`] and
//! [`output_of`] for a child started with `spawn`. The deadline is generous (a shared 2-core
//! CI machine runs several test binaries at once), so it only ever fires on a real hang;
//! nothing here measures how fast anything is.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long one command may run before the test calls it hung: 120 s, or
/// `SLUICE_TEST_DEADLINE_SECS` (for a machine slower than any CI runner).
pub fn deadline() -> Duration {
    std::env::var("SLUICE_TEST_DEADLINE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(120), Duration::from_secs)
}

/// The command line, for messages: `sluice run p.yaml` (the program's file name, then its
/// arguments).
pub fn describe(cmd: &Command) -> String {
    let program = std::path::Path::new(cmd.get_program());
    let mut words = vec![
        program
            .file_name()
            .unwrap_or(program.as_os_str())
            .to_string_lossy()
            .into_owned(),
    ];
    words.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    words.join(" ")
}

/// [`Command::output`] with the [`deadline`]: standard output and error captured, standard
/// input empty. A command still running at the deadline is killed and fails the test.
pub fn output(cmd: &mut Command) -> Output {
    try_output(cmd).unwrap_or_else(|e| panic!("cannot start `{}`: {e}", describe(cmd)))
}

/// [`output`] for a caller that reports a command that cannot start in its own words (which
/// tool to install): the spawn's error is returned; a hang still fails the test.
pub fn try_output(cmd: &mut Command) -> std::io::Result<Output> {
    let what = describe(cmd);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    Ok(output_of(child, &what))
}

/// [`Child::wait`] with the [`deadline`]; `what` names the command in the failure.
pub fn status(child: &mut Child, what: &str) -> ExitStatus {
    status_within(child, deadline(), what)
}

/// [`status`] with its own limit, for a test that knows a tighter bound it relies on.
pub fn status_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let until = Instant::now() + limit;
    match poll(child, until) {
        Some(status) => status,
        None => hung(child, limit, what, ""),
    }
}

/// [`Child::wait_with_output`] with the [`deadline`]: whatever of standard output and error
/// was piped is read while the child runs (so that a full pipe never blocks it), then
/// returned with its status.
pub fn output_of(mut child: Child, what: &str) -> Output {
    let limit = deadline();
    let until = Instant::now() + limit;
    let (tx, rx) = mpsc::channel::<(usize, Vec<u8>)>();
    let mut open = 0;
    let streams: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ];
    for (i, stream) in streams.into_iter().enumerate() {
        let Some(mut stream) = stream else {
            continue;
        };
        open += 1;
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = stream.read_to_end(&mut buf);
            let _ = tx.send((i, buf));
        });
    }
    drop(tx);
    // The pipes close when the child ends (or hands them to a process that outlives it,
    // which the deadline catches too).
    let mut got = [Vec::new(), Vec::new()];
    while open > 0 {
        let left = until.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, buf)) => {
                got[i] = buf;
                open -= 1;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let err = String::from_utf8_lossy(&got[1]).into_owned();
                hung(&mut child, limit, what, &err)
            }
        }
    }
    let Some(status) = poll(&mut child, until) else {
        let err = String::from_utf8_lossy(&got[1]).into_owned();
        hung(&mut child, limit, what, &err)
    };
    let [stdout, stderr] = got;
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The child's status once it has ended, or None at `until`. Polls from 1 ms up to 20 ms
/// apart: a quick command is not held back by the poll.
fn poll(child: &mut Child, until: Instant) -> Option<ExitStatus> {
    let mut every = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => panic!("cannot wait for a child process: {e}"),
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        std::thread::sleep(every.min(until - now));
        every = (every * 2).min(Duration::from_millis(20));
    }
}

/// Kills the hung child and fails the test, naming the command.
fn hung(child: &mut Child, limit: Duration, what: &str, stderr: &str) -> ! {
    let _ = child.kill();
    let _ = child.wait();
    let tail = if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; its standard error so far:\n{stderr}")
    };
    panic!(
        "`{what}` did not end within {} s and was killed (a hang?){tail}",
        limit.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_returns_both_streams_and_the_status() {
        let out = output(Command::new("sh").args(["-c", "echo out; echo err >&2; exit 3"]));
        assert_eq!(out.status.code(), Some(3));
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
    }

    #[test]
    fn a_hung_child_is_killed_and_the_failure_names_the_command() {
        let mut child = Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep starts");
        let pid = child.id();
        let failure = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            status_within(&mut child, Duration::from_millis(100), "sleep 30")
        }))
        .expect_err("a child past its limit fails the test");
        let message = failure
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("`sleep 30` did not end"), "{message}");
        // Killed and reaped: the process is gone.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "the hung child still runs"
        );
    }

    #[test]
    fn describe_names_the_program_and_its_arguments() {
        let mut cmd = Command::new("/usr/bin/env");
        cmd.args(["run", "p.yaml"]).env("X", "1");
        assert_eq!(describe(&cmd), "env run p.yaml");
    }
}
