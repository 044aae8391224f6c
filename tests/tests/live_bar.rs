//! The live progress bar, as a user sees it on a terminal: `sluice run` and `sluice sweep`
//! are started under a pseudo-terminal (util-linux `script`, with the window size set by
//! `stty`), and what they write is played through a small terminal model to get the screen's
//! lines. The bar shows no count before there is a total, and ends cleared, so that the
//! final lines print cleanly below it; a terminal that does not say its size gets plain lines.

use std::process::Command;

use sluice_e2e::{Sandbox, bin, wait};

const COLS: usize = 100;

/// Runs `sluice ARGS` in the sandbox under a pseudo-terminal of `cols` x `rows` (`0 0`: one
/// that does not say its size) and returns everything it wrote to the terminal.
fn on_terminal(sb: &Sandbox, size: (usize, usize), args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut line = format!(
        "stty cols {} rows {}; exec {}",
        size.0,
        size.1,
        quote(&bin("sluice").display().to_string())
    );
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    // util-linux `script` gives the test a pseudo-terminal.
    let out = wait::output(
        Command::new("script")
            .args(["-qec", &line, "/dev/null"])
            .current_dir(sb.path())
            .envs(sb.envs())
            .env_remove("RUST_LOG"),
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A terminal's screen, enough of one for what sluice writes: printable characters with
/// deferred wrapping at the right margin (as xterm and VTE do), CR, LF, backspace, cursor
/// movement (CUU, CUD, CUF, CUB, CHA), erase in line and display; colours and modes are
/// ignored. No height limit: lines are never scrolled away.
struct Screen {
    width: usize,
    lines: Vec<Vec<char>>,
    row: usize,
    col: usize,
    /// The cursor wrote the last column: the next character goes to the next line.
    pending_wrap: bool,
}

impl Screen {
    fn play(width: usize, bytes: &str) -> Screen {
        let mut s = Screen {
            width,
            lines: vec![Vec::new()],
            row: 0,
            col: 0,
            pending_wrap: false,
        };
        let mut chars = bytes.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\r' => {
                    s.col = 0;
                    s.pending_wrap = false;
                }
                '\n' => s.down(1),
                '\u{8}' => {
                    s.col = s.col.saturating_sub(1);
                    s.pending_wrap = false;
                }
                '\u{1b}' => {
                    if chars.peek() != Some(&'[') {
                        chars.next();
                        continue;
                    }
                    chars.next();
                    let mut params = String::new();
                    let mut last = ' ';
                    for p in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&p) {
                            last = p;
                            break;
                        }
                        params.push(p);
                    }
                    let n = params.trim_start_matches('?').parse::<usize>().ok();
                    s.control(last, n);
                }
                c if c.is_control() => {}
                c => s.put(c),
            }
        }
        s
    }

    fn down(&mut self, n: usize) {
        self.row += n;
        while self.lines.len() <= self.row {
            self.lines.push(Vec::new());
        }
        self.pending_wrap = false;
    }

    fn control(&mut self, code: char, n: Option<usize>) {
        let line = &mut self.lines[self.row];
        match code {
            'A' => self.row = self.row.saturating_sub(n.unwrap_or(1).max(1)),
            'B' => return self.down(n.unwrap_or(1).max(1)),
            'C' => self.col = (self.col + n.unwrap_or(1).max(1)).min(self.width - 1),
            'D' => self.col = self.col.saturating_sub(n.unwrap_or(1).max(1)),
            'G' => self.col = n.unwrap_or(1).max(1) - 1,
            'K' => match n.unwrap_or(0) {
                0 => line.truncate(self.col),
                1 => line.iter_mut().take(self.col + 1).for_each(|c| *c = ' '),
                _ => line.clear(),
            },
            'J' => {
                line.truncate(self.col);
                self.lines.truncate(self.row + 1);
            }
            _ => return,
        }
        self.pending_wrap = false;
    }

    fn put(&mut self, c: char) {
        if self.pending_wrap {
            self.col = 0;
            self.down(1);
        }
        let line = &mut self.lines[self.row];
        while line.len() <= self.col {
            line.push(' ');
        }
        line[self.col] = c;
        if self.col + 1 == self.width {
            self.pending_wrap = true;
        } else {
            self.col += 1;
        }
    }

    /// The screen's lines, trailing blanks trimmed, trailing empty lines dropped.
    fn text(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .lines
            .iter()
            .map(|l| l.iter().collect::<String>().trim_end().to_owned())
            .collect();
        while out.last().is_some_and(String::is_empty) {
            out.pop();
        }
        out
    }
}

