//! The runtime's command line, shared by the `sluice-runtime` binary and `sluice runtime`.

use std::process::ExitCode;

const USAGE: &str = "usage: sluice-runtime exec ATTEMPT_DIR
       sluice-runtime serve
       sluice-runtime pod
       sluice-runtime install DEST

exec:    runs one attempt of a step, as the sluice engine prepared it in ATTEMPT_DIR
         (launch.json), and records its end in ATTEMPT_DIR/result.json.
serve:   runs the attempts named on standard input (one `exec NUMBER STEP DIR` line each,
         tab-separated), each as `exec` would, answering `ended NUMBER STEP` on standard
         output; used by the local engine to start one runtime per run, not per attempt.
pod:     runs one worker of an attempt inside a Kubernetes pod, configured by its
         environment (SLUICE_POD_LAUNCH, SLUICE_POD_KEY, SLUICE_POD_DIR), and records it
         in the object store under SLUICE_POD_KEY/ (result.json last); the attempt's log
         is copied to standard output as it is written.
install: copies this binary to DEST (mode 0755, folders created); what a pod's init
         container runs to put the runtime on the pod's shared volume.";

/// Runs the runtime with `args` (without the program's name): `exec DIR`, `serve`, `pod`,
/// `install DEST`, `--version`, `--help`. The `sluice` binary calls this too, so that one
/// binary is enough on a machine (`sluice runtime serve`, or `sluice` installed under the
/// name `sluice-runtime`).
pub fn main(args: &[String]) -> ExitCode {
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["exec", dir] => match crate::exec::exec(std::path::Path::new(dir)) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice-runtime: error: {e}");
                ExitCode::from(1)
            }
        },
        ["serve"] => match crate::serve::serve() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice-runtime: error: {e}");
                ExitCode::from(1)
            }
        },
        ["pod"] => match crate::pod::pod() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sluice-runtime: error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        ["install", dest] => match crate::install::install(std::path::Path::new(dest)) {
            Ok(_) => ExitCode::SUCCESS,
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
