//! Which run a reference names (`RUN` of the CLI contract: an id, an unambiguous prefix,
//! `@latest`, `NAME@latest`) for a principal. A principal that sees every team resolves
//! over every run, as the store does; a team-bound one over its team's runs only, so that
//! `@latest` is its team's newest run and an ambiguous prefix never lists another team's ids.

use super::{Error, Principal, Service};

impl Service {
    /// The id of the run `reference` names among the runs `who` sees.
    pub(super) async fn resolve(&self, who: &Principal, reference: &str) -> Result<String, Error> {
        let Some(team) = who.bound_team() else {
            return match self.store.resolve(reference).await {
                Ok(id) => Ok(id),
                // The store's words name the home; a server's clients get the service's.
                Err(crate::store::Error::NotFound(m)) if !self.shows_home => {
                    let home = format!(" in {}", self.store.home.display());
                    Err(Error::NotFound(m.replace(&home, "").replace(
                        &format!("no run '{reference}'"),
                        &format!("unknown run '{reference}'"),
                    )))
                }
                Err(e) => Err(e.into()),
            };
        };
        // Looked up in the store within the team (not by reading the team's runs: a status
        // would cost what the team has ever run).
        let home = self.in_home();
        if let Some(name) = reference.strip_suffix("@latest") {
            return self.store.latest_in_team(team, name).await?.ok_or_else(|| {
                Error::NotFound(if name.is_empty() {
                    format!("no runs yet{home}")
                } else {
                    format!("no run of a pipeline or sweep named '{name}'{home}")
                })
            });
        }
        let ids = self.store.ids_in_team(team, reference).await?;
        match ids.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(self.unknown_run(reference)),
            many => Err(Error::NotFound(format!(
                "'{reference}' is ambiguous: it starts {} and more; give more of the id",
                many.join(", ")
            ))),
        }
    }
}
