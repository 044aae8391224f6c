//! The CLI against a server (`--server URL` or `$SLUICE_SERVER`, the token in
//! `$SLUICE_TOKEN`): each command is one or a few API requests, and what it prints is what the
//! server renders with the code embedded mode prints with (`?format=text`), or the API's
//! JSON, which has the `--output json` shapes. Exit codes are embedded mode's: a refusal
//! of the request is 2, a server that cannot be reached is 3.

use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use super::exit::{Error, Outcome};
use super::output::{self, Format, say};
use crate::client::{self, Client};
use crate::run::driver::Watcher;
use crate::run::state::run as rs;
use crate::store::StepRow;

static SERVER: OnceLock<Client> = OnceLock::new();

/// Sets the server every command talks to (once, from the flags).
pub fn connect(url: &str) -> Result<(), Error> {
    let token = std::env::var("SLUICE_TOKEN").ok().filter(|t| !t.is_empty());
    let client = Client::new(url, token)?;
    let _ = SERVER.set(client);
    Ok(())
}

/// The server, when the CLI talks to one.
pub fn server() -> Option<&'static Client> {
    SERVER.get()
}

fn format_query(format: Format) -> (&'static str, String) {
    (
        "format",
        match format {
            Format::Json => "json",
            Format::Text => "text",
        }
        .to_owned(),
    )
}

fn run_path(run: &str) -> String {
    format!("/api/v1/runs/{}", client::segment(run))
}

fn print(body: &str, format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::text(|out| writeln!(out, "{}", body.trim_end())),
        Format::Text => output::text(|out| write!(out, "{body}")),
    }
    .map_err(Error::output)
}

/// `sluice runs`.
pub async fn runs(
    c: &Client,
    args: &super::status::RunsArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let mut query = vec![format_query(format), ("limit", args.limit.to_string())];
    for (k, v) in [
        ("team", &args.team),
        ("state", &args.state),
        ("pipeline", &args.pipeline),
        ("since", &args.since),
    ] {
        if let Some(v) = v {
            query.push((k, v.clone()));
        }
    }
    let body = c.text(Method::GET, "/api/v1/runs", &query).await?;
    print(&body, format)?;
    Ok(Outcome::Success)
}

/// `sluice status RUN`.
pub async fn status(
    c: &Client,
    args: &super::status::StatusArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let mut query = vec![format_query(format)];
    if let Some((limit, offset)) = args.page() {
        query.push(("steps_limit", limit.to_string()));
        query.push(("steps_offset", offset.to_string()));
    }
    let body = c.text(Method::GET, &run_path(&args.run), &query).await?;
    print(&body, format)?;
    Ok(Outcome::Success)
}

/// `sluice logs RUN [STEP] [-f]`: the stream, as it comes.
pub async fn logs(c: &Client, args: &super::logs::Args, format: Format) -> Result<Outcome, Error> {
    let mut query = vec![format_query(format), ("follow", args.follow.to_string())];
    if let Some(step) = &args.step {
        query.push(("step", step.clone()));
    }
    if let Some(n) = args.attempt {
        query.push(("attempt", n.to_string()));
    }
    let mut response = c
        .send(
            Method::GET,
            &format!("{}/logs", run_path(&args.run)),
            &query,
            None,
        )
        .await?;
    if let Some(note) = response
        .headers()
        .get("sluice-note")
        .and_then(|v| v.to_str().ok())
    {
        say(note);
    }
    while let Some(bytes) = c.chunk(&mut response).await? {
        output::text(|out| out.write_all(&bytes)).map_err(Error::output)?;
    }
    Ok(Outcome::Success)
}

/// `{"id": RUN, "state": STATE}` (or `run RUN: STATE`), as embedded `cancel` prints it.
fn print_state(id: &str, state: &str, format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&json!({ "id": id, "state": state })),
        Format::Text => output::text(|out| writeln!(out, "run {id}: {state}")),
    }
    .map_err(Error::output)
}

/// `sluice cancel RUN`: records the cancellation, then (without `--no-wait`) waits for the
/// server to stop the run's steps.
pub async fn cancel(
    c: &Client,
    args: &super::run::CancelArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let answer = c
        .json(
            Method::POST,
            &format!("{}/cancel", run_path(&args.run.run)),
            &[],
            None,
        )
        .await;
    let id = match answer {
        Ok(v) => str_of(&v, "id"),
        Err(client::Error::Refused(r)) if r.status == 409 && r.in_the_way.is_some() => {
            say(&r.message);
            if let Some(w) = &r.in_the_way {
                print_state(&w.run, &w.state, format)?;
            }
            return Ok(Outcome::Success);
        }
        Err(e) => return Err(e.into()),
    };
    if args.no_wait {
        say(format_args!(
            "run {id}: cancel requested; the server stops it within a second"
        ));
    }
    let state = if args.no_wait {
        state_of(c, &id).await?
    } else {
        wait_ended(c, &id).await?
    };
    print_state(&id, &state, format)?;
    Ok(Outcome::Success)
}

