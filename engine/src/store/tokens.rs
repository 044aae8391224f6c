//! The server's tokens and its audit record (`spec/server.md`, "Teams, tokens and roles").
//!
//! A token row holds the SHA-256 of the token, never the token: whoever reads the database
//! (a backup, a support dump) cannot act as anyone. Revocation is a timestamp, so that the
//! record keeps who had access when.

use super::read::Reader;
use super::{Error, Store};

/// A token as stored (without the token itself).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenRow {
    pub id: String,
    pub name: Option<String>,
    /// The team it acts for; `*` for every team (an admin's).
    pub team: String,
    pub role: String,
    /// SHA-256 of the token, hex.
    pub hash: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// One change, as the audit record keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    pub at: String,
    /// A token's id, or `local` for whoever opened the state directly.
    pub who: String,
    pub team: String,
    pub action: String,
    pub target: String,
    pub result: String,
}

fn token_row(row: &sqlx::any::AnyRow) -> Result<TokenRow, Error> {
    let r = Reader::new(row, "a token");
    Ok(TokenRow {
        id: r.get("id")?,
        name: r.get("name")?,
        team: r.get("team")?,
        role: r.get("role")?,
        hash: r.get("hash")?,
        created_at: r.get("created_at")?,
        expires_at: r.get("expires_at")?,
        revoked_at: r.get("revoked_at")?,
    })
}

impl Store {
    /// Records a new token.
    pub async fn insert_token(&self, t: &TokenRow) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO tokens (id, name, team, role, hash, created_at, expires_at, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&t.id)
        .bind(&t.name)
        .bind(&t.team)
        .bind(&t.role)
        .bind(&t.hash)
        .bind(&t.created_at)
        .bind(&t.expires_at)
        .bind(&t.revoked_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The token whose hash is `hash`, revoked or expired ones included (the caller says why
    /// it is refused).
    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRow>, Error> {
        let row = sqlx::query("SELECT * FROM tokens WHERE hash = $1")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(token_row).transpose()
    }

    /// Every token, or those of `team`, oldest first.
    pub async fn tokens(&self, team: Option<&str>) -> Result<Vec<TokenRow>, Error> {
        let rows = match team {
            Some(team) => {
                sqlx::query("SELECT * FROM tokens WHERE team = $1 ORDER BY created_at, id")
                    .bind(team)
                    .fetch_all(&self.pool)
                    .await?
            }
            None => {
                sqlx::query("SELECT * FROM tokens ORDER BY created_at, id")
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(token_row).collect()
    }

    /// Revokes token `id` at `at`. Returns the row as it was, or `None` for no such token; a
    /// token revoked before keeps its first revocation time.
    pub async fn revoke_token(&self, id: &str, at: &str) -> Result<Option<TokenRow>, Error> {
        let row = sqlx::query("SELECT * FROM tokens WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row.as_ref().map(token_row).transpose()? else {
            return Ok(None);
        };
        sqlx::query("UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(at)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(Some(row))
    }

    /// Appends one change to the audit record.
    pub async fn audit(&self, a: &AuditRow) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO audit (at, who, team, action, target, result) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&a.at)
        .bind(&a.who)
        .bind(&a.team)
        .bind(&a.action)
        .bind(&a.target)
        .bind(&a.result)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Who submitted each of `runs`, from their `submit` entries: the token's name, else its
    /// id. Runs without such an entry are left out.
    pub async fn submitters(
        &self,
        runs: &[String],
    ) -> Result<std::collections::HashMap<String, String>, Error> {
        let mut out = std::collections::HashMap::new();
        for chunk in runs.chunks(200) {
            let marks: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT a.target, a.who, t.name FROM audit a LEFT JOIN tokens t ON t.id = a.who \
                 WHERE a.action = 'submit' AND a.result = 'ok' AND a.target IN ({})",
                marks.join(", ")
            );
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                q = q.bind(format!("run {id}"));
            }
            for row in q.fetch_all(&self.pool).await? {
                let r = Reader::new(&row, "an audit record");
                let target: String = r.get("target")?;
                let who: String = r.get("who")?;
                let name: Option<String> = r.get("name")?;
                if let Some(id) = target.strip_prefix("run ") {
                    out.insert(id.to_owned(), name.unwrap_or(who));
                }
            }
        }
        Ok(out)
    }

    /// The audit record, in the order it was written.
    pub async fn audit_record(&self) -> Result<Vec<AuditRow>, Error> {
        let rows =
            sqlx::query("SELECT at, who, team, action, target, result FROM audit ORDER BY seq")
                .fetch_all(&self.pool)
                .await?;
        rows.iter()
            .map(|row| {
                let r = Reader::new(row, "an audit record");
                Ok(AuditRow {
                    at: r.get("at")?,
                    who: r.get("who")?,
                    team: r.get("team")?,
                    action: r.get("action")?,
                    target: r.get("target")?,
                    result: r.get("result")?,
                })
            })
            .collect()
    }
}
