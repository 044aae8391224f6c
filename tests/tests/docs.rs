//! The documentation a fresh clone has: every link in the repository's markdown leads to a
//! file of the repository (and to a heading that exists), none leaves it, and the YAML examples
//! of the docs are files `sluice lint` accepts.
//!
//! Why: the README once linked to the contract beside the checkout (`../shared/spec/...`) and
//! to traces that only one machine had; a clone had none of them.

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};

use sluice_e2e::{TempDir, root, run_in};

/// Every markdown file of the repository: hidden folders and `target/` left out.
fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for p in paths {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with('.') || name == "target" {
                continue;
            }
            if p.is_dir() {
                walk(&p, out);
            } else if name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root(), &mut out);
    out
}

/// The text with fenced code blocks and inline code spans blanked out (line breaks kept, so
/// that line numbers still hold): links are not read inside code.
fn without_code(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut fence: Option<&str> = None;
    for line in md.split_inclusive('\n') {
        let trimmed = line.trim_start();
        match fence {
            Some(f) => {
                if trimmed.starts_with(f) {
                    fence = None;
                }
                out.push_str(if line.ends_with('\n') { "\n" } else { "" });
                continue;
            }
            None if trimmed.starts_with("```") || trimmed.starts_with("~~~") => {
                fence = Some(if trimmed.starts_with("```") {
                    "```"
                } else {
                    "~~~"
                });
                out.push_str(if line.ends_with('\n') { "\n" } else { "" });
                continue;
            }
            None => {}
        }
        // Inline code: a run of backticks up to the same run.
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            out.push_str(&rest[..start]);
            let ticks = rest[start..].chars().take_while(|c| *c == '`').count();
            let after = &rest[start + ticks..];
            match after.find(&"`".repeat(ticks)) {
                Some(end) => {
                    out.push(' ');
                    rest = &after[end + ticks..];
                }
                None => {
                    out.push_str(&rest[start..start + ticks]);
                    rest = after;
                }
            }
        }
        out.push_str(rest);
    }
    out
}

/// The link targets of a markdown text, with their line: inline links and images
/// (`[text](target "title")`, `<target>`), reference definitions (`[name]: target`), and
/// `href`/`src` attributes.
fn links(md: &str) -> Vec<(usize, String)> {
    let text = without_code(md);
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let target = if let Some(inner) = after.strip_prefix('<') {
                inner.split('>').next().unwrap_or("")
            } else {
                after
                    .split(|c: char| c == ')' || c.is_whitespace())
                    .next()
                    .unwrap_or("")
            };
            out.push((n, target.to_owned()));
            rest = after;
        }
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some(close) = t.find("]:")
            && !t[..close].contains('(')
        {
            let target = t[close + 2..].split_whitespace().next().unwrap_or("");
            out.push((n, target.trim_matches(['<', '>']).to_owned()));
        }
        for attr in ["href=\"", "src=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attr) {
                let after = &rest[at + attr.len()..];
                out.push((n, after.split('"').next().unwrap_or("").to_owned()));
                rest = after;
            }
        }
    }
    out
}

/// Whether a target is a URL with a scheme (`https:`, `mailto:`), not a path.
fn is_url(target: &str) -> bool {
    let Some((scheme, _)) = target.split_once(':') else {
        return false;
    };
    !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
}

/// `base/target` with `.` and `..` resolved, relative to the repository's root; None when it
/// climbs above the root.
fn resolve(base: &Path, target: &str) -> Option<PathBuf> {
    let mut parts: Vec<String> = base
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    for c in Path::new(target).components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(parts.iter().collect())
}

/// The anchors GitHub gives a markdown file's headings: lowercased, punctuation dropped
/// (`-` and `_` kept), spaces as `-`, repeats numbered `-1`, `-2`...
fn anchors(md: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fence = false;
    for line in md.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if fence || hashes == 0 || hashes > 6 || !t[hashes..].starts_with(' ') {
            continue;
        }
        let title = t[hashes..].trim().trim_end_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                '-' | '_' => Some(c),
                c if c.is_alphanumeric() => Some(c),
                _ => None,
            })
            .collect();
        let mut anchor = slug.clone();
        let mut k = 0;
        while seen.contains(&anchor) {
            k += 1;
            anchor = format!("{slug}-{k}");
        }
        seen.insert(anchor);
    }
    seen
}