async fn state_of(c: &Client, id: &str) -> Result<String, Error> {
    let v = c.json(Method::GET, &run_path(id), &[], None).await?;
    Ok(str_of(&v, "state"))
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_owned()
}

/// Polls run `id` until it has ended; returns its state.
async fn wait_ended(c: &Client, id: &str) -> Result<String, Error> {
    loop {
        let state = state_of(c, id).await?;
        if state != rs::RUNNING {
            return Ok(state);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// How often a followed run is looked at.
const POLL_EVERY: Duration = Duration::from_millis(100);

/// `sluice preempt RUN STEP`.
pub async fn preempt(
    c: &Client,
    args: &super::run::PreemptArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let path = format!(
        "{}/steps/{}/preempt",
        run_path(&args.run),
        client::segment(&args.step)
    );
    let v = c.json(Method::POST, &path, &[], None).await?;
    match format {
        Format::Json => output::json(&v),
        Format::Text => output::text(|out| {
            writeln!(
                out,
                "preempting {} (attempt {}) of run {}: it resumes from its checkpoint",
                str_of(&v, "step"),
                v.get("attempt").and_then(Value::as_i64).unwrap_or(0),
                str_of(&v, "id")
            )
        }),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// `sluice retry RUN`: reopens what failed, then follows the run as `run` does.
pub async fn retry(
    c: &Client,
    args: &super::run::RunRef,
    format: Format,
) -> Result<Outcome, Error> {
    let v = c
        .json(
            Method::POST,
            &format!("{}/retry", run_path(&args.run)),
            &[],
            None,
        )
        .await?;
    let id = str_of(&v, "id");
    let steps = v.get("steps").and_then(Value::as_array).map_or(0, Vec::len);
    if steps == 0 {
        say(format_args!("run {id} succeeded: nothing to retry"));
        return Ok(Outcome::Success);
    }
    if format == Format::Text {
        say(format_args!("run {id}: retrying {steps} step(s)"));
    }
    follow(c, &id, format, args.quiet).await
}

/// `sluice resume RUN`: the server adopts runs whose engine died by itself; this asks it to
/// at once and follows the run.
pub async fn resume(
    c: &Client,
    args: &super::run::RunRef,
    format: Format,
) -> Result<Outcome, Error> {
    let v = c
        .json(
            Method::POST,
            &format!("{}/resume", run_path(&args.run)),
            &[],
            None,
        )
        .await?;
    follow(c, &str_of(&v, "id"), format, args.quiet).await
}

/// `sluice run FILE` (and `sweep`) against a server: submits the file's text, then follows
/// the run (or, with `--detach`, prints its id).
pub async fn start(
    c: &Client,
    shown: &str,
    text: String,
    workdir: &std::path::Path,
    args: &super::run::RunArgs,
    format: Format,
) -> Result<Outcome, Error> {
    if args.cluster.is_some() || args.objects.is_some() {
        return Err(Error::Usage(
            "--cluster and --objects are for embedded mode: a server admits runs under its own Cluster and object store".into(),
        ));
    }
    let body = json!({
        "source": text,
        "path": shown,
        "params": args.params,
        "name": args.name,
        "workdir": workdir.display().to_string(),
    });
    let v = c.submit("/api/v1/runs", &body).await?;
    if let Some(warnings) = v.get("warnings").and_then(Value::as_array) {
        for w in warnings.iter().filter_map(Value::as_str) {
            say(w);
        }
    }
    let id = str_of(&v, "id");
    if args.detach {
        match format {
            Format::Json => output::json(&json!({ "id": id })),
            Format::Text => output::text(|out| writeln!(out, "{id}")),
        }
        .map_err(Error::output)?;
        return Ok(Outcome::Success);
    }
    if format == Format::Text {
        say(format_args!(
            "run {id} started ({} {shown})",
            str_of(&v, "name")
        ));
    }
    follow(c, &id, format, false).await
}

/// Follows run `id` to its end with the same live view as embedded mode, then prints its
/// status and maps its state to the exit code. The first Ctrl-C cancels the run (the server
/// stops its steps); a second one stops following at once.
async fn follow(c: &Client, id: &str, format: Format, quiet: bool) -> Result<Outcome, Error> {
    let mut progress = super::progress::Progress::new(quiet || format == Format::Json);
    let mut seen: std::collections::HashMap<String, (String, i64)> = Default::default();
    let mut presses = 0u32;
    let mut interrupt = Box::pin(tokio::signal::ctrl_c());
    // Each look costs the server a view of the whole run (10,000 trials are 10,000 steps): the
    // next look waits at least ten times as long as this one took, so that following a big
    // run costs the server a tenth of its time at most.
    let state = loop {
        let asked = std::time::Instant::now();
        let v = c.json(Method::GET, &run_path(id), &[], None).await?;
        let wait = POLL_EVERY.max(asked.elapsed() * 10);
        let steps = v
            .get("steps")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let total = steps.len();
        let done = steps
            .iter()
            .filter(|s| {
                crate::run::state::StepState::parse(&str_of(s, "state"))
                    .is_some_and(|s| s.is_terminal())
            })
            .count();
        for s in &steps {
            let name = str_of(s, "name");
            let state = str_of(s, "state");
            let attempts = s
                .get("attempts")
                .and_then(Value::as_array)
                .map_or(0, |a| i64::try_from(a.len()).unwrap_or(i64::MAX));
            if seen.get(&name) == Some(&(state.clone(), attempts)) {
                continue;
            }
            seen.insert(name.clone(), (state.clone(), attempts));
            let row = StepRow {
                name,
                state: crate::run::state::StepState::parse(&state).unwrap_or_default(),
                reason: s.get("reason").and_then(Value::as_str).map(str::to_owned),
                attempts,
                ..StepRow::default()
            };
            progress.step(&row, total, done);
        }
        let state = str_of(&v, "state");
        if state != rs::RUNNING {
            break state;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = &mut interrupt => {
                presses += 1;
                super::run::INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
                if presses > 1 {
                    progress.finish();
                    say(format_args!("run {id}: left to the server (`sluice status {id}`)"));
                    return Ok(Outcome::Interrupted);
                }
                progress.note("cancelling the run (Ctrl-C again to stop following it)");
                let path = format!("{}/cancel", run_path(id));
                match c.json(Method::POST, &path, &[], None).await {
                    Ok(_) | Err(client::Error::Refused(_)) => {}
                    Err(e) => return Err(e.into()),
                }
                interrupt = Box::pin(tokio::signal::ctrl_c());
            }
        }
    };
    progress.finish();
    let body = c
        .text(Method::GET, &run_path(id), &[format_query(format)])
        .await?;
    print(&body, format)?;
    Ok(match rs::RunState::parse(&state) {
        Some(rs::SUCCEEDED) => Outcome::Success,
        Some(rs::CANCELLED) if presses > 0 => Outcome::Interrupted,
        _ => Outcome::Unsuccessful,
    })
}

/// `sluice token create/list/revoke` against the server (an admin's token).
pub async fn token(
    c: &Client,
    command: &super::token::Command,
    format: Format,
) -> Result<Outcome, Error> {
    use super::token::Command as T;
    match command {
        T::Create(a) => {
            let body = json!({
                "team": a.team, "role": a.role, "name": a.name, "expires": a.expires,
            });
            let v = c
                .json(Method::POST, "/api/v1/tokens", &[], Some(&body))
                .await?;
            super::token::print_created(&str_of(&v, "id"), &str_of(&v, "token"), format)?;
        }
        T::List(a) => {
            let mut query = Vec::new();
            if let Some(t) = &a.team {
                query.push(("team", t.clone()));
            }
            let v = c.json(Method::GET, "/api/v1/tokens", &query, None).await?;
            let rows: Vec<super::token::Listed> = serde_json::from_value(v).map_err(|e| {
                Error::Usage(format!("the server's list of tokens cannot be read: {e}"))
            })?;
            super::token::print_list(&rows, format)?;
        }
        T::Revoke(a) => {
            let path = format!("/api/v1/tokens/{}", client::segment(&a.id));
            c.json(Method::DELETE, &path, &[], None).await?;
            super::token::print_revoked(&a.id, format)?;
        }
    }
    Ok(Outcome::Success)
}

/// `sluice usage` against the server.
pub async fn usage(
    c: &Client,
    args: &super::usage::Args,
    format: Format,
) -> Result<Outcome, Error> {
    let mut query = vec![format_query(format), ("by", args.by.clone())];
    for (k, v) in [
        ("team", &args.team),
        ("since", &args.since),
        ("until", &args.until),
    ] {
        if let Some(v) = v {
            query.push((k, v.clone()));
        }
    }
    let body = c.text(Method::GET, "/api/v1/usage", &query).await?;
    print(&body, format)?;
    Ok(Outcome::Success)
}

/// `sluice submit NAME` against the server: runs the applied pipeline, then follows it as
/// `run` does.
pub async fn submit(
    c: &Client,
    args: &super::schedules::SubmitArgs,
    format: Format,
) -> Result<Outcome, Error> {
    let body = json!({"name": args.name, "params": args.params});
    let v = c.submit("/api/v1/submit", &body).await?;
    let id = str_of(&v, "id");
    if args.detach {
        match format {
            Format::Json => output::json(&json!({ "id": id })),
            Format::Text => output::text(|out| writeln!(out, "{id}")),
        }
        .map_err(Error::output)?;
        return Ok(Outcome::Success);
    }
    if format == Format::Text {
        say(format_args!("run {id} started ({})", args.name));
    }
    follow(c, &id, format, false).await
}
