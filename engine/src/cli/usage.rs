//! `sluice usage`: GPU-hours, CPU-hours, cost and wasted GPU-hours per group, as a table with
//! a total line, or the contract's JSON (`{"rows": [...], "total": {...}}`).

use std::io::Write;

use super::exit::{Error, Outcome};
use super::home::Home;
use super::output::{self, Format};
use crate::clock;
use crate::service::usage::{self, Figures, Key, Usage, UsageQuery};
use crate::service::{Principal, Service};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this team's usage.
    #[arg(long)]
    pub team: Option<String>,
    /// From this date (2026-12-01, UTC, from its first moment) or RFC 3339 time.
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Up to this date (2026-12-31, UTC, the day included) or RFC 3339 time (excluded).
    #[arg(long, value_name = "DATE")]
    pub until: Option<String>,
    /// Group by these keys, comma-separated: team, pool, pipeline.
    #[arg(long, default_value = "team", value_name = "KEYS")]
    pub by: String,
}

pub async fn run(home: &Home, args: &Args, format: Format) -> Result<Outcome, Error> {
    let by = usage::parse_by(&args.by)?;
    let query = UsageQuery {
        team: args.team.clone(),
        since: args.since.clone(),
        until: args.until.clone(),
        by: by.clone(),
    };
    // No home yet: nothing has run, so nothing was used (and nothing is created).
    let found = match Store::open_existing(&home.path).await? {
        Some(store) => {
            let service = Service::new(store, clock::system());
            service.usage(&Principal::local(), &query).await?
        }
        None => {
            // The dates are still checked, as with a home.
            usage::window(&query)?;
            Usage::default()
        }
    };
    match format {
        Format::Json => output::json(&found),
        Format::Text => output::text(|out| write_table(out, &by, &found)),
    }
    .map_err(Error::output)?;
    Ok(Outcome::Success)
}

/// The groups as an aligned table, key columns first (in team, pool, pipeline order, as the
/// rows are sorted), then the figures, then one `NAME HOURS` column per extended resource used
/// (`nvidia.com/mig-1g.10gb HOURS`), then the total line.
pub fn write_table(out: &mut dyn Write, by: &[Key], u: &Usage) -> std::io::Result<()> {
    let keys: Vec<Key> = Key::ALL.into_iter().filter(|k| by.contains(k)).collect();
    let value = |r: &usage::UsageGroup, k: Key| -> String {
        match k {
            Key::Team => r.team.clone(),
            Key::Pool => r.pool.clone(),
            Key::Pipeline => r.pipeline.clone(),
        }
        .unwrap_or_default()
    };
    let extended: Vec<&String> = u.total.extended_hours.keys().collect();
    let numbers = |f: &Figures| {
        [
            format!("{:.3}", f.gpu_hours),
            format!("{:.3}", f.cpu_hours),
            format!("{:.2}", f.cost),
            format!("{:.3}", f.wasted_gpu_hours),
        ]
        .into_iter()
        .chain(
            extended
                .iter()
                .map(|name| format!("{:.3}", f.extended_hours.get(*name).copied().unwrap_or(0.0))),
        )
        .collect::<Vec<String>>()
    };
    let heads: Vec<String> = ["GPU-HOURS", "CPU-HOURS", "COST", "WASTED GPU-HOURS"]
        .iter()
        .map(|h| (*h).to_owned())
        .chain(extended.iter().map(|name| format!("{name} HOURS")))
        .collect();
    let mut table: Vec<Vec<String>> = Vec::with_capacity(u.rows.len() + 2);
    table.push(
        keys.iter()
            .map(|k| k.as_str().to_uppercase())
            .chain(heads.iter().cloned())
            .collect(),
    );
    for r in &u.rows {
        table.push(
            keys.iter()
                .map(|&k| value(r, k))
                .chain(numbers(&r.figures))
                .collect(),
        );
    }
    let mut total: Vec<String> = keys.iter().map(|_| String::new()).collect();
    if let Some(first) = total.first_mut() {
        *first = "total".into();
    }
    table.push(total.into_iter().chain(numbers(&u.total)).collect());
    let columns = keys.len() + heads.len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    for row in &table {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            let w = widths[c];
            if c < keys.len() {
                line.push_str(&format!("{cell:w$}"));
            } else {
                line.push_str(&format!("{cell:>w$}"));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::usage::UsageGroup;

    fn figures(gpu_hours: f64, cost: f64) -> Figures {
        Figures {
            gpu_hours,
            cpu_hours: 1.0,
            cost,
            wasted_gpu_hours: 0.25,
            extended_hours: Default::default(),
        }
    }

    #[test]
    fn the_table_aligns_its_columns_and_ends_with_the_total() {
        let u = Usage {
            rows: vec![
                UsageGroup {
                    team: Some("nlp".into()),
                    pool: Some("a100".into()),
                    figures: figures(1.5, 3.75),
                    ..UsageGroup::default()
                },
                UsageGroup {
                    team: Some("vision".into()),
                    pool: Some("h100-spot".into()),
                    figures: figures(12.0, 13.2),
                    ..UsageGroup::default()
                },
            ],
            total: Figures {
                gpu_hours: 13.5,
                cpu_hours: 2.0,
                cost: 16.95,
                wasted_gpu_hours: 0.5,
                extended_hours: Default::default(),
            },
        };
        let mut out = Vec::new();
        write_table(&mut out, &[Key::Pool, Key::Team], &u).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "\
TEAM    POOL       GPU-HOURS  CPU-HOURS   COST  WASTED GPU-HOURS
nlp     a100           1.500      1.000   3.75             0.250
vision  h100-spot     12.000      1.000  13.20             0.250
total                 13.500      2.000  16.95             0.500
"
        );
    }

    #[test]
    fn extended_resources_used_get_a_column_each() {
        let mig = "nvidia.com/mig-1g.10gb".to_owned();
        let with = |h: f64| Figures {
            extended_hours: [(mig.clone(), h)].into_iter().collect(),
            ..figures(0.0, 0.5)
        };
        let u = Usage {
            rows: vec![
                UsageGroup {
                    team: Some("nlp".into()),
                    figures: figures(1.0, 2.0),
                    ..UsageGroup::default()
                },
                UsageGroup {
                    team: Some("serving".into()),
                    figures: with(3.5),
                    ..UsageGroup::default()
                },
            ],
            total: Figures {
                gpu_hours: 1.0,
                cost: 2.5,
                ..with(3.5)
            },
        };
        let mut out = Vec::new();
        write_table(&mut out, &[Key::Team], &u).expect("writes");
        let text = String::from_utf8(out).expect("utf-8");
        assert_eq!(
            text,
            "\
TEAM     GPU-HOURS  CPU-HOURS  COST  WASTED GPU-HOURS  nvidia.com/mig-1g.10gb HOURS
nlp          1.000      1.000  2.00             0.250                         0.000
serving      0.000      1.000  0.50             0.250                         3.500
total        1.000      1.000  2.50             0.250                         3.500
"
        );
    }
}
