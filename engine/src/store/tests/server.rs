//! The server's rows: tokens, the audit record, the leader's lease and fence, usage.

use super::*;

fn token(id: &str, team: &str, hash: &str) -> TokenRow {
    TokenRow {
        id: id.into(),
        name: Some(format!("{id}'s")),
        team: team.into(),
        role: "member".into(),
        hash: hash.into(),
        created_at: format!("2026-12-05T10:00:00.00{}Z", id.len()),
        expires_at: None,
        revoked_at: None,
    }
}

conformance!(
    tokens_are_found_by_hash_listed_per_team_and_revoked_once,
    |store, backend| {
        store
            .insert_token(&token("t1", "vision", "h1"))
            .await
            .expect("insert");
        store
            .insert_token(&token("t22", "nlp", "h2"))
            .await
            .expect("insert");
        // A hash is one token's: a second row with it is refused.
        assert!(store.insert_token(&token("t3", "nlp", "h1")).await.is_err());
        let found = store
            .token_by_hash("h2")
            .await
            .expect("read")
            .expect("found");
        assert_eq!(found, token("t22", "nlp", "h2"));
        assert_eq!(store.token_by_hash("nope").await.expect("read"), None);
        let ids = |rows: Vec<TokenRow>| rows.into_iter().map(|t| t.id).collect::<Vec<_>>();
        assert_eq!(ids(store.tokens(None).await.expect("list")), ["t1", "t22"]);
        assert_eq!(ids(store.tokens(Some("nlp")).await.expect("list")), ["t22"]);
        let before = store
            .revoke_token("t1", "2026-12-05T11:00:00.000Z")
            .await
            .expect("revoke");
        assert_eq!(before.map(|t| t.revoked_at), Some(None));
        store
            .revoke_token("t1", "2026-12-05T12:00:00.000Z")
            .await
            .expect("revoke again");
        let t1 = store
            .token_by_hash("h1")
            .await
            .expect("read")
            .expect("found");
        assert_eq!(
            t1.revoked_at.as_deref(),
            Some("2026-12-05T11:00:00.000Z"),
            "{backend}"
        );
        assert_eq!(
            store
                .revoke_token("t9", "2026-12-05T11:00:00.000Z")
                .await
                .expect("revoke"),
            None
        );
    }
);

conformance!(the_audit_record_keeps_changes_in_order, |store, backend| {
    for (i, action) in ["token create", "submit", "cancel"].into_iter().enumerate() {
        let row = AuditRow {
            at: format!("2026-12-05T10:00:0{i}.000Z"),
            who: "t1".into(),
            team: "vision".into(),
            action: action.into(),
            target: format!("run r{i}"),
            result: "ok".into(),
        };
        store.audit(&row).await.expect("audit");
    }
    let record = store.audit_record().await.expect("record");
    let actions: Vec<&str> = record.iter().map(|a| a.action.as_str()).collect();
    assert_eq!(actions, ["token create", "submit", "cancel"], "{backend}");
    assert_eq!(record[1].target, "run r1");
});

conformance!(
    who_submitted_a_run_is_the_name_of_the_token_of_its_submit,
    |store, backend| {
        store
            .insert_token(&token("t1", "vision", "h1"))
            .await
            .expect("insert");
        let mut unnamed = token("t2", "vision", "h2");
        unnamed.name = None;
        store.insert_token(&unnamed).await.expect("insert");
        let entries = [
            ("t1", "submit", "run r1", "ok"),
            ("t2", "submit", "run r2", "ok"),
            // A refused submit, and another change of r1: neither says who submitted.
            ("t2", "submit", "run r3", "403 Forbidden"),
            ("t2", "cancel", "run r1", "ok"),
        ];
        for (who, action, target, result) in entries {
            let row = AuditRow {
                at: "2026-12-05T10:00:00.000Z".into(),
                who: who.into(),
                team: "vision".into(),
                action: action.into(),
                target: target.into(),
                result: result.into(),
            };
            store.audit(&row).await.expect("audit");
        }
        let ids: Vec<String> = ["r1", "r2", "r3", "r4"].map(String::from).to_vec();
        let who = store.submitters(&ids).await.expect("submitters");
        assert_eq!(who.get("r1").map(String::as_str), Some("t1's"), "{backend}");
        assert_eq!(who.get("r2").map(String::as_str), Some("t2"), "{backend}");
        assert_eq!(who.len(), 2, "{who:?}");
        assert!(store.submitters(&[]).await.expect("none").is_empty());
    }
);