/// What is wrong with one link of `file`, if anything.
fn check_link(root: &Path, file: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("an empty link".into());
    }
    if is_url(target) {
        return None;
    }
    let (path, fragment) = match target.split_once('#') {
        Some((p, f)) => (p, Some(f)),
        None => (target, None),
    };
    let path = path.split('?').next().unwrap_or("");
    if path.starts_with('/') {
        return Some(format!(
            "'{target}' is an absolute path: a clone of the repository does not have it"
        ));
    }
    let rel_file = file.strip_prefix(root).unwrap_or(file);
    let base = rel_file.parent().unwrap_or(Path::new(""));
    let resolved = if path.is_empty() {
        rel_file.to_path_buf()
    } else {
        match resolve(base, path) {
            Some(p) => p,
            None => {
                return Some(format!(
                    "'{target}' points outside the repository: a clone does not have it"
                ));
            }
        }
    };
    let full = root.join(&resolved);
    if !full.exists() {
        return Some(format!(
            "'{target}': {} does not exist in the repository",
            resolved.display()
        ));
    }
    if let Some(fragment) = fragment
        && !fragment.is_empty()
        && full.extension().is_some_and(|e| e == "md")
    {
        let text = std::fs::read_to_string(&full).unwrap_or_default();
        if !anchors(&text).contains(fragment) {
            return Some(format!(
                "'{target}': {} has no heading with the anchor #{fragment}",
                resolved.display()
            ));
        }
    }
    None
}

#[test]
fn links_in_the_docs_lead_to_files_of_the_repository() {
    let root = root();
    let files = markdown_files();
    for must in [
        "README.md",
        "docs/reference/README.md",
        "docs/traces.md",
        "examples/simulate/traces/README.md",
    ] {
        assert!(
            files.contains(&root.join(must)),
            "{must} is not among the markdown files found: {files:?}"
        );
    }
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let md = std::fs::read_to_string(file).unwrap_or_default();
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        for (line, target) in links(&md) {
            checked += 1;
            if let Some(why) = check_link(&root, file, &target) {
                problems.push(format!("{shown}:{line}: {why}"));
            }
        }
        // Named without a link, the folders beside the checkout are just as absent.
        for (i, text) in md.lines().enumerate() {
            for outside in ["../shared/", "/work/shared"] {
                if text.contains(outside) {
                    problems.push(format!(
                        "{shown}:{}: names {outside}, which a clone does not have",
                        i + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: the extractor is broken"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The checker itself: what it must refuse, and what it must accept.
#[test]
fn the_link_check_refuses_what_a_clone_lacks() {
    let root = root();
    let readme = root.join("README.md");
    let bad = [
        "../shared/spec/pipeline.md",
        "/work/shared/data/traces/README.md",
        "docs/no-such-page.md",
        "docs/reference/cli.md#no-such-heading",
        "../../outside.md",
    ];
    for target in bad {
        assert!(
            check_link(&root, &readme, target).is_some(),
            "'{target}' was accepted"
        );
    }
    let good = [
        "docs/reference/README.md",
        "docs/reference/cli.md#sluice-run",
        "docs/reference/cluster.md#running-with---cluster",
        "examples/simulate/traces/",
        "https://www.usenix.org/conference/atc23/presentation/weng",
        "#start",
    ];
    for target in good {
        assert_eq!(check_link(&root, &readme, target), None, "'{target}'");
    }
    let md = "[a](x.md) `[b](y.md)` [c](<z w.md>)\n```\n[d](q.md)\n```\n[e]: r.md\n";
    let found: Vec<String> = links(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(found, ["x.md", "z w.md", "r.md"]);
}

/// The YAML examples of the docs (a ```yaml block holding a whole document, with its
/// `apiVersion`) are files `sluice lint` accepts: the reference cannot drift from the code.
#[test]
fn yaml_examples_in_the_docs_lint_clean() {
    let root = root();
    let tmp = TempDir::new("doc-examples");
    let mut written = Vec::new();
    for file in markdown_files() {
        let md = std::fs::read_to_string(&file).unwrap_or_default();
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        let mut block: Option<(usize, String)> = None;
        for (i, line) in md.lines().enumerate() {
            let t = line.trim_start();
            match &mut block {
                None if t.starts_with("```yaml") => block = Some((i + 1, String::new())),
                Some((start, text)) if t.starts_with("```") => {
                    if text.contains("apiVersion:") {
                        let name = format!("{}-{start}.yaml", shown.replace(['/', '.'], "_"));
                        written.push((format!("{shown}:{start}"), tmp.write(&name, text)));
                    }
                    block = None;
                }
                Some((_, text)) => {
                    text.push_str(line);
                    text.push('\n');
                }
                None => {}
            }
        }
    }
    assert!(
        written.len() >= 7,
        "only {} YAML examples found in the docs",
        written.len()
    );
    let mut failures = Vec::new();
    for (from, path) in &written {
        let p = path.display().to_string();
        let out = run_in(&root, &["lint", &p]);
        if out.code != Some(0) {
            failures.push(format!("{from}:\n{}", out.stderr));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
