//! `sluice logs RUN [STEP] [-f] [--attempt N]`: the lines `Service::stream_logs` gives,
//! written to standard output (remarks on standard error). `--output json` prints one JSON
//! object per line.

use super::exit::{Error, Outcome};
use super::output::{self, Format};
use crate::service::logs::{Query, Sink};
use crate::store::Store;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A run id, an unambiguous prefix of one, @latest or NAME@latest.
    pub run: String,
    /// One step (`train`, `evaluate[1]`); without it, every step's, each line marked with its
    /// step.
    pub step: Option<String>,
    /// Keep printing new lines: until the step has ended (with STEP), else until the run has.
    #[arg(short, long)]
    pub follow: bool,
    /// Which attempt of STEP (default: the latest).
    #[arg(long, requires = "step")]
    pub attempt: Option<i64>,
}

impl Args {
    pub fn query(&self, format: Format) -> Query {
        Query {
            run: self.run.clone(),
            step: self.step.clone(),
            follow: self.follow,
            attempt: self.attempt,
            json: format == Format::Json,
        }
    }
}

/// Standard output, flushed line by line; a closed pipe (`| head`) ends nothing in error.
pub struct Stdout;

impl Sink for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        output::text(|out| out.write_all(bytes))
    }

    fn note(&mut self, text: &str) {
        output::say(text);
    }
}

pub async fn run(store: &Store, args: &Args, format: Format) -> Result<Outcome, Error> {
    let service = crate::service::Service::new(store.clone(), crate::clock::system());
    service
        .stream_logs(
            &crate::service::Principal::local(),
            &args.query(format),
            &mut Stdout,
        )
        .await?;
    Ok(Outcome::Success)
}
