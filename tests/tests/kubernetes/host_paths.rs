//! On Kubernetes the server reads no file of its own machine for a member's pipeline: a
//! `cache.files` entry, a `workdir` that is absolute or climbs out of the container's working
//! directory, and an output that links out of `$SLUICE_OUTPUT_DIR` are refused, with the
//! secret they point at (a file this test makes beside the server's home) never read: it is
//! in no answer, log, status or object.

use serde_json::{Value, json};

use super::setup::{Cluster, steps, wait_state};

/// A file outside every run's folder, with content nobody could guess.
fn secret(k: &Cluster) -> (std::path::PathBuf, String) {
    let content = format!(
        "top-secret-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    (k.sb.write("secret.txt", &content), content)
}

/// `POST /api/v1/runs`, as [`Cluster::submit`] but returning the answer.
fn submit(k: &Cluster, source: &str, params: &[&str]) -> sluice_e2e::http::Answer {
    k.server.call(
        "POST",
        "/api/v1/runs",
        Some(&k.token),
        Some(&json!({"source": source, "path": "p.yaml", "params": params})),
    )
}

/// The rendered diagnostics of a refusal.
fn rendered(answer: &Value) -> Vec<String> {
    answer["error"]["rendered"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// `cache.files` are hashed by the engine: on a Kubernetes server a relative path climbing
/// out of the server's home, the absolute path of a file of its machine and
/// `../../../../etc/shadow` are each refused at submission, at their line and column, with
/// help; no run is recorded, so nothing was read. The CLI says the same against the server.
#[test]
fn cache_files_are_refused_at_submission_and_never_read() {
    let k = Cluster::start("k8s-cache-files", &["node-a"], "");
    let (path, content) = secret(&k);
    let source = format!(
        r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {{name: peek}}
spec:
  steps:
    - name: train
      run: echo trained
      cache:
        files:
          - ../secret.txt
          - {}
          - ../../../../etc/shadow
"#,
        path.display()
    );
    let a = submit(&k, &source, &[]);
    assert_eq!(a.status, 400, "refused: {}", a.text());
    let body = a.json();
    assert_eq!(body["error"]["kind"], "invalid", "{body}");
    let lines = rendered(&body);
    for (line, col, file) in [
        (10, 13, "../secret.txt".to_owned()),
        (11, 13, path.display().to_string()),
        (12, 13, "../../../../etc/shadow".to_owned()),
    ] {
        let want = format!(
            "p.yaml:{line}:{col}: error: cache.files: '{file}' cannot be hashed on Kubernetes: the step's files are in its image, and the engine reads no file of its own machine\n  help: drop cache.files and say what should change the key in cache.key"
        );
        assert!(
            lines.iter().any(|l| l.starts_with(&want)),
            "no {want:?} in {lines:#?}"
        );
    }
    assert!(!a.text().contains(&content), "{}", a.text());
    assert!(k.runs().is_empty(), "a run was recorded: {:?}", k.runs());
    // The CLI against the server: the same diagnostics, at the file's own name, exit 2.
    let file = k.sb.write("peek.yaml", &source);
    let ran = k.cli(&["run", file.to_str().expect("a path")]);
    assert_eq!(ran.code, Some(2), "{}", ran.stderr);
    assert!(
        ran.stderr.contains(
            "peek.yaml:10:13: error: cache.files: '../secret.txt' cannot be hashed on Kubernetes"
        ) && ran.stderr.contains("  help: drop cache.files"),
        "{}",
        ran.stderr
    );
    assert!(!ran.stderr.contains(&content) && !ran.stdout.contains(&content));
    assert!(k.runs().is_empty(), "a run was recorded: {:?}", k.runs());
    // Applied for later runs (`submit NAME`, a schedule): refused the same, nothing applied.
    let a = k.server.call(
        "POST",
        "/api/v1/apply",
        Some(&k.token),
        Some(&json!({"files": [{"path": "p.yaml", "text": source}]})),
    );
    assert_eq!(a.status, 400, "refused: {}", a.text());
    assert!(
        rendered(&a.json()).iter().any(|l| l.starts_with(
            "p.yaml:12:13: error: cache.files: '../../../../etc/shadow' cannot be hashed on Kubernetes"
        )),
        "{}",
        a.text()
    );
    let named = k.server.call(
        "POST",
        "/api/v1/submit",
        Some(&k.token),
        Some(&json!({"name": "peek"})),
    );
    assert_eq!(named.status, 404, "nothing applied: {}", named.text());
    // Steps that name no file are cached as before.
    let id = k.submit(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: kept}\nspec:\n  steps:\n    - {name: a, run: echo a, cache: {key: v1}}\n",
        &[],
    );
    wait_state(&k, &id, "Succeeded");
    k.assert_calls_within_the_role();
}

/// A step's `workdir` is a folder in its container: an absolute one, or one climbing out of
/// the container's working directory, is refused at submission when written so, and fails
/// its step (no pod made) when a template renders it so. A placed input is a folder of the
/// attempt in the pod, and a step may run in it.
#[test]
fn a_workdir_outside_the_container_is_refused_and_an_input_folder_is_one() {
    let k = Cluster::start("k8s-workdir", &["node-a"], "");
    let (path, content) = secret(&k);
    let folder = path
        .parent()
        .expect("the secret's folder")
        .display()
        .to_string();
    let source = format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: peek}}\nspec:\n  steps:\n    - name: look\n      workdir: {folder}\n      run: cat secret.txt\n"
    );
    let a = submit(&k, &source, &[]);
    assert_eq!(a.status, 400, "refused: {}", a.text());
    let lines = rendered(&a.json());
    let want = format!(
        "p.yaml:7:16: error: workdir '{folder}' is an absolute path: on Kubernetes a step's workdir is a folder under its container's working directory, never a path of the engine's machine\n  help: write a folder relative to the image's working directory"
    );
    assert!(
        lines.iter().any(|l| l.starts_with(&want)),
        "no {want:?} in {lines:#?}"
    );
    assert!(k.runs().is_empty(), "a run was recorded: {:?}", k.runs());

    // Made by a template: known once rendered; the step fails saying why, no pod is made.
    let templated = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: peek}\nspec:\n  params:\n    dir: {type: string}\n  steps:\n    - name: look\n      workdir: \"{{params.dir}}\"\n      run: cat secret.txt\n";
    for (dir, why) in [
        (
            folder.as_str(),
            format!("workdir '{folder}' is an absolute path"),
        ),
        (
            "a/../..",
            "workdir 'a/../..' climbs out of its folder".to_owned(),
        ),
    ] {
        let id = k.submit(templated, &[&format!("dir={dir}")]);
        wait_state(&k, &id, "Failed");
        let run = k.run(&id);
        let reason = steps(&run)["look"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            reason.starts_with(&why) && reason.contains("on Kubernetes"),
            "{reason}"
        );
        assert!(k.live_pods(&id).is_empty() && !run.to_string().contains(&content));
    }
    assert_eq!(
        k.kube.calls()["by"]["create pods"].as_u64().unwrap_or(0),
        0,
        "a pod was made"
    );

    // An upstream output placed in the attempt's folder is a folder of the pod's own.
    let inputs = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: inside}\nspec:\n  steps:\n    - name: prep\n      outputs: [src]\n      run: mkdir -p $SLUICE_OUTPUT_DIR/src && echo from-the-input > $SLUICE_OUTPUT_DIR/src/hello.txt\n    - name: use\n      needs: [prep]\n      workdir: \"{{steps.prep.outputs.src}}\"\n      run: cat hello.txt\n";
    let id = k.submit(inputs, &[]);
    wait_state(&k, &id, "Succeeded");
    let logs = k.cli(&["logs", &id, "use"]);
    assert!(logs.stdout.contains("from-the-input"), "{}", logs.stdout);
    k.assert_calls_within_the_role();
}

