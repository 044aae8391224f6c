//! Paths a pipeline names, on Kubernetes. A step runs in its container there, so the engine
//! never resolves a pipeline's path on its own machine: a step's `workdir` is a folder under
//! the container's working directory (the image's `WORKDIR`), and `cache.files` cannot be
//! read at all (the step's files are in its image, not on the engine's machine). [`check`]
//! reports what the file says literally, at its line and column; a `workdir` made by a
//! template is checked once rendered ([`in_container`], when the attempt is built).

use std::path::{Component, Path, PathBuf};

use super::diagnostic::Diagnostics;
use super::model::{Action, Pipeline, Step};
use super::template::Part;

/// `path` as a folder inside the one it is relative to: relative, with no `..` climbing above
/// where it starts. The answer is normalised (`a/./b/../c` is `a/c`; `""` and `.` are the
/// folder itself, an empty path). Err says what is wrong, naming the path.
pub fn inside(path: &str) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    let mut depth = 0usize;
    for c in Path::new(path).components() {
        match c {
            Component::Normal(n) => {
                out.push(n);
                depth += 1;
            }
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => {
                out.pop();
                depth -= 1;
            }
            Component::ParentDir => return Err(format!("'{path}' climbs out of its folder")),
            Component::RootDir | Component::Prefix(_) => {
                return Err(format!("'{path}' is an absolute path"));
            }
        }
    }
    Ok(out)
}

/// A step's rendered `workdir` on Kubernetes: a folder under the container's working
/// directory ([`inside`]), or under the attempt's own folder `attempt` in the pod (a placed
/// input, `{{steps.S.outputs.NAME}}`). Err is the step's reason.
pub fn in_container(workdir: &str, attempt: &Path) -> Result<PathBuf, String> {
    let why = match inside(workdir) {
        Ok(p) => return Ok(p),
        Err(why) => why,
    };
    if let Some(rest) = Path::new(workdir)
        .strip_prefix(attempt)
        .ok()
        .and_then(|r| r.to_str())
        && let Ok(under) = inside(rest)
    {
        return Ok(attempt.join(under));
    }
    Err(format!("workdir {why}: {WORKDIR_IS}"))
}

const WORKDIR_IS: &str = "on Kubernetes a step's workdir is a folder under its container's working directory, never a path of the engine's machine";

const WORKDIR_HELP: &str = "write a folder relative to the image's working directory (workdir: src), or change folder in the step's command";

const CACHE_FILES_HELP: &str = "drop cache.files and say what should change the key in cache.key (an image digest, a commit: key: \"{{params.commit}}\"); an upstream step's outputs are hashed already";

/// Reports, for a pipeline that runs on Kubernetes, every `workdir` that is absolute or
/// climbs out of the container's working directory as written (a template's is checked
/// once rendered, unless its fixed start is absolute already), and every `cache.files`
/// entry. A sweep's trial is checked as a step.
pub fn check(p: &Pipeline, diags: &mut Diagnostics) {
    for step in &p.steps {
        check_step(step, diags);
        if let Action::Sweep {
            sweep: Some(sweep), ..
        } = &step.action
        {
            check_step(&sweep.trial, diags);
        }
    }
}

fn check_step(step: &Step, diags: &mut Diagnostics) {
    if let (Some(t), Some(pos)) = (&step.workdir, step.workdir_pos) {
        // As written: its text, templates included.
        let written: String = t
            .parts
            .iter()
            .map(|p| match p {
                Part::Text(s) => s.as_str(),
                Part::Ref(r) => r.raw.as_str(),
            })
            .collect();
        let why = match t.parts.as_slice() {
            [Part::Text(text)] => inside(text).err(),
            [Part::Text(text), ..] if Path::new(text).has_root() => {
                Some(format!("'{written}' is an absolute path"))
            }
            _ => None,
        };
        if let Some(why) = why {
            diags
                .error(pos, format!("workdir {why}: {WORKDIR_IS}"))
                .help(WORKDIR_HELP);
        }
    }
    for (file, pos) in step.cache.iter().flat_map(|c| &c.files) {
        diags
            .error(
                *pos,
                format!(
                    "cache.files: '{file}' cannot be hashed on Kubernetes: the step's files are in its image, and the engine reads no file of its own machine"
                ),
            )
            .help(CACHE_FILES_HELP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_keeps_a_path_in_its_folder_and_normalises_it() {
        assert_eq!(inside(""), Ok(PathBuf::new()));
        assert_eq!(inside("."), Ok(PathBuf::new()));
        assert_eq!(inside("src"), Ok(PathBuf::from("src")));
        assert_eq!(inside("a/./b/../c/"), Ok(PathBuf::from("a/c")));
        assert_eq!(inside("a/.."), Ok(PathBuf::new()));
    }

    #[test]
    fn inside_refuses_absolute_paths_and_climbing_out() {
        for bad in ["/etc", "/", "..", "../x", "a/../..", "a/../../etc/shadow"] {
            assert!(inside(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(
            inside("../../../../etc/shadow"),
            Err("'../../../../etc/shadow' climbs out of its folder".into())
        );
        assert_eq!(inside("/etc"), Err("'/etc' is an absolute path".into()));
    }

    #[test]
    fn in_container_also_takes_the_attempts_own_folder() {
        let attempt = Path::new("/sluice-pod/attempt");
        assert_eq!(
            in_container("/sluice-pod/attempt/inputs/prep/src", attempt),
            Ok(PathBuf::from("/sluice-pod/attempt/inputs/prep/src"))
        );
        assert_eq!(in_container("src", attempt), Ok(PathBuf::from("src")));
        for bad in [
            "/etc",
            "/sluice-pod/attempt/../../etc",
            "/sluice-pod/attemptx",
            "../x",
        ] {
            let e = in_container(bad, attempt).expect_err(bad);
            assert!(e.starts_with("workdir '"), "{e}");
            assert!(e.contains("on Kubernetes"), "{e}");
        }
    }
}
