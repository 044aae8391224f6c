//! The local executor: attempts run on this machine under one `sluice-runtime serve` per
//! driven run, each in its folder `HOME/attempts/RUN/STEP.N` (its [`Handle`]).
//!
//! The protocol, all through files of the attempt's folder (`sluice_runtime::contract`):
//! the engine writes `launch.json` and hands the attempt over on the runtime's standard input
//! ([`server`]); the runtime holds an flock on `lock` for the attempt's life, touching it as
//! its heartbeat ([`heartbeat`]), and writes `result.json` last. Liveness after a restart is
//! whether the lock is held ([`probe`]); a stop is a `terminate` file ([`stop`]); metrics and
//! the log are files the runtime appends to ([`files`]). The machine's pool is [`machine`].

pub mod files;
pub mod heartbeat;
pub mod machine;
pub mod probe;
pub mod runtime;
pub mod server;
pub mod stop;

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use sluice_runtime::contract;
use sluice_runtime::objects::Objects;
use tokio::sync::mpsc;

use super::{
    AttemptId, Capacity, Error, Event, Executor, Handle, Placement, Probe, Reason, Settings, io,
};
use probe::Probe as Found;
use server::{Note, Server};

/// How often attempts this engine did not hand over (reattached, or their runtime is gone)
/// are checked for their end through their locks.
const REATTACHED_POLL: Duration = Duration::from_millis(200);

/// An attempt this executor watches.
struct Watched {
    id: AttemptId,
    dir: PathBuf,
    /// The generation of this engine's runtime it was handed to: its end arrives as a note.
    /// None (reattached after a restart, or its runtime is gone): polled through its lock.
    ours: Option<u64>,
}

/// The local executor of one run.
pub struct Local {
    home: PathBuf,
    run: String,
    settings: Settings,
    capacity: Capacity,
    objects: Objects,
    /// The run's `sluice-runtime serve`, started at the first attempt.
    server: Option<Server>,
    /// How many runtimes this executor has started.
    generations: u64,
    tx: mpsc::UnboundedSender<Note>,
    rx: mpsc::UnboundedReceiver<Note>,
    /// By step instance name.
    watched: HashMap<String, Watched>,
    events: VecDeque<Event>,
    last_poll: Instant,
    last_beat: Instant,
    /// Logs being copied to the object store.
    uploads: tokio::task::JoinSet<()>,
}

impl Local {
    /// The executor of run `run` on the home `home`, keeping logs in `objects`.
    pub fn new(home: &Path, run: &str, objects: Objects, settings: Settings) -> Local {
        let (tx, rx) = mpsc::unbounded_channel();
        Local {
            home: home.to_path_buf(),
            run: run.to_owned(),
            settings,
            capacity: machine::capacity(),
            objects,
            server: None,
            generations: 0,
            tx,
            rx,
            watched: HashMap::new(),
            events: VecDeque::new(),
            last_poll: Instant::now(),
            last_beat: Instant::now(),
            uploads: tokio::task::JoinSet::new(),
        }
    }

    fn dir(handle: &Handle) -> &Path {
        Path::new(handle.as_str())
    }

    fn watch(&mut self, id: &AttemptId, dir: PathBuf, ours: Option<u64>) {
        self.watched.insert(
            id.step.clone(),
            Watched {
                id: id.clone(),
                dir,
                ours,
            },
        );
    }

    /// Hands a prepared, committed attempt to the run's runtime, starting one if needed. A
    /// runtime that went away is replaced once.
    async fn hand_over(&mut self, id: &AttemptId, dir: &Path) -> std::io::Result<u64> {
        for _ in 0..2 {
            if self.server.is_none() {
                self.generations += 1;
                let run_dir = self.home.join("attempts").join(&self.run);
                self.server = Some(Server::start(&run_dir, self.generations, self.tx.clone())?);
            }
            if let Some(server) = self.server.as_mut() {
                let generation = server.generation;
                match server.submit(id.number, &id.step, dir).await {
                    Ok(()) => return Ok(generation),
                    Err(e) => {
                        tracing::warn!(
                            "the runtime stopped taking attempts ({e}); starting another"
                        );
                        self.runtime_gone(generation);
                    }
                }
            }
        }
        Err(std::io::Error::other("the runtime stopped taking attempts"))
    }

