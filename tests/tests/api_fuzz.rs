//! The API fuzzed with schemathesis (pinned in `tests/fuzz/requirements.txt`) from the document
//! the server serves, `/api/v1/openapi.json`, on a server whose two teams each have runs
//! (succeeded, failed, running), an applied pipeline and a schedule that has fired. Three
//! passes, one a token: team A's viewer (every read, with the data untouched), team A's member
//! (the changes too) and an admin (tokens and the audit record). Each must find nothing: no
//! 5xx, every answer of a documented status, content type, headers and schema, invalid input
//! refused, no operation that works without a valid token, and no object of team A that team
//! B's token gets (`object_level_authorization`, team B's member as the peer). Then every
//! answer the team A passes recorded is searched for team B's run ids, names and token ids, and
//! each of team B's runs is asked for with team A's tokens: "unknown run", as an id never used.
//!
//! Locally: `cargo build --workspace && cargo test -p sluice-e2e --test api_fuzz`; what
//! schemathesis printed is in the failure, and `SLUICE_FUZZ_KEEP=DIR` keeps its configuration,
//! reports and recorded answers in DIR.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, wait_for};

/// Team A, whose tokens fuzz the API.
const A: &str = "vision";
/// Team B. Its team, pipelines, schedules and tokens all start with this, a string no answer
/// to team A has any reason to hold: finding it there is a leak.
const B: &str = "qxb-secret";

/// The seed of every pass (the one CI gives the property tests).
const SEED: u64 = 20_261_203;
/// Test cases per operation and phase: enough to reach every refusal, few enough for a
/// 2-core machine (the whole test takes a few minutes). `SLUICE_FUZZ_EXAMPLES` asks for more
/// (a longer search, run by hand).
fn examples() -> u32 {
    std::env::var("SLUICE_FUZZ_EXAMPLES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(25)
}

/// The checks every pass makes (`object_level_authorization` only where there is a peer).
/// Not made: `positive_data_acceptance` (a document cannot say which YAML is a valid pipeline
/// or which run ids exist, so schema-valid input is often rightly refused), and the stateful
/// `use_after_free` and `ensure_resource_availability` (the document declares no links).
const CHECKS: &[&str] = &[
    "not_a_server_error",
    "status_code_conformance",
    "content_type_conformance",
    "response_headers_conformance",
    "response_schema_conformance",
    "negative_data_rejection",
    "missing_required_header",
    "ignored_auth",
    "unsupported_method",
];

/// A pipeline whose steps take a tenth of a core, so that the running runs leave room for
/// the others on a 2-core machine.
fn pipeline(name: &str, steps: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {{name: {name}}}\nspec:\n  defaults:\n    resources: {{cpu: 100m, memory: 64Mi}}\n  steps:\n{steps}"
    )
}

const QUICK: &str = "    - name: hello\n      run: echo hello\n    - name: after\n      needs: [hello]\n      run: echo after\n";
const BROKEN: &str = "    - name: fail\n      run: echo about to fail; exit 3\n";
/// Runs until `release` exists, or until the test is gone (a failed test removes its folder).
fn waiting(release: &Path) -> String {
    format!(
        "    - name: work\n      run: |\n        echo started\n        while [ ! -e {r} ] && [ -d {d} ]; do sleep 0.1; done\n",
        r = release.display(),
        d = release.parent().map(Path::display).expect("a folder"),
    )
}

/// What one team has: its tokens and its objects.
struct Team {
    /// Its name, which its pipelines', schedules' and tokens' names start with.
    prefix: String,
    member: (String, String),
    viewer: (String, String),
    runs: Vec<String>,
}

impl Team {
    fn new(sb: &Sandbox, name: &str) -> Team {
        let member = token(sb, name, "member", &["--name", &format!("{name}-member")]);
        let viewer = token(sb, name, "viewer", &["--name", &format!("{name}-viewer")]);
        Team {
            prefix: name.to_owned(),
            member,
            viewer,
            runs: Vec::new(),
        }
    }

