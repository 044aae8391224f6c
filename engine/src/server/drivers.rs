//! The runs this server drives: every `Running` run of the store that no live engine holds.
//! A run submitted through the API is started at once ([`Drivers::drive`]); the others (runs
//! reopened by `retry` or `resume`, runs of a server that died or stopped, of a `sluice run`
//! whose process was killed) are adopted by a pass over the store every
//! [`ADOPT_EVERY`]. Each run is driven by its own `run::Driver` task; all of them share the
//! process's schedulers, so one scheduler decides for every run of a Cluster. While it leads,
//! this loop also keeps the schedule loop (`ticks`) running, one per lead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};

use super::metrics::Metrics;
use crate::run::admission::Schedulers;
use crate::run::{self, Driver, Ending, Interrupt};
use crate::service::Service;
use crate::store::Store;

use super::leader::Elected;

/// How often the store is looked through for runs nobody drives.
pub const ADOPT_EVERY: Duration = Duration::from_secs(1);

/// The driver tasks of this process, by run id.
pub struct Drivers {
    service: Service,
    /// The server's Cluster file and object store, for the runs its schedules start.
    cluster: Option<std::path::PathBuf>,
    /// Where the schedule loop reads the time: the service's clock, or a test's.
    schedule_clock: Mutex<Option<Arc<dyn crate::clock::Clock>>>,
    objects: Option<String>,
    /// The store fenced with this server's epoch while it leads (its drivers write through
    /// it); None while another server leads.
    lead: Mutex<Option<Store>>,
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
    pub fn new(
        service: Service,
        metrics: Arc<Metrics>,
        cluster: Option<std::path::PathBuf>,
        objects: Option<String>,
    ) -> Arc<Self> {
        Arc::new(Drivers {
            service,
            schedule_clock: Mutex::new(None),
            cluster,
            objects,
            lead: Mutex::new(None),
            schedulers: Schedulers::default(),
            metrics,
            running: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            tasks: Mutex::new(tokio::task::JoinSet::new()),
        })
    }

    /// Makes the schedule loop read the time from `clock` (tests drive it).
    pub fn set_schedule_clock(&self, clock: Arc<dyn crate::clock::Clock>) {
        if let Ok(mut c) = self.schedule_clock.lock() {
            *c = Some(clock);
        }
    }

    /// How many runs this process drives now.
    pub fn count(&self) -> usize {
        self.running.lock().map_or(0, |r| r.len())
    }

    /// Looks for runs to adopt now rather than at the next pass.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// The store this server's drivers write through, while it leads.
    fn leading(&self) -> Option<Store> {
        self.lead.lock().ok().and_then(|l| l.clone())
    }

