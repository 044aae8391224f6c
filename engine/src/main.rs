//! The `sluice` binary: parse the command line, run it, map the outcome to an exit code.

fn main() -> std::process::ExitCode {
    sluice_engine::cli::main()
}
