//! The `sluice` binary: parse the command line, run it, map the outcome to an exit code.

/// mimalloc: the engine builds large trees of small values (a 100,000-step pipeline is
/// millions of nodes); the system allocator spent a fifth of `lint`'s time in malloc and free.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    sluice_engine::cli::main()
}
