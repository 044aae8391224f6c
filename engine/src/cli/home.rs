//! Where state lives: the home a command uses, found as git finds `.git`.
//!
//! `--home DIR` or `$SLUICE_HOME` win; else the nearest `.sluice` folder in the current folder
//! or one above it; else `.sluice` at the top of the enclosing git repository; else
//! `./.sluice`. So `cd examples/sweeps && sluice sweep ...` adds to the history of the
//! checkout instead of starting a second one, and `cd /tmp && sluice runs` creates nothing.

use std::path::{Path, PathBuf};

/// The folder name a home has when it is found rather than given.
pub const DIR_NAME: &str = ".sluice";

/// The home a command uses, and how it was chosen (said in messages about a missing home).
#[derive(Clone, Debug)]
pub struct Home {
    /// Absolute: attempts' folders are handed to programs that run elsewhere.
    pub path: PathBuf,
    pub how: How,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum How {
    /// `--home` or `$SLUICE_HOME`.
    Given,
    /// A `.sluice` folder found in the current folder or above it.
    Found,
    /// `.sluice` at the top of the enclosing git repository (not created yet).
    GitTop,
    /// `./.sluice` (not created yet).
    Here,
}

impl Home {
    /// Resolves the home from `given` (the flag or the environment) and the current folder.
    pub fn resolve(given: Option<&Path>) -> Home {
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        Self::resolve_from(given, &cwd)
    }

    /// As `resolve`, from `cwd` (for tests).
    pub fn resolve_from(given: Option<&Path>, cwd: &Path) -> Home {
        if let Some(dir) = given {
            let path = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
            return Home {
                path,
                how: How::Given,
            };
        }
        let cwd = std::path::absolute(cwd).unwrap_or_else(|_| cwd.to_owned());
        for dir in cwd.ancestors() {
            let candidate = dir.join(DIR_NAME);
            if candidate.is_dir() {
                return Home {
                    path: candidate,
                    how: How::Found,
                };
            }
        }
        if let Some(top) = cwd.ancestors().find(|d| d.join(".git").exists()) {
            return Home {
                path: top.join(DIR_NAME),
                how: How::GitTop,
            };
        }
        Home {
            path: cwd.join(DIR_NAME),
            how: How::Here,
        }
    }

    /// Whether the home holds a state store already.
    pub fn exists(&self) -> bool {
        self.path.join("sluice.db").is_file()
    }

    /// What a read-only command says when there is no home yet.
    pub fn missing(&self) -> String {
        match self.how {
            How::Given => format!("no sluice home at {}", self.path.display()),
            _ => format!(
                "no sluice home here: no {DIR_NAME} folder in this folder or above it (would use {}); set SLUICE_HOME or --home to use another",
                self.path.display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-home-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_default();
        dir
    }

    #[test]
    fn a_home_above_is_found_from_a_subfolder() {
        let top = scratch("above");
        let sub = top.join("examples").join("sweeps");
        std::fs::create_dir_all(&sub).unwrap_or_default();
        std::fs::create_dir_all(top.join(DIR_NAME)).unwrap_or_default();
        let h = Home::resolve_from(None, &sub);
        assert_eq!(h.path, top.join(DIR_NAME));
        assert_eq!(h.how, How::Found);
        let _ = std::fs::remove_dir_all(&top);
    }

    #[test]
    fn without_a_home_the_top_of_the_git_repository_is_used() {
        let top = scratch("git");
        let sub = top.join("a").join("b");
        std::fs::create_dir_all(&sub).unwrap_or_default();
        std::fs::create_dir_all(top.join(".git")).unwrap_or_default();
        let h = Home::resolve_from(None, &sub);
        // A `.sluice` above the scratch folder (a user's /tmp/.sluice) is nearer: it wins.
        if top.ancestors().skip(1).any(|d| d.join(DIR_NAME).is_dir()) {
            assert_eq!(h.how, How::Found);
        } else {
            assert_eq!(h.path, top.join(DIR_NAME));
            assert_eq!(h.how, How::GitTop);
        }
        let _ = std::fs::remove_dir_all(&top);
    }

    #[test]
    fn a_given_home_wins() {
        let top = scratch("given");
        std::fs::create_dir_all(top.join(DIR_NAME)).unwrap_or_default();
        let h = Home::resolve_from(Some(Path::new("/elsewhere/h")), &top);
        assert_eq!(h.path, PathBuf::from("/elsewhere/h"));
        let _ = std::fs::remove_dir_all(&top);
    }
}
