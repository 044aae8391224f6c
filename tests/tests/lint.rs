//! `sluice lint` end to end: the bad-input corpus, the good examples, JSON, plans, params.

use std::path::{Path, PathBuf};

use sluice_e2e::{Sandbox, TempDir, root, run_in};

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("folder exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    files
}

/// Each `data/bad/NAME.yaml` fails with exit 2 and prints exactly `NAME.stderr`.
/// `SLUICE_BLESS=1` rewrites the expected files from what the linter prints now (review the
/// diff before committing it).
#[test]
fn bad_inputs_print_exactly_their_expected_errors() {
    let dir = root().join("tests/data/bad");
    let bless = std::env::var_os("SLUICE_BLESS").is_some();
    let files = yaml_files(&dir);
    assert!(files.len() >= 40, "the corpus has {} files", files.len());
    let mut failures = Vec::new();
    for file in &files {
        let name = file
            .file_name()
            .and_then(|n| n.to_str())
            .expect("utf-8 name");
        // A `# lint-args: ...` line adds arguments (a `--cluster` file, `-p` values).
        let text = std::fs::read_to_string(file).expect("readable");
        let extra: Vec<&str> = text
            .lines()
            .find_map(|l| l.strip_prefix("# lint-args:"))
            .map(|a| a.split_whitespace().collect())
            .unwrap_or_default();
        let args: Vec<&str> = ["lint"].into_iter().chain(extra).chain([name]).collect();
        let out = run_in(&dir, &args);
        let expected_path = file.with_extension("stderr");
        if bless {
            std::fs::write(&expected_path, &out.stderr).expect("write expected");
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if out.code != Some(2) {
            failures.push(format!("{name}: exit {:?}, expected 2", out.code));
        }
        if out.stderr != expected {
            failures.push(format!(
                "{name}: stderr differs\n--- expected\n{expected}--- got\n{}",
                out.stderr
            ));
        }
        if out.stderr.contains("panicked") {
            failures.push(format!("{name}: panicked"));
        }
        if !out.stdout.is_empty() {
            failures.push(format!("{name}: printed on stdout: {}", out.stdout));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every diagnostic line of the corpus has the pinned shape.
#[test]
fn every_error_line_has_path_line_and_column() {
    let dir = root().join("tests/data/bad");
    for file in yaml_files(&dir) {
        let expected = std::fs::read_to_string(file.with_extension("stderr")).unwrap_or_default();
        for line in expected.lines() {
            if line.starts_with("  help: ") || line.starts_with("sluice lint: ") {
                continue;
            }
            let mut parts = line.splitn(4, ':');
            let (path, l, c, rest) = (parts.next(), parts.next(), parts.next(), parts.next());
            assert!(
                path.is_some_and(|p| p.ends_with(".yaml"))
                    && l.is_some_and(|l| l.parse::<u32>().is_ok())
                    && c.is_some_and(|c| c.parse::<u32>().is_ok())
                    && rest.is_some_and(|r| r.starts_with(" error: ") || r.starts_with(" note: ")),
                "{}: malformed line {line:?}",
                file.display()
            );
        }
    }
}

/// The examples users copy from: the repository's and the contract's.
#[test]
fn examples_lint_clean() {
    let mut paths = vec![
        root().join("examples/pipelines"),
        root().join("tests/data/good"),
    ];
    // The contract's own examples, when the shared folder sits beside the checkout (it does
    // in CI). Kinds not validated yet must still lint without errors.
    let tmp = TempDir::new("spec-examples");
    for doc in ["pipeline", "sweep", "cluster"] {
        let shared = root().join(format!("../shared/spec/{doc}.md"));
        if let Ok(md) = std::fs::read_to_string(&shared) {
            for (i, block) in yaml_blocks(&md).into_iter().enumerate() {
                paths.push(tmp.write(&format!("{doc}-{i}.yaml"), &block));
            }
        }
    }
    let examples = yaml_files(&root().join("examples/pipelines"));
    assert!(
        examples.len() >= 7,
        "examples/pipelines has {} files",
        examples.len()
    );
    let args: Vec<String> = std::iter::once("lint".to_owned())
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_in(&root(), &args);
    // quotaPools and acrossTeams included: every example of the contract lints clean.
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

fn yaml_blocks(md: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in md.lines() {
        match (&mut current, line.trim_start()) {
            (None, l) if l.starts_with("```yaml") => current = Some(String::new()),
            (Some(_), l) if l.starts_with("```") => blocks.extend(current.take()),
            (Some(b), _) => {
                b.push_str(line);
                b.push('\n');
            }
            _ => {}
        }
    }
    blocks
}

/// The Katib Experiments of the examples (random search; PyTorchJob trials as gangs) read as
/// sweeps without a word: no error, no warning (nothing in them is dropped or changed).
#[test]
fn the_katib_examples_lint_clean() {
    for (file, name) in [
        ("examples/sweeps/katib-random.yaml", "random"),
        ("examples/sweeps/katib-pytorchjob.yaml", "pytorchjob-mnist"),
    ] {
        let out = run_in(&root(), &["lint", file]);
        assert_eq!(out.code, Some(0), "{file}: {}", out.stderr);
        assert_eq!(
            out.stderr, "sluice lint: 1 file, 1 document: no errors\n",
            "{file}: {}",
            out.stderr
        );
        // As JSON: the document is a sweep, with nothing to say about it.
        let out = run_in(&root(), &["lint", "--output", "json", file]);
        assert_eq!(out.code, Some(0), "{file}: {}", out.stderr);
        let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
        assert_eq!(v["files"][0]["documents"][0]["kind"], "Sweep", "{v}");
        assert_eq!(v["files"][0]["documents"][0]["name"], name, "{v}");
        assert_eq!(
            (v["errors"].as_u64(), v["warnings"].as_u64()),
            (Some(0), Some(0)),
            "{v}"
        );
    }
}

#[test]
fn the_spec_example_in_the_repository_lints_clean_and_plans() {
    let dir = root().join("tests/data/good");
    let out = run_in(&dir, &["lint", "--plan", "spec-pipeline.yaml"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let expected = "\
pipeline retrain (team vision) from spec-pipeline.yaml: 5 steps, 6 instances, 4 levels
  params: epochs=3 lr=0.001 split=val
  level 0:
    prep
  level 1:
    train  needs prep  [4 workers x 2 GPU]
  level 2:
    evaluate[0]  needs train  item=\"val\"
    evaluate[1]  needs train  item=\"test\"
  level 3:
    publish  needs evaluate  when {{steps.train.metrics.accuracy}} >= 0.9
  on exit:
    notify
";
    assert_eq!(out.stdout, expected);
}

const FAN: &str = "\
apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: fan}
spec:
  params:
    shards: {type: list, default: [a, b]}
    epochs: {type: int, default: 3}
    mode: {type: string, default: fast, values: [fast, slow]}
    seed: {type: int}
  steps:
    - name: prep
      run: echo prep
      outputs: [files]
    - name: work
      needs: [prep]
      forEach: \"{{params.shards}}\"
      run: echo {{item}} {{params.epochs}}
    - name: later
      needs: [prep]
      forEach: \"{{steps.prep.outputs.files}}\"
      run: echo {{item}}
    - name: join
      needs: [work, later]
      run: echo done {{params.seed}}
";

#[test]
fn plan_expands_fan_out_from_params_and_marks_run_time_fan_out() {
    let tmp = TempDir::new("plan");
    tmp.write("fan.yaml", FAN);
    let out = run_in(
        tmp.path(),
        &[
            "lint",
            "--plan",
            "fan.yaml",
            "-p",
            r#"shards=["x","y","z"]"#,
            "--output",
            "json",
        ],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    let plan = &v["plans"][0];
    assert_eq!(plan["name"], "fan");
    assert_eq!(plan["steps"], 4);
    assert_eq!(plan["unset_params"], serde_json::json!(["seed"]));
    let names: Vec<Vec<String>> = plan["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .map(|l| {
            l["steps"]
                .as_array()
                .expect("steps")
                .iter()
                .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        names,
        vec![
            vec!["prep".to_owned()],
            vec![
                "work[0]".into(),
                "work[1]".into(),
                "work[2]".into(),
                "later[*]".into()
            ],
            vec!["join".into()],
        ]
    );
    assert_eq!(plan["levels"][1]["steps"][2]["item"], "z");
    assert_eq!(
        plan["levels"][2]["steps"][0]["needs"],
        serde_json::json!(["work", "later"])
    );
    assert_eq!(plan["instances"], 6);
}

#[test]
fn params_given_on_the_command_line_are_checked_against_their_types() {
    let tmp = TempDir::new("params");
    tmp.write("fan.yaml", FAN);
    let out = run_in(
        tmp.path(),
        &[
            "lint",
            "fan.yaml",
            "-p",
            "epochs=many",
            "-p",
            "mode=medium",
            "-p",
            "shards=a,b",
            "-p",
            "epoch=3",
            "-p",
            "novalue",
        ],
    );
    assert_eq!(out.code, Some(2));
    let expected = "\
-p epochs=many: error: parameter 'epochs': expected an integer, found \"many\"
-p mode=medium: error: parameter 'mode': \"medium\" is not one of the allowed values
  help: allowed: \"fast\", \"slow\"
-p shards=a,b: error: parameter 'shards': expected a JSON list such as '[\"a\", \"b\"]', found \"a,b\"
-p epoch=3: error: pipeline 'fan' has no parameter 'epoch'
  help: did you mean 'epochs'?
-p novalue: error: expected NAME=VALUE, found \"novalue\"
sluice lint: 1 file, 1 document: 5 errors
";
    assert_eq!(out.stderr, expected);
    let ok = run_in(
        tmp.path(),
        &["lint", "fan.yaml", "-p", "epochs=7", "-p", "mode=slow"],
    );
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
}

#[test]
fn json_output_lists_every_diagnostic_with_its_position() {
    let tmp = TempDir::new("json");
    tmp.write(
        "p.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  steps:\n    - name: a\n      run: x\n      retry: {limit: many}\n    - name: b\n      need: [a]\n      run: y\n",
    );
    let out = run_in(tmp.path(), &["lint", "p.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.is_empty(),
        "nothing on stderr in JSON mode: {}",
        out.stderr
    );
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    assert_eq!(v["errors"], 2);
    assert_eq!(
        v["diagnostics"],
        serde_json::json!([
            {"path": "p.yaml", "line": 8, "column": 22, "severity": "error",
             "message": "retry.limit: expected a non-negative integer, found \"many\""},
            {"path": "p.yaml", "line": 10, "column": 7, "severity": "error",
             "message": "unknown field 'need' in step 'b'", "help": ["did you mean 'needs'?"]},
        ])
    );
    assert_eq!(v["files"][0]["documents"][0]["kind"], "Pipeline");
}

#[test]
fn folders_are_searched_recursively_for_yaml_and_hidden_folders_skipped() {
    let tmp = TempDir::new("folders");
    let good = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: ok}\nspec:\n  steps:\n    - {name: a, run: x}\n";
    tmp.write("a/one.yaml", good);
    tmp.write("a/b/two.yml", good);
    tmp.write("a/notes.txt", "not yaml");
    tmp.write("a/.hidden/bad.yaml", "this: [is broken");
    let out = run_in(tmp.path(), &["lint", "a"]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(out.stderr, "sluice lint: 2 files, 2 documents: no errors\n");
    tmp.write(
        "a/b/three.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: x}\nspec: {steps: []}\n",
    );
    let out = run_in(tmp.path(), &["lint", "a", "missing.yaml"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr
            .contains("a/b/three.yaml:4:15: error: a pipeline needs at least one step"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("missing.yaml: error: cannot read"),
        "{}",
        out.stderr
    );
}

#[test]
fn cluster_capacity_refuses_steps_no_pool_can_hold() {
    let tmp = TempDir::new("cluster");
    tmp.write(
        "cluster.yaml",
        "apiVersion: sluice.dev/v1\nkind: Cluster\nmetadata: {name: lab}\nspec:\n  pools:\n    - name: a100\n      nodes: 2\n      resources: {gpu: 4, cpu: 32, memory: 256Gi}\n      labels: {gpu: a100}\n  priorities:\n    - {name: high, value: 10}\n    - {name: low, value: 0, default: true}\n",
    );
    tmp.write(
        "p.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: p}\nspec:\n  steps:\n    - name: fits\n      run: x\n      resources: {gpu: 4, workers: 2, flavor: a100}\n      priority: high\n    - name: too-many\n      run: x\n      resources: {gpu: 4, workers: 3}\n    - name: too-big\n      run: x\n      resources: {gpu: 8}\n    - name: flavor\n      run: x\n      resources: {flavor: a10}\n    - name: prio\n      run: x\n      priority: hihg\n",
    );
    let out = run_in(tmp.path(), &["lint", "--cluster", "cluster.yaml", "p.yaml"]);
    assert_eq!(out.code, Some(2));
    let expected = "\
p.yaml:10:7: error: step 'too-many': 3 workers of 4 GPU, 1 CPU do not fit in any pool
  help: the closest is pool 'a100', 2 nodes of 4 GPU, 32 CPU, 256Gi memory, which holds 2 such workers
p.yaml:13:7: error: step 'too-big': 1 worker of 8 GPU, 1 CPU does not fit in any pool
  help: the closest is pool 'a100', 2 nodes of 4 GPU, 32 CPU, 256Gi memory, which holds 0 such workers
p.yaml:16:7: error: step 'flavor': no pool offers flavor 'a10'
  help: did you mean 'a100'?
p.yaml:19:7: error: step 'prio': the cluster has no priority class 'hihg'
  help: did you mean 'high'?
sluice lint: 1 file, 1 document: 4 errors
";
    assert_eq!(out.stderr, expected);
    let without = run_in(tmp.path(), &["lint", "p.yaml"]);
    assert_eq!(
        without.code,
        Some(0),
        "without a cluster nothing is known of capacity: {}",
        without.stderr
    );
}

#[test]
fn all_errors_of_several_files_are_reported_in_one_run() {
    let tmp = TempDir::new("several");
    tmp.write("a.yaml", "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: a}\nspec:\n  steps:\n    - {name: x, run: a, needs: [y]}\n    - {name: y, run: b, needs: [x]}\n");
    tmp.write(
        "b.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipline\nmetadata: {name: b}\nspec: {}\n",
    );
    let out = run_in(tmp.path(), &["lint", "a.yaml", "b.yaml"]);
    assert_eq!(out.code, Some(2));
    assert_eq!(
        out.stderr,
        "a.yaml:6:33: error: dependency cycle: x -> y -> x\n  help: a step cannot wait for itself; remove one of these needs\nb.yaml:2:7: error: unknown kind 'Pipline'\n  help: did you mean 'Pipeline'?\n  help: the rest of the document is checked as a Pipeline\nb.yaml:4:7: error: a pipeline needs 'steps'\n  help: add steps: a list of steps, each with a name and a run command\nsluice lint: 2 files, 2 documents: 3 errors\n"
    );
}

/// A misspelled kind is checked as the kind it is nearest to, but is still an error: `run`
/// refuses the file with exit 2 and starts nothing, even when nothing else is wrong.
#[test]
fn a_misspelled_kind_is_checked_as_its_nearest_kind_and_never_runs() {
    let sandbox = Sandbox::new("misspelled-kind");
    sandbox.write(
        "p.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipline\nmetadata: {name: p}\nspec:\n  steps:\n    - name: a\n      run: touch ran\n",
    );
    let out = sandbox.run(&["run", "p.yaml"]);
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "p.yaml:2:7: error: unknown kind 'Pipline'\n  help: did you mean 'Pipeline'?"
        ),
        "{}",
        out.stderr
    );
    assert!(!sandbox.path().join("ran").exists(), "the step ran");

    sandbox.write(
        "q.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipline\nmetadata: {name: q}\nspec:\n  steps:\n    - name: a\n      rn: x\n",
    );
    let out = sandbox.run(&["lint", "q.yaml", "--output", "json"]);
    assert_eq!(out.code, Some(2));
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON document");
    let messages: Vec<&str> = v["diagnostics"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|d| d["message"].as_str())
        .collect();
    assert_eq!(
        messages,
        [
            "unknown kind 'Pipline'",
            "step 'a' has nothing to run",
            "unknown field 'rn' in step 'a'"
        ]
    );
    // The document is listed as what it was checked as.
    assert_eq!(v["files"][0]["documents"][0]["kind"], "Pipeline");
}

#[test]
fn help_and_unknown_commands() {
    let out = run_in(&root(), &["lint", "--help"]);
    assert_eq!(out.code, Some(0));
    assert!(out.stdout.contains("--plan"), "{}", out.stdout);
    let out = run_in(&root(), &["lnit"]);
    assert_eq!(out.code, Some(2));
    assert!(
        out.stderr.contains("lint"),
        "suggests the command: {}",
        out.stderr
    );
}
