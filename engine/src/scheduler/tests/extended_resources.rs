//! Extended resources (MIG slices here): placed, counted, quota'd, shared and explained like
//! GPUs.

use super::*;

/// The slot of the MIG slices these tests use.
pub(super) fn mig() -> usize {
    extended::slot("nvidia.com/mig-1g.10gb").expect("a slot for MIG slices")
}

/// Node 0: 7 MIG slices and no whole GPU (an A100 cut in seven); node 1: 8 GPUs, no slices.
fn mig_cluster(teams: Vec<Team>) -> Cluster {
    Cluster {
        pools: vec![pool("mig", "a", false), pool("a100", "a", false)],
        nodes: vec![
            Node {
                pool: 0,
                capacity: Res::new(0, 32_000, 256 * GI).with_ext(mig(), 7),
            },
            Node {
                pool: 1,
                capacity: Res::new(8, 64_000, 512 * GI),
            },
        ],
        teams,
    }
}

fn slices(id: u64, team: usize, n: u64) -> Job {
    let mut j = job(id, team, 1, 0);
    j.per_worker = j.per_worker.with_ext(mig(), n);
    j
}

#[test]
fn slices_go_only_where_they_are_and_a_node_never_gives_more_than_it_has() {
    let c = mig_cluster(vec![team("serving", 1.0, 0, None)]);
    let queue = [
        slices(1, 0, 3),
        slices(2, 0, 3),
        slices(3, 0, 3),
        job(4, 0, 1, 1),
    ];
    let d = cycle(&c, &[], &queue, &Settings::default());
    let a = admitted(&d);
    // Two of the three 3-slice steps fill 6 of the 7 slices; the third cannot fit, and the
    // node of whole GPUs (no slices) is never used for it.
    assert_eq!(a.get(&1), Some(&vec![0]), "{d:?}");
    assert_eq!(a.get(&2), Some(&vec![0]), "{d:?}");
    assert!(!a.contains_key(&3), "{d:?}");
    assert_eq!(a.get(&4), Some(&vec![1]), "{d:?}");
    let why = reason(&d, 3);
    assert!(why.contains("3 nvidia.com/mig-1g.10gb"), "{why}");
    // With one step ended, the third starts.
    let running = vec![Running {
        job: slices(1, 0, 3),
        nodes: vec![0],
        started: 0,
        work_at_risk: 0,
    }];
    let d = cycle(&c, &running, &[slices(3, 0, 3)], &Settings::default());
    assert_eq!(admitted(&d).get(&3), Some(&vec![0]), "{d:?}");
}

#[test]
fn a_quota_of_slices_is_reclaimed_from_a_team_that_borrowed_them() {
    // serving's quota: 4 slices (and no GPU). research (no quota) borrowed 6 of the 7.
    let mut serving = team("serving", 1.0, 0, None);
    serving.quota = Res {
        ext: [u32::MAX; extended::SLOTS],
        ..Res::new(0, u64::MAX, u64::MAX)
    };
    serving.quota.ext[mig()] = 4;
    let c = mig_cluster(vec![serving, team("research", 1.0, 0, None)]);
    let running: Vec<Running> = (0..3)
        .map(|i| Running {
            job: slices(10 + i, 1, 2),
            nodes: vec![0],
            started: i,
            work_at_risk: 10 * i,
        })
        .collect();
    let later = Settings {
        now: 3600,
        ..Settings::default()
    };
    let d = cycle(&c, &running, &[slices(1, 0, 4)], &later);
    // One free slice plus two borrowed steps of 2 make room for 4: two victims, no more.
    let victims = victims_for(&d, 1);
    assert_eq!(victims.len(), 2, "{d:?}");
    assert!(reason(&d, 1).contains("under its quota"), "{d:?}");
    // Without reclaim it waits, naming its quota in slices.
    let no = Settings {
        reclaim: false,
        ..later
    };
    let d = cycle(&c, &running, &[slices(1, 0, 4)], &no);
    assert!(!d.iter().any(|x| matches!(x, Decision::Preempt { .. })));
    let why = reason(&d, 1);
    assert!(why.contains("4 nvidia.com/mig-1g.10gb"), "{why}");
}

#[test]
fn slices_count_in_the_dominant_share() {
    let total = Res::new(8, 96_000, 768 * GI).with_ext(mig(), 7);
    let all_slices = Res::new(0, 1000, GI).with_ext(mig(), 7);
    assert_eq!(all_slices.dominant_share(total), 1.0);
    // A resource the cluster does not have adds no share of its own.
    assert_eq!(Res::new(4, 0, 0).dominant_share(Res::new(8, 0, 0)), 0.5);
    assert_eq!(
        Res::ZERO.with_ext(mig(), 2).to_string(),
        "2 nvidia.com/mig-1g.10gb"
    );
}