    /// The runtime process ended: what it was running is watched through the attempts' locks
    /// (a result if they ended, lost if not), and the next attempt starts a new one.
    fn runtime_gone(&mut self, generation: u64) {
        if self
            .server
            .as_ref()
            .is_some_and(|s| s.generation == generation)
        {
            self.server = None;
        }
        for w in self.watched.values_mut() {
            if w.ours == Some(generation) {
                w.ours = None;
            }
        }
    }

    fn on_note(&mut self, note: Note) {
        match note {
            Note::Ended { step, number } => {
                if self
                    .watched
                    .get(&step)
                    .is_some_and(|w| w.id.number == number)
                    && let Some(w) = self.watched.remove(&step)
                {
                    let result = probe::read_result(&w.dir).map(Box::new);
                    self.events.push_back(Event::Ended {
                        attempt: w.id,
                        result,
                    });
                }
            }
            Note::Gone { generation } => self.runtime_gone(generation),
        }
    }

    /// Checks attempts not handed to a live runtime of this engine: a free lock means their
    /// runtime ended. A folder that cannot be read is tried again at the next poll.
    fn poll_unowned(&mut self) {
        let unowned: Vec<String> = self
            .watched
            .iter()
            .filter(|(_, w)| w.ours.is_none())
            .map(|(n, _)| n.clone())
            .collect();
        for name in unowned {
            let Some(dir) = self.watched.get(&name).map(|w| w.dir.clone()) else {
                continue;
            };
            let event = match probe::probe(&dir) {
                Ok(Found::Alive) => continue,
                Ok(Found::Ended(result)) => Some(result),
                Ok(Found::Vanished(reason)) => {
                    if let Some(w) = self.watched.remove(&name) {
                        self.events.push_back(Event::Lost {
                            attempt: w.id,
                            reason,
                        });
                    }
                    continue;
                }
                Err(e) => {
                    tracing::warn!("cannot check attempt folder {}: {e}", dir.display());
                    continue;
                }
            };
            if let Some(w) = self.watched.remove(&name) {
                self.events.push_back(Event::Ended {
                    attempt: w.id,
                    result: event,
                });
            }
        }
    }

    /// Declares lost the attempts whose runtime has been silent past the heartbeat timeout
    /// (it hangs, or its machine died): they are fenced off and their programs ended, and a
    /// runtime of this engine that hangs is ended too.
    fn check_heartbeats(&mut self) {
        let now = SystemTime::now();
        let silent: Vec<(String, Duration)> = self
            .watched
            .iter()
            .filter_map(|(name, w)| {
                let quiet = heartbeat::silence(&w.dir, now)?;
                (quiet > self.settings.heartbeat_timeout).then(|| (name.clone(), quiet))
            })
            .collect();
        for (name, quiet) in silent {
            let Some(w) = self.watched.remove(&name) else {
                continue;
            };
            heartbeat::fence(&w.dir);
            if let Some(generation) = w.ours {
                if let Some(server) = self.server.as_ref().filter(|s| s.generation == generation) {
                    server.kill();
                }
                self.runtime_gone(generation);
            }
            self.events.push_back(Event::Lost {
                attempt: w.id,
                reason: heartbeat::reason(quiet),
            });
        }
    }

    fn beat_every(&self) -> Duration {
        (self.settings.heartbeat_timeout / 4).min(Duration::from_secs(1))
    }
}

impl Executor for Local {
    fn capacity(&self) -> &Capacity {
        &self.capacity
    }

    fn handle(&self, id: &AttemptId) -> Handle {
        Handle::new(self.runtime_dir(id).display().to_string())
    }

    fn runtime_dir(&self, id: &AttemptId) -> PathBuf {
        files::attempt_dir(&self.home, &id.run, &id.step, id.number)
    }

    async fn prepare(
        &mut self,
        id: &AttemptId,
        launch: &contract::Launch,
    ) -> Result<Handle, Error> {
        let dir = self.runtime_dir(id);
        files::write_launch(&dir, launch)
            .map_err(io(format!("cannot write attempt folder {}", dir.display())))?;
        Ok(self.handle(id))
    }

    async fn discard(&mut self, handle: &Handle) {
        let _ = std::fs::remove_dir_all(Self::dir(handle));
    }

