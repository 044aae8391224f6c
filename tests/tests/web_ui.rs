//! The web UI in a real headless browser (Debian's chromium through chromedriver): signing
//! in, the runs list, a run's graph with each step's state, a failed step's log, a sweep's
//! charts, teams kept apart (404), a viewer without buttons, and forged changes refused.
//! The screenshots in docs/screenshots are taken here.

use std::time::Duration;

use serde_json::Value;
use sluice_e2e::browser::Browser;
use sluice_e2e::server::{Server, token};
use sluice_e2e::{Sandbox, root};

const FAILS: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: validate}
spec:
  steps:
    - name: load
      run: echo loaded 0 rows
    - name: check
      needs: [load]
      run: echo "the input has 0 rows, expected at least 1" >&2; exit 3
"#;

const SLOW: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: slow}
spec:
  steps:
    - name: wait
      run: sleep 120
"#;

/// `sluice ARGS --detach` against the server from `dir`: the run's id.
fn submit_in(server: &Server, dir: &std::path::Path, token: &str, args: &[&str]) -> String {
    let mut cmd = sluice_e2e::sluice();
    cmd.args(args)
        .arg("--detach")
        .current_dir(dir)
        .env("SLUICE_SERVER", server.url())
        .env("SLUICE_TOKEN", token)
        .env("SLUICE_HOME", dir.join("client-home"));
    let out = sluice_e2e::ran(sluice_e2e::wait::output(&mut cmd));
    assert_eq!(out.code, Some(0), "{args:?}: {}", out.stderr);
    out.stdout.trim().to_owned()
}

fn status(server: &Server, token: &str, id: &str) -> Value {
    let a = server.call("GET", &format!("/api/v1/runs/{id}"), Some(token), None);
    assert_eq!(a.status, 200, "{}", a.text());
    a.json()
}

fn wait_state(server: &Server, token: &str, id: &str, want: &[&str]) -> Value {
    let mut last = Value::Null;
    sluice_e2e::wait_for(&format!("run {id} to be one of {want:?}"), || {
        last = status(server, token, id);
        want.iter().any(|w| last["state"] == *w)
    });
    last
}

