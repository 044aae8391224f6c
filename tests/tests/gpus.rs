//! GPUs on one machine: found with `nvidia-smi` (here a stand-in script on PATH reporting four
//! GPUs, since this machine has none), held per attempt in the shared pool, and handed to each
//! worker as `CUDA_VISIBLE_DEVICES`.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;

use sluice_e2e::{Sandbox, step_states, wait};

/// Each step records `NAME RANK CUDA_VISIBLE_DEVICES START END` (times in ms) in `seen`.
const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: gpus}
spec:
  defaults:
    resources: {cpu: 100m}
  steps:
    - name: gang
      resources: {cpu: 100m, gpu: 1, workers: 2}
      run: &record python3 -c 'import os, time; s = time.time(); time.sleep(0.6); print(os.environ["SLUICE_STEP"], os.environ.get("RANK", "0"), repr(os.environ.get("CUDA_VISIBLE_DEVICES")), int(s * 1000), int(time.time() * 1000), file=open("seen", "a"))'
    - name: pair
      resources: {cpu: 100m, gpu: 2}
      run: *record
    - name: later
      resources: {cpu: 100m, gpu: 3}
      run: *record
    - name: plain
      run: *record
"#;

struct Seen {
    step: String,
    gpus: Option<BTreeSet<u32>>,
    start: u64,
    end: u64,
}

fn seen(sb: &Sandbox) -> Vec<Seen> {
    std::fs::read_to_string(sb.path().join("seen"))
        .expect("steps ran")
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let gpus = match w[2] {
                "None" => None,
                quoted => Some(
                    quoted
                        .trim_matches('\'')
                        .split(',')
                        .filter(|g| !g.is_empty())
                        .map(|g| g.parse().expect("an index"))
                        .collect(),
                ),
            };
            Seen {
                step: w[0].to_owned(),
                gpus,
                start: w[3].parse().expect("ms"),
                end: w[4].parse().expect("ms"),
            }
        })
        .collect()
}

fn fake_nvidia_smi(sb: &Sandbox) -> String {
    let bin = sb.path().join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let tool = bin.join("nvidia-smi");
    std::fs::write(&tool, "#!/bin/sh\nprintf '0\\n1\\n2\\n3\\n'\n").expect("write");
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

#[test]
fn gpus_are_held_per_attempt_and_given_to_each_worker() {
    let sb = Sandbox::new("gpus");
    sb.write("p.yaml", PIPELINE);
    let path = fake_nvidia_smi(&sb);
    let out = wait::output(sb.cmd(&["run", "p.yaml"]).env("PATH", &path));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = seen(&sb);
    let of = |name: &str| seen.iter().filter(|s| s.step == name).collect::<Vec<_>>();
    // Each gang worker has one GPU of its own.
    let gang = of("gang");
    assert_eq!(gang.len(), 2);
    let a = gang[0].gpus.clone().expect("set");
    let b = gang[1].gpus.clone().expect("set");
    assert_eq!((a.len(), b.len()), (1, 1));
    assert!(a.is_disjoint(&b));
    assert_eq!(of("pair")[0].gpus.as_ref().map(BTreeSet::len), Some(2));
    assert_eq!(of("later")[0].gpus.as_ref().map(BTreeSet::len), Some(3));
    // A step without GPUs sees none, rather than every GPU of the machine.
    assert_eq!(of("plain")[0].gpus, Some(BTreeSet::new()));
    // Never more than the four GPUs at once, and no index held twice at the same moment.
    for x in &seen {
        for y in &seen {
            let overlap = x.start < y.end && y.start < x.end;
            let same = std::ptr::eq(x, y) || (x.step == y.step && x.gpus == y.gpus);
            if overlap
                && !same
                && let (Some(gx), Some(gy)) = (&x.gpus, &y.gpus)
            {
                assert!(gx.is_disjoint(gy), "{} and {} shared a GPU", x.step, y.step);
            }
        }
        assert!(x.gpus.iter().flatten().all(|g| *g < 4));
    }
    // `later` (3 GPUs) could not start beside `gang` and `pair` (4 GPUs between them).
    let later = of("later")[0];
    assert!(
        seen.iter()
            .filter(|s| s.step == "gang" || s.step == "pair")
            .any(|s| later.start >= s.end)
    );
}

#[test]
fn a_step_asking_more_gpus_than_the_machine_has_fails_saying_so() {
    let sb = Sandbox::new("gpus-big");
    sb.write(
        "p.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: big}\nspec:\n  steps:\n    - name: huge\n      resources: {gpu: 4, workers: 2}\n      run: \"true\"\n",
    );
    let path = fake_nvidia_smi(&sb);
    let out = wait::output(sb.cmd(&["run", "p.yaml"]).env("PATH", &path));
    assert_eq!(out.status.code(), Some(1));
    let status = sb.status(&sb.last_run());
    assert_eq!(step_states(&status)["huge"], "Failed");
    let reason = status["steps"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("8 GPU(s)") && reason.contains("this machine has 4"),
        "{reason}"
    );
}
