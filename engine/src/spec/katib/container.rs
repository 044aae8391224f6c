//! The primary container of a trial's pod template as a sluice step's command, image, env and
//! resources: shared by a Job's pod and a PyTorchJob's Master (`${trialParameters.NAME}`
//! substituted, `$(VAR)` expanded, resources requested as Kubernetes schedules them).

use std::collections::BTreeMap;

use super::params::TrialParams;
use super::trial::{entry, map, quoted, seq};
use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::MetricsFile;
use crate::spec::yaml::{Entry, Node, Typed, Value};

/// Where a pod template is, for what is said about it.
pub(super) struct Owner<'a> {
    /// The path of its containers, from trialSpec (`spec.template.spec.containers`).
    pub containers: &'a str,
    /// Its kind, as the help names it (`a batch/v1 Job`, `the PyTorchJob's Master`).
    pub kind: &'a str,
    /// What a wrong primaryContainerName is not a container of (`trialSpec`).
    pub within: &'a str,
}

/// The pod template's `initContainers`, refused: false after saying so.
pub(super) fn no_init_containers(cx: &mut Cx<'_>, pod: Option<&Node>) -> bool {
    let Some(init) = pod.and_then(Node::as_map).and_then(|m| {
        m.iter()
            .find(|e| e.key == "initContainers")
            .map(|e| e.key_pos)
    }) else {
        return true;
    };
    cx.d.error(init, "initContainers cannot be honoured by sluice")
        .help("a sluice trial runs the primary container's command alone; run the setup in it");
    false
}

/// The primary container of a pod's spec (`pod`): the one `trialTemplate.primaryContainerName`
/// names, or the only one. None after saying why.
pub(super) fn primary<'n>(
    cx: &mut Cx<'_>,
    template: &Node,
    pod: Option<&'n Node>,
    at: &Node,
    owner: &Owner<'_>,
) -> Option<&'n Node> {
    let Some(containers) = pod.and_then(|s| s.get("containers")).and_then(Node::as_seq) else {
        cx.d.error(at.pos, format!("trialSpec needs {}", owner.containers))
            .help(format!(
                "sluice reads the trial's command from {}'s container",
                owner.kind
            ));
        return None;
    };
    match template.get("primaryContainerName") {
        Some(p) => {
            let wanted = cx.string(p, "trialTemplate.primaryContainerName")?;
            let names: Vec<&str> = containers
                .iter()
                .filter_map(|c| c.get("name").and_then(Node::as_scalar))
                .map(|s| s.text.as_str())
                .collect();
            let found = containers.iter().find(|c| {
                c.get("name")
                    .and_then(Node::as_scalar)
                    .is_some_and(|n| n.text == wanted)
            });
            if found.is_none() {
                let d = cx.d.error(
                    p.pos,
                    format!(
                        "primaryContainerName '{wanted}' is not a container of {}",
                        owner.within
                    ),
                );
                d.suggest(&wanted, names.iter().copied());
                if d.help.is_empty() {
                    d.help(format!("its containers are: {}", names.join(", ")));
                }
            }
            found
        }
        None if containers.len() == 1 => containers.first(),
        None => {
            cx.d.error(at.pos, "cannot tell the trial's container")
                .help(format!(
                    "set trialTemplate.primaryContainerName to one of {}'s containers",
                    owner.kind
                ));
            None
        }
    }
}