    fn submit(&mut self, server: &Server, name: &str, steps: &str) -> String {
        let source = pipeline(&format!("{}-{name}", self.prefix), steps);
        let a = server.call(
            "POST",
            "/api/v1/runs",
            Some(&self.member.1),
            Some(&json!({"source": source, "path": format!("{name}.yaml")})),
        );
        assert_eq!(a.status, 201, "submit {name}: {}", a.text());
        let id = a.json()["id"].as_str().expect("an id").to_owned();
        self.runs.push(id.clone());
        id
    }

    fn get(&self, server: &Server, path: &str) -> Value {
        let a = server.call("GET", path, Some(&self.member.1), None);
        assert_eq!(a.status, 200, "GET {path}: {}", a.text());
        a.json()
    }

    /// A succeeded, a failed and a running run; an applied pipeline and an hourly schedule of it.
    fn seed(&mut self, server: &Server, release: &Path) {
        let quick = self.submit(server, "quick", QUICK);
        let broken = self.submit(server, "broken", BROKEN);
        let waiting = self.submit(server, "waiting", &waiting(release));
        for (id, state) in [(&quick, "Succeeded"), (&broken, "Failed")] {
            wait_for(&format!("run {id} to be {state}"), || {
                self.get(server, &format!("/api/v1/runs/{id}"))["state"] == state
            });
        }
        wait_for("the waiting run's step to run", || {
            self.get(server, &format!("/api/v1/runs/{waiting}"))["steps"][0]["state"] == "Running"
        });
        let p = &self.prefix;
        let applied = format!(
            "{}---\napiVersion: sluice.dev/v1\nkind: Schedule\nmetadata: {{name: {p}-hourly}}\nspec:\n  pipeline: {p}-applied\n  cron: \"0 * * * *\"\n",
            pipeline(&format!("{p}-applied"), QUICK)
        );
        let a = server.call(
            "POST",
            "/api/v1/apply",
            Some(&self.member.1),
            Some(&json!({"files": [{"path": "applied.yaml", "text": applied}]})),
        );
        assert_eq!(a.status, 200, "apply: {}", a.text());
    }
}

/// RFC 3339 UTC of a unix time in seconds (civil date from days, Howard Hinnant's way).
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.500Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn set_clock(path: &Path, secs: u64) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, rfc3339(secs)).expect("clock");
    std::fs::rename(&tmp, path).expect("clock");
}

/// One schemathesis pass.
struct Pass<'a> {
    name: &'a str,
    /// The WFC user whose token every request carries.
    user: &'a str,
    /// Another team's token: it must not get what `user` reads.
    peer: Option<&'a str>,
    /// Only the operations with these tags (all without).
    tags: &'a [&'a str],
}

fn toml_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", quoted.join(", "))
}

