//! The local runtime: one `sluice-runtime serve` process per driven run, handed each attempt
//! once its folder is prepared and its row committed.
//!
//! One process per run rather than per attempt halves the processes started per step (see
//! `sluice_runtime::serve` for the measurements and the protocol). The process is started in
//! its own process group, so a Ctrl-C in the engine's terminal does not reach it, and it
//! outlives the engine: when the engine dies its standard input ends, it takes no new attempt
//! and finishes the running ones, whose locks and results the next engine reads.

use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;

/// What the runtime says about attempts.
#[derive(Debug)]
pub enum Note {
    /// Attempt `number` of `step` has ended (its `result.json` is written) or was skipped
    /// (abandoned, or already ended): read its folder.
    Ended { step: String, number: i64 },
    /// The runtime process numbered `generation` is gone: attempts it was given must be
    /// probed through their locks.
    Gone { generation: u64 },
}

/// A running `sluice-runtime serve`.
pub struct Server {
    stdin: ChildStdin,
    /// The runtime's process id, to end it if it hangs.
    pid: Option<u32>,
    /// Which runtime of this engine this is (1, 2, ...), to match `Note::Gone`.
    pub generation: u64,
}

impl Server {
    /// Starts the runtime for the run whose attempts live under `run_dir`; its notes arrive on
    /// `notes`. What the runtime prints itself goes to `run_dir/runtime.err`.
    pub fn start(
        run_dir: &Path,
        generation: u64,
        notes: mpsc::UnboundedSender<Note>,
    ) -> std::io::Result<Server> {
        std::fs::create_dir_all(run_dir)?;
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(run_dir.join("runtime.err"))?;
        let runtime = super::runtime::command().map_err(std::io::Error::other)?;
        let mut cmd = tokio::process::Command::new(&runtime.program);
        cmd.args(&runtime.prefix)
            .arg("serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .process_group(0)
            .kill_on_drop(false);
        let mut child: Child = cmd.spawn()?;
        let pid = child.id();
        let stdin = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the runtime has no standard input"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| std::io::Error::other("the runtime has no standard output"))?;
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut parts = line.splitn(4, '\t');
                let (Some(_kind), Some(number), Some(step)) =
                    (parts.next(), parts.next(), parts.next())
                else {
                    continue;
                };
                if let Ok(number) = number.parse() {
                    let step = step.to_owned();
                    if notes.send(Note::Ended { step, number }).is_err() {
                        break;
                    }
                }
            }
            let _ = notes.send(Note::Gone { generation });
            // Reap it; it has closed its output, so it is ending.
            let _ = child.wait().await;
        });
        Ok(Server {
            stdin,
            pid,
            generation,
        })
    }

    /// SIGKILL to the runtime (it hangs).
    pub fn kill(&self) {
        self.signal(nix::sys::signal::Signal::SIGKILL);
    }

    /// SIGTERM to the runtime: it stops its attempts (SIGTERM to their programs, the grace
    /// period, SIGKILL) and ends.
    pub fn terminate(&self) {
        self.signal(nix::sys::signal::Signal::SIGTERM);
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Some(pid) = self.pid.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// Hands the runtime attempt `number` of `step`, prepared in `dir`.
    pub async fn submit(&mut self, number: i64, step: &str, dir: &Path) -> std::io::Result<()> {
        let line = format!("exec\t{number}\t{step}\t{}\n", dir.display());
        self.stdin.write_all(line.as_bytes()).await?;
        self.stdin.flush().await
    }
}
