//! The driver's rows in memory (counts per step, the queues, the rows still open) and their
//! commits. Decisions change rows here first; nothing is acted on until they are committed.

use super::{Driver, Error, Watcher};
use crate::executor::Executor;
use crate::run::state::step as st;
use crate::store::{AttemptRow, Change, Event, StepRow};

/// How many rows of one step are in which kind of state.
#[derive(Default, Clone, Copy)]
pub(super) struct Counts {
    pub total: usize,
    pub terminal: usize,
    pub satisfied: usize,
    pub failed: usize,
    pub stopped: usize,
}

impl Counts {
    fn add(&mut self, state: st::StepState, by: i64) {
        let bump = |c: &mut usize| *c = c.saturating_add_signed(by as isize);
        if st::is_terminal(state) {
            bump(&mut self.terminal);
        }
        if st::satisfies(state) {
            bump(&mut self.satisfied);
        }
        if state == st::FAILED {
            bump(&mut self.failed);
        }
        if state == st::STOPPED {
            bump(&mut self.stopped);
        }
    }
}

impl<E: Executor> Driver<E> {
    pub(super) fn add_row(&mut self, row: StepRow) {
        let idx = self.rows.len();
        if !st::is_terminal(row.state) {
            self.open_all += 1;
            if !self.is_on_exit(&row) {
                self.open_main += 1;
            }
        }
        if row.state == st::QUEUED && row.not_before.is_some() {
            self.backing_off.insert(idx);
        }
        let c = self.counts.entry(row.step.clone()).or_default();
        c.total += 1;
        c.add(row.state, 1);
        if let Some(&si) = self.step_index.get(&row.step) {
            for need in &self.pipeline.steps[si].needs {
                self.dependents
                    .entry(need.step.clone())
                    .or_default()
                    .push(idx);
            }
        }
        match row.state {
            st::PENDING => self.dirty.push_back(idx),
            st::QUEUED => {
                self.queued.insert(idx);
            }
            _ => {}
        }
        self.by_name.insert(row.name.clone(), idx);
        self.rows.push(row);
    }

    /// Moves row `idx` to `state`, keeping counts and queues; wakes dependents when its step
    /// is done. The caller commits the row.
    pub(super) fn set_state(&mut self, idx: usize, state: st::StepState, reason: Option<String>) {
        let old = std::mem::replace(&mut self.rows[idx].state, state);
        self.rows[idx].reason = reason;
        let delta = i64::from(st::is_terminal(old)) - i64::from(st::is_terminal(state));
        let main = !self.is_on_exit(&self.rows[idx]);
        self.open_all = (self.open_all as i64 + delta) as usize;
        if main {
            self.open_main = (self.open_main as i64 + delta) as usize;
        }
        if state == st::QUEUED && self.rows[idx].not_before.is_some() {
            self.backing_off.insert(idx);
        } else {
            self.backing_off.remove(&idx);
        }
        let step = self.rows[idx].step.clone();
        let c = self.counts.entry(step.clone()).or_default();
        c.add(old, -1);
        c.add(state, 1);
        let done = c.terminal == c.total;
        if old == st::QUEUED {
            self.queued.remove(&idx);
        }
        match state {
            st::QUEUED => {
                self.queued.insert(idx);
            }
            st::PENDING => self.dirty.push_back(idx),
            _ => {}
        }
        if st::is_terminal(state) {
            self.rows[idx].ended_at = Some(self.clock.now_rfc3339());
        }
        if done && let Some(deps) = self.dependents.get(&step) {
            self.dirty.extend(deps.iter().copied());
        }
    }

    /// Commits row `idx` (and what is pending) and shows it.
    pub(super) async fn commit_row(
        &mut self,
        idx: usize,
        watcher: &mut dyn Watcher,
    ) -> Result<(), Error> {
        let row = self.rows[idx].clone();
        self.commit(Change {
            steps: vec![&row],
            ..Change::default()
        })
        .await?;
        watcher.step(&row, self.rows.len(), 0);
        Ok(())
    }

    /// Commits what is pending, then `change`, in one transaction.
    pub(super) async fn commit(&mut self, change: Change<'_>) -> Result<(), Error> {
        let Pending {
            steps,
            attempts,
            mut events,
        } = std::mem::take(&mut self.pending);
        events.extend(change.events);
        let all = Change {
            steps: steps.iter().chain(change.steps).collect(),
            new_steps: change.new_steps,
            attempts: attempts.iter().chain(change.attempts).collect(),
            run_end: change.run_end,
            events,
        };
        self.store.commit(&self.run.id, all).await?;
        Ok(())
    }

    /// Commits what is pending, if anything.
    pub(super) async fn flush(&mut self) -> Result<(), Error> {
        if self.pending.steps.is_empty() && self.pending.events.is_empty() {
            return Ok(());
        }
        self.commit(Change::default()).await
    }

    /// A queued row's reason for waiting, committed with what comes next and shown when it
    /// changes.
    pub(super) fn show_wait(&mut self, name: &str, reason: String, watcher: &mut dyn Watcher) {
        let Some(&idx) = self.by_name.get(name) else {
            return;
        };
        if self.rows[idx].reason.as_deref() == Some(reason.as_str()) {
            return;
        }
        self.rows[idx].reason = Some(reason);
        self.pending.steps.push(self.rows[idx].clone());
        watcher.step(&self.rows[idx], self.rows.len(), 0);
    }
}

/// Attempt ends decided but not yet committed, so that they share the transaction of the
/// next start instead of costing one of their own. Nothing is acted on because of them until
/// they are committed: a dependent's start commits them first, in its own transaction, and
/// the engine commits what is left before it waits or ends. An engine that dies first loses
/// nothing: each ended attempt's result is kept by its executor, and the next engine collects
/// it.
#[derive(Default)]
pub(super) struct Pending {
    pub steps: Vec<StepRow>,
    pub attempts: Vec<AttemptRow>,
    pub events: Vec<Event>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty() && self.attempts.is_empty() && self.events.is_empty()
    }

    /// What is pending, as a change to commit first in another transaction (the events are
    /// moved into it).
    pub fn change(&mut self) -> Change<'_> {
        Change {
            steps: self.steps.iter().collect(),
            attempts: self.attempts.iter().collect(),
            events: std::mem::take(&mut self.events),
            ..Change::default()
        }
    }
}