/// Runs `st run` for `pass` (failing the test with schemathesis' report on any finding); the
/// HAR file of the exchanges it recorded.
fn fuzz(
    st: &Path,
    dir: &Path,
    server: &Server,
    pass: &Pass,
    users: &[(&str, &str)],
    dictionaries: &str,
) -> PathBuf {
    let auth = json!({
        "auth": users
            .iter()
            .map(|(name, token)| json!({
                "name": name,
                "fixedHeaders": [{"name": "Authorization", "value": format!("Bearer {token}")}],
            }))
            .collect::<Vec<_>>(),
    });
    let auth_file = dir.join(format!("{}.auth.json", pass.name));
    std::fs::write(&auth_file, auth.to_string()).expect("the WFC auth file");
    let mut peers = vec![pass.user.to_owned()];
    peers.extend(pass.peer.map(str::to_owned));
    let config = format!(
        "[auth.wfc]\npath = {:?}\nuser = {:?}\n{}\n{dictionaries}",
        auth_file.display().to_string(),
        pass.user,
        if pass.peer.is_some() {
            format!("peers = {}\n", toml_list(&peers))
        } else {
            String::new()
        },
    );
    let config_file = dir.join(format!("{}.toml", pass.name));
    std::fs::write(&config_file, config).expect("the schemathesis configuration");
    let har = dir.join(format!("{}.har", pass.name));
    let mut checks: Vec<&str> = CHECKS.to_vec();
    if pass.peer.is_some() {
        checks.push("object_level_authorization");
    }
    let url = server.url();
    let mut cmd = std::process::Command::new(st);
    cmd.current_dir(dir)
        .arg("--config-file")
        .arg(&config_file)
        .args(["--no-color", "run"])
        .arg(format!("{url}/api/v1/openapi.json"))
        .args(["--url", &url])
        .args(["--checks", &checks.join(",")])
        .args(["--mode", "all"])
        .args(["--max-examples", &examples().to_string()])
        .args(["--seed", &SEED.to_string(), "--generation-deterministic"])
        .args(["--workers", "1", "--request-timeout", "20"])
        .args(["--report", "har", "--report-har-path"])
        .arg(&har)
        // The recorded answers keep their Authorization header: it tells team A's from the
        // peer's probes.
        .args(["--output-sanitize", "false"]);
    for tag in pass.tags {
        cmd.args(["--include-tag", tag]);
    }
    let what = sluice_e2e::wait::describe(&cmd);
    let out = dir.join(format!("{}.out", pass.name));
    let file = std::fs::File::create(&out).expect("the output file");
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file.try_clone().expect("the output file"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let status = sluice_e2e::wait::status_within(&mut child, Duration::from_secs(900), &what);
    let report = std::fs::read_to_string(&out).unwrap_or_default();
    eprintln!(
        "schemathesis pass {} ({} s): {what}",
        pass.name,
        started.elapsed().as_secs()
    );
    assert!(
        status.success(),
        "schemathesis found something in pass {} ({what}):\n{report}",
        pass.name
    );
    assert!(
        report.contains("Tested:"),
        "pass {}: schemathesis tested nothing:\n{report}",
        pass.name
    );
    har
}

/// An exchange: what was asked (method, URL, status), the request's URL and body, and the
/// answer's headers and body.
struct Exchange {
    what: String,
    request: String,
    answer: String,
}

/// The recorded exchanges of a HAR file whose request carried `token`.
fn answers_to(har: &Path, token: &str) -> Vec<Exchange> {
    let text = std::fs::read_to_string(har).unwrap_or_else(|e| panic!("{}: {e}", har.display()));
    let har: Value = serde_json::from_str(&text).expect("the HAR file is JSON");
    let bearer = format!("Bearer {token}");
    let mut out = Vec::new();
    for e in har["log"]["entries"].as_array().expect("HAR entries") {
        let req = &e["request"];
        let sent = req["headers"].as_array().is_some_and(|h| {
            h.iter().any(|h| {
                h["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case("authorization"))
                    && h["value"] == bearer.as_str()
            })
        });
        if !sent {
            continue;
        }
        let res = &e["response"];
        let what = format!(
            "{} {} -> {}",
            req["method"].as_str().unwrap_or("?"),
            req["url"].as_str().unwrap_or("?"),
            res["status"]
        );
        out.push(Exchange {
            what,
            request: format!("{}\n{}", req["url"], req["postData"]["text"]),
            answer: format!("{}\n{}", res["headers"], res["content"]["text"]),
        });
    }
    out
}

/// Fails when an answer holds one of `needles` that its request did not (schemathesis learns
/// team B's ids from the peer's probes and asks for them: the refusal may quote what was
/// asked, as it does for an id never used).
fn assert_no_leak(exchanges: &[Exchange], needles: &[String], whose: &str) {
    for e in exchanges {
        for n in needles {
            assert!(
                !e.answer.contains(n.as_str()) || e.request.contains(n.as_str()),
                "{}: an answer to {whose} holds team B's {n:?}:\n{}",
                e.what,
                e.answer
            );
        }
    }
}

#[test]
fn schemathesis_finds_nothing_and_no_team_sees_anothers_objects() {
    let tools = sluice_e2e::schemathesis::tools();
    let sb = Sandbox::new("api-fuzz");
    let keep = std::env::var_os("SLUICE_FUZZ_KEEP").map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| sb.path().join("fuzz"));
    std::fs::create_dir_all(&dir).expect("the fuzz folder");

    let mut a = Team::new(&sb, A);
    let mut b = Team::new(&sb, B);
    let (_, admin) = token(&sb, "*", "admin", &["--name", "root"]);
    // A token of team A for the admin pass to revoke (the others must keep working).
    let (spare, _) = token(&sb, A, "member", &["--name", "spare"]);
    // The schedule loop reads its time from this file: now while the schedules are applied,
    // then the next full hour, so that each schedule fires once and no more.
    let clock = sb.path().join("clock");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    set_clock(&clock, now);
    let clock_env = clock.to_str().expect("a path").to_owned();
    // A rate no pass reaches: a 429 is documented, but would stop the pass short of the API.
    let server = Server::start_with(
        &sb,
        &["--rate", "100000"],
        &[("SLUICE_SCHEDULE_CLOCK_FILE", clock_env.as_str())],
    );
    server.wait_ready();

    // The document is valid OpenAPI 3 (schemathesis would refuse to start on some mistakes,
    // and read others its own way).
    let doc = server.call("GET", "/api/v1/openapi.json", None, None);
    assert_eq!(doc.status, 200, "{}", doc.text());
    assert!(
        doc.json()["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "an OpenAPI 3 document: {}",
        doc.text()
    );
    let doc_file = dir.join("openapi.json");
    std::fs::write(&doc_file, &doc.body).expect("the document");
    let checked =
        sluice_e2e::wait::output(std::process::Command::new(&tools.validator).arg(&doc_file));
    assert!(
        checked.status.success(),
        "openapi-spec-validator refuses /api/v1/openapi.json: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    let release = sb.path().join("release");
    a.seed(&server, &release);
    b.seed(&server, &release);
    set_clock(&clock, (now / 3600 + 1) * 3600);
    for team in [&mut a, &mut b] {
        let path = format!("/api/v1/schedules/{}-hourly", team.prefix);
        wait_for(&format!("{path} to fire"), || {
            team.get(&server, &path)["fires"][0]["run"].is_string()
        });
        let fired = team.get(&server, &path)["fires"][0]["run"]
            .as_str()
            .expect("the fire's run")
            .to_owned();
        wait_for(&format!("the scheduled run {fired}"), || {
            team.get(&server, &format!("/api/v1/runs/{fired}"))["state"] == "Succeeded"
        });
        team.runs.push(fired);
    }

    // What the passes may name: team A's objects, and never B's.
    let mut run_refs: Vec<String> = a.runs.clone();
    run_refs.extend([
        a.runs[0][..4].to_owned(),
        "@latest".to_owned(),
        format!("{A}-quick@latest"),
    ]);
    let dictionaries = format!(
        r#"[dictionaries.runs]
values = {runs}
[dictionaries.steps]
values = ["hello", "after", "fail", "work"]
[dictionaries.schedules]
values = ["{A}-hourly"]
[dictionaries.pipelines]
values = ["{A}-applied", "{A}-quick"]
[dictionaries.tokens]
values = ["{spare}"]

[parameters]
"path.run" = {{ dictionary = "runs", probability = 0.6 }}
"path.step" = {{ dictionary = "steps", probability = 0.6 }}
"path.name" = {{ dictionary = "schedules", probability = 0.6 }}
"path.id" = {{ dictionary = "tokens", probability = 0.5 }}

# A followed log of the running run would stream until the test ends.
[[operations]]
include-operation-id = "run_logs"
parameters = {{ "query.follow" = false }}

# Pruning would remove the applied pipeline and schedule that the other operations read.
[[operations]]
include-operation-id = "apply_documents"
parameters = {{ "body.prune" = false }}

[[operations]]
include-operation-id = "submit_applied"
parameters = {{ "body.name" = {{ dictionary = "pipelines", probability = 0.6 }} }}
"#,
        runs = toml_list(&run_refs),
    );
    let users = [
        ("viewer", a.viewer.1.as_str()),
        ("member", a.member.1.as_str()),
        ("admin", admin.as_str()),
        ("peer", b.member.1.as_str()),
    ];
    let started = Instant::now();
    let mut hars = Vec::new();
    for pass in [
        // Reads first, while every object is as seeded.
        Pass {
            name: "viewer",
            user: "viewer",
            peer: Some("peer"),
            tags: &[],
        },
        Pass {
            name: "member",
            user: "member",
            peer: Some("peer"),
            tags: &[],
        },
        Pass {
            name: "admin",
            user: "admin",
            peer: None,
            tags: &["admin", "tokens"],
        },
    ] {
        let har = fuzz(&tools.st, &dir, &server, &pass, &users, &dictionaries);
        hars.push((pass.name, har));
    }
    eprintln!(
        "schemathesis: three passes in {} s",
        started.elapsed().as_secs()
    );

    // Team B's objects, as team B sees them now.
    let b_runs = b.get(&server, "/api/v1/runs?limit=0");
    let b_ids: Vec<String> = b_runs
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r["id"].as_str().map(str::to_owned))
        .collect();
    assert!(b_ids.len() >= 4, "team B's runs: {b_runs}");
    let mut needles = b_ids.clone();
    needles.extend([b.member.0.clone(), b.viewer.0.clone(), B.to_owned()]);

    // Every answer the team A passes recorded: none holds anything of team B's.
    for (name, har) in &hars[..2] {
        let token = if *name == "viewer" {
            &a.viewer.1
        } else {
            &a.member.1
        };
        let answers = answers_to(har, token);
        assert!(
            answers.len() >= 100,
            "pass {name} recorded {} answers to team A's token",
            answers.len()
        );
        assert!(
            answers
                .iter()
                .any(|e| e.what.ends_with("-> 200") && e.answer.contains(&a.runs[0])),
            "pass {name} recorded team A's runs in its answers"
        );
        assert_no_leak(&answers, &needles, &format!("team A's {name}"));
    }

    // And asked directly: every list team A may read, filtered by team B's name or not, and
    // each of team B's runs.
    for token in [&a.member.1, &a.viewer.1] {
        for path in [
            "/api/v1/runs?limit=0".to_owned(),
            "/api/v1/runs?limit=0&format=text".to_owned(),
            format!("/api/v1/runs?limit=0&team={B}"),
            "/api/v1/schedules".to_owned(),
            "/api/v1/schedules?format=text".to_owned(),
            "/api/v1/usage?by=team,pool,pipeline".to_owned(),
            "/api/v1/usage?by=team,pool,pipeline&format=text".to_owned(),
            format!("/api/v1/usage?team={B}"),
            "/api/v1/whoami".to_owned(),
        ] {
            let got = server.call("GET", &path, Some(token), None);
            let exchange = Exchange {
                what: format!("GET {path} -> {}", got.status),
                request: path.clone(),
                answer: format!("{:?}\n{}", got.headers, got.text()),
            };
            assert_no_leak(&[exchange], &needles, "team A");
        }
        let never = "0123456789ab";
        let unknown = server.call("GET", &format!("/api/v1/runs/{never}"), Some(token), None);
        assert_eq!(unknown.status, 404, "{}", unknown.text());
        for id in &b_ids {
            for suffix in [
                "",
                "/logs",
                "/cancel",
                "/retry",
                "/resume",
                "/steps/work/preempt",
            ] {
                let method = if suffix.is_empty() || suffix == "/logs" {
                    "GET"
                } else {
                    "POST"
                };
                let got = server.call(
                    method,
                    &format!("/api/v1/runs/{id}{suffix}"),
                    Some(token),
                    None,
                );
                let never_used = server.call(
                    method,
                    &format!("/api/v1/runs/{never}{suffix}"),
                    Some(token),
                    None,
                );
                assert_eq!(
                    (got.status, got.text().replace(id.as_str(), never)),
                    (never_used.status, never_used.text()),
                    "{method} team B's run {id}{suffix} as team A: as an id never used"
                );
            }
        }
    }
    // Team B's run still as it was: team A's passes changed nothing of it.
    let waiting = b.get(&server, &format!("/api/v1/runs/{}", b.runs[2]));
    assert_eq!(waiting["state"], "Running", "{waiting}");
    assert_eq!(
        waiting["steps"][0]["attempts"].as_array().map(Vec::len),
        Some(1)
    );
    std::fs::write(&release, "").expect("release");
}
