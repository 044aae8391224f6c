//! The service over a real SQLite store in a throwaway home: who may do what, and each kind
//! of error a front end maps.

use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::run::state::{run as rs, step as st};
use crate::store::{Change, Store};

const PIPELINE: &str = "\
apiVersion: sluice.dev/v1
kind: Pipeline
metadata:
  name: pair
spec:
  steps:
    - name: prepare
      run: 'true'
    - name: train
      needs: [prepare]
      run: 'true'
";

struct Home {
    path: std::path::PathBuf,
    service: Service,
    clock: ManualClock,
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

async fn home(tag: &str) -> Home {
    let path = std::env::temp_dir().join(format!("sluice-service-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let store = Store::open(&path).await.expect("open the store");
    let clock = ManualClock::new(crate::time::parse("2026-12-02T19:00:00.000Z").expect("valid"));
    let service = Service::new(store, Arc::new(clock.clone()));
    Home {
        path,
        service,
        clock,
    }
}

fn request(text: &str) -> Request {
    Request {
        shown: "pair.yaml".into(),
        text: text.into(),
        workdir: std::env::temp_dir(),
        ..Request::default()
    }
}

fn with_team(team: &str) -> String {
    PIPELINE.replace("  name: pair\n", &format!("  name: pair\n  team: {team}\n"))
}

/// Submits `text` as `who`; the warnings are dropped.
async fn submit(h: &Home, who: &Principal, text: &str) -> Result<Submitted, Error> {
    let checked = submit::check(who, request(text), &mut |_| {})?;
    h.service.submit(who, checked, &mut |_| {}).await
}

/// Ends run `id` as its engine would: every step and the run in `state`.
async fn end(h: &Home, id: &str, state: &str) {
    let store = h.service.store();
    let mut steps = store.steps(id).await.expect("steps");
    for s in &mut steps {
        s.state = state.parse().expect("a step state");
    }
    store
        .commit(
            id,
            Change {
                steps: steps.iter().collect(),
                run_end: Some((state.parse().expect("a run state"), None)),
                ..Change::default()
            },
        )
        .await
        .expect("commit");
}

fn member(team: &str) -> Principal {
    Principal::new(team, Role::Member)
}

#[tokio::test]
async fn a_submitted_run_is_listed_and_shown_with_the_clocks_time() {
    let h = home("submit").await;
    let local = Principal::local();
    let run = submit(&h, &local, &with_team("vision"))
        .await
        .expect("submit");
    assert_eq!(run.name, "pair");

    h.clock.advance(Duration::from_secs(90));
    let v = h.service.status(&local, &run.id).await.expect("status");
    assert_eq!(
        (v.team.as_str(), v.state.as_str()),
        ("vision", rs::RUNNING.as_str())
    );
    let steps: Vec<&str> = v
        .steps
        .as_ref()
        .expect("steps")
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(steps, ["prepare", "train"]);
    assert_eq!(crate::time::format(v.taken_at), "2026-12-02T19:01:30.000Z");

    let listed = h
        .service
        .list(&local, &Filter::default())
        .await
        .expect("list");
    assert_eq!(listed.runs.len(), 1);
    assert!(listed.any);
}

#[tokio::test]
async fn an_unknown_run_is_not_found() {
    let h = home("unknown").await;
    let local = Principal::local();
    for e in [
        h.service.status(&local, "f00d").await.expect_err("no run"),
        h.service.cancel(&local, "f00d").await.expect_err("no run"),
        h.service
            .preempt(&local, "f00d", "train")
            .await
            .expect_err("no run"),
    ] {
        assert!(matches!(e, Error::NotFound(_)), "{e:?}");
        assert_eq!(e.status_code(), 404);
    }
}

#[tokio::test]
async fn a_pipeline_with_errors_is_invalid_with_every_diagnostic() {
    let h = home("invalid").await;
    let bad = PIPELINE
        .replace("needs: [prepare]", "needs: [prepar]")
        .replace("      run: 'true'\n", "      rnu: 'true'\n");
    let e = submit(&h, &Principal::local(), &bad)
        .await
        .expect_err("invalid");
    let Error::Invalid { diagnostics, .. } = &e else {
        panic!("expected Invalid, got {e:?}");
    };
    assert!(diagnostics.len() >= 2, "{diagnostics:?}");
    assert!(
        diagnostics
            .iter()
            .all(|d| d.path == "pair.yaml" && d.pos.is_some())
    );
    assert!(
        diagnostics.iter().any(|d| d.message.contains("prepar")),
        "{diagnostics:?}"
    );
    assert_eq!(e.status_code(), 400);
    // Nothing was recorded.
    let listed = h
        .service
        .list(&Principal::local(), &Filter::default())
        .await
        .expect("list");
    assert!(!listed.any);
}

#[tokio::test]
async fn a_bad_parameter_is_invalid_before_anything_is_recorded() {
    let h = home("param").await;
    let e = submit_with_params(&h, &["nope=1"])
        .await
        .expect_err("invalid");
    assert!(
        matches!(&e, Error::Invalid { diagnostics, .. } if !diagnostics.is_empty()),
        "{e:?}"
    );
}

async fn submit_with_params(h: &Home, params: &[&str]) -> Result<Submitted, Error> {
    let who = Principal::local();
    let mut r = request(PIPELINE);
    r.params = params.iter().map(|p| (*p).to_owned()).collect();
    let checked = submit::check(&who, r, &mut |_| {})?;
    h.service.submit(&who, checked, &mut |_| {}).await
}

#[tokio::test]
async fn cancelling_an_ended_run_and_retrying_a_running_one_are_conflicts() {
    let h = home("conflict").await;
    let local = Principal::local();
    let running = submit(&h, &local, PIPELINE).await.expect("submit").id;
    let e = h
        .service
        .retry(&local, &running)
        .await
        .expect_err("running");
    assert!(
        matches!(&e, Error::Conflict { in_the_way: Some(w), .. } if w.state == rs::RUNNING),
        "{e:?}"
    );
    assert!(e.to_string().contains("is still running"), "{e}");

    end(&h, &running, rs::SUCCEEDED.as_str()).await;
    let e = h.service.cancel(&local, &running).await.expect_err("ended");
    assert_eq!(
        e.to_string(),
        format!("run {running} already ended: Succeeded")
    );
    assert!(
        matches!(&e, Error::Conflict { in_the_way: Some(w), .. } if w.run == running && w.state == rs::SUCCEEDED),
        "{e:?}"
    );
    assert_eq!(e.status_code(), 409);
    assert_eq!(
        h.service.retry(&local, &running).await.expect("retry"),
        Retried::NothingToRetry {
            id: running.clone()
        }
    );
}

#[tokio::test]
async fn cancel_is_recorded_and_retry_reopens_failed_steps() {
    let h = home("changes").await;
    let local = Principal::local();
    let id = submit(&h, &local, PIPELINE).await.expect("submit").id;
    assert_eq!(h.service.cancel(&local, &id).await.expect("cancel"), id);
    assert!(h.service.store().cancel_requested(&id).await.expect("read"));

    end(&h, &id, st::FAILED.as_str()).await;
    let Retried::Reopened { steps, .. } = h.service.retry(&local, &id).await.expect("retry") else {
        panic!("a failed run is retried");
    };
    assert_eq!(steps, ["prepare", "train"]);
    let run = h.service.status(&local, &id).await.expect("status");
    assert_eq!(run.state, rs::RUNNING);
}

#[tokio::test]
async fn preempting_a_step_that_is_not_running_is_a_conflict_and_an_unknown_one_not_found() {
    let h = home("preempt").await;
    let local = Principal::local();
    let id = submit(&h, &local, PIPELINE).await.expect("submit").id;
    let e = h
        .service
        .preempt(&local, &id, "train")
        .await
        .expect_err("pending");
    assert_eq!(
        e.to_string(),
        format!("step 'train' of run {id} is not running (it is Pending)")
    );
    assert!(matches!(e, Error::Conflict { .. }), "{e:?}");
    let e = h
        .service
        .preempt(&local, &id, "trian")
        .await
        .expect_err("unknown");
    assert_eq!(
        e.to_string(),
        format!("run {id} has no step 'trian' (did you mean 'train'?)")
    );
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
}

#[tokio::test]
async fn a_viewer_reads_its_teams_runs_and_changes_nothing() {
    let h = home("viewer").await;
    let id = submit(&h, &member("vision"), PIPELINE)
        .await
        .expect("a member submits")
        .id;
    let viewer = Principal::new("vision", Role::Viewer);
    h.service
        .status(&viewer, &id)
        .await
        .expect("a viewer reads");
    h.service
        .logs(&viewer, &id, Some("train"))
        .await
        .expect("and reads logs");
    let refused = [
        submit(&h, &viewer, PIPELINE).await.map(|_| ()),
        h.service.cancel(&viewer, &id).await.map(|_| ()),
        h.service.retry(&viewer, &id).await.map(|_| ()),
        h.service.resume(&viewer, &id).await.map(|_| ()),
        h.service.preempt(&viewer, &id, "train").await.map(|_| ()),
    ];
    for r in refused {
        let e = r.expect_err("a viewer changes nothing");
        assert!(matches!(e, Error::Forbidden(_)), "{e:?}");
        assert_eq!(e.status_code(), 403);
    }
    assert!(!h.service.store().cancel_requested(&id).await.expect("read"));
}

#[tokio::test]
async fn another_teams_run_does_not_exist_for_a_member_but_does_for_an_admin() {
    let h = home("teams").await;
    let theirs = submit(&h, &member("nlp"), PIPELINE)
        .await
        .expect("submit")
        .id;
    let mine = submit(&h, &member("vision"), PIPELINE)
        .await
        .expect("submit")
        .id;
    let me = member("vision");
    for e in [
        h.service.status(&me, &theirs).await.expect_err("hidden"),
        h.service.cancel(&me, &theirs).await.expect_err("hidden"),
        h.service.retry(&me, &theirs).await.expect_err("hidden"),
        h.service.resume(&me, &theirs).await.expect_err("hidden"),
        h.service
            .logs(&me, &theirs, None)
            .await
            .expect_err("hidden"),
    ] {
        // Exactly what an id never used says.
        assert!(
            matches!(&e, Error::NotFound(m) if m.starts_with(&format!("no run '{theirs}' in "))),
            "{e:?}"
        );
    }
    let seen: Vec<String> = h
        .service
        .list(&me, &Filter::default())
        .await
        .expect("list")
        .runs
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(seen, [mine]);
    let other = Filter {
        team: Some("nlp".into()),
        ..Filter::default()
    };
    let listed = h.service.list(&me, &other).await.expect("list");
    assert!(listed.runs.is_empty() && listed.any);

    // An admin of one team is that team's: the other's run does not exist for it.
    let team_admin = Principal::new("ops", Role::Admin);
    let e = h
        .service
        .status(&team_admin, &theirs)
        .await
        .expect_err("another team's run");
    assert_eq!(e.status_code(), 404);
    let admin = Principal::every_team(Role::Admin);
    h.service
        .status(&admin, &theirs)
        .await
        .expect("an admin of every team sees it");
    h.service
        .cancel(&admin, &theirs)
        .await
        .expect("and cancels it");
    let all = h
        .service
        .list(&admin, &Filter::default())
        .await
        .expect("list");
    assert_eq!(all.runs.len(), 2);
}

#[tokio::test]
async fn a_team_bound_principal_gives_the_run_its_team() {
    let h = home("team").await;
    let id = submit(&h, &member("vision"), PIPELINE)
        .await
        .expect("a file without a team takes the principal's")
        .id;
    let v = h
        .service
        .status(&Principal::local(), &id)
        .await
        .expect("status");
    assert_eq!(v.team, "vision");
    submit(&h, &member("vision"), &with_team("vision"))
        .await
        .expect("its own team, written");

    let e = submit(&h, &member("vision"), &with_team("nlp"))
        .await
        .expect_err("another team's file");
    assert!(matches!(e, Error::Forbidden(_)), "{e:?}");
    assert!(e.to_string().contains("team 'vision'"), "{e}");

    // The local principal (an admin) keeps the file's team.
    let id = submit(&h, &Principal::local(), &with_team("nlp"))
        .await
        .expect("submit")
        .id;
    let v = h
        .service
        .status(&Principal::local(), &id)
        .await
        .expect("status");
    assert_eq!(v.team, "nlp");
}

#[tokio::test]
async fn list_filters_are_checked() {
    let h = home("filters").await;
    let local = Principal::local();
    let bad_state = Filter {
        state: Some("runing".into()),
        ..Filter::default()
    };
    let e = h
        .service
        .list(&local, &bad_state)
        .await
        .expect_err("bad state");
    assert!(e.to_string().contains("did you mean 'Running'?"), "{e}");
    let bad_limit = Filter {
        limit: -1,
        ..Filter::default()
    };
    let e = h
        .service
        .list(&local, &bad_limit)
        .await
        .expect_err("bad limit");
    assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
}

#[tokio::test]
async fn a_team_bound_principal_resolves_over_its_teams_runs_only() {
    let h = home("resolve").await;
    let mine = submit(&h, &member("vision"), PIPELINE)
        .await
        .expect("submit")
        .id;
    // Runs are dated by the service's clock: nlp's is newer.
    h.clock.advance(Duration::from_secs(1));
    let theirs = submit(&h, &member("nlp"), PIPELINE)
        .await
        .expect("submit")
        .id;
    let me = member("vision");
    let newest = h.service.status(&Principal::local(), "@latest").await;
    assert_eq!(newest.expect("resolves").id, theirs);
    for reference in ["@latest", "pair@latest"] {
        let v = h.service.status(&me, reference).await.expect("resolves");
        assert_eq!(v.id, mine, "{reference}");
    }
    // A prefix both ids share (the empty one) names only the run it sees: another team's id
    // is never listed as an ambiguity.
    assert_eq!(h.service.status(&me, "").await.expect("resolves").id, mine);
    let e = h
        .service
        .status(&Principal::local(), "")
        .await
        .expect_err("ambiguous for whoever sees both");
    assert!(e.to_string().contains("ambiguous"), "{e}");
    let e = h
        .service
        .status(&me, "nope@latest")
        .await
        .expect_err("none");
    assert!(matches!(e, Error::NotFound(_)), "{e:?}");
    assert!(h.service.status(&member("nlp"), &theirs).await.is_ok());
}

#[tokio::test]
async fn status_pages_a_runs_steps_in_file_order_with_counts_by_state() {
    let h = home("page").await;
    let local = Principal::local();
    let mut text = String::from(
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata:\n  name: wide\nspec:\n  steps:\n",
    );
    for i in 0..12 {
        text.push_str(&format!("    - name: s{:02}\n      run: 'true'\n", 11 - i));
    }
    let id = submit(&h, &local, &text).await.expect("submit").id;
    let names = |v: &RunView| -> Vec<String> {
        v.steps
            .as_ref()
            .expect("steps")
            .iter()
            .map(|s| s.name.clone())
            .collect()
    };
    let v = h
        .service
        .status_page(&local, &id, 4, 2)
        .await
        .expect("a page");
    assert_eq!(names(&v), ["s09", "s08", "s07", "s06"]);
    assert_eq!(v.steps_total, Some(12));
    let counts = v.step_counts.clone().expect("counts");
    assert_eq!(counts.values().sum::<i64>(), 12, "{counts:?}");
    // 0 is no limit; past the end is an empty page, not an error.
    let rest = h
        .service
        .status_page(&local, &id, 0, 10)
        .await
        .expect("rest");
    assert_eq!(names(&rest), ["s01", "s00"]);
    let none = h
        .service
        .status_page(&local, &id, 5, 12)
        .await
        .expect("none");
    assert!(names(&none).is_empty());
    // The whole status has no counts (its shape is the contract's).
    let whole = h.service.status(&local, &id).await.expect("status");
    assert_eq!(names(&whole).len(), 12);
    assert!(whole.steps_total.is_none() && whole.step_counts.is_none());
    let json = serde_json::to_value(&whole).expect("JSON");
    assert!(json.get("steps_total").is_none() && json.get("step_counts").is_none());
    // The ended run's counts by state.
    end(&h, &id, st::SUCCEEDED.as_str()).await;
    let v = h
        .service
        .status_page(&local, &id, 1, 0)
        .await
        .expect("page");
    assert_eq!(
        v.step_counts
            .expect("counts")
            .into_iter()
            .collect::<Vec<_>>(),
        [("Succeeded".to_owned(), 12)]
    );
    for (limit, offset) in [(-1, 0), (1, -1)] {
        let e = h
            .service
            .status_page(&local, &id, limit, offset)
            .await
            .expect_err("negative");
        assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
    }
}
