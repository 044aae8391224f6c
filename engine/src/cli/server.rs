//! `sluice server`: serves the API and drives every run of its state store until SIGTERM or
//! Ctrl-C, then stops accepting requests and leaves running steps running for the next
//! server (as `run --detach`'s engine does on SIGTERM).

use std::net::SocketAddr;
use std::path::PathBuf;

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::say;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A Cluster file: runs submitted here are admitted onto its nodes (quotas, fair share,
    /// priorities, gangs), and its `state` and `objects` are the server's unless --state
    /// and --objects say otherwise.
    #[arg(long, value_name = "FILE")]
    pub cluster: Option<PathBuf>,
    /// Where the API listens.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// The object store of runs submitted here (file:///PATH or s3://BUCKET/PREFIX);
    /// default: the Cluster's `objects`, else a folder in the home.
    #[arg(long, env = "SLUICE_OBJECTS", value_name = "URL")]
    pub objects: Option<String>,
    /// Requests one token may make per second (bursts of as many); more get 429.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub rate: u32,
    /// An origin (https://HOST[:PORT]) whose pages may send changes besides the server's
    /// own (its Host): the address browsers use when a proxy in front rewrites Host.
    /// Repeatable. Other sites' POST, PUT, PATCH and DELETE requests are refused (403).
    #[arg(long = "allowed-origin", value_name = "URL")]
    pub allowed_origins: Vec<crate::server::origin::Origin>,
    /// Open connections at most (log streams that follow a run included); past it, new ones
    /// wait for one to close. Lowered to what the process's open-file limit allows.
    #[arg(long, default_value_t = 1024, value_name = "N")]
    pub max_connections: usize,
    /// How long a client has to send a request's head (its line and headers) before the
    /// connection is closed: half-open requests do not pile up.
    #[arg(long, default_value = "10s", value_name = "DURATION", value_parser = crate::spec::units::parse_duration)]
    pub header_timeout: std::time::Duration,
    /// Failed authentications (unknown, expired or revoked tokens) one client address may
    /// make in a minute; past them its requests get 429 until the minute is over. Behind a
    /// proxy, every client has the proxy's address.
    #[arg(long, default_value_t = crate::server::api::failures::LIMIT, value_name = "N")]
    pub auth_failures: u32,
}

/// Runs the server on its own multi-threaded runtime (every run is driven by a task).
pub fn run(home: &Home, args: &Args) -> Result<Outcome, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io {
            context: "cannot start the async runtime".into(),
            source: e,
        })?;
    runtime.block_on(serve(home, args))
}

async fn serve(home: &Home, args: &Args) -> Result<Outcome, Error> {
    if let Some(file) = &args.cluster {
        cluster_state(file)?;
    }
    super::run::runtime_found()?;
    // A server holds every team's state: a damaged store is refused now, rather than served
    // while every request fails on it, and its files are its owner's only.
    let store = crate::store::Store::open_verified(&home.path).await?;
    for file in store.make_files_private() {
        tracing::info!(
            "{} was readable by others: now by its owner only",
            file.display()
        );
    }
    let config = crate::server::Config {
        listen: args.listen,
        cluster: args
            .cluster
            .as_ref()
            .map(|c| std::path::absolute(c).unwrap_or_else(|_| c.clone())),
        objects: args.objects.clone(),
        rate: args.rate,
        allowed_origins: args.allowed_origins.clone(),
        limits: crate::server::listen::Limits {
            max_connections: args.max_connections.max(1),
            header_timeout: args.header_timeout,
        },
        auth_failures: args.auth_failures,
    };
    let server = crate::server::Server::bind(config, store, crate::clock::system())
        .await
        .map_err(|e| Error::Io {
            context: e.to_string(),
            source: std::io::Error::other("listen"),
        })?;
    let addr = server.local_addr().unwrap_or(args.listen);
    say(format_args!(
        "sluice server: listening on http://{addr} (home {}); SIGTERM or Ctrl-C stops it and leaves running steps to the next server",
        home.path.display()
    ));
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            tracing::warn!("cannot listen for SIGTERM and SIGINT");
            return;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        say("sluice server: stopping (running steps keep running)");
        let _ = tx.send(true);
    });
    server.serve(rx).await.map_err(|e| Error::Io {
        context: "the server stopped".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(Outcome::Success)
}

/// A Cluster file is checked before anything starts, and its `state:` chosen unless
/// --state was given (as `sluice run --cluster` does).
fn cluster_state(file: &std::path::Path) -> Result<(), Error> {
    let shown = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .map_err(|e| Error::Usage(format!("cannot read {shown}: {e}")))?;
    let (loaded, _) = crate::spec::cluster::load(&shown, text).map_err(|diags| {
        super::output::diagnostics(&diags);
        Error::Usage(format!("{shown} is not valid"))
    })?;
    if crate::store::chosen().is_some() {
        return Ok(());
    }
    let Some(url) = crate::service::submit::cluster_setting(&loaded, "state").map(|(u, _)| u)
    else {
        return Ok(());
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let location = crate::store::Location::parse(&url, &cwd)
        .map_err(|e| Error::Usage(format!("{shown}: state: {e}")))?;
    crate::store::choose(&location.url())?;
    Ok(())
}
