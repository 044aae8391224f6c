//! The local executor on attempt folders made by hand (no runtime): what it reports of an
//! attempt whose lock is held, freed with a result, or silent past the heartbeat timeout,
//! and how it asks an attempt to stop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sluice_runtime::contract::{self, End};
use sluice_runtime::objects::Objects;

use super::Local;
use crate::executor::{AttemptId, Event, Executor, Probe, Reason, Settings};

/// A fresh home for one test, removed when dropped.
struct Home(PathBuf);

impl Home {
    fn new(tag: &str) -> Home {
        let dir = std::env::temp_dir().join(format!(
            "sluice-local-{tag}-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        std::fs::create_dir_all(&dir).expect("a temporary home");
        Home(dir)
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn local(home: &Path, heartbeat: Duration) -> Local {
    let objects = Objects::open(&format!("file://{}", home.join("objects").display()))
        .expect("a folder object store");
    let settings = Settings {
        heartbeat_timeout: heartbeat,
        ..Settings::default()
    };
    Local::new(home, "r1", objects, settings)
}

fn id(step: &str) -> AttemptId {
    AttemptId {
        run: "r1".into(),
        step: step.into(),
        number: 1,
    }
}

/// Makes the attempt's folder with its lock held (as a live runtime holds it), the lock
/// recording a started program that does not exist.
fn running(dir: &Path) -> File {
    std::fs::create_dir_all(dir).expect("attempt folder");
    let lock = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(contract::LOCK_FILE))
        .expect("lock");
    lock.try_lock().expect("the lock is free");
    let started = contract::Started {
        runtime_pid: u32::MAX,
        pid: u32::MAX,
        groups: Vec::new(),
        started_at: "2026-01-01T00:00:00Z".into(),
    };
    std::fs::write(
        dir.join(contract::LOCK_FILE),
        serde_json::to_vec(&started).expect("json"),
    )
    .expect("started record");
    lock
}

fn result(end: End) -> contract::Result {
    contract::Result {
        end,
        exit_code: Some(0),
        signal: None,
        started_at: "2026-01-01T00:00:00Z".into(),
        ended_at: "2026-01-01T00:00:01Z".into(),
        reason: None,
        metrics: [("loss".to_owned(), 0.5)].into(),
    }
}

async fn next(exec: &mut Local) -> Event {
    tokio::time::timeout(Duration::from_secs(10), exec.next_event())
        .await
        .expect("an event within 10 s")
}

#[tokio::test]
async fn a_reattached_attempt_that_ends_is_reported_with_its_result() {
    let home = Home::new("ends");
    let mut exec = local(&home.0, Duration::from_secs(60));
    let handle = exec.handle(&id("train"));
    let dir = PathBuf::from(handle.as_str());
    let lock = running(&dir);
    let found = exec.reattach(&id("train"), &handle).await.expect("probe");
    assert!(matches!(found, Probe::Running), "{found:?}");
    std::fs::write(
        dir.join(contract::RESULT_FILE),
        serde_json::to_vec(&result(End::Succeeded)).expect("json"),
    )
    .expect("result");
    drop(lock);
    match next(&mut exec).await {
        Event::Ended { attempt, result } => {
            assert_eq!(attempt, id("train"));
            let result = result.expect("the recorded result");
            assert_eq!(result.end, End::Succeeded);
            assert_eq!(result.metrics.get("loss"), Some(&0.5));
        }
        other => panic!("expected the end, got {other:?}"),
    }
}

#[tokio::test]
async fn an_attempt_never_started_is_lost_and_abandoned() {
    let home = Home::new("abandoned");
    let mut exec = local(&home.0, Duration::from_secs(60));
    let handle = exec
        .prepare(&id("train"), &launch())
        .await
        .expect("prepared");
    let found = exec.reattach(&id("train"), &handle).await.expect("probe");
    assert!(
        matches!(&found, Probe::Lost(why) if why.contains("before the attempt started")),
        "{found:?}"
    );
    // A runtime started late does nothing.
    assert!(Path::new(handle.as_str()).join("abandoned").is_file());
}

#[tokio::test]
async fn an_attempt_silent_past_the_heartbeat_timeout_is_fenced_off_and_lost() {
    let home = Home::new("silent");
    let mut exec = local(&home.0, Duration::from_millis(200));
    let handle = exec.handle(&id("train"));
    let dir = PathBuf::from(handle.as_str());
    let lock = running(&dir);
    // Its last heartbeat was a minute ago.
    lock.set_modified(SystemTime::now() - Duration::from_secs(60))
        .expect("set the lock's time");
    let found = exec.reattach(&id("train"), &handle).await.expect("probe");
    assert!(matches!(found, Probe::Running), "{found:?}");
    match next(&mut exec).await {
        Event::Lost { attempt, reason } => {
            assert_eq!(attempt, id("train"));
            assert!(reason.contains("no heartbeat for 1m"), "{reason}");
        }
        other => panic!("expected it lost, got {other:?}"),
    }
    // A runtime that wakes up again syncs no more checkpoints for it.
    assert!(dir.join(contract::LOST_FILE).is_file());
}

#[tokio::test]
async fn a_stop_is_asked_once_for_any_reason_and_seen_by_everyone() {
    let home = Home::new("stop");
    let exec = local(&home.0, Duration::from_secs(60));
    let handle = exec.handle(&id("train"));
    std::fs::create_dir_all(handle.as_str()).expect("attempt folder");
    assert!(!exec.stop_asked(&handle).await);
    exec.stop(&handle, Reason::Preempt).await.expect("asked");
    assert!(exec.stop_asked(&handle).await);
    let file = Path::new(handle.as_str()).join(contract::TERMINATE_FILE);
    assert_eq!(std::fs::read_to_string(&file).expect("file"), "preempt\n");
    // A folder that is gone is an error naming the file, not a silent success.
    let gone = exec.handle(&id("other"));
    let err = exec
        .stop(&gone, Reason::Cancel)
        .await
        .expect_err("no folder");
    assert!(err.to_string().contains("other.1"), "{err}");
}

fn launch() -> contract::Launch {
    contract::Launch {
        argv: vec!["true".into()],
        workdir: PathBuf::from("."),
        env: Default::default(),
        timeout_ms: None,
        grace_ms: 1000,
        inputs: Vec::new(),
        outputs: Vec::new(),
        output_dir: PathBuf::from("out"),
        checkpoint_dir: PathBuf::from("checkpoint"),
        checkpoint: None,
        workers: 1,
        heartbeat_ms: 1000,
        gpus: Vec::new(),
        gpus_per_worker: 0,
        hide_gpus: false,
        objects: String::new(),
        outputs_key: String::new(),
        metrics_stdout: true,
        collect: Default::default(),
        inherit: Default::default(),
    }
}