conformance!(
    a_leader_that_was_taken_over_writes_no_more,
    |store, backend| {
        store
            .create_run(&new_run("r", "p", "t", &["a"]), None)
            .await
            .expect("create");
        // Server A leads (epoch 1) and writes through its fenced store.
        let seen = store.leadership().await.expect("the leader row");
        assert_eq!((seen.epoch, seen.holder.as_deref()), (0, None));
        let a = store
            .try_lead(&seen, "1@a", 10_000)
            .await
            .expect("run for leader")
            .expect("A leads");
        let fenced = store.fenced(a);
        let change = || Change {
            steps: vec![],
            new_steps: vec![],
            attempts: vec![],
            run_end: None,
            events: vec![Event {
                step: None,
                kind: EventKind::Preempting,
                detail: None,
            }],
        };
        fenced
            .commit("r", change())
            .await
            .expect("A writes while it leads");
        assert!(store.renew_lead(a, "1@a", 20_000).await.expect("renew"));
        // A second candidate that read the same row loses the race.
        assert_eq!(
            store.try_lead(&seen, "2@b", 10_000).await.expect("race"),
            None
        );
        // B takes over once A's lease has run out: A's writes are refused from then on, and A
        // cannot renew; nothing of A's reaches the store.
        let seen = store.leadership().await.expect("the leader row");
        let b = store
            .try_lead(&seen, "2@b", 30_000)
            .await
            .expect("run for leader")
            .expect("B leads");
        assert_eq!(b, a + 1);
        let refused = fenced.commit("r", change()).await;
        assert!(matches!(refused, Err(Error::Fenced(_))), "{refused:?}");
        // Every other write of A's engine is refused too: a cancel, a lease let go, a cache
        // entry forgotten, waiting rows dropped.
        let fenced_out = |r: Result<(), Error>, what: &str| {
            assert!(matches!(r, Err(Error::Fenced(_))), "{what}: {r:?}");
        };
        fenced_out(fenced.request_cancel("r").await, "request_cancel");
        fenced_out(fenced.release_lease("r", "1@a").await, "release_lease");
        fenced_out(fenced.delete_cache("t", "k").await, "delete_cache");
        fenced_out(
            fenced.forget_waiting(&["r".to_owned()]).await,
            "forget_waiting",
        );
        assert!(
            !store.cancel_requested("r").await.expect("read"),
            "A's cancel was not recorded"
        );
        assert!(!store.renew_lead(a, "1@a", 40_000).await.expect("renew"));
        assert_eq!(events(&store, "r").await, ["created", "preempting"]);
        store
            .fenced(b)
            .commit("r", change())
            .await
            .expect("B writes");
        // B resigns: its lease ends at once.
        store.resign(b, "2@b").await.expect("resign");
        assert_eq!(store.leadership().await.expect("row").until_ms, 0);
    }
);

