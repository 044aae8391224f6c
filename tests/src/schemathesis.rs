//! schemathesis, the OpenAPI fuzzer the API's fuzz test runs (`tests/tests/api_fuzz.rs`), and
//! openapi-spec-validator, which checks the document it fuzzes from.
//!
//! Their versions, with their dependencies', are pinned in one place,
//! `tests/fuzz/requirements.txt`. They are found in the Python virtual environment
//! `$SLUICE_FUZZ_VENV` (which must have the pinned schemathesis), else
//! `target/schemathesis-venv` (what `.ci/run` installs), installed there with python3's venv
//! and pip from that file (about 30 s) when it does not hold exactly the pinned packages. A test that needs them and cannot get them
//! fails, saying why: it never passes without having fuzzed the API.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The pinned requirements: every package, each `NAME==VERSION`.
pub fn requirements() -> PathBuf {
    crate::root().join("tests/fuzz/requirements.txt")
}

/// The pinned packages, `name==version` with the name normalized as pip compares names.
fn pinned() -> Vec<String> {
    let text = std::fs::read_to_string(requirements()).expect("tests/fuzz/requirements.txt");
    normalized(&text)
}

fn normalized(freeze: &str) -> Vec<String> {
    let mut out: Vec<String> = freeze
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.to_ascii_lowercase().replace(['_', '.'], "-"))
        .collect();
    out.sort();
    out
}

/// The pinned version of schemathesis, from the requirements.
pub fn version() -> String {
    let text = std::fs::read_to_string(requirements()).expect("tests/fuzz/requirements.txt");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("schemathesis=="))
        .map(str::to_owned)
        .expect("tests/fuzz/requirements.txt pins schemathesis==VERSION")
}

/// The programs of a virtual environment with the requirements installed.
pub struct Tools {
    /// schemathesis' command line.
    pub st: PathBuf,
    pub validator: PathBuf,
}

impl Tools {
    fn of(venv: &Path) -> Tools {
        Tools {
            st: venv.join("bin/st"),
            validator: venv.join("bin/openapi-spec-validator"),
        }
    }

    /// The version `st` says it is (`st, version 4.32.5`), or None when it does not run.
    fn version(&self) -> Option<String> {
        let out = crate::wait::try_output(Command::new(&self.st).arg("--version")).ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success().then(|| {
            text.rsplit(' ')
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned()
        })
    }

    fn ready(&self, pinned: &str) -> bool {
        self.validator.is_file() && self.version().as_deref() == Some(pinned)
    }

    /// Whether the environment holds exactly the pinned packages (`pip freeze`).
    fn exactly_pinned(&self) -> bool {
        let Some(bin) = self.st.parent() else {
            return false;
        };
        crate::wait::try_output(Command::new(bin.join("python")).args(["-m", "pip", "freeze"]))
            .is_ok_and(|out| {
                out.status.success()
                    && normalized(&String::from_utf8_lossy(&out.stdout)) == pinned()
            })
    }
}

/// The tools, of the pinned versions.
pub fn tools() -> Tools {
    let pinned = version();
    if let Some(venv) = std::env::var_os("SLUICE_FUZZ_VENV") {
        let venv = PathBuf::from(venv);
        let tools = Tools::of(&venv);
        assert!(
            tools.ready(&pinned),
            "$SLUICE_FUZZ_VENV={} has not schemathesis {pinned} (found {:?}) and \
             openapi-spec-validator: pip install -r tests/fuzz/requirements.txt into it",
            venv.display(),
            tools.version()
        );
        return tools;
    }
    // Ours is exactly what the requirements pin (a changed pin installs again).
    let venv = crate::root().join("target/schemathesis-venv");
    let tools = Tools::of(&venv);
    if tools.ready(&pinned) && tools.exactly_pinned() {
        return tools;
    }
    // One installer at a time across test binaries: `mkdir` is atomic.
    let lock = crate::root().join("target/schemathesis-venv.lock");
    let _ = std::fs::create_dir_all(crate::root().join("target"));
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::create_dir(&lock).is_err() {
        assert!(
            Instant::now() < deadline,
            "waited 300 s for another test installing schemathesis"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    if tools.ready(&pinned) && tools.exactly_pinned() {
        let _ = std::fs::remove_dir(&lock);
        return tools;
    }
    // Bounded like every other child, with room for a slow download.
    let install = |cmd: &mut Command| {
        let what = crate::wait::describe(cmd);
        cmd.spawn().is_ok_and(|mut child| {
            crate::wait::status_within(&mut child, Duration::from_secs(600), &what).success()
        })
    };
    let ok = install(Command::new("python3").args(["-m", "venv"]).arg(&venv))
        && install(
            Command::new(venv.join("bin/pip"))
                .args(["install", "-q", "-r"])
                .arg(requirements()),
        );
    let _ = std::fs::remove_dir(&lock);
    assert!(
        ok && tools.ready(&pinned),
        "no schemathesis {pinned} for the API's fuzz test (found {:?} at {}): install \
         tests/fuzz/requirements.txt (as .ci/run does) into target/schemathesis-venv, or into \
         a venv named by SLUICE_FUZZ_VENV",
        tools.version(),
        tools.st.display()
    );
    tools
}
