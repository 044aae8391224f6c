//! Applied documents and the fires of schedules.

use super::*;

fn doc(kind: &str, name: &str, source: &str) -> NewDocument {
    NewDocument {
        kind: kind.into(),
        name: name.into(),
        source: source.into(),
        path: "p.yaml".into(),
        workdir: "/w".into(),
    }
}

conformance!(
    apply_keeps_versions_and_prunes_only_the_teams_own,
    |store, backend| {
        let at = "2026-12-01T00:00:00.000Z";
        let did = |v: Vec<(String, String, Applied)>| -> Vec<String> {
            v.into_iter()
                .map(|(k, n, a)| format!("{k}/{n} {}", a.as_str()))
                .collect()
        };
        let first = [
            doc("Pipeline", "retrain", "v1"),
            doc("Schedule", "nightly", "s1"),
        ];
        let out = store
            .apply("vision", &first, false, false, "t1", at)
            .await
            .expect("apply");
        assert_eq!(
            did(out),
            ["Pipeline/retrain created", "Schedule/nightly created"]
        );
        store
            .apply(
                "nlp",
                &[doc("Pipeline", "other", "x")],
                false,
                false,
                "t2",
                at,
            )
            .await
            .expect("apply");
        // A dry run says what would happen and writes nothing.
        let second = [
            doc("Pipeline", "retrain", "v2"),
            doc("Schedule", "nightly", "s1"),
        ];
        let out = store
            .apply("vision", &second, true, true, "t1", at)
            .await
            .expect("dry run");
        assert_eq!(
            did(out),
            ["Pipeline/retrain configured", "Schedule/nightly unchanged"]
        );
        let held = store.applied(Some("vision")).await.expect("applied");
        assert_eq!(held[0].source, "v1", "{backend}: a dry run wrote");
        // Configured makes version 2; pruning removes what the paths no longer hold, of this
        // team only.
        let out = store
            .apply(
                "vision",
                &[doc("Pipeline", "retrain", "v2")],
                true,
                false,
                "t1",
                at,
            )
            .await
            .expect("apply");
        assert_eq!(
            did(out),
            ["Pipeline/retrain configured", "Schedule/nightly pruned"]
        );
        let held = store.applied(Some("vision")).await.expect("applied");
        assert_eq!(held.len(), 1);
        assert_eq!((held[0].version, held[0].source.as_str()), (2, "v2"));
        assert_eq!(store.applied(Some("nlp")).await.expect("nlp").len(), 1);
        // Applied again, a pruned document is created again, as a new version.
        let out = store
            .apply(
                "vision",
                &[doc("Schedule", "nightly", "s1")],
                false,
                false,
                "t1",
                at,
            )
            .await
            .expect("apply");
        assert_eq!(did(out), ["Schedule/nightly created"]);
        let s = store
            .applied_named("vision", &["Schedule"], "nightly")
            .await
            .expect("read")
            .expect("in force");
        assert_eq!(s.version, 2);
    }
);

conformance!(
    ticks_decided_at_once_write_what_is_new_and_nothing_when_a_run_is_refused,
    |store, backend| {
        let fire = |schedule: &str, run: &str| FireRow {
            team: "vision".into(),
            schedule: schedule.into(),
            tick: "2026-12-01T02:00:00.000Z".into(),
            outcome: "started".into(),
            run_id: Some(run.into()),
            reason: None,
            version: 1,
            recorded_at: "2026-12-01T02:00:00.100Z".into(),
        };
        let run = |id: &str, schedule: &str| {
            let mut r = new_run(id, "retrain", "vision", &["a"]);
            r.schedule = Some(schedule.into());
            r
        };
        let (a, b) = (run("ra", "a"), run("rb", "b"));
        assert!(
            store
                .fire(&fire("a", "ra"), Some((&a, None)))
                .await
                .expect("fire")
        );
        // `a`'s tick was decided already (a restarted server deciding again): only `b`'s is
        // written, with its run.
        let (fa, fb) = (fire("a", "ra2"), fire("b", "rb"));
        let a2 = run("ra2", "a");
        let written = store
            .fires_at_once(&[(&fa, Some((&a2, None))), (&fb, Some((&b, None)))])
            .await
            .expect("fires");
        assert_eq!(written, [false, true], "{backend}");
        assert!(matches!(store.run("ra2").await, Err(Error::NotFound(_))));
        assert!(store.run("rb").await.is_ok());
        // A run refused past its team's queue writes none of the batch.
        let (fc, fd) = (fire("c", "rc"), fire("d", "rd"));
        let (c, d) = (run("rc", "c"), run("rd", "d"));
        let refused = store
            .fires_at_once(&[(&fc, Some((&c, None))), (&fd, Some((&d, Some(0))))])
            .await;
        assert!(
            matches!(refused, Err(Error::QueueFull { .. })),
            "{refused:?}"
        );
        assert!(store.fires("vision", "c").await.expect("fires").is_empty());
        assert!(matches!(store.run("rc").await, Err(Error::NotFound(_))));
    }
);

conformance!(
    a_tick_is_decided_once_with_its_run_or_not_at_all,
    |store, backend| {
        let fire = |tick: &str, run: Option<&str>| FireRow {
            team: "vision".into(),
            schedule: "nightly".into(),
            tick: tick.into(),
            outcome: if run.is_some() { "started" } else { "missed" }.into(),
            run_id: run.map(str::to_owned),
            reason: None,
            version: 1,
            recorded_at: "2026-12-01T02:00:01.000Z".into(),
        };
        let mut run = new_run("r1", "retrain", "vision", &["a", "b"]);
        run.schedule = Some("nightly".into());
        run.applied_version = Some(3);
        let t1 = "2026-12-01T02:00:00.000Z";
        assert!(
            store
                .fire(&fire(t1, Some("r1")), Some((&run, None)))
                .await
                .expect("fire")
        );
        // The same tick again (a restarted or second server): refused, and no second run.
        let mut again = new_run("r2", "retrain", "vision", &["a"]);
        again.schedule = Some("nightly".into());
        assert!(
            !store
                .fire(&fire(t1, Some("r2")), Some((&again, None)))
                .await
                .expect("fire")
        );
        assert!(
            matches!(store.run("r2").await, Err(Error::NotFound(_))),
            "{backend}"
        );
        let row = store.run("r1").await.expect("r1");
        assert_eq!(
            (row.applied_version, row.schedule.as_deref()),
            (Some(3), Some("nightly"))
        );
        assert_eq!(
            store
                .schedule_running("vision", "nightly")
                .await
                .expect("running"),
            ["r1"]
        );
        // A run refused by its team's queue leaves no fire behind either.
        let t2 = "2026-12-02T02:00:00.000Z";
        let refused = store
            .fire(&fire(t2, Some("r2")), Some((&again, Some(0))))
            .await;
        assert!(
            matches!(refused, Err(Error::QueueFull { .. })),
            "{refused:?}"
        );
        assert!(
            store
                .fire(&fire(t2, None), None)
                .await
                .expect("record it missed")
        );
        let fires = store.fires("vision", "nightly").await.expect("fires");
        assert_eq!(fires.len(), 2);
        assert_eq!(fires[1].outcome, "missed");
        assert_eq!(
            store
                .last_fire("vision", "nightly")
                .await
                .expect("last")
                .map(|f| f.tick),
            Some(t2.to_owned())
        );
    }
);
