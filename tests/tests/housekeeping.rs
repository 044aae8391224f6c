//! Housekeeping (issue 13, item 6): an output is kept once on this machine, a consumer cannot
//! change a stored artifact through its input, and `sluice delete` and `sluice gc` remove
//! runs with everything they left.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sluice_e2e::s3::S3;
use sluice_e2e::{Sandbox, step_states, wait, wait_for};

fn pipeline(name: &str, spec: &str) -> String {
    format!("apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {name}}}\nspec:\n{spec}")
}

/// The id of the run a `run --output json` printed.
fn id_of(stdout: &str) -> String {
    let v: serde_json::Value = serde_json::from_str(stdout).expect("one JSON document");
    v["id"].as_str().expect("an id").to_owned()
}

/// Runs `FILE` to its end in `sb`, expecting success; returns the run's id.
fn run_ok(sb: &Sandbox, file: &str) -> String {
    let out = sb.run(&["run", file, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}\n{}", out.stdout, out.stderr);
    id_of(&out.stdout)
}

/// Every file under `dir` (symbolic links not followed).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(p) = todo.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            for e in std::fs::read_dir(&p).expect("list").flatten() {
                todo.push(e.path());
            }
        } else {
            out.push(p);
        }
    }
    out
}

/// One SQL statement on the sandbox's state store (python3's sqlite3 on the home's database,
/// or psql on its PostgreSQL database): its rows, one per line, columns separated by `|`.
/// (The test reaches into the store only for what no command shows: cache rows, and ages
/// the test cannot wait for.)
fn sql(sb: &Sandbox, statement: &str) -> String {
    let out = match &sb.state {
        Some(url) => wait::output(Command::new("psql").arg(url).args([
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-t",
            "-A",
            "-c",
            statement,
        ])),
        None => wait::output(
            Command::new("python3")
                .args([
                "-c",
                "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nrows = c.execute(sys.argv[2]).fetchall()\nc.commit()\nprint('\\n'.join('|'.join(str(v) for v in r) for r in rows))",
            ])
                .arg(sb.home().join("sluice.db"))
                .arg(statement),
        ),
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Makes run `id` look as if it had ended `days` days ago.
fn backdate(sb: &Sandbox, id: &str, days: u32) {
    let (created, ended) = if sb.state.is_some() {
        let at = |minutes: u32| {
            format!(
                "to_char((now() AT TIME ZONE 'UTC') - interval '{days} days' - interval '{minutes} minutes', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
            )
        };
        (at(1), at(0))
    } else {
        (
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{days} days', '-1 minutes')"),
            format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{days} days')"),
        )
    };
    sql(
        sb,
        &format!("UPDATE runs SET created_at = {created}, ended_at = {ended} WHERE id = '{id}'"),
    );
}

/// The run ids `sluice runs` lists.
fn listed(sb: &Sandbox) -> Vec<String> {
    let out = sb.run(&["runs", "--output", "json", "--limit", "100"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("runs prints JSON");
    v.as_array()
        .expect("a list")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_owned())
        .collect()
}

const BLOB: usize = 3 << 20;
const WEIGHTS: usize = (2 << 20) + 7;

/// `make` writes a 3 MiB file output, a folder output and a link to a file outside;
/// `clobber` writes into its input in place (truncating and rewriting the same file, as
/// `open(path, "w")` does, and patching a folder input's file with `r+`); `check` reads
/// the same artifacts afterwards and fails unless they are what `make` wrote.
const PASSING: &str = r#"  steps:
    - name: make
      outputs: [blob, model, link]
      command:
        - python3
        - -c
        - |
          import os
          out = os.environ["SLUICE_OUTPUT_DIR"]
          open(os.path.join(out, "blob"), "wb").write(b"0123456789abcdef" * (3 * 65536))
          os.makedirs(os.path.join(out, "model", "meta"))
          open(os.path.join(out, "model", "weights.bin"), "wb").write(b"w" * (2 * 1048576 + 7))
          open(os.path.join(out, "model", "meta", "config.json"), "w").write("{}")
          os.symlink(os.path.abspath("dataset.txt"), os.path.join(out, "link"))
    - name: clobber
      needs: [make]
      command:
        - python3
        - -c
        - |
          import sys
          open(sys.argv[1], "wb").write(b"clobbered")
          with open(sys.argv[2] + "/weights.bin", "r+b") as f:
              f.write(b"XXXX")
          open(sys.argv[3], "w").write("clobbered")
        - "{{steps.make.outputs.blob}}"
        - "{{steps.make.outputs.model}}"
        - "{{steps.make.outputs.link}}"
    - name: check
      needs: [clobber]
      command:
        - python3
        - -c
        - |
          import sys
          assert open(sys.argv[1], "rb").read() == b"0123456789abcdef" * (3 * 65536), "blob changed"
          assert open(sys.argv[2] + "/weights.bin", "rb").read(4) == b"wwww", "weights changed"
          assert open(sys.argv[3]).read() == "the dataset\n", "link target changed"
          print("intact")
        - "{{steps.make.outputs.blob}}"
        - "{{steps.make.outputs.model}}"
        - "{{steps.make.outputs.link}}"
"#;

#[test]
fn an_output_is_kept_once_and_a_consumer_writing_into_its_input_changes_nothing_stored() {
    let sb = Sandbox::new("once");
    sb.write("dataset.txt", "the dataset\n");
    sb.write("p.yaml", &pipeline("once", PASSING));
    let id = run_ok(&sb, "p.yaml");
    let out = sb.run(&["logs", &id, "check"]);
    assert!(out.stdout.contains("intact"), "{}", out.stdout);

    // Each output is on disk once in the whole home (the attempt's out/ was renamed into the
    // store, the consumers' copies in inputs/ went with their attempts), and shares its
    // blocks with no other name (one link).
    let home = sb.home();
    for (what, len) in [("blob", BLOB), ("weights.bin", WEIGHTS)] {
        let copies: Vec<PathBuf> = files_under(&home)
            .into_iter()
            .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.len() == len as u64))
            .collect();
        assert_eq!(copies.len(), 1, "{what} is on disk as {copies:?}");
        assert_eq!(std::fs::metadata(&copies[0]).expect("meta").nlink(), 1);
        assert!(
            copies[0].starts_with(home.join(format!("objects/teams/default/runs/{id}/make/1"))),
            "{what} is kept in the object store: {copies:?}"
        );
    }
    let attempts = home.join("attempts").join(&id);
    assert!(!attempts.join("clobber.1/inputs").exists());
    assert!(!attempts.join("check.1/inputs").exists());

    // The stored artifacts are what `make` wrote, whatever `clobber` did to its inputs.
    let stored = home.join(format!("objects/teams/default/runs/{id}/make/1/outputs"));
    assert_eq!(
        std::fs::read(stored.join("blob")).expect("blob"),
        b"0123456789abcdef".repeat(3 * 65536)
    );
    assert_eq!(
        std::fs::read(stored.join("model/weights.bin")).expect("weights")[..4],
        *b"wwww"
    );
    assert_eq!(
        std::fs::read_to_string(stored.join("model/meta/config.json")).expect("config"),
        "{}"
    );
    // A link to a file outside is stored as a copy of that file; the file stays where it is.
    let link = std::fs::symlink_metadata(stored.join("link")).expect("link output");
    assert!(link.is_file(), "stored as a file, not a link");
    assert_eq!(
        std::fs::read_to_string(stored.join("link")).expect("link"),
        "the dataset\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.path().join("dataset.txt")).expect("dataset"),
        "the dataset\n"
    );
}

#[test]
fn delete_removes_a_run_with_its_files_objects_and_cache_entries() {
    let sb = Sandbox::new("delete");
    sb.write(
        "p.yaml",
        &pipeline(
            "del",
            "  steps:\n    - name: make\n      cache: true\n      outputs: [o]\n      checkpoint: {every: 100ms}\n      run: echo making; echo ran >> ran && echo state > $SLUICE_CHECKPOINT_DIR/s && echo made > $SLUICE_OUTPUT_DIR/o\n    - name: use\n      needs: [make]\n      run: cat {{steps.make.outputs.o}}\n",
        ),
    );
    // A detached run: it leaves an engine log too.
    let out = sb.run(&["run", "p.yaml", "--detach", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let first = id_of(&out.stdout);
    wait_for("the detached run to end", || {
        sb.status(&first)["state"] == "Succeeded"
    });
    let home = sb.home();
    let objects = home.join("objects/teams/default");
    let left = [
        home.join("attempts").join(&first),
        home.join("engines").join(format!("{first}.log")),
        objects.join("runs").join(&first),
        objects.join("checkpoints").join(&first),
    ];
    for p in &left {
        assert!(p.exists(), "the run left {}", p.display());
    }
    assert!(
        objects
            .join(format!("runs/{first}/make/1/logs/output.log"))
            .is_file()
    );
    // The second run takes its `make` from the cache: the entry points at the first run.
    let second = run_ok(&sb, "p.yaml");
    assert_eq!(step_states(&sb.status(&second))["make"], "Cached");
    assert_eq!(
        sql(
            &sb,
            &format!("SELECT count(*) FROM cache WHERE run_id = '{first}'")
        ),
        "1"
    );

    // Deleted by a prefix of its id.
    let out = sb.run(&["delete", &first[..6], "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["id"], first.as_str());
    assert_eq!(v["state"], "Deleted");
    assert!(v["freed_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
    for p in &left {
        assert!(!p.exists(), "{} is still there", p.display());
    }
    assert_eq!(
        sql(
            &sb,
            &format!(
                "SELECT (SELECT count(*) FROM cache WHERE run_id = '{first}') + (SELECT count(*) FROM steps WHERE run_id = '{first}') + (SELECT count(*) FROM attempts WHERE run_id = '{first}') + (SELECT count(*) FROM events WHERE run_id = '{first}')"
            )
        ),
        "0"
    );
    let out = sb.run(&["status", &first]);
    assert_eq!(out.code, Some(2));
    assert!(out.stderr.contains("no run"), "{}", out.stderr);
    assert!(!listed(&sb).contains(&first));
    // What the second run kept of its own is still there.
    assert!(home.join("attempts").join(&second).is_dir());

    // The cache entry went with the run: the next run makes its output again.
    let third = run_ok(&sb, "p.yaml");
    assert_eq!(step_states(&sb.status(&third))["make"], "Succeeded");
    assert_eq!(
        std::fs::read_to_string(sb.path().join("ran"))
            .expect("ran")
            .lines()
            .count(),
        2
    );

    // Several at once, in text: one line per run; in JSON: a list.
    let out = sb.run(&["delete", &second]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("deleted {second} (del, Succeeded): ")),
        "{}",
        out.stdout
    );
    let fourth = run_ok(&sb, "p.yaml");
    let out = sb.run(&["delete", &third, &fourth, "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v[0]["id"], third.as_str());
    assert_eq!(v[1]["id"], fourth.as_str());
    assert_eq!(v[1]["state"], "Deleted");
    assert!(listed(&sb).is_empty());
    assert!(files_under(&home.join("attempts")).is_empty());
    assert!(files_under(&home.join("objects")).is_empty());
    // A run that is gone is an unknown run.
    assert_eq!(sb.run(&["delete", &third]).code, Some(2));
}

#[test]
fn a_running_run_is_not_deleted_and_a_delete_cut_off_is_finished_by_the_next() {
    let sb = Sandbox::new("delrunning");
    sb.write(
        "done.yaml",
        &pipeline(
            "done",
            "  steps:\n    - name: a\n      outputs: [o]\n      run: echo x > $SLUICE_OUTPUT_DIR/o\n",
        ),
    );
    sb.write(
        "long.yaml",
        &pipeline("long", "  steps:\n    - name: wait\n      run: sleep 60\n"),
    );
    let ended = run_ok(&sb, "done.yaml");
    let out = sb.run(&["run", "long.yaml", "--detach", "--output", "json"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let running = id_of(&out.stdout);
    wait_for("the step to run", || {
        step_states(&sb.status(&running))
            .get("wait")
            .is_some_and(|s| s == "Running")
    });
    // Refused, saying what to do; and with it, nothing else given is deleted either.
    let out = sb.run(&["delete", &ended, &running]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("run {running} is still running"))
            && out.stderr.contains(&format!("sluice cancel {running}"))
            && out.stderr.contains("nothing was deleted"),
        "{}",
        out.stderr
    );
    let ids = listed(&sb);
    assert!(ids.contains(&ended) && ids.contains(&running), "{ids:?}");
    assert!(sb.home().join("attempts").join(&running).is_dir());
    // gc leaves running runs and their files alone, however old everything is.
    let out = sb.run(&["gc", "--older-than", "0s"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(listed(&sb), vec![running.clone()]);
    assert!(sb.home().join("attempts").join(&running).is_dir());
    assert_eq!(
        step_states(&sb.status(&running))
            .get("wait")
            .map(String::as_str),
        Some("Running")
    );
    assert_eq!(sb.run(&["cancel", &running]).code, Some(0));
    wait_for("the cancel", || sb.status(&running)["state"] == "Cancelled");

    // A delete cut off after marking the run and removing part of its files: the run says
    // so, cannot be retried, and the next delete finishes the job.
    let second = run_ok(&sb, "done.yaml");
    sql(
        &sb,
        &format!("UPDATE runs SET state = 'Deleting' WHERE id = '{second}'"),
    );
    std::fs::remove_dir_all(sb.home().join("attempts").join(&second)).expect("attempts");
    assert_eq!(sb.status(&second)["state"], "Deleting");
    let out = sb.run(&["retry", &second]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("being deleted"), "{}", out.stderr);
    let out = sb.run(&["delete", &second]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        !sb.home()
            .join(format!("objects/teams/default/runs/{second}"))
            .exists()
    );
    assert!(!listed(&sb).contains(&second));
}

#[test]
fn gc_deletes_old_runs_keeps_the_newest_of_each_name_and_removes_orphans() {
    let sb = Sandbox::new("gc");
    for name in ["a", "b"] {
        sb.write(
            &format!("{name}.yaml"),
            &pipeline(
                name,
                "  steps:\n    - name: s\n      outputs: [o]\n      run: echo out > $SLUICE_OUTPUT_DIR/o\n",
            ),
        );
    }
    let home = sb.home();
    // Oldest first: a1 ended 50 days ago, b1 45, a2 40; a3 and b2 just now.
    let a1 = run_ok(&sb, "a.yaml");
    let b1 = run_ok(&sb, "b.yaml");
    let a2 = run_ok(&sb, "a.yaml");
    let a3 = run_ok(&sb, "a.yaml");
    let b2 = run_ok(&sb, "b.yaml");
    backdate(&sb, &a1, 50);
    backdate(&sb, &b1, 45);
    backdate(&sb, &a2, 40);
    // Files of a run the store no longer has.
    let orphan = "0rphan000000";
    let orphans = [
        sb.write(&format!("home/attempts/{orphan}/s.1/output.log"), "x\n"),
        sb.write(&format!("home/engines/{orphan}.log"), "log\n"),
        sb.write(
            &format!("home/objects/teams/default/runs/{orphan}/s/1/outputs/o"),
            "out\n",
        ),
        sb.write(
            &format!("home/objects/teams/other/checkpoints/{orphan}/s/1/MANIFEST.json"),
            "{}",
        ),
    ];

    let chosen = |args: &[&str]| -> (Vec<String>, serde_json::Value) {
        let mut all = vec!["gc", "--output", "json"];
        all.extend_from_slice(args);
        let out = sb.run(&all);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
        let ids = v["runs"]
            .as_array()
            .expect("runs")
            .iter()
            .map(|r| r["id"].as_str().expect("id").to_owned())
            .collect();
        (ids, v)
    };
    // Dry runs: what would go, nothing removed. Default: ended more than 30 days ago.
    let (ids, v) = chosen(&["--dry-run"]);
    assert_eq!(ids, [a1.clone(), b1.clone(), a2.clone()]);
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["runs"][0]["state"], "Succeeded");
    let paths: Vec<&str> = v["orphans"]
        .as_array()
        .expect("orphans")
        .iter()
        .map(|o| o["path"].as_str().expect("path"))
        .collect();
    assert_eq!(
        paths,
        [
            format!("attempts/{orphan}"),
            format!("engines/{orphan}.log"),
            format!("teams/default/runs/{orphan}"),
            format!("teams/other/checkpoints/{orphan}"),
        ]
    );
    assert!(v["freed_bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
    assert_eq!(
        chosen(&["--dry-run", "--older-than", "42d"]).0,
        [a1.clone(), b1.clone()]
    );
    // The newest two of each name stay, however old.
    assert_eq!(
        chosen(&["--dry-run", "--keep-last", "2"]).0,
        vec![a1.clone()]
    );
    assert_eq!(listed(&sb).len(), 5);
    for p in &orphans {
        assert!(p.exists(), "a dry run removed {}", p.display());
    }
    let out = sb.run(&["gc", "--dry-run", "--keep-last", "2"]);
    assert!(
        out.stdout
            .contains(&format!("would delete {a1} a (Succeeded, ended ")),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("gc --dry-run: 1 run(s) and 4 orphan(s) would be removed"),
        "{}",
        out.stdout
    );

    // For real, keeping the newest of each name.
    let (ids, v) = chosen(&["--keep-last", "1"]);
    assert_eq!(ids, [a1.clone(), b1.clone(), a2.clone()]);
    assert_eq!(v["runs"][0]["state"], "Deleted");
    let mut left = listed(&sb);
    left.sort();
    let mut kept = vec![a3.clone(), b2.clone()];
    kept.sort();
    assert_eq!(left, kept);
    for gone in [&a1, &b1, &a2] {
        assert!(!home.join("attempts").join(gone).exists());
        assert!(
            !home
                .join(format!("objects/teams/default/runs/{gone}"))
                .exists()
        );
    }
    for p in &orphans {
        assert!(!p.exists(), "{} is still there", p.display());
    }
    for id in [&a3, &b2] {
        assert!(
            home.join(format!("objects/teams/default/runs/{id}/s/1/outputs/o"))
                .is_file()
        );
    }
    // Nothing more to do.
    let out = sb.run(&["gc"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("gc: 0 run(s) and 0 orphan(s) removed, 0 B freed"),
        "{}",
        out.stdout
    );
    // A bad age is a usage error.
    let out = sb.run(&["gc", "--older-than", "30"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(out.stderr.contains("--older-than"), "{}", out.stderr);
}

#[test]
fn delete_removes_a_runs_objects_from_s3() {
    let s3 = S3::start("sluice-delete");
    let sb = Sandbox::new("s3delete");
    sb.write(
        "p.yaml",
        &pipeline(
            "s3del",
            "  steps:\n    - name: make\n      outputs: [o]\n      checkpoint: {every: 100ms}\n      run: echo step-log; echo state > $SLUICE_CHECKPOINT_DIR/s && echo made > $SLUICE_OUTPUT_DIR/o\n",
        ),
    );
    let url = s3.url("team-store");
    let s3_run = |args: &[&str]| {
        let mut cmd = sb.cmd(args);
        for (k, v) in s3.env() {
            cmd.env(k, v);
        }
        sluice_e2e::ran(wait::output(&mut cmd))
    };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let out = s3_run(&["run", "p.yaml", "--objects", &url, "--output", "json"]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
        ids.push(id_of(&out.stdout));
    }
    let prefixes = |id: &str| {
        [
            format!("team-store/teams/default/runs/{id}/"),
            format!("team-store/teams/default/checkpoints/{id}/"),
        ]
    };
    let [runs, checkpoints] = prefixes(&ids[0]);
    let stored = s3.keys(&runs);
    for key in ["make/1/outputs/o", "make/1/logs/output.log"] {
        assert!(
            stored.contains(&format!("{runs}{key}")),
            "{key} is in the bucket: {stored:?}"
        );
    }
    assert!(
        s3.keys(&checkpoints)
            .iter()
            .any(|k| k.ends_with("MANIFEST.json")),
        "a checkpoint is in the bucket"
    );
    let out = s3_run(&["delete", &ids[0]]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(s3.keys(&runs), Vec::<String>::new());
    assert_eq!(s3.keys(&checkpoints), Vec::<String>::new());
    assert!(!sb.home().join("attempts").join(&ids[0]).exists());
    assert_eq!(listed(&sb), vec![ids[1].clone()]);
    // The other run's objects stay.
    for prefix in prefixes(&ids[1]) {
        assert!(!s3.keys(&prefix).is_empty(), "{prefix} is kept");
    }
}
