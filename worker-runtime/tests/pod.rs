//! The `sluice-runtime` binary itself, spawned as a pod would run it: `install` (the init
//! container) and `pod` (one worker of an attempt, recorded in a `file://` object store).
//! Every wait is bounded by a deadline, so a hung runtime fails the test instead of hanging
//! it.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_sluice-runtime");

/// Longer than any run here takes; only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(60);

/// A fresh folder for one test, removed when dropped.
struct Tmp(PathBuf);

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let p =
            std::env::temp_dir().join(format!("sluice-pod-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p).expect("temp dir");
        Tmp(p)
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Waits (bounded) for `child` to exit, and collects what it printed.
fn wait_output(mut child: std::process::Child) -> Output {
    let until = Instant::now() + DEADLINE;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("its output"),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                panic!("sluice-runtime did not end within {DEADLINE:?}");
            }
            Err(e) => panic!("cannot wait for sluice-runtime: {e}"),
        }
    }
}

#[test]
fn install_copies_a_runnable_binary() {
    let tmp = Tmp::new("install");
    let dest = tmp.0.join("sluice-pod/bin/sluice-runtime");
    let out = wait_output(
        Command::new(BIN)
            .arg("install")
            .arg(&dest)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert!(out.status.success(), "{out:?}");
    let version = wait_output(
        Command::new(&dest)
            .arg("--version")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the installed binary runs"),
    );
    assert!(version.status.success(), "{version:?}");
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("sluice-runtime "),
        "{version:?}"
    );
}

#[test]
fn install_into_a_path_it_cannot_create_fails_saying_why() {
    let tmp = Tmp::new("install-bad");
    let file = tmp.0.join("a-file");
    std::fs::write(&file, b"").expect("write");
    let out = wait_output(
        Command::new(BIN)
            .arg("install")
            .arg(file.join("bin/sluice-runtime"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sluice-runtime: error: cannot create"),
        "{err}"
    );
}
