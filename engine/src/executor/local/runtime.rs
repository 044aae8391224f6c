//! Which `sluice-runtime` the local executor starts: beside `sluice`, in `$SLUICE_RUNTIME`, on
//! `PATH`, else the runtime built into `sluice` itself (`sluice runtime`).

use std::path::{Path, PathBuf};

/// How the engine starts the runtime: a program, and the words before the runtime's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeCommand {
    pub program: PathBuf,
    /// `["runtime"]` when the program is `sluice` itself.
    pub prefix: Vec<&'static str>,
}

impl std::fmt::Display for RuntimeCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.program.display())?;
        for word in &self.prefix {
            write!(f, " {word}")?;
        }
        Ok(())
    }
}

/// The runtime, as the contract finds it: a `sluice-runtime` beside this program, else
/// `$SLUICE_RUNTIME`, else `sluice-runtime` on `PATH`; else the runtime built into this very
/// binary (`sluice runtime ...`), so that copying `sluice` alone is enough. A `$SLUICE_RUNTIME`
/// that names no file is an error, found before anything starts.
pub fn command() -> Result<RuntimeCommand, String> {
    let exe = std::env::current_exe().ok();
    if let Some(dir) = exe.as_deref().and_then(Path::parent) {
        let beside = dir.join("sluice-runtime");
        if beside.is_file() {
            return Ok(RuntimeCommand {
                program: beside,
                prefix: Vec::new(),
            });
        }
    }
    if let Some(p) = std::env::var_os("SLUICE_RUNTIME").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(&p);
        if path.is_file() {
            return Ok(RuntimeCommand {
                program: path,
                prefix: Vec::new(),
            });
        }
        return Err(format!(
            "SLUICE_RUNTIME={} names no runtime binary; unset it to use the runtime built into sluice",
            path.display()
        ));
    }
    if let Some(path) = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("sluice-runtime"))
            .find(|p| p.is_file())
    }) {
        return Ok(RuntimeCommand {
            program: path,
            prefix: Vec::new(),
        });
    }
    match exe {
        Some(program) => Ok(RuntimeCommand {
            program,
            prefix: vec!["runtime"],
        }),
        None => Err(
            "cannot find sluice-runtime (beside sluice, $SLUICE_RUNTIME or PATH), nor this program's own path"
                .into(),
        ),
    }
}
