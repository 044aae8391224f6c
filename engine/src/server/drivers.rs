//! The runs this server drives: every `Running` run of the store that no live engine holds.
//! A run submitted through the API is started at once ([`Drivers::drive`]); the others (runs
//! reopened by `retry` or `resume`, runs of a server that died or stopped, of a `sluice run`
//! whose process was killed) are adopted by a pass over the store every
//! [`ADOPT_EVERY`]. Each run is driven by its own `run::Driver` task; all of them share the
//! process's schedulers, so one scheduler decides for every run of a Cluster.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};

use super::metrics::Metrics;
use crate::run::admission::Schedulers;
use crate::run::state::run as rs;
use crate::run::{self, Driver, Ending, Interrupt};
use crate::service::Service;

/// How often the store is looked through for runs nobody drives.
pub const ADOPT_EVERY: Duration = Duration::from_secs(1);

/// The driver tasks of this process, by run id.
pub struct Drivers {
    service: Service,
    schedulers: Schedulers,
    metrics: Arc<Metrics>,
    /// Each driven run's way to be told to stop (detach) at shutdown.
    running: Mutex<HashMap<String, mpsc::UnboundedSender<Interrupt>>>,
    /// Wakes the adopting loop early (a run was reopened).
    wake: Notify,
    /// Driver tasks, to be waited for at shutdown.
    tasks: Mutex<tokio::task::JoinSet<()>>,
}

impl std::fmt::Debug for Drivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drivers").finish_non_exhaustive()
    }
}

impl Drivers {
    pub fn new(service: Service, metrics: Arc<Metrics>) -> Arc<Self> {
        Arc::new(Drivers {
            service,
            schedulers: Schedulers::default(),
            metrics,
            running: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            tasks: Mutex::new(tokio::task::JoinSet::new()),
        })
    }

    /// How many runs this process drives now.
    pub fn count(&self) -> usize {
        self.running.lock().map_or(0, |r| r.len())
    }

    /// Looks for runs to adopt now rather than at the next pass.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Starts driving run `id` unless this process drives it already.
    pub fn drive(self: &Arc<Self>, id: &str) {
        let (tx, rx) = mpsc::unbounded_channel();
        {
            let Ok(mut running) = self.running.lock() else {
                return;
            };
            if running.contains_key(id) {
                return;
            }
            running.insert(id.to_owned(), tx);
        }
        let me = self.clone();
        let id = id.to_owned();
        let task = async move {
            let span = tracing::info_span!("run", id = %id);
            let _ = tracing::Instrument::instrument(me.drive_one(&id, rx), span).await;
            if let Ok(mut running) = me.running.lock() {
                running.remove(&id);
            }
        };
        if let Ok(mut tasks) = self.tasks.lock() {
            // Finished tasks are dropped as new ones come, so the set does not grow.
            while tasks.try_join_next().is_some() {}
            tasks.spawn(task);
        }
    }

    async fn drive_one(&self, id: &str, rx: mpsc::UnboundedReceiver<Interrupt>) {
        let store = self.service.store();
        let clock = self.service.clock().clone();
        let opened = match Driver::open(store.clone(), id, &self.schedulers, clock).await {
            Ok(opened) => opened,
            Err(run::driver::Error::Invalid(why)) => {
                // A run this version cannot drive ends Failed, saying why, rather than
                // staying Running with nobody able to drive it.
                tracing::warn!("run {id} cannot be driven: {why}");
                let change = crate::store::Change {
                    run_end: Some((rs::FAILED.to_owned(), Some(why))),
                    ..crate::store::Change::default()
                };
                if let Err(e) = store.commit(id, change).await {
                    tracing::warn!("cannot record that run {id} failed: {e}");
                }
                let _ = store.release_lease(id, &run::engine::me(0).owner).await;
                return;
            }
            Err(e) => {
                tracing::warn!("cannot open run {id}: {e}");
                return;
            }
        };
        let driver = match opened {
            Ok(d) => d,
            Err(Ending::Busy(holder)) => {
                tracing::debug!("run {id} is driven by the engine {holder}");
                return;
            }
            Err(_) => return,
        };
        tracing::info!("driving run {id}");
        match driver.drive(&mut run::driver::Silent, Some(rx)).await {
            Ok(Ending::Ended(state)) => {
                tracing::info!("run {id} ended: {state}");
                self.metrics.run_ended(&state);
            }
            Ok(Ending::Detached) => tracing::info!("run {id} left to the next server"),
            Ok(Ending::Busy(holder)) => tracing::warn!("run {id} was taken over by {holder}"),
            Err(e) => tracing::warn!("driving run {id} stopped: {e}"),
        }
    }

    /// Adopts every `Running` run that no live engine holds (this process's own runs are
    /// already driven).
    pub async fn adopt(self: &Arc<Self>) -> Result<(), crate::store::Error> {
        let store = self.service.store();
        let now = self.service.clock().now_ms();
        let me = run::engine::me(0).owner;
        let runs = store.runs(None, Some(rs::RUNNING), i64::MAX).await?;
        for r in runs {
            let free = match r.holder() {
                None => true,
                Some(h) => h.owner == me || !run::engine::alive(&h, now),
            };
            if free {
                self.drive(&r.id);
            }
        }
        Ok(())
    }

    /// Adopts runs until `stop` turns true, then tells every driver to stop driving (their
    /// steps keep running) and waits for them.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                break;
            }
            if let Err(e) = self.adopt().await {
                tracing::warn!("cannot look for runs to drive: {e}");
            }
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(ADOPT_EVERY) => {}
            }
        }
        self.detach_all().await;
    }

    /// Tells every driver to stop driving and leave its steps running, and waits for them.
    pub async fn detach_all(&self) {
        if let Ok(running) = self.running.lock() {
            for tx in running.values() {
                let _ = tx.send(Interrupt::Detach);
            }
        }
        let mut tasks = match self.tasks.lock() {
            Ok(mut t) => std::mem::take(&mut *t),
            Err(_) => return,
        };
        while tasks.join_next().await.is_some() {}
    }
}
