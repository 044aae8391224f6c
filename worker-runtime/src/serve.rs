//! `sluice-runtime serve`: one runtime process supervising many attempts, for the local
//! executor.
//!
//! Why: starting a process costs about a millisecond on a small VM (exec, dynamic loading,
//! CPU feature probing), and a runtime per attempt doubled the processes started per step. A
//! local engine starts one `serve` per run instead and hands it attempts; each runs on its own
//! thread through exactly the code of `sluice-runtime exec` ([`crate::exec::attempt`]), with
//! the same files, lock and result, so the engine's crash recovery does not change: a thread
//! holds its attempt's lock as a process would.
//!
//! Protocol, one line each way per attempt (tab-separated; names never hold tabs):
//! - standard input: `exec NUMBER STEP DIR`, the attempt's folder prepared by the engine;
//! - standard output: `ended NUMBER STEP` once its `result.json` is written (or `skipped`,
//!   or `error ... MESSAGE` when the runtime itself failed).
//!
//! When standard input ends (the engine finished, or died) no new attempt is accepted; the
//! running ones go on to their end, and then the process exits. SIGTERM to this process stops
//! every attempt it runs, as `exec` would stop its one.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use crate::exec::{self, Error, Exec};

/// Serves attempts read from standard input until it ends and every attempt has ended.
pub fn serve() -> Result<(), Error> {
    let term = exec::signals()?;
    let stores = std::sync::Arc::new(crate::stores::Stores::new());
    let (done_tx, done_rx) = mpsc::channel::<String>();
    // One writer, so lines never interleave. A write to an engine that is gone fails; the
    // attempts' files say everything it needs once it is back.
    let writer = std::thread::spawn(move || {
        let mut out = std::io::stdout().lock();
        for line in done_rx {
            if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                continue;
            }
        }
    });
    let mut running: Vec<std::thread::JoinHandle<()>> = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut parts = line.splitn(4, '\t');
        let (Some("exec"), Some(number), Some(step), Some(dir)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            eprintln!("sluice-runtime serve: ignoring a line it does not understand: {line:?}");
            continue;
        };
        let tag = format!("{number}\t{step}");
        let dir = PathBuf::from(dir);
        let term = std::sync::Arc::clone(&term);
        let stores = std::sync::Arc::clone(&stores);
        let done = done_tx.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("attempt {step}.{number}"))
            .spawn(move || {
                let reply = match exec::attempt(&dir, &term, &stores) {
                    Ok(Exec::Ran) => format!("ended\t{tag}"),
                    Ok(Exec::Skipped) => format!("skipped\t{tag}"),
                    Err(e) => {
                        eprintln!("sluice-runtime: {}: error: {e}", dir.display());
                        format!("error\t{tag}\t{e}")
                    }
                };
                let _ = done.send(reply);
            });
        match spawned {
            Ok(handle) => running.push(handle),
            Err(e) => {
                let _ = done_tx.send(format!(
                    "error\t{number}\t{step}\tcannot start a thread: {e}"
                ));
            }
        }
        running.retain(|h| !h.is_finished());
    }
    for handle in running {
        let _ = handle.join();
    }
    drop(done_tx);
    let _ = writer.join();
    Ok(())
}