/// A GET from the page (with its cookies): the answer's status.
async fn status_from_page(b: &Browser, path: &str) -> i64 {
    b.client
        .execute_async(
            "const [path, done] = arguments; fetch(path).then(r => done(r.status)).catch(() => done(-1));",
            vec![path.into()],
        )
        .await
        .expect("the page's request")
        .as_i64()
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_signs_in_and_reads_runs_graphs_logs_and_sweeps() {
    let sb = Sandbox::new("web-ui-member");
    let (_, member) = token(&sb, "vision", "member", &["--name", "alice"]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    let examples = root().join("examples");
    let diamond = submit_in(
        &server,
        &examples.join("pipelines"),
        &member,
        &["run", "diamond.yaml"],
    );
    sb.write("fails.yaml", FAILS);
    let failed = submit_in(&server, sb.path(), &member, &["run", "fails.yaml"]);
    let sweep = submit_in(
        &server,
        &examples.join("sweeps"),
        &member,
        &["sweep", "early-stop.yaml"],
    );
    let diamond_status = wait_state(&server, &member, &diamond, &["Succeeded"]);
    wait_state(&server, &member, &failed, &["Failed"]);
    let sweep_status = wait_state(&server, &member, &sweep, &["Succeeded", "Failed"]);

    let b = Browser::start().await;
    // Signed out, a page sends to the sign-in form, which comes back to it.
    b.goto(&format!("{base}/runs")).await;
    assert!(b.url().await.contains("/login"), "{}", b.url().await);
    b.sign_in(&base, &member).await;
    assert!(b.url().await.ends_with("/runs"), "{}", b.url().await);
    // The token never shows in a URL.
    assert!(!b.url().await.contains(&member));
    // The stylesheet applies under the page's Content-Security-Policy (a file of this site).
    let header = b
        .client
        .execute(
            "return getComputedStyle(document.querySelector('header.top')).backgroundColor;",
            vec![],
        )
        .await
        .expect("the header's colour");
    assert_eq!(header, "rgb(24, 32, 44)", "the stylesheet applies");
    let listed = b.attrs("#runs tbody tr", "data-run").await;
    for id in [&diamond, &failed, &sweep] {
        assert!(listed.contains(id), "{id} in the runs list {listed:?}");
    }
    let text = b.text().await;
    assert!(text.contains("alice"), "who submitted: {text}");
    b.screenshot("runs").await;
    // A filter by state.
    b.goto(&format!("{base}/runs?state=Failed")).await;
    assert_eq!(
        b.attrs("#runs tbody tr", "data-run").await,
        vec![failed.clone()]
    );

    // The diamond's graph: every step, in the state the API gives.
    b.goto(&format!("{base}/runs/{diamond}")).await;
    let steps = b.attrs("svg.dag g.node", "data-step").await;
    let states = b.attrs("svg.dag g.node", "data-state").await;
    let api = sluice_e2e::step_states(&diamond_status);
    assert_eq!(steps.len(), api.len(), "{steps:?} vs {api:?}");
    for (step, state) in steps.iter().zip(&states) {
        assert_eq!(api.get(step), Some(state), "step {step}");
    }
    assert_eq!(b.count("svg.dag path.edge").await, 4);
    b.screenshot("run").await;

    // The failed step: its box says so, and its log is readable.
    b.goto(&format!("{base}/runs/{failed}")).await;
    let failed_nodes: Vec<String> = b.attrs("svg.dag g.node.failed", "data-step").await;
    assert_eq!(failed_nodes, vec!["check".to_owned()]);
    b.goto(&format!("{base}/runs/{failed}/steps/check")).await;
    let log = b
        .client
        .find(fantoccini::Locator::Css("pre#log"))
        .await
        .expect("the log")
        .text()
        .await
        .expect("its text");
    assert!(
        log.contains("the input has 0 rows, expected at least 1"),
        "{log}"
    );
    b.screenshot("step-log").await;

    // The sweep: a point per trial with a value, a line per trial in parallel coordinates,
    // early-stopped trials marked.
    b.goto(&format!("{base}/runs/{sweep}")).await;
    let trials = sweep_status["trials"].as_array().expect("trials");
    let valued = trials.iter().filter(|t| t["value"].is_number()).count();
    assert!(valued > 0, "{sweep_status}");
    assert_eq!(b.count("svg.history circle").await, valued);
    assert_eq!(b.count("svg.parallel path.pc").await, trials.len());
    assert_eq!(b.count("#trials tbody tr").await, trials.len());
    let stopped = trials.iter().filter(|t| t["state"] == "Stopped").count();
    assert_eq!(
        b.count("#trials tbody tr[data-state=Stopped]").await,
        stopped
    );
    let stopped_with_value = trials
        .iter()
        .filter(|t| t["state"] == "Stopped" && t["value"].is_number())
        .count();
    assert_eq!(
        b.count("svg.history circle.stopped").await,
        stopped_with_value
    );
    b.client
        .execute("document.getElementById('sweep').scrollIntoView();", vec![])
        .await
        .expect("scrolled to the charts");
    b.screenshot("sweep").await;

    b.goto(&format!("{base}/usage")).await;
    assert!(b.text().await.contains("team vision"));
    assert!(
        b.count("#usage tbody tr").await >= 4,
        "a row per pipeline, and the total"
    );
    assert!(
        b.count("#per-day-group tbody tr").await >= 3,
        "today's row per pipeline"
    );
    b.screenshot("usage").await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_teams_token_sees_none_of_its_pages() {
    let sb = Sandbox::new("web-ui-teams");
    let (_, a) = token(&sb, "vision", "member", &[]);
    let (_, b_token) = token(&sb, "nlp", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    sb.write("fails.yaml", FAILS);
    let id = submit_in(&server, sb.path(), &a, &["run", "fails.yaml"]);
    wait_state(&server, &a, &id, &["Failed"]);

    let b = Browser::start().await;
    b.sign_in(&base, &b_token).await;
    assert!(b.text().await.contains("team nlp"));
    assert!(b.attrs("#runs tbody tr", "data-run").await.is_empty());
    for path in [
        format!("/runs/{id}"),
        format!("/runs/{}", &id[..6]),
        format!("/runs/{id}/steps/check"),
        format!("/runs/{id}/steps/check/log.txt"),
        format!("/runs/{id}/live"),
    ] {
        assert_eq!(status_from_page(&b, &path).await, 404, "{path}");
    }
    b.goto(&format!("{base}/runs/{id}")).await;
    let text = b.text().await;
    assert!(
        text.contains("404") && text.contains("unknown run"),
        "{text}"
    );
    assert!(!text.contains("the input has 0 rows"));
    // A change to it is 404 too, never done.
    b.goto(&format!("{base}/runs")).await;
    let csrf = b.attrs("input[name=csrf]", "value").await;
    let status = b
        .post_from_page(&format!("/runs/{id}/retry"), &format!("csrf={}", csrf[0]))
        .await;
    assert_eq!(status, 404);
    assert_eq!(status_of(&server, &a, &id), "Failed");
    b.close().await;
}

/// Login CSRF: a page of another site posting the sign-in form with the attacker's token, so
/// that its visitor works in the attacker's team. Refused (403) without a cookie set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_cannot_sign_its_visitor_in() {
    let sb = Sandbox::new("web-ui-login-csrf");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let (_, attacker) = token(&sb, "nlp", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    let forge = format!(
        r#"<!doctype html><form method="post" action="{base}/login"><input name="token" value="{attacker}"><input name="next" value="/runs"></form><script>document.forms[0].submit()</script>"#
    );
    let site = sluice_e2e::site::Site::start(&[("/forge", &forge)]);

    let b = Browser::start().await;
    b.goto(&site.url("localhost", "/forge")).await;
    b.wait_for_text("the refusal", false, |t| t.contains("another site"))
        .await;
    b.goto(&format!("{base}/runs")).await;
    assert!(
        b.url().await.contains("/login"),
        "not signed in: {}",
        b.url().await
    );
    assert!(!b.text().await.contains("team nlp"), "{}", b.text().await);

    // Signed in already: still in the visitor's own team afterwards.
    b.sign_in(&base, &member).await;
    b.goto(&site.url("localhost", "/forge")).await;
    b.wait_for_text("the refusal", false, |t| t.contains("another site"))
        .await;
    b.goto(&format!("{base}/runs")).await;
    assert!(b.text().await.contains("team vision"), "{}", b.text().await);
    b.close().await;
}

/// What the browser shows in the `index`th frame of the page: its address and its text.
async fn in_frame(b: &Browser, index: u16) -> (String, String) {
    b.client.enter_frame(index).await.expect("into the frame");
    let shown = b
        .client
        .execute(
            "return [String(location.href), document.body ? document.body.innerText : ''];",
            vec![],
        )
        .await
        .expect("the frame's address and text");
    b.client.enter_parent_frame().await.expect("back out");
    let field = |i: usize| shown[i].as_str().unwrap_or_default().to_owned();
    (field(0), field(1))
}

/// Clickjacking: a page of another site framing sluice's pages (a run, the sign-in form)
/// gets nothing rendered: `frame-ancestors 'none'` and `X-Frame-Options: DENY`. (The
/// framed run's request carries no cookie, SameSite=Strict, so without them it would show
/// the sign-in form.) A frame of a third origin on the same page is rendered, which shows
/// that the test sees what frames show. The framing page is served by `site`, with no
/// policy of its own: a page of sluice's (at `localhost`) would be stopped from framing
/// anything by its own `default-src 'none'`, which would prove nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_site_cannot_frame_the_pages() {
    let sb = Sandbox::new("web-ui-frames");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    sb.write("fails.yaml", FAILS);
    let id = submit_in(&server, sb.path(), &member, &["run", "fails.yaml"]);
    wait_state(&server, &member, &id, &["Failed"]);

    let site =
        sluice_e2e::site::Site::start(&[("/inner", "<p id=inner>a frame of a third origin</p>")]);
    // The page is at localhost, the control frame at 127.0.0.1 of the same port: another
    // origin again, whose page has no policy.
    site.page(
        "/frame",
        &format!(
            r#"<!doctype html><iframe src="{}"></iframe><iframe src="{base}/runs/{id}"></iframe><iframe src="{base}/login"></iframe>"#,
            site.url("127.0.0.1", "/inner")
        ),
    );
    let b = Browser::start().await;
    b.sign_in(&base, &member).await;
    b.goto(&site.url("localhost", "/frame")).await;
    let deadline = std::time::Instant::now() + sluice_e2e::wait::deadline();
    while !in_frame(&b, 0)
        .await
        .1
        .contains("a frame of a third origin")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the control frame never showed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for (index, what) in [(1, "the run"), (2, "the sign-in form")] {
        // Until the frame has loaded what it was given (it starts at about:blank).
        let (url, text) = loop {
            let (url, text) = in_frame(&b, index).await;
            if url != "about:blank" || std::time::Instant::now() > deadline {
                break (url, text);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert!(
            !text.contains("sluice") && !text.contains(&id) && !text.contains("Token"),
            "{what} was rendered in another site's frame ({url}): {text}"
        );
        // Chromium's page for a frame it refused to render.
        assert!(
            url.starts_with("chrome-error://"),
            "{what}: the frame is at {url}: {text}"
        );
    }
    b.close().await;
}

/// How many attempts step `step` of run `id` has had.
fn attempts_of(server: &Server, token: &str, id: &str, step: &str) -> usize {
    status(server, token, id)["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["name"] == step))
        .and_then(|s| s["attempts"].as_array())
        .map_or(0, Vec::len)
}

/// Clicks the button `css` and answers the confirmation it asks for (accepted or
/// dismissed): the question. Fails when none is asked.
async fn click_and_answer(b: &Browser, css: &str, accept: bool) -> String {
    b.client
        .find(fantoccini::Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .click()
        .await
        .expect("a click");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let asked = loop {
        match b.client.get_alert_text().await {
            Ok(t) => break t,
            Err(e) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "{css} asked for no confirmation: {e} (at {})",
                    b.url().await
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    if accept {
        b.client.accept_alert().await.expect("accepted");
    } else {
        b.client.dismiss_alert().await.expect("dismissed");
    }
    asked
}

/// Retry, Resume, Cancel and Preempt ask first, naming the run (the external script's
/// `confirm`, from the form's `data-confirm`): dismissed, nothing changes; accepted, the
/// change is made. Preempt's buttons are in the part of the page a running run refreshes
/// every 2 s: they still ask once it has been replaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_ask_first_and_a_dismissed_one_changes_nothing() {
    let sb = Sandbox::new("web-ui-confirm");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    sb.write("fails.yaml", FAILS);
    sb.write("slow.yaml", SLOW);
    let failed = submit_in(&server, sb.path(), &member, &["run", "fails.yaml"]);
    let running = submit_in(&server, sb.path(), &member, &["run", "slow.yaml"]);
    wait_state(&server, &member, &failed, &["Failed"]);
    sluice_e2e::wait_for("the slow step to run", || {
        sluice_e2e::step_states(&status(&server, &member, &running)).get("wait")
            == Some(&"Running".to_owned())
    });
    let b = Browser::start().await;
    b.sign_in(&base, &member).await;

    // Retry, dismissed: the run stays as it was, the page too.
    let page = format!("{base}/runs/{failed}");
    b.goto(&page).await;
    let retry = format!("form[action='/runs/{failed}/retry'] button");
    let asked = click_and_answer(&b, &retry, false).await;
    assert!(
        asked.starts_with(&format!("Retry run {failed}?")),
        "{asked}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(b.url().await, page);
    assert_eq!(status_of(&server, &member, &failed), "Failed");
    assert_eq!(attempts_of(&server, &member, &failed, "check"), 1);
    // Accepted: retried.
    click_and_answer(&b, &retry, true).await;
    b.wait_for_text("the retry", false, |t| t.contains("Reopened: check."))
        .await;
    sluice_e2e::wait_for("check's second attempt", || {
        attempts_of(&server, &member, &failed, "check") == 2
    });

    // Preempt, once the refreshing part has been replaced: asks, and dismissed, nothing.
    b.goto(&format!("{base}/runs/{running}")).await;
    b.client
        .execute(
            "document.getElementById('steps').dataset.first = 'yes';",
            vec![],
        )
        .await
        .expect("the first steps table marked");
    let deadline = std::time::Instant::now() + sluice_e2e::wait::deadline();
    while b.count("#steps[data-first]").await > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the steps never refreshed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = click_and_answer(
        &b,
        &format!("form[action='/runs/{running}/steps/wait/preempt'] button"),
        false,
    )
    .await;
    assert!(
        asked.starts_with(&format!("Preempt step wait of run {running}?")),
        "{asked}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!b.text().await.contains("preempted:"), "{}", b.text().await);
    assert_eq!(attempts_of(&server, &member, &running, "wait"), 1);
    assert_eq!(
        sluice_e2e::step_states(&status(&server, &member, &running)).get("wait"),
        Some(&"Running".to_owned())
    );

    // Cancel, dismissed then accepted.
    let cancel = format!("form[action='/runs/{running}/cancel'] button");
    let asked = click_and_answer(&b, &cancel, false).await;
    assert!(
        asked.starts_with(&format!("Cancel run {running}?")),
        "{asked}"
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(status_of(&server, &member, &running), "Running");
    click_and_answer(&b, &cancel, true).await;
    wait_state(&server, &member, &running, &["Cancelled"]);
    b.close().await;
}

fn status_of(server: &Server, token: &str, id: &str) -> String {
    status(server, token, id)["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_has_no_buttons_and_forged_changes_are_refused() {
    let sb = Sandbox::new("web-ui-roles");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let (_, viewer) = token(&sb, "vision", "viewer", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    sb.write("slow.yaml", SLOW);
    let id = submit_in(&server, sb.path(), &member, &["run", "slow.yaml"]);
    sluice_e2e::wait_for("the step to run", || {
        sluice_e2e::step_states(&status(&server, &member, &id)).get("wait")
            == Some(&"Running".to_owned())
    });
    let cancel = format!("/runs/{id}/cancel");

    // A viewer: no button, and the change refused even with the session's own CSRF value.
    let b = Browser::start().await;
    b.sign_in(&base, &viewer).await;
    b.goto(&format!("{base}/runs/{id}")).await;
    assert!(b.text().await.contains("Running"));
    assert_eq!(b.count(&format!("form[action='{cancel}']")).await, 0);
    assert_eq!(b.count("form[action$='/preempt']").await, 0);
    let csrf = b.attrs("input[name=csrf]", "value").await;
    assert_eq!(
        b.post_from_page(&cancel, &format!("csrf={}", csrf[0]))
            .await,
        403
    );
    assert_eq!(status_of(&server, &member, &id), "Running");
    b.close().await;

    // A member: the buttons, but a request without the page's CSRF value is refused.
    let b = Browser::start().await;
    b.sign_in(&base, &member).await;
    b.goto(&format!("{base}/runs/{id}")).await;
    assert_eq!(b.count(&format!("form[action='{cancel}']")).await, 1);
    assert_eq!(b.count("form[action$='/preempt']").await, 1);
    assert_eq!(b.post_from_page(&cancel, "").await, 403);
    assert_eq!(
        b.post_from_page(&cancel, "csrf=0123456789abcdef").await,
        403
    );
    assert_eq!(status_of(&server, &member, &id), "Running");

    // A page of another site posting the form, even with the session's CSRF value: refused
    // (403) by the Origin check before anything is done (and the cookie, SameSite=Strict,
    // is not even sent).
    let csrf = b.attrs("input[name=csrf]", "value").await;
    let forge = format!(
        r#"<!doctype html><form method="post" action="{base}{cancel}"><input name="csrf" value="{}"></form><script>document.forms[0].submit()</script>"#,
        csrf[0]
    );
    let site = sluice_e2e::site::Site::start(&[("/forge", &forge)]);
    b.goto(&site.url("localhost", "/forge")).await;
    b.wait_for_text("the refusal", false, |t| t.contains("another site"))
        .await;
    assert!(b.text().await.contains("403"), "{}", b.text().await);
    assert_eq!(status_of(&server, &member, &id), "Running");

    // The real button cancels (its confirmation accepted).
    b.goto(&format!("{base}/runs/{id}")).await;
    b.client
        .execute("window.confirm = () => true;", vec![])
        .await
        .expect("confirm accepted");
    b.client
        .find(fantoccini::Locator::Css(&format!(
            "form[action='{cancel}'] button"
        )))
        .await
        .expect("the cancel button")
        .click()
        .await
        .expect("a click");
    b.wait_for_text("the cancellation", false, |t| {
        t.contains("Cancellation requested")
    })
    .await;
    wait_state(&server, &member, &id, &["Cancelled"]);
    b.close().await;
}

const CLUSTER: &str = r#"apiVersion: sluice.dev/v1
kind: Cluster
metadata: {name: lab}
spec:
  pools:
    - name: a100
      nodes: 1
      resources: {gpu: 2, cpu: 32, memory: 256Gi}
  teams:
    - {name: vision, quota: {gpu: 2}}
    - {name: nlp, quota: {gpu: 2}}
  priorities:
    - {name: high, value: 100}
    - {name: low, value: 0, default: true}
"#;

/// Four steps that each take the whole node: the high one written first runs, and the other
/// three wait in the scheduler's order: the other high one, then the low ones as written.
const QUEUED: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: train}
spec:
  steps:
    - {name: s1, run: sleep 120, resources: {gpu: 2}}
    - {name: s2, run: sleep 120, resources: {gpu: 2}, priority: high}
    - {name: s3, run: sleep 120, resources: {gpu: 2}}
    - {name: s4, run: sleep 120, resources: {gpu: 2}, priority: high}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_shows_what_runs_what_waits_and_why() {
    let sb = Sandbox::new("web-ui-queue");
    let (_, member) = token(&sb, "vision", "member", &[]);
    sb.write("cluster.yaml", CLUSTER);
    let cluster = sb.path().join("cluster.yaml");
    let server = Server::start(&sb, &["--cluster", cluster.to_str().expect("a path")]);
    let base = server.url();
    sb.write("train.yaml", QUEUED);
    let id = submit_in(&server, sb.path(), &member, &["run", "train.yaml"]);
    // s2 holds the node's GPUs; the others wait, each saying why.
    let mut reasons = std::collections::BTreeMap::new();
    sluice_e2e::wait_for("s2 to run and the others to wait with a reason", || {
        let s = status(&server, &member, &id);
        let steps = s["steps"].as_array().cloned().unwrap_or_default();
        reasons = steps
            .iter()
            .filter(|t| t["state"] == "Queued" && t["reason"].is_string())
            .map(|t| {
                (
                    t["name"].as_str().unwrap_or_default().to_owned(),
                    t["reason"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        sluice_e2e::step_states(&s).get("s2") == Some(&"Running".to_owned()) && reasons.len() == 3
    });

    let b = Browser::start().await;
    b.sign_in(&base, &member).await;
    b.goto(&format!("{base}/queue")).await;
    assert_eq!(b.attrs("#running tbody tr", "data-step").await, ["s2"]);
    assert_eq!(
        b.attrs("#waiting tbody tr", "data-step").await,
        ["s4", "s1", "s3"],
        "high before low, then as written"
    );
    let mut shown = Vec::new();
    for row in b
        .client
        .find_all(fantoccini::Locator::Css("#waiting tbody tr"))
        .await
        .expect("the rows")
    {
        let step = row
            .attr("data-step")
            .await
            .expect("a step")
            .unwrap_or_default();
        let reason = row
            .find(fantoccini::Locator::Css("td.reason"))
            .await
            .expect("a reason")
            .text()
            .await
            .expect("its text");
        shown.push((step, reason));
    }
    assert_eq!(shown.len(), 3);
    for (step, reason) in &shown {
        assert_eq!(
            Some(reason),
            reasons.get(step),
            "the reason `status` gives {step}"
        );
    }
    let vision = b
        .client
        .find(fantoccini::Locator::Css("#quotas tr[data-team=vision]"))
        .await
        .expect("vision's quota")
        .text()
        .await
        .expect("its text");
    assert!(vision.starts_with("vision 2 2 a100: 2"), "{vision}");
    b.screenshot("queue").await;
    b.close().await;
    let out = server.cli(&sb, Some(&member), &["cancel", &id]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

const LIVE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: live}
spec:
  steps:
    - name: talk
      run: for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.6; done
    - name: after
      needs: [talk]
      run: sleep 4; echo done
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_runs_log_and_graph_update_without_a_reload() {
    let sb = Sandbox::new("web-ui-live");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    sb.write("live.yaml", LIVE);
    let id = submit_in(&server, sb.path(), &member, &["run", "live.yaml"]);
    sluice_e2e::wait_for("talk to run", || {
        sluice_e2e::step_states(&status(&server, &member, &id)).get("talk")
            == Some(&"Running".to_owned())
    });
    let b = Browser::start().await;
    b.sign_in(&base, &member).await;

    // The log grows on the page as the step writes it.
    b.goto(&format!("{base}/runs/{id}/steps/talk")).await;
    assert_eq!(b.count("pre[data-live-log]").await, 1, "{}", b.text().await);
    // The step writes for 4.8 s after it started: the last line comes after the page.
    assert!(!b.text().await.contains("line 8"), "{}", b.text().await);
    b.wait_for_text("the step's last line", false, |t| t.contains("line 8"))
        .await;
    let log = b.text().await;
    // Each line once: what was on the page is not appended again.
    for i in 1..=8 {
        assert_eq!(log.matches(&format!("line {i}")).count(), 1, "{log}");
    }

    // The graph follows the run to its end.
    b.goto(&format!("{base}/runs/{id}")).await;
    assert_eq!(b.count("[data-live]").await, 1);
    assert_ne!(
        b.attrs("svg.dag g.node", "data-state").await,
        ["Succeeded", "Succeeded"],
        "`after` runs for 4 s"
    );
    let deadline = std::time::Instant::now() + sluice_e2e::wait::deadline();
    loop {
        let states = b.attrs("svg.dag g.node", "data-state").await;
        if states == ["Succeeded", "Succeeded"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the graph stayed at {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(b.text().await.contains("Succeeded"));
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedules_show_their_next_fire_in_their_time_zone() {
    let sb = Sandbox::new("web-ui-schedules");
    let (_, member) = token(&sb, "vision", "member", &[]);
    let server = Server::start(&sb, &[]);
    let base = server.url();
    let examples = root().join("examples").join("schedules");
    let out = server.cli(
        &sb,
        Some(&member),
        &["apply", "-f", examples.to_str().expect("a path")],
    );
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let b = Browser::start().await;
    b.sign_in(&base, &member).await;
    b.goto(&format!("{base}/schedules")).await;
    assert_eq!(
        b.attrs("#schedules tbody tr", "data-schedule").await,
        ["nightly-retrain"]
    );
    let row = b
        .client
        .find(fantoccini::Locator::Css("#schedules tbody tr"))
        .await
        .expect("the row")
        .text()
        .await
        .expect("its text");
    // 02:00 in Berlin, whichever of CET and CEST the next night is in.
    assert!(
        row.contains(" 02:00 CET") || row.contains(" 02:00 CEST"),
        "{row}"
    );
    assert!(
        row.contains("Europe/Berlin") && row.contains("0 2 * * *"),
        "{row}"
    );
    b.screenshot("schedules").await;
    b.close().await;
}