/// Characters only the live bar draws: its blocks and the braille spinner.
fn is_bar_glyph(c: char) -> bool {
    matches!(c, '\u{2580}'..='\u{259f}' | '\u{2800}'..='\u{28ff}')
}

const PIPELINE: &str = "apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: bar}
spec:
  steps:
    - name: first
      run: sleep 1
    - name: second
      needs: [first]
      run: sleep 1
";

#[test]
fn the_model_terminal_wraps_late_and_erases_as_a_terminal_does() {
    // 5 columns: "abcde" fills the line without wrapping; "f" goes to the next one.
    let s = Screen::play(5, "abcde\rxy\u{1b}[2Kz\r\nabcdef\u{1b}[1A\rq");
    assert_eq!(s.text(), ["  z", "qbcde", "f"]);
}

#[test]
fn run_shows_no_count_before_a_total_and_its_last_lines_print_below_the_bar() {
    let sb = Sandbox::new("bar-run");
    sb.write("p.yaml", PIPELINE);
    let raw = on_terminal(&sb, (COLS, 60), &["run", "p.yaml"]);
    // The bar was drawn while the run went on...
    assert!(raw.contains("/2 steps"), "no bar: {raw:?}");
    // ... never as a count of nothing.
    assert!(!raw.contains("0/0"), "a bar at 0/0: {raw:?}");
    let screen = Screen::play(COLS, &raw).text();
    // What is left is clean lines: no bar, no spinner, nothing written over another line.
    for line in &screen {
        assert!(
            !line.chars().any(is_bar_glyph),
            "bar debris in {line:?}: {screen:#?}"
        );
    }
    let id = screen[0]
        .strip_prefix("run ")
        .and_then(|l| l.strip_suffix(" started (bar p.yaml)"))
        .unwrap_or_else(|| panic!("first line: {screen:#?}"));
    let at = |want: &str| {
        screen
            .iter()
            .position(|l| l == want)
            .unwrap_or_else(|| panic!("no line {want:?}: {screen:#?}"))
    };
    let note = at(&format!("run {id} Succeeded"));
    let status = at(&format!("run {id} (bar, team default): Succeeded"));
    assert!(note < status, "{screen:#?}");
    assert!(screen[status + 1].starts_with("STEP"), "{screen:#?}");
}

#[test]
fn a_failed_step_and_a_sweep_print_their_lines_cleanly_between_bar_updates() {
    let sb = Sandbox::new("bar-sweep");
    sb.write(
        "f.yaml",
        "apiVersion: sluice.dev/v1\nkind: Pipeline\nmetadata: {name: fails}\nspec:\n  steps:\n    - name: boom\n      run: sh -c 'sleep 1; exit 3'\n",
    );
    let raw = on_terminal(&sb, (COLS, 60), &["run", "f.yaml"]);
    assert!(!raw.contains("0/0"), "a bar at 0/0: {raw:?}");
    let screen = Screen::play(COLS, &raw).text();
    for line in &screen {
        assert!(
            !line.chars().any(is_bar_glyph),
            "bar debris in {line:?}: {screen:#?}"
        );
    }
    assert!(
        screen.iter().any(|l| l.starts_with("boom failed: ")),
        "{screen:#?}"
    );

    let raw = on_terminal(
        &sb,
        (COLS, 60),
        &[
            "sweep",
            "--name",
            "bar",
            "-p",
            "x=float:0:1",
            "--objective",
            "minimize:loss",
            "--algorithm",
            "random",
            "--trials",
            "3",
            "--",
            "sh",
            "-c",
            "sleep 1; echo loss={{params.x}}",
        ],
    );
    assert!(raw.contains("/3 trials"), "no bar: {raw:?}");
    assert!(!raw.contains("0/0"), "a bar at 0/0: {raw:?}");
    let screen = Screen::play(COLS, &raw).text();
    for line in &screen {
        assert!(
            !line.chars().any(is_bar_glyph),
            "bar debris in {line:?}: {screen:#?}"
        );
    }
    assert!(
        screen
            .iter()
            .any(|l| l.starts_with("run ") && l.ends_with(" (bar, team default): Succeeded")),
        "{screen:#?}"
    );
}

#[test]
fn a_terminal_that_does_not_say_its_size_gets_plain_lines() {
    let sb = Sandbox::new("bar-nosize");
    sb.write("p.yaml", PIPELINE);
    let raw = on_terminal(&sb, (0, 0), &["run", "p.yaml"]);
    assert!(!raw.contains('\u{1b}'), "escape codes: {raw:?}");
    assert!(!raw.chars().any(is_bar_glyph), "a bar: {raw:?}");
    assert!(
        raw.lines()
            .any(|l| l.trim_end().ends_with(" second Succeeded")),
        "{raw}"
    );
}
