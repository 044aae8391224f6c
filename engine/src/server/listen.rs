//! The server's accept loop, in place of `axum::serve`, for the limits a server facing many
//! clients needs and `axum::serve` does not set: a header-read timeout (a connection that
//! does not finish its request's head in time is closed, so half-open requests cannot pile
//! up), and a cap on open connections kept below the process's file descriptors, so that a
//! flood of sockets leaves the store, the attempts' files and the logs descriptors to work
//! with. At the cap the loop stops accepting; what arrives waits in the kernel's backlog
//! until a connection closes.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tower::ServiceExt;

/// File descriptors kept for everything but connections (the store, attempts, logs).
const RESERVED_FDS: u64 = 256;

/// How the listener is bounded.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections at most.
    pub max_connections: usize,
    /// How long a client has to send a request's head (from the connection's start, or the
    /// end of its previous answer).
    pub header_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            header_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// The limits as they can hold in this process: the soft limit on open files raised to
    /// the hard one, and the cap lowered to what that leaves after [`RESERVED_FDS`].
    pub fn fitted(self) -> Limits {
        use nix::sys::resource::{Resource, getrlimit, setrlimit};
        let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
            return self;
        };
        let soft = if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
            hard
        } else {
            soft
        };
        let room = usize::try_from(soft.saturating_sub(RESERVED_FDS)).unwrap_or(usize::MAX);
        let max_connections = self.max_connections.min(room.max(16));
        if max_connections < self.max_connections {
            tracing::warn!(
                "at most {max_connections} connections: this process may open {soft} files"
            );
        }
        Limits {
            max_connections,
            ..self
        }
    }
}

/// Serves `app` on `listener` until `stop` turns true; then stops accepting, asks every open
/// connection to finish (answers under way complete), and returns once they have.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    // Dropped when the loop ends: each connection's task then finishes gracefully.
    let (closing_tx, closing_rx) = watch::channel(());
    // Every connection's task holds a sender: all dropped means all ended.
    let (ended_tx, mut ended_rx) = mpsc::channel::<()>(1);
    loop {
        let slot = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(s) => s,
                Err(_) => break,
            },
        };
        let (stream, remote) = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a connection reset before it was accepted: the
                    // loop goes on, after a breath if the process is out of files.
                    tracing::debug!("accept: {e}");
                    let out_of_files = [nix::errno::Errno::EMFILE, nix::errno::Errno::ENFILE]
                        .iter()
                        .any(|n| e.raw_os_error() == Some(*n as i32));
                    if out_of_files {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let mut closing = closing_rx.clone();
        let ended = ended_tx.clone();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(app.map_request(
                move |mut request: hyper::Request<Incoming>| {
                    request.extensions_mut().insert(ConnectInfo(remote));
                    request.map(Body::new)
                },
            ));
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!("connection from {remote}: {e}");
                    }
                }
                _ = closing.changed() => {
                    conn.as_mut().graceful_shutdown();
                    if let Err(e) = conn.await {
                        tracing::debug!("connection from {remote}: {e}");
                    }
                }
            }
            drop(slot);
            drop(ended);
        });
    }
    drop(closing_tx);
    drop(ended_tx);
    // Every connection's sender dropped: `recv` says the channel is closed.
    let _ = ended_rx.recv().await;
    Ok(())
}