    async fn launch(
        &mut self,
        id: &AttemptId,
        handle: &Handle,
        launch: &contract::Launch,
        _placement: &Placement,
    ) -> Result<(), Error> {
        let dir = Self::dir(handle).to_path_buf();
        if !launch.gpus.is_empty() {
            // The GPUs are known once reserved: the launch is written again before the runtime
            // is handed it.
            files::write_launch(&dir, launch)
                .map_err(io(format!("cannot write attempt folder {}", dir.display())))?;
        }
        match self.hand_over(id, &dir).await {
            Ok(generation) => {
                self.watch(id, dir, Some(generation));
                Ok(())
            }
            Err(e) => Err(Error::Unavailable(format!(
                "cannot start the runtime ({}): {e}",
                runtime::command().map_or_else(|why| why, |r| r.to_string())
            ))),
        }
    }

    async fn reattach(&mut self, id: &AttemptId, handle: &Handle) -> Result<Probe, Error> {
        let dir = Self::dir(handle).to_path_buf();
        let found = probe::probe(&dir)
            .map_err(io(format!("cannot check attempt folder {}", dir.display())))?;
        Ok(match found {
            Found::Alive => {
                self.watch(id, dir, None);
                Probe::Running
            }
            Found::Ended(result) => Probe::Ended(result),
            Found::Vanished(reason) => Probe::Lost(reason),
        })
    }

    async fn result(&self, handle: &Handle) -> Option<contract::Result> {
        probe::read_result(Self::dir(handle))
    }

    async fn stop_asked(&self, handle: &Handle) -> bool {
        stop::asked(Self::dir(handle))
    }

    async fn stop(&self, handle: &Handle, reason: Reason) -> Result<(), Error> {
        stop::ask(Self::dir(handle), reason)
    }

    async fn metrics(&self, handle: &Handle, metric: &str) -> Vec<(u64, f64)> {
        files::curve(Self::dir(handle), metric)
    }

    async fn log(&self, handle: &Handle, from: u64) -> Result<Vec<u8>, Error> {
        let dir = Self::dir(handle);
        files::log(dir, from).map_err(io(format!("cannot read the log in {}", dir.display())))
    }

    /// Keeps the attempt's log in the object store (at `OBJECTS/logs/output.log`), in the
    /// background: the next trial or step need not wait for it (it cost about a tenth of a
    /// no-op step). A failure is logged, not fatal: the log stays readable in the attempt's
    /// folder, where `sluice logs` also looks.
    fn ended(&mut self, handle: &Handle, objects: &str) {
        let from = Self::dir(handle).join(contract::LOG_FILE);
        if !std::fs::metadata(&from).is_ok_and(|m| m.len() > 0) {
            return;
        }
        let key = format!("{objects}/logs/output.log");
        let store = self.objects.clone();
        self.uploads.spawn(async move {
            if let Err(e) = store.put_path(&from, &key).await {
                tracing::warn!("cannot keep the log {}: {e}", from.display());
            }
        });
        // Collect the finished ones, so that the set stays small.
        while self.uploads.try_join_next().is_some() {}
    }

    async fn settle(&mut self) {
        while self.uploads.join_next().await.is_some() {}
    }

    async fn next_event(&mut self) -> Event {
        loop {
            if let Some(event) = self.events.pop_front() {
                return event;
            }
            if self.watched.is_empty() {
                // Nothing to watch: nothing to poll either, until the runtime says something
                // (a driver whose steps wait costs nothing here).
                match self.rx.recv().await {
                    Some(note) => self.on_note(note),
                    None => std::future::pending::<()>().await,
                }
                continue;
            }
            let beat_at = self.last_beat + self.beat_every();
            let poll_at = if self.watched.values().any(|w| w.ours.is_none()) {
                self.last_poll + REATTACHED_POLL
            } else {
                beat_at
            };
            let at = beat_at.min(poll_at);
            tokio::select! {
                Some(note) = self.rx.recv() => self.on_note(note),
                () = tokio::time::sleep_until(at.into()) => {
                    let now = Instant::now();
                    if now >= poll_at {
                        self.last_poll = now;
                        self.poll_unowned();
                    }
                    if now >= beat_at {
                        self.last_beat = now;
                        self.check_heartbeats();
                    }
                }
            }
        }
    }

    /// SIGTERM to the run's runtime, which stops its attempts as it does on eviction.
    fn halt(&mut self) {
        if let Some(server) = &self.server {
            server.terminate();
        }
    }
}

#[cfg(test)]
mod tests;
