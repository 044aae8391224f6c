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
        // A team's runs, newest first. (A store query scoped to the team would spare reading
        // them all; see the store's `resolve`.)
        let runs = self.store.runs(Some(team), None, i64::MAX).await?;
        let home = self.in_home();
        if let Some(name) = reference.strip_suffix("@latest") {
            return runs
                .iter()
                .find(|r| name.is_empty() || r.name == name)
                .map(|r| r.id.clone())
                .ok_or_else(|| {
                    Error::NotFound(if name.is_empty() {
                        format!("no runs yet{home}")
                    } else {
                        format!("no run of a pipeline or sweep named '{name}'{home}")
                    })
                });
        }
        if let Some(exact) = runs.iter().find(|r| r.id == reference) {
            return Ok(exact.id.clone());
        }
        let mut ids: Vec<&str> = runs
            .iter()
            .map(|r| r.id.as_str())
            .filter(|id| id.starts_with(reference))
            .collect();
        ids.sort_unstable();
        match ids.as_slice() {
            [one] => Ok((*one).to_owned()),
            [] => Err(self.unknown_run(reference)),
            many => Err(Error::NotFound(format!(
                "'{reference}' is ambiguous: it starts {} and more; give more of the id",
                many.iter().take(3).copied().collect::<Vec<_>>().join(", ")
            ))),
        }
    }
}
