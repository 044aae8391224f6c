//! Why a step that did not fit waits, in the words `status` shows.

use super::*;

/// Why a step that did not fit waits, in words.
pub(super) fn why_not(cluster: &Cluster, st: &mut State, job: &Job, shape: Shape) -> Arc<str> {
    if let Some((generation, usage, why)) = st.reasons.get(&(job.team, shape))
        && *generation == st.free_gen
        && *usage == st.quota_usage[job.team]
    {
        return why.clone();
    }
    let why: Arc<str> = why_not_words(cluster, st, job, shape).into();
    st.reasons.insert(
        (job.team, shape),
        (st.free_gen, st.quota_usage[job.team], why.clone()),
    );
    why
}

pub(super) fn why_not_words(cluster: &Cluster, st: &mut State, job: &Job, shape: Shape) -> String {
    let team = &cluster.teams[job.team];
    let allowed = &st.allowed[shape.2].2;
    let fits_empty = allowed
        .nodes
        .iter()
        .any(|&n| job.per_worker.fits_in(cluster.nodes[n].capacity));
    if !fits_empty {
        let pools: Vec<usize> = (0..cluster.pools.len())
            .filter(|&p| placement::pool_admits(cluster, p, job))
            .collect();
        return format!(
            "no node of a pool it may use ({}) can hold one worker ({})",
            pools
                .iter()
                .map(|&p| cluster.pools[p].name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            job.per_worker
        );
    }
    let key = (job.per_worker, shape.2);
    let room = match st.room.get(&key) {
        Some(&(generation, room)) if generation == st.free_gen => room,
        _ => {
            let room: u64 = allowed
                .nodes
                .iter()
                .map(|&n| workers_that_fit(job.per_worker, st.free[n]))
                .sum();
            st.room.insert(key, (st.free_gen, room));
            room
        }
    };
    // Written once per shape (and free room) and once per team (and usage), then joined: a
    // reason for every waiting step, every cycle.
    use std::fmt::Write as _;
    let words = match st.shape_words.get(&shape) {
        Some((generation, words)) if *generation == st.free_gen => words,
        _ => {
            let mut words = String::with_capacity(96);
            let _ = if job.workers > 1 {
                write!(
                    words,
                    "waiting: needs gang of {} x ({})",
                    job.workers, job.per_worker
                )
            } else {
                write!(words, "waiting: needs {}", job.per_worker)
            };
            let _ = write!(
                words,
                "; free room for {room} of {} worker(s) now",
                job.workers
            );
            st.shape_words.insert(shape, (st.free_gen, words));
            &st.shape_words[&shape].1
        }
    };
    let mut why = String::with_capacity(words.len() + 80);
    why.push_str(words);
    if team.quota != Res::ZERO {
        let usage = st.quota_usage[job.team];
        if st.team_words.is_empty() {
            st.team_words = vec![None; cluster.teams.len()];
        }
        match &mut st.team_words[job.team] {
            Some((held, words)) if *held == usage => why.push_str(words),
            slot => {
                let mut words = String::with_capacity(80);
                let _ = write!(
                    words,
                    "; team {} holds {} of its quota {}",
                    team.name, usage, team.quota
                );
                why.push_str(&words);
                *slot = Some((usage, words));
            }
        }
    }
    why
}

pub(super) fn workers_that_fit(per: Res, free: Res) -> u64 {
    if !per.fits_in(free) {
        return 0;
    }
    per.count_in(free).min(1024)
}