    /// Starts driving run `id` unless this process drives it already, or another server
    /// leads (which adopts it within a second).
    pub fn drive(self: &Arc<Self>, id: &str) {
        let Some(store) = self.leading() else {
            return;
        };
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
            let _ = tracing::Instrument::instrument(me.drive_one(store, &id, rx), span).await;
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

    async fn drive_one(&self, store: Store, id: &str, rx: mpsc::UnboundedReceiver<Interrupt>) {
        let store = &store;
        let clock = self.service.clock().clone();
        // Boxed: opening's future is not kept beside the driver's for as long as the run waits.
        let opened = match Box::pin(Driver::open(store.clone(), id, &self.schedulers, clock)).await
        {
            Ok(opened) => opened,
            Err(run::driver::Error::Invalid(why)) => {
                tracing::warn!("run {id} cannot be driven: {why}");
                let end = run::transitions::undrivable(why);
                let change = crate::store::Change {
                    events: vec![crate::store::Event {
                        step: None,
                        kind: crate::store::EventKind::Ended,
                        detail: Some(end.0.into()),
                    }],
                    run_end: Some(end),
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
        let mut driver = match opened {
            Ok(d) => d,
            Err(Ending::Busy(holder)) => {
                tracing::debug!("run {id} is driven by the engine {holder}");
                return;
            }
            Err(_) => return,
        };
        // Steps of a server's runs start from the allow-list, never the server's own
        // environment (its store's URL, its token, its object store's credentials).
        driver.set_step_environment(crate::executor::StepEnvironment::Allowed);
        tracing::info!("driving run {id}");
        match driver.drive(&mut run::driver::Silent, Some(rx)).await {
            Ok(Ending::Ended(state)) => {
                tracing::info!("run {id} ended: {state}");
                self.metrics.run_ended(state.as_str());
            }
            Ok(Ending::Detached) => tracing::info!("run {id} left to the next server"),
            Ok(Ending::Busy(holder)) => tracing::warn!("run {id} was taken over by {holder}"),
            Err(e) => tracing::warn!("driving run {id} stopped: {e}"),
        }
    }

    /// Adopts every `Running` run that no live engine holds (this process's own runs are
    /// already driven), and those `previous` (the server that led before) held, whose leases
    /// need not be waited out: that server is fenced.
    pub async fn adopt(
        self: &Arc<Self>,
        previous: Option<&str>,
    ) -> Result<(), crate::store::Error> {
        let Some(store) = self.leading() else {
            return Ok(());
        };
        let now = self.service.clock().now_ms();
        let me = run::engine::me(now + run::engine::LEASE_MS);
        // This process's own runs are driven already: only the others are read.
        let runs = store.running_not_held_by(&me.owner).await?;
        for (id, holder) in runs {
            let free = match holder {
                None => true,
                Some(h) if previous == Some(h.owner.as_str()) => {
                    store.take_lease(&id, &me, |_| true, true).await?.is_ok()
                }
                Some(h) => !run::engine::alive(&h, now),
            };
            if free {
                self.drive(&id);
            }
        }
        Ok(())
    }

    /// Follows the lead: while this server leads, adopts runs (every [`ADOPT_EVERY`], or
    /// when woken); when it loses the lead or `stop` turns true, tells every driver to stop
    /// driving (their steps keep running) and waits for them.
    pub async fn run(
        self: Arc<Self>,
        mut lead: watch::Receiver<Option<Elected>>,
        mut stop: watch::Receiver<bool>,
    ) {
        let mut previous: Option<String> = None;
        let mut handled: Option<Elected> = None;
        // Runs created or reopened by another process (or let go by this one's renewal).
        let mut adoptable = self.service.store().adoptable();
        // The schedule loop of the current lead: its way to be stopped, and its task.
        let mut ticks: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)> = None;
        loop {
            if *stop.borrow() {
                break;
            }
            // The lead as the election says it now (a change seen by `changed` below is
            // handled here, on the next turn).
            let now = lead.borrow_and_update().clone();
            if now != handled {
                stop_ticks(ticks.take()).await;
                match &now {
                    Some(e) => {
                        let fenced = self.service.store().fenced(e.epoch);
                        if let Ok(mut l) = self.lead.lock() {
                            *l = Some(fenced.clone());
                        }
                        self.metrics.set_leader(true);
                        previous.clone_from(&e.previous);
                        ticks = Some(self.start_ticks(fenced));
                    }
                    None => {
                        if let Ok(mut l) = self.lead.lock() {
                            *l = None;
                        }
                        self.metrics.set_leader(false);
                        self.detach_all().await;
                    }
                }
                handled = now;
            }
            if self.leading().is_some() {
                if let Err(e) = self.adopt(previous.as_deref()).await {
                    tracing::warn!("cannot look for runs to drive: {e}");
                } else {
                    previous = None;
                }
            }
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                _ = lead.changed() => {}
                () = self.wake.notified() => {}
                _ = adoptable.changed() => {}
                () = tokio::time::sleep(ADOPT_EVERY) => {}
            }
        }
        stop_ticks(ticks.take()).await;
        if let Ok(mut l) = self.lead.lock() {
            *l = None;
        }
        self.detach_all().await;
    }

    /// Starts the schedule loop of a new lead, with an empty cache: it starts from what the
    /// store says, writing through the lead's fenced store.
    fn start_ticks(
        self: &Arc<Self>,
        fenced: Store,
    ) -> (watch::Sender<bool>, tokio::task::JoinHandle<()>) {
        let clock = self
            .schedule_clock
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .unwrap_or_else(|| self.service.clock().clone());
        let ticks = super::ticks::Ticks::new(
            Service::for_clients(fenced, clock),
            self.clone(),
            self.cluster.clone(),
            self.objects.clone(),
        );
        let (tx, rx) = watch::channel(false);
        (tx, tokio::spawn(ticks.run(rx)))
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

/// Stops a schedule loop and waits for its pass to end.
async fn stop_ticks(ticks: Option<(watch::Sender<bool>, tokio::task::JoinHandle<()>)>) {
    if let Some((tx, task)) = ticks {
        let _ = tx.send(true);
        if let Err(e) = task.await {
            tracing::warn!("the schedule loop ended badly: {e}");
        }
    }
}
