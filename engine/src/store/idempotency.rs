//! Submissions a client may retry (`Idempotency-Key`): the key is recorded in the transaction
//! that records the run, so a submission whose answer was lost (a dropped connection, a
//! server killed after its commit) is answered again with the same run when the client
//! retries, never recorded twice. A key is remembered for a day.

use super::read::Reader;

/// A time in milliseconds as the store writes times.
fn at(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(String::new, crate::time::format)
}
use super::{Error, Lock, NewRun, Store};

/// How long a key is remembered: a retry comes within minutes, a day is far beyond that.
pub const REMEMBERED_MS: i64 = 24 * 3600 * 1000;

/// A submission's key, scoped to the team of the token that sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub team: String,
    pub key: String,
    /// SHA-256 of the request, so that the key reused for another request is refused.
    pub hash: String,
}

/// What a key recorded: the request it came with, and the run it made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recorded {
    pub hash: String,
    pub run_id: String,
    pub name: String,
}

impl Store {
    /// The run `key` recorded, if any (and not older than [`REMEMBERED_MS`]).
    pub async fn idempotent(&self, key: &Key, now_ms: i64) -> Result<Option<Recorded>, Error> {
        let since = at(now_ms - REMEMBERED_MS);
        let row = sqlx::query(
            "SELECT hash, run_id, name FROM idempotency WHERE team = $1 AND key = $2 AND created_at >= $3",
        )
        .bind(&key.team)
        .bind(&key.key)
        .bind(&since)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            let r = Reader::new(&r, format!("idempotency key {}", key.key));
            Ok(Recorded {
                hash: r.get("hash")?,
                run_id: r.get("run_id")?,
                name: r.get("name")?,
            })
        })
        .transpose()
    }

    /// [`Store::create_run`] with the submission's key recorded in the same transaction.
    /// When the key was recorded meanwhile (two retries at once), nothing is written and
    /// `Error::KeyTaken` says so: the caller answers with the run the key holds.
    pub async fn create_run_keyed(
        &self,
        run: &NewRun,
        max_queued: Option<u64>,
        key: &Key,
        now_ms: i64,
    ) -> Result<(), Error> {
        let mut tx = self.write(Lock::Room).await?;
        let expired = at(now_ms - REMEMBERED_MS);
        sqlx::query("DELETE FROM idempotency WHERE created_at < $1")
            .bind(&expired)
            .execute(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO idempotency (team, key, hash, run_id, name, created_at) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (team, key) DO NOTHING",
        )
        .bind(&key.team)
        .bind(&key.key)
        .bind(&key.hash)
        .bind(&run.id)
        .bind(&run.name)
        .bind(at(now_ms))
        .execute(&mut *tx)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(Error::KeyTaken);
        }
        super::runs::insert_run(&mut tx, run, max_queued, &self.at()).await?;
        super::feed::record(
            &mut tx,
            self.dialect,
            super::feed::Kind::Created,
            &run.id,
            self.at().ms,
        )
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
