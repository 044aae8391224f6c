//! `sluice server`: the same engine as `sluice run`, kept running for many teams. One process
//! drives every run of its state store ([`drivers`], one scheduler per Cluster over all of
//! them) and serves the HTTP API ([`api`]) that the CLI's `--server` mode and other clients
//! use, and the web UI at `/` ([`ui`]); `/metrics`, `/healthz` and `/readyz` beside it.
//!
//! Nothing here runs steps differently from embedded mode: a run submitted through the API is
//! recorded by the service and driven by `run::Driver`, exactly as `sluice run` drives it.

pub mod api;
pub mod drivers;
pub mod headers;
pub mod leader;
pub mod listen;
pub mod metrics;
pub mod origin;
pub mod ticks;
pub mod ui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;

use crate::clock::Clock;
use crate::service::Service;
use crate::store::Store;

/// How a server is set up (`sluice server`'s flags, resolved).
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the API listens.
    pub listen: SocketAddr,
    /// The Cluster file every run submitted here is admitted under (its nodes, quotas and
    /// priorities), if any.
    pub cluster: Option<PathBuf>,
    /// The object store runs keep their outputs in; default: the Cluster's, else the home's.
    pub objects: Option<String>,
    /// Requests a token may make per second (a burst of as many is allowed).
    pub rate: u32,
    /// Open connections and the time to send a request's head.
    pub limits: listen::Limits,
    /// Failed authentications one address may make in a minute.
    pub auth_failures: u32,
    /// Origins besides the server's own (`Host`) whose pages may send changes: the address
    /// browsers use when a proxy in front rewrites `Host` (see [`origin`]).
    pub allowed_origins: Vec<origin::Origin>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the server stopped: {0}")]
    Serve(#[source] std::io::Error),
}

/// A server bound to its address, ready to serve.
pub struct Server {
    listener: tokio::net::TcpListener,
    config: Config,
    service: Service,
    metrics: Arc<metrics::Metrics>,
    drivers: Arc<drivers::Drivers>,
}

impl Server {
    /// Binds the listener and prepares the engine over `store`.
    pub async fn bind(config: Config, store: Store, clock: Arc<dyn Clock>) -> Result<Self, Error> {
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|source| Error::Listen {
                addr: config.listen,
                source,
            })?;
        let metrics = Arc::new(metrics::Metrics::new());
        let service = Service::for_clients(store, clock);
        let drivers = drivers::Drivers::new(
            service.clone(),
            metrics.clone(),
            config.cluster.clone(),
            config.objects.clone(),
        );
        // A test's clock for the schedule loop (documented as test-only).
        if let Some(path) = std::env::var_os("SLUICE_SCHEDULE_CLOCK_FILE") {
            drivers.set_schedule_clock(Arc::new(crate::clock::FileClock { path: path.into() }));
        }
        Ok(Server {
            listener,
            config,
            service,
            metrics,
            drivers,
        })
    }

    /// The address the API listens on (the port the system chose for `:0`).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `stop` turns true: then stops accepting requests, finishes those under
    /// way, and stops driving runs, leaving their steps running for the next server to
    /// adopt (as a detached engine does).
    pub async fn serve(self, stop: watch::Receiver<bool>) -> Result<(), Error> {
        // The election and the engine: the engine drives runs while the election says this
        // server leads.
        let (lead_tx, lead_rx) = watch::channel(None);
        let me = crate::run::engine::me(0).owner;
        let election = tokio::spawn(leader::elect(
            self.service.store().clone(),
            self.service.clock().clone(),
            me.clone(),
            lead_tx,
            stop.clone(),
        ));
        let engine = tokio::spawn(self.drivers.clone().run(lead_rx.clone(), stop.clone()));
        // The web UI's usage page shows a week: each team's is read once now, in the
        // background, and kept (`service::usage::days`).
        let warm = self.service.clone();
        tokio::spawn(async move {
            if let Err(e) = warm.warm_usage(7).await {
                tracing::info!("cannot read the last week's usage ahead: {e}");
            }
        });
        let store = self.service.store().clone();
        let state = api::AppState::new(
            self.service,
            self.drivers,
            self.metrics,
            &self.config,
            stop.clone(),
        );
        let app = api::router(state);
        let served = listen::serve(self.listener, app, self.config.limits.fitted(), stop).await;
        if let Err(e) = engine.await {
            tracing::warn!("the engine's loop ended badly: {e}");
        }
        let _ = election.await;
        // Every driver has stopped: the lead is let go at once, so that another server takes
        // over without waiting for the lease to run out.
        let last = lead_rx.borrow().clone();
        if let Some(e) = last
            && let Err(err) = store.resign(e.epoch, &me).await
        {
            tracing::warn!("cannot let the lead go: {err}");
        }
        served.map_err(Error::Serve)
    }
}
