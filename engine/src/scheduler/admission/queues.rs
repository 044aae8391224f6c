//! The waiting steps in the order each queue takes them.
//!
//! Copied, queue after queue, into one buffer: the teams take turns, and a step fetched from
//! all over `waiting` at its turn would cost a cache miss each (measured at stop 27: queues of
//! references were 10% slower). Keeping the buffer from one cycle to the next was measured
//! too (stop 28): no difference at 100,000 or 1,000,000 waiting steps, so it is not kept.

use super::*;

pub(super) struct Queues {
    /// Each queue's steps in its order, queue 0's first.
    jobs: Vec<Job>,
    /// Per queue: where its next step is in `jobs`, and one past its last.
    next: Vec<usize>,
    end: Vec<usize>,
}

impl Queues {
    /// `waiting` in `nq` queues: step `j` in queue `queue(j)`, each queue ordered by `key`.
    pub(super) fn new(
        waiting: &[Job],
        nq: usize,
        queue: impl Fn(&Job) -> usize,
        key: impl Fn(&Job) -> Key,
    ) -> Queues {
        // Where each queue starts: counted, then summed.
        let mut start = vec![0usize; nq + 1];
        for j in waiting {
            start[queue(j) + 1] += 1;
        }
        for q in 0..nq {
            start[q + 1] += start[q];
        }
        let mut keys = vec![((0, 0, 0), 0); waiting.len()];
        let mut fill = start.clone();
        for (i, j) in waiting.iter().enumerate() {
            let q = queue(j);
            keys[fill[q]] = (key(j), i);
            fill[q] += 1;
        }
        for q in 0..nq {
            // Keys are unique (they end with the step's id): unstable is exact.
            keys[start[q]..start[q + 1]].sort_unstable_by_key(|(k, _)| *k);
        }
        let jobs = keys.iter().map(|&(_, i)| waiting[i].clone()).collect();
        let end = start[1..].to_vec();
        start.truncate(nq);
        Queues {
            jobs,
            next: start,
            end,
        }
    }

    /// Queue `q`'s next step, if any.
    pub(super) fn peek(&self, q: usize) -> Option<&Job> {
        let i = *self.next.get(q)?;
        (i < self.end[q]).then(|| &self.jobs[i])
    }

    /// Takes queue `q`'s next step: the index of it for `job`.
    pub(super) fn pop(&mut self, q: usize) -> Option<usize> {
        let i = *self.next.get(q)?;
        (i < self.end[q]).then(|| {
            self.next[q] += 1;
            i
        })
    }

    pub(super) fn job(&self, i: usize) -> &Job {
        &self.jobs[i]
    }

    /// What is left in each queue: (queue, its steps in order).
    pub(super) fn rest(&self) -> impl Iterator<Item = (usize, &[Job])> {
        (0..self.next.len()).map(|q| (q, &self.jobs[self.next[q]..self.end[q]]))
    }
}
