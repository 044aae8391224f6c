//! Diagnostics as data.
//!
//! Every problem found in the input is a [`Diagnostic`] value: where it is, what is wrong and,
//! where we can tell, how to fix it. Validation appends to a [`Diagnostics`] list instead of
//! returning on the first failure, so a user sees every problem of a file in one run. Two
//! renderers turn the list into the pinned text form (`PATH:LINE:COL: error: MESSAGE` followed
//! by `  help: ...` lines) and into JSON.

use std::fmt;

use serde::Serialize;

/// How bad a diagnostic is. Only errors make `sluice lint` fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    #[default]
    Error,
    Warning,
    Note,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        })
    }
}

/// A line and column, both counted from 1 (the column in characters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Pos {
    pub line: u32,
    pub column: u32,
}

impl fmt::Display for Pos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

impl Pos {
    pub const START: Pos = Pos { line: 1, column: 1 };

    pub fn new(line: u32, column: u32) -> Self {
        Self { line, column }
    }
}

/// One problem in the input.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Diagnostic {
    /// The file, or what stood in for one (`--param lr=x`).
    pub path: String,
    /// `None` when the input has no lines, as with a command-line flag.
    #[serde(flatten)]
    pub pos: Option<Pos>,
    pub severity: Severity,
    pub message: String,
    /// Suggestions, each printed on its own `help:` line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub help: Vec<String>,
    /// Past a file's [`KEPT`] diagnostics: counted, not kept, and no work is spent on its
    /// suggestions.
    #[serde(skip)]
    pub(crate) uncounted: bool,
}

/// The diagnostics kept per file: a file with more problems (a mapping of a million unknown
/// keys, merged in hundreds of times) gets the first ones found and the count of the rest,
/// so that neither the time spent on suggestions nor the answer grows with them.
pub const KEPT: usize = 1000;

impl Diagnostic {
    pub fn error(path: &str, pos: Option<Pos>, message: impl Into<String>) -> Self {
        Self {
            path: path.to_owned(),
            pos,
            severity: Severity::Error,
            message: message.into(),
            help: Vec::new(),
            uncounted: false,
        }
    }

    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.help.push(help.into());
        self
    }

    pub fn with_severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.pos {
            Some(p) => write!(f, "{}:{}:{}: ", self.path, p.line, p.column)?,
            None => write!(f, "{}: ", self.path)?,
        }
        write!(f, "{}: {}", self.severity, self.message)?;
        for help in &self.help {
            write!(f, "\n  help: {help}")?;
        }
        Ok(())
    }
}

/// The diagnostics of one file (or of one command line), in the order they were found: the
/// first [`KEPT`], and how many errors and others came after them.
#[derive(Clone, Debug, Default)]
pub struct Diagnostics {
    path: String,
    items: Vec<Diagnostic>,
    /// Errors and other diagnostics found past [`KEPT`].
    more_errors: usize,
    more_others: usize,
    /// What a diagnostic past [`KEPT`] is written into, and forgotten.
    spare: Diagnostic,
}

