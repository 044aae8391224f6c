//! `sluice token create/list/revoke`: on the server's host (its home or `--state`) without a
//! token, as the admin who owns the home; with `--server`, through the API with an admin's
//! token. `create` prints the token once: only its hash is kept.

use serde::{Deserialize, Serialize};

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format};
use crate::service::{Principal, Service};

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Make a token for a team with a role; it is printed once.
    Create(CreateArgs),
    /// List tokens (never their text), of one team or all.
    List(ListArgs),
    /// Revoke a token by id: its next request is refused (401).
    Revoke(RevokeArgs),
}

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Args)]
pub struct CreateArgs {
    /// The team whose runs the token sees and changes; `*` (admins only) for every team.
    #[arg(long)]
    pub team: String,
    /// viewer (reads), member (also submits, cancels, retries, resumes, preempts) or admin
    /// (everything, and tokens).
    #[arg(long)]
    pub role: String,
    /// A name to tell it by (`ci`, `alice-laptop`).
    #[arg(long)]
    pub name: Option<String>,
    /// How long it lasts (`90d`, `12h`); for ever without.
    #[arg(long, value_name = "DURATION")]
    pub expires: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Only tokens of this team.
    #[arg(long)]
    pub team: Option<String>,
}

#[derive(Debug, clap::Args)]
pub struct RevokeArgs {
    /// The token's id (as `sluice token list` shows it).
    pub id: String,
}

/// A token as listed (the API's shape).
#[derive(Debug, Deserialize, Serialize)]
pub struct Listed {
    pub id: String,
    pub name: Option<String>,
    pub team: String,
    pub role: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

pub async fn run(home: &Home, args: &Args, format: Format) -> Result<Outcome, Error> {
    let store = crate::store::Store::open(&home.path).await?;
    let service = Service::new(store, crate::clock::system());
    let me = Principal::local();
    match &args.command {
        Command::Create(a) => {
            let role = crate::server::api::parse_role(&a.role)?;
            let expires = a
                .expires
                .as_deref()
                .map(crate::server::api::parse_expiry)
                .transpose()?;
            let created = service
                .create_token(&me, "local", &a.team, role, a.name.clone(), expires)
                .await?;
            print_created(&created.row.id, &created.token, format)?;
        }
        Command::List(a) => {
            let rows = service.list_tokens(&me, a.team.as_deref()).await?;
            let rows: Vec<Listed> = rows
                .into_iter()
                .map(|t| Listed {
                    id: t.id,
                    name: t.name,
                    team: t.team,
                    role: t.role,
                    created_at: t.created_at,
                    expires_at: t.expires_at,
                    revoked_at: t.revoked_at,
                })
                .collect();
            print_list(&rows, format)?;
        }
        Command::Revoke(a) => {
            service.revoke_token(&me, "local", &a.id).await?;
            print_revoked(&a.id, format)?;
        }
    }
    Ok(Outcome::Success)
}

pub fn print_created(id: &str, token: &str, format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&serde_json::json!({ "id": id, "token": token })),
        Format::Text => output::text(|out| {
            writeln!(out, "{token}")?;
            output::say(format_args!(
                "token {id} created: it is shown this once (only its hash is kept); use it as SLUICE_TOKEN"
            ));
            Ok(())
        }),
    }
    .map_err(Error::output)
}

pub fn print_list(rows: &[Listed], format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&rows),
        Format::Text => output::text(|out| {
            if rows.is_empty() {
                return writeln!(
                    out,
                    "no tokens yet (`sluice token create --team T --role R`)"
                );
            }
            let name_w = rows
                .iter()
                .map(|r| r.name.as_deref().unwrap_or("-").len())
                .max()
                .unwrap_or(0)
                .max(4);
            let team_w = rows.iter().map(|r| r.team.len()).max().unwrap_or(0).max(4);
            writeln!(
                out,
                "{:12}  {:name_w$}  {:team_w$}  {:6}  {:24}  STATUS",
                "ID", "NAME", "TEAM", "ROLE", "CREATED"
            )?;
            for r in rows {
                let status = match (&r.revoked_at, &r.expires_at) {
                    (Some(at), _) => format!("revoked {at}"),
                    (None, Some(at)) => format!("expires {at}"),
                    (None, None) => "active".to_owned(),
                };
                writeln!(
                    out,
                    "{:12}  {:name_w$}  {:team_w$}  {:6}  {:24}  {status}",
                    r.id,
                    r.name.as_deref().unwrap_or("-"),
                    r.team,
                    r.role,
                    r.created_at
                )?;
            }
            Ok(())
        }),
    }
    .map_err(Error::output)
}

pub fn print_revoked(id: &str, format: Format) -> Result<(), Error> {
    match format {
        Format::Json => output::json(&serde_json::json!({ "id": id, "revoked": true })),
        Format::Text => output::text(|out| writeln!(out, "token {id} revoked")),
    }
    .map_err(Error::output)
}
