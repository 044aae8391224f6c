//! Which server leads: one row (`leader`) holding the leader's epoch, who holds it and until
//! when. A server becomes the leader by raising the epoch once the holder's lease has run out
//! (a compare-and-set on the epoch it read, so two candidates cannot both win), and renews the
//! lease while it leads. The epoch is the fence: a store made with [`Store::fenced`] checks,
//! inside every write transaction, that the epoch is still its own (PostgreSQL: under a share
//! lock of the row, so that a takeover waits for writes already checked and every later one
//! sees the new epoch).

use super::read::Reader;
use super::{Dialect, Error, Store, Tx};

/// The leader row as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub epoch: i64,
    /// `PID@HOST` of the server holding it, if any.
    pub holder: Option<String>,
    /// Unix ms: the holder leads until then unless it renews.
    pub until_ms: i64,
}

/// `Fenced` unless the store's leader epoch is `epoch`.
pub(super) async fn check(tx: &mut Tx, dialect: Dialect, epoch: i64) -> Result<(), Error> {
    let sql = match dialect {
        Dialect::Postgres => "SELECT epoch FROM leader WHERE id = 1 FOR SHARE",
        Dialect::Sqlite => "SELECT epoch FROM leader WHERE id = 1",
    };
    let row = sqlx::query(sql).fetch_optional(&mut **tx).await?;
    let now: Option<i64> = match &row {
        Some(row) => Some(Reader::new(row, "the leader").get("epoch")?),
        None => None,
    };
    if now == Some(epoch) {
        return Ok(());
    }
    Err(Error::Fenced(format!(
        "this server led with epoch {epoch}, but another server leads now (epoch {}): it writes no more",
        now.map_or_else(|| "none".to_owned(), |e| e.to_string())
    )))
}

impl Store {
    /// This store, writing as the leader elected with `epoch`.
    pub fn fenced(&self, epoch: i64) -> Store {
        let mut s = self.clone();
        s.fence = Some(epoch);
        s
    }

    pub async fn leadership(&self) -> Result<Leadership, Error> {
        let row = sqlx::query("SELECT epoch, holder, until_ms FROM leader WHERE id = 1")
            .fetch_one(&self.pool)
            .await?;
        let r = Reader::new(&row, "the leader");
        Ok(Leadership {
            epoch: r.get("epoch")?,
            holder: r.get("holder")?,
            until_ms: r.get("until_ms")?,
        })
    }

    /// Becomes the leader in place of the lead read as `seen` (the caller has judged it
    /// over): the new epoch, or None when another server won the same race.
    pub async fn try_lead(
        &self,
        seen: &Leadership,
        me: &str,
        until: i64,
    ) -> Result<Option<i64>, Error> {
        let done = sqlx::query(
            "UPDATE leader SET epoch = epoch + 1, holder = $1, until_ms = $2 WHERE id = 1 AND epoch = $3",
        )
        .bind(me)
        .bind(until)
        .bind(seen.epoch)
        .execute(&self.pool)
        .await?;
        Ok((done.rows_affected() == 1).then_some(seen.epoch + 1))
    }

    /// Renews the lease of the leader elected with `epoch`; false when another server has
    /// taken over.
    pub async fn renew_lead(&self, epoch: i64, me: &str, until: i64) -> Result<bool, Error> {
        let done = sqlx::query(
            "UPDATE leader SET until_ms = $1 WHERE id = 1 AND epoch = $2 AND holder = $3",
        )
        .bind(until)
        .bind(epoch)
        .bind(me)
        .execute(&self.pool)
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Lets the lead go at once (a server stopping), so that another takes over without
    /// waiting for the lease to run out.
    pub async fn resign(&self, epoch: i64, me: &str) -> Result<(), Error> {
        sqlx::query("UPDATE leader SET until_ms = 0 WHERE id = 1 AND epoch = $1 AND holder = $2")
            .bind(epoch)
            .bind(me)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}
