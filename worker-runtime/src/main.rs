//! `sluice-runtime`: runs one attempt of a step. Thin: parse arguments, run, exit.

use std::process::ExitCode;

const USAGE: &str = "usage: sluice-runtime exec ATTEMPT_DIR
       sluice-runtime serve

exec:  runs one attempt of a step, as the sluice engine prepared it in ATTEMPT_DIR
       (launch.json), and records its end in ATTEMPT_DIR/result.json.
serve: runs the attempts named on standard input (one `exec NUMBER STEP DIR` line each,
       tab-separated), each as `exec` would, answering `ended NUMBER STEP` on standard
       output; used by the local engine to start one runtime per run, not per attempt.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["exec", dir] => match sluice_runtime::exec::exec(std::path::Path::new(dir)) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice-runtime: error: {e}");
                ExitCode::from(1)
            }
        },
        ["serve"] => match sluice_runtime::serve::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice-runtime: error: {e}");
                ExitCode::from(1)
            }
        },
        ["--version" | "-V"] => {
            println!("sluice-runtime {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        ["--help" | "-h"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