impl Diagnostics {
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            ..Self::default()
        }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// Records an error at `pos` and returns it so that help lines can be added.
    pub fn error(&mut self, pos: Pos, message: impl Into<String>) -> &mut Diagnostic {
        self.push(Diagnostic::error(&self.path, Some(pos), message))
    }

    pub fn note(&mut self, pos: Pos, message: impl Into<String>) -> &mut Diagnostic {
        self.push(Diagnostic::error(&self.path, Some(pos), message).with_severity(Severity::Note))
    }

    pub fn warning(&mut self, pos: Pos, message: impl Into<String>) -> &mut Diagnostic {
        self.push(
            Diagnostic::error(&self.path, Some(pos), message).with_severity(Severity::Warning),
        )
    }

    pub fn push(&mut self, diagnostic: Diagnostic) -> &mut Diagnostic {
        if self.items.len() >= KEPT {
            if diagnostic.severity == Severity::Error {
                self.more_errors += 1;
            } else {
                self.more_others += 1;
            }
            self.spare = diagnostic;
            self.spare.uncounted = true;
            return &mut self.spare;
        }
        self.items.push(diagnostic);
        let last = self.items.len() - 1;
        &mut self.items[last]
    }

    pub fn last_mut(&mut self) -> Option<&mut Diagnostic> {
        self.items.last_mut()
    }

    pub fn has_errors(&self) -> bool {
        self.more_errors > 0 || self.items.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn error_count(&self) -> usize {
        self.more_errors
            + self
                .items
                .iter()
                .filter(|d| d.severity == Severity::Error)
                .count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The errors found past [`KEPT`]: counted, not kept.
    pub fn errors_not_kept(&self) -> usize {
        self.more_errors
    }

    /// The diagnostics sorted by position, without repeats. Settings shared through
    /// `defaults` are checked once per step, so the same problem can be found many times.
    /// Past [`KEPT`], one last diagnostic says how many more there are.
    pub fn into_sorted(mut self) -> Vec<Diagnostic> {
        self.items.sort_by_key(|a| a.pos);
        self.items.dedup();
        let more = self.more_errors + self.more_others;
        if more > 0 {
            // A note: the problems it stands for are counted by `error_count`.
            self.items.push(
                Diagnostic::error(
                    &self.path,
                    None,
                    format!(
                        "{more} more problems in this file are not shown ({} errors); the first {KEPT} found are above",
                        self.more_errors
                    ),
                )
                .with_severity(Severity::Note)
                .with_help("fix these and run it again to see the rest"),
            );
        }
        self.items
    }
}

impl Extend<Diagnostic> for Diagnostics {
    fn extend<T: IntoIterator<Item = Diagnostic>>(&mut self, iter: T) {
        for d in iter {
            self.push(d);
        }
    }
}

impl Diagnostic {
    /// Adds `help: did you mean 'X'?` when a known name is close to `got`.
    pub fn suggest<'a>(
        &mut self,
        got: &str,
        known: impl IntoIterator<Item = &'a str>,
    ) -> &mut Self {
        if self.uncounted {
            return self;
        }
        if let Some(best) = nearest(got, known) {
            self.help.push(format!("did you mean '{best}'?"));
        }
        self
    }

    pub fn help(&mut self, help: impl Into<String>) -> &mut Self {
        if !self.uncounted {
            self.help.push(help.into());
        }
        self
    }
}

/// The known name closest to `got`, if it is close enough to be the one meant.
///
/// Jaro-Winkler rewards a shared prefix, which matches how names are mistyped (`need` for
/// `needs`); a case-insensitive exact match always wins.
pub fn nearest<'a>(got: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = got.to_lowercase();
    let mut best: Option<(f64, &str)> = None;
    for candidate in known {
        if candidate == got {
            continue;
        }
        let score = if candidate.to_lowercase() == lower {
            2.0
        } else {
            strsim::jaro_winkler(&lower, &candidate.to_lowercase())
        };
        if score >= 0.8 && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_pinned_text_form() {
        let d = Diagnostic::error("p.yaml", Some(Pos::new(4, 7)), "unknown field 'need'")
            .with_help("did you mean 'needs'?");
        assert_eq!(
            d.to_string(),
            "p.yaml:4:7: error: unknown field 'need'\n  help: did you mean 'needs'?"
        );
    }

    #[test]
    fn nearest_prefers_close_names_and_refuses_far_ones() {
        let known = ["needs", "name", "run", "resources"];
        assert_eq!(nearest("need", known), Some("needs"));
        assert_eq!(nearest("resource", known), Some("resources"));
        assert_eq!(nearest("Run", known), Some("run"));
        assert_eq!(nearest("zzzzzz", known), None);
    }

    #[test]
    fn past_the_kept_ones_problems_are_counted_and_said_once() {
        let mut d = Diagnostics::new("big.yaml");
        for i in 0..(KEPT as u32 + 250) {
            d.error(Pos::new(i + 1, 1), format!("problem {i}"))
                .suggest("need", ["needs"]);
        }
        assert_eq!(d.error_count(), KEPT + 250);
        assert!(d.has_errors());
        let sorted = d.into_sorted();
        assert_eq!(sorted.len(), KEPT + 1);
        assert_eq!(sorted[0].help, ["did you mean 'needs'?"]);
        let last = sorted.last().expect("the summary");
        assert_eq!(last.severity, Severity::Note);
        assert!(
            last.message
                .starts_with("250 more problems in this file are not shown"),
            "{}",
            last.message
        );
    }
}