/// The step's `command`, `image`, `env` and `resources` from the primary container; None
/// after saying what is wrong (or when `ok` is false: something was already said).
pub(super) fn container_step(
    cx: &mut Cx<'_>,
    container: &Node,
    refs: &TrialParams,
    metrics_file: Option<&(MetricsFile, Pos)>,
    mut ok: bool,
) -> Option<Vec<Entry>> {
    for e in container.as_map().unwrap_or_default() {
        let why = match e.key.as_str() {
            "envFrom" => {
                "a local trial cannot read Kubernetes config maps or secrets; write env values, or pass settings as arguments"
            }
            "volumeMounts" | "volumeDevices" => {
                "a local trial sees this machine's files; pass paths as arguments"
            }
            "workingDir" => {
                "a local trial runs in the experiment file's folder; pass paths as arguments"
            }
            _ => continue,
        };
        cx.d.error(
            e.key_pos,
            format!("container field '{}' cannot be honoured by sluice", e.key),
        )
        .help(why);
        ok = false;
    }
    // The container's env, with trial parameters replaced; `$(NAME)` in later values and in
    // the command reads them, as Kubernetes expands it.
    let mut env_text: BTreeMap<String, String> = BTreeMap::new();
    // The command's words and env values as written: where the File collector's path must be.
    let mut written: Vec<String> = Vec::new();
    let mut env: Vec<Entry> = Vec::new();
    if let Some(list) = container.get("env") {
        match list.as_seq() {
            None => {
                cx.expected(list, "env", "a list of {name, value}");
                ok = false;
            }
            Some(items) => {
                for item in items {
                    let Some(fields) = cx.fields(item, "env", &["name", "value", "valueFrom"])
                    else {
                        ok = false;
                        continue;
                    };
                    let Some(name) = item.get("name").and_then(|n| cx.string(n, "env.name")) else {
                        if item.get("name").is_none() {
                            cx.d.error(item.pos, "an env entry needs 'name'");
                        }
                        ok = false;
                        continue;
                    };
                    if let Some(from) = fields.iter().find(|e| e.key == "valueFrom") {
                        cx.d.error(
                            from.key_pos,
                            format!("env '{name}': valueFrom cannot be honoured by sluice"),
                        )
                        .help("a local trial cannot read Kubernetes secrets, config maps or pod fields; write value:, or pass it as an argument");
                        ok = false;
                        continue;
                    }
                    let (value_node, text) = match item.get("value") {
                        Some(v) => match v.as_scalar() {
                            Some(s) if s.typed() == Typed::Null => (v, String::new()),
                            Some(s) => (v, s.text.clone()),
                            None => {
                                cx.expected(v, &format!("env '{name}' value"), "a string");
                                ok = false;
                                continue;
                            }
                        },
                        None => (item, String::new()),
                    };
                    let Some(replaced) = substitute(cx, value_node, &text, refs) else {
                        ok = false;
                        continue;
                    };
                    let replaced = expand_vars(&replaced, &env_text);
                    env_text.insert(name.clone(), replaced.clone());
                    written.push(text);
                    env.push(Entry {
                        key: name,
                        key_pos: item.pos,
                        value: quoted(value_node, replaced),
                    });
                }
            }
        }
    }
    // The argument vector, with ${trialParameters.NAME} turned into {{params.REF}}.
    let mut words: Vec<Node> = Vec::new();
    for key in ["command", "args"] {
        let Some(list) = container.get(key) else {
            continue;
        };
        let Some(items) = list.as_seq() else {
            cx.expected(list, key, "a list of strings");
            ok = false;
            continue;
        };
        for item in items {
            let Some(text) = item.as_scalar().map(|s| s.text.clone()) else {
                cx.expected(item, key, "a string");
                ok = false;
                continue;
            };
            match substitute(cx, item, &text, refs) {
                Some(replaced) => words.push(quoted(item, expand_vars(&replaced, &env_text))),
                None => ok = false,
            }
            written.push(text);
        }
    }
    if words.is_empty() && ok {
        cx.d.error(container.pos, "the trial's container has no command")
            .help("give the container a command (and args) to run");
        return None;
    }
    if let Some((f, pos)) = metrics_file
        && !written.iter().any(|w| w.contains(&f.path))
    {
        cx.d.error(
            *pos,
            format!(
                "the File collector's path '{}' is not in the trial container's command, args or env",
                f.path
            ),
        )
        .help("sluice gives each trial its own metrics file by replacing the path where the container passes it (--log-path=PATH); pass the path to the program");
        ok = false;
    }
    if !ok {
        return None;
    }
    let mut step = vec![entry(container, "command", seq(container, words))];
    if let Some(image) = container.get("image") {
        step.push(entry(container, "image", image.clone()));
    }
    if !env.is_empty() {
        step.push(entry(container, "env", map(container, env)));
    }
    if let Some(resources) = container.get("resources").and_then(resources) {
        step.push(entry(container, "resources", resources));
    }
    Some(step)
}

/// Replaces each `${trialParameters.NAME}` by `{{params.REF}}`; the rest is kept literally
/// (a `{{` in it is escaped). None after reporting an unknown or unclosed name.
fn substitute(cx: &mut Cx<'_>, node: &Node, text: &str, refs: &TrialParams) -> Option<String> {
    const OPEN: &str = "${trialParameters.";
    let literal = |s: &str| s.replace("{{", "\\{{");
    let mut out = String::new();
    let mut rest = text;
    let mut ok = true;
    while let Some(i) = rest.find(OPEN) {
        out.push_str(&literal(&rest[..i]));
        let after = &rest[i + OPEN.len()..];
        let Some(end) = after.find('}') else {
            cx.d.error(
                node.pos,
                format!("unclosed ${{trialParameters...}} in '{text}'"),
            )
            .help("write ${trialParameters.NAME}");
            return None;
        };
        let name = &after[..end];
        match refs.get(name) {
            Some(Some(reference)) => out.push_str(&format!("{{{{params.{reference}}}}}")),
            // Its reference was wrong, and said so.
            Some(None) => ok = false,
            None => {
                let d = cx.d.error(
                    node.pos,
                    format!(
                        "${{trialParameters.{name}}}: trialTemplate.trialParameters has no '{name}'"
                    ),
                );
                d.suggest(name, refs.keys().map(String::as_str));
                if d.help.is_empty() {
                    d.help("declare it under trialTemplate.trialParameters with the parameter it references");
                }
                ok = false;
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(&literal(rest));
    ok.then_some(out)
}

/// Kubernetes' expansion of a container's command, args and env values: `$(NAME)` is the
/// value of an env variable defined before it (left as written when there is none), `$$` is
/// `$`.
fn expand_vars(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
            && let Some(value) = env.get(&inner[..end])
        {
            out.push_str(value);
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A container's `resources` as a sluice step's: what it requests, as Kubernetes schedules
/// it (a resource with a limit and no request requests its limit).
fn resources(node: &Node) -> Option<Node> {
    let mut found: BTreeMap<&str, Node> = BTreeMap::new();
    for part in ["limits", "requests"] {
        for e in node.get(part).and_then(Node::as_map).unwrap_or_default() {
            let key = match e.key.as_str() {
                "cpu" => "cpu",
                "memory" => "memory",
                "nvidia.com/gpu" => "gpu",
                _ => continue,
            };
            let mut value = e.value.clone();
            // `nvidia.com/gpu: "1"`: a count, however it was quoted.
            if key == "gpu"
                && let Value::Scalar(s) = &mut value.value
            {
                s.plain = true;
            }
            found.insert(key, value);
        }
    }
    if found.is_empty() {
        return None;
    }
    let entries = found.into_iter().map(|(k, v)| entry(node, k, v)).collect();
    Some(map(node, entries))
}
