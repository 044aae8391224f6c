//! `sluice-runtime`: runs one attempt of a step. Thin: the command line is [`sluice_runtime::cli`].

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    sluice_runtime::cli::main(&args)
}