conformance!(
    usage_reads_the_attempts_that_held_room_in_a_window,
    |store, backend| {
        store
            .create_run(&new_run("r1", "train", "vision", &["fit"]), None)
            .await
            .expect("create");
        store
            .create_run(&new_run("r2", "eval", "nlp", &["score"]), None)
            .await
            .expect("create");
        // Attempts by hour of 2026-12-02: fit 1 from 01 to 03, fit 2 from 05 and running, score 1
        // from 02 to 04 (placed on a cluster node).
        let hour = |h: u32| format!("2026-12-02T{h:02}:00:00.000Z");
        let rows = [
            ("r1", "fit", 1, at::PREEMPTED, 1, Some(3), None),
            ("r1", "fit", 2, at::RUNNING, 5, None, None),
            ("r2", "score", 1, at::SUCCEEDED, 2, Some(4), Some("[1]")),
        ];
        for (run, step, number, state, start, end, nodes) in rows {
            sqlx::query("INSERT INTO attempts (run_id, step, number, state, dir, millicpu, memory, gpus, started_at, ended_at, job, nodes) VALUES ($1, $2, $3, $4, $5, 1500, 0, '0,1', $6, $7, $8, $9)")
            .bind(run)
            .bind(step)
            .bind(number)
            .bind(state.as_str())
            .bind(format!("/attempts/{run}/{step}.{number}"))
            .bind(hour(start))
            .bind(end.map(hour))
            .bind(nodes.map(|_| "{}"))
            .bind(nodes)
            .execute(store.pool())
            .await
            .expect("insert");
        }
        let found = |rows: Vec<UsageRow>| -> Vec<(String, i64)> {
            rows.into_iter().map(|r| (r.step, r.number)).collect()
        };
        let all = store.usage(None, None, None).await.expect("usage");
        assert_eq!(all.len(), 3, "{backend}");
        let fit = &all[0];
        assert_eq!(
            (
                fit.run_id.as_str(),
                fit.team.as_str(),
                fit.pipeline.as_str(),
                fit.file_step.as_str(),
                fit.state.as_str(),
                fit.millicpu,
                fit.gpus.as_deref(),
                fit.ended_at.as_deref(),
            ),
            (
                "r1",
                "vision",
                "train",
                "fit",
                at::PREEMPTED.as_str(),
                1500,
                Some("0,1"),
                Some(hour(3).as_str())
            ),
            "{backend}"
        );
        assert_eq!(all[2].nodes.as_deref(), Some("[1]"), "{backend}");
        assert_eq!(all[2].job.as_deref(), Some("{}"), "{backend}");
        // One team's.
        assert_eq!(
            found(store.usage(Some("nlp"), None, None).await.expect("usage")),
            [("score".to_owned(), 1)],
            "{backend}"
        );
        // [03:00, 05:00): fit 1 ended at 03 (nothing in it), fit 2 starts at 05 (nothing yet).
        assert_eq!(
            found(
                store
                    .usage(None, Some(&hour(3)), Some(&hour(5)))
                    .await
                    .expect("usage")
            ),
            [("score".to_owned(), 1)],
            "{backend}"
        );
        // From 06:00 on: only the running one.
        assert_eq!(
            found(
                store
                    .usage(None, Some(&hour(6)), None)
                    .await
                    .expect("usage")
            ),
            [("fit".to_owned(), 2)],
            "{backend}"
        );
        // What runs now, by the state's index.
        assert_eq!(
            found(store.usage_running().await.expect("running")),
            [("fit".to_owned(), 2)],
            "{backend}"
        );
        // What the usage page's kept days check: runs created before each end, and the
        // team's first running attempt.
        sqlx::query("UPDATE runs SET created_at = $1 WHERE id = 'r1'")
            .bind(hour(1))
            .execute(store.pool())
            .await
            .expect("created_at");
        let counts = store
            .runs_before(
                "vision",
                &[hour(0), hour(2), "2027-01-01T00:00:00.000Z".into()],
            )
            .await
            .expect("counts");
        assert_eq!(counts, [0, 1, 1], "{backend}");
        assert_eq!(
            store.first_running("vision").await.expect("first"),
            Some(hour(5)),
            "{backend}"
        );
        assert_eq!(store.first_running("nlp").await.expect("first"), None);
    }
);
