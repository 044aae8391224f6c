//! Reading rows without panics: a column of the wrong type or a NULL where a value must be
//! is an error naming the row, never a crash of the engine reading it (`Row::get` panics).

use sqlx::any::AnyRow;
use sqlx::{Decode, Row, Type};

use super::Error;

/// A row being read, and what it is (for the error: "run 3f2a…", "step train of run 3f2a…").
pub(super) struct Reader<'r> {
    row: &'r AnyRow,
    what: String,
}

impl<'r> Reader<'r> {
    pub(super) fn new(row: &'r AnyRow, what: impl Into<String>) -> Self {
        Reader {
            row,
            what: what.into(),
        }
    }

    /// The column `column`, decoded as `T`.
    pub(super) fn get<T>(&self, column: &str) -> Result<T, Error>
    where
        T: Decode<'r, sqlx::Any> + Type<sqlx::Any>,
    {
        self.row
            .try_get(column)
            .map_err(|e| Error::Corrupt(format!("{}, column {column}: {e}", self.what)))
    }

    /// The column `column` if the query has one (None when it has not).
    pub(super) fn optional<T>(&self, column: &str) -> Result<Option<T>, Error>
    where
        T: Decode<'r, sqlx::Any> + Type<sqlx::Any>,
    {
        match self.row.try_get(column) {
            Ok(v) => Ok(Some(v)),
            Err(sqlx::Error::ColumnNotFound(_)) => Ok(None),
            Err(e) => Err(Error::Corrupt(format!(
                "{}, column {column}: {e}",
                self.what
            ))),
        }
    }

    /// The column at `index`, decoded as `T`.
    pub(super) fn at<T>(&self, index: usize) -> Result<T, Error>
    where
        T: Decode<'r, sqlx::Any> + Type<sqlx::Any>,
    {
        self.row
            .try_get(index)
            .map_err(|e| Error::Corrupt(format!("{}, column {index}: {e}", self.what)))
    }

    /// A column holding a lifecycle state, by its contract name: one no state has is an
    /// error naming the row (a store written by a newer sluice, or damaged).
    pub(super) fn state<S>(&self, column: &str) -> Result<S, Error>
    where
        S: std::str::FromStr<Err = crate::run::state::UnknownState>,
    {
        let text: String = self.get(column)?;
        text.parse()
            .map_err(|e| Error::Corrupt(format!("{}, column {column}: {e}", self.what)))
    }

    /// An integer column holding a flag (0 or 1; SQLite has no boolean).
    pub(super) fn flag(&self, column: &str) -> Result<bool, Error> {
        match self.get::<i64>(column)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(Error::Corrupt(format!(
                "{}, column {column}: {n} where 0 or 1 must be",
                self.what
            ))),
        }
    }
}

/// The first column of each row, decoded as `T` (ids, names).
pub(super) fn column<T>(rows: &[AnyRow], what: &str) -> Result<Vec<T>, Error>
where
    T: for<'r> Decode<'r, sqlx::Any> + Type<sqlx::Any>,
{
    rows.iter().map(|r| Reader::new(r, what).at(0)).collect()
}