/// An output that is a link leading out of `$SLUICE_OUTPUT_DIR` (to a file of the machine,
/// or inside a folder output) fails its step with the reason, and nothing of it is kept: no
/// object under its key, the secret in no log or status. A link inside the output folder is
/// kept as a copy of its target.
#[test]
fn an_output_linking_out_of_its_folder_is_refused_and_never_kept() {
    let k = Cluster::start("k8s-output-links", &["node-a"], "");
    let (path, content) = secret(&k);
    let source = "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: leak}\nspec:\n  params:\n    secret: {type: string}\n    how: {type: string}\n  steps:\n    - name: leak\n      env: {SECRET: \"{{params.secret}}\", HOW: \"{{params.how}}\"}\n      outputs: [model]\n      run: |\n        cd \"$SLUICE_OUTPUT_DIR\"\n        case \"$HOW\" in\n          file) ln -s \"$SECRET\" model ;;\n          folder) mkdir model && echo weights > model/a.bin && ln -s \"$SECRET\" model/b.bin ;;\n          parent) mkdir model && echo weights > model/a.bin && ln -s ../.. model/up ;;\n          inside) echo weights > real.bin && mkdir model && ln -s ../real.bin model/a.bin ;;\n        esac\n";
    let secret_param = format!("secret={}", path.display());
    for (how, why) in [
        (
            "file",
            format!("/out/model is a link to {}, outside ", path.display()),
        ),
        (
            "folder",
            format!("/out/model/b.bin is a link to {}, outside ", path.display()),
        ),
        (
            "parent",
            "/out/model/up is a link to ../.., outside ".to_owned(),
        ),
    ] {
        let id = k.submit(source, &[&secret_param, &format!("how={how}")]);
        wait_state(&k, &id, "Failed");
        let run = k.run(&id);
        let reason = steps(&run)["leak"]["reason"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        assert!(
            reason.starts_with("cannot store output 'model': ")
                && reason.contains(&why)
                && reason.ends_with("a pod keeps only files of its own output folder"),
            "{how}: {reason}"
        );
        let kept =
            k.s3.keys(&format!("sluice/teams/vision/runs/{id}/leak/1/outputs"));
        assert!(kept.is_empty(), "{how}: kept {kept:?}");
        let logs = k.cli(&["logs", &id, "leak"]);
        assert!(!run.to_string().contains(&content), "{how}: {run}");
        assert!(!logs.stdout.contains(&content), "{how}: {}", logs.stdout);
    }
    let id = k.submit(source, &[&secret_param, "how=inside"]);
    wait_state(&k, &id, "Succeeded");
    let kept =
        k.s3.keys(&format!("sluice/teams/vision/runs/{id}/leak/1/outputs"));
    assert_eq!(
        kept,
        [format!(
            "sluice/teams/vision/runs/{id}/leak/1/outputs/model/a.bin"
        )]
    );
    k.assert_calls_within_the_role();
}
