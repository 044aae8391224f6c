//! From a step instance to the launch of an attempt: templates rendered, inputs listed, the
//! runtime's settings filled in. The executor writes it where its runtime reads it.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sluice_runtime::contract::{self, Input, Launch};

use crate::executor::Settings;
use crate::spec::model::{Action, ParamValue, Step};
use crate::spec::template::{Ref, Template};
use crate::store::{RunRow, StepRow};

use super::state::step as st;

/// Why a step cannot be launched as it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// It reads a skipped step's outputs or metrics: it is skipped too.
    Skip(String),
    /// Something it needs does not exist: the step fails, saying what.
    Fail(String),
}

/// What templates can read, for one run.
pub struct Scope<'a> {
    pub run: &'a RunRow,
    pub params: &'a BTreeMap<String, ParamValue>,
    pub rows: &'a [StepRow],
    pub by_name: &'a HashMap<String, usize>,
    /// `{{run.state}}`, for onExit steps.
    pub run_state: &'a str,
    /// The row is a sweep's trial: `{{params.NAME}}` are its proposed values (its `item`), and
    /// the run's own parameters are `{{pipeline.params.NAME}}`.
    pub trial: bool,
}

impl Scope<'_> {
    fn upstream(&self, name: &str) -> Result<&StepRow, Stop> {
        let row = self
            .by_name
            .get(name)
            .map(|&i| &self.rows[i])
            .ok_or_else(|| {
                Stop::Fail(format!("step '{name}' has no single instance to read from"))
            })?;
        if row.state == st::SKIPPED {
            return Err(Stop::Skip(format!("it reads skipped step '{name}'")));
        }
        Ok(row)
    }

    /// The text of one reference. `inputs` collects artifacts to place, at `inputs_dir`.
    pub fn resolve(
        &self,
        row: &StepRow,
        r: &Ref,
        inputs: &mut Vec<Input>,
        inputs_dir: &Path,
    ) -> Result<String, Stop> {
        match r {
            Ref::Param(n) if self.trial => {
                let params: serde_json::Map<String, serde_json::Value> = row
                    .item
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .unwrap_or_default();
                params
                    .get(n)
                    .map(json_text)
                    .ok_or_else(|| Stop::Fail(format!("the trial has no parameter '{n}'")))
            }
            Ref::Param(n) | Ref::PipelineParam(n) => self
                .params
                .get(n)
                .map(ParamValue::to_text)
                .ok_or_else(|| Stop::Fail(format!("parameter '{n}' has no value"))),
            Ref::Output { step, name } => {
                let up = self.upstream(step)?;
                let dir = up.outputs.as_ref().ok_or_else(|| {
                    Stop::Fail(format!(
                        "step '{step}' has no outputs (it ended {})",
                        up.state
                    ))
                })?;
                let to = inputs_dir.join(step).join(name);
                if !inputs.iter().any(|i| i.to == to) {
                    inputs.push(Input {
                        key: format!("{dir}/{name}"),
                        to: to.clone(),
                    });
                }
                Ok(to.display().to_string())
            }
            Ref::Metric { step, name } => {
                let up = self.upstream(step)?;
                let metrics: BTreeMap<String, f64> = up
                    .metrics
                    .as_deref()
                    .and_then(|m| serde_json::from_str(m).ok())
                    .unwrap_or_default();
                metrics.get(name).map(|v| v.to_string()).ok_or_else(|| {
                    Stop::Fail(format!(
                        "metric '{name}' of step '{step}' was never reported"
                    ))
                })
            }
            Ref::BestParam { step, name } => {
                let up = self.upstream(step)?;
                let best: serde_json::Map<String, serde_json::Value> = up
                    .item
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .ok_or_else(|| {
                        Stop::Fail(format!(
                            "sweep '{step}' has no best trial (it ended {})",
                            up.state
                        ))
                    })?;
                best.get(name).map(json_text).ok_or_else(|| {
                    Stop::Fail(format!(
                        "the best trial of sweep '{step}' has no parameter '{name}'"
                    ))
                })
            }
            Ref::Item(path) => {
                let item: serde_json::Value = row
                    .item
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .ok_or_else(|| Stop::Fail("the step has no forEach item".into()))?;
                let mut v = &item;
                for field in path {
                    v = v.get(field.as_str()).ok_or_else(|| {
                        Stop::Fail(format!("the forEach item has no field '{field}'"))
                    })?;
                }
                Ok(json_text(v))
            }
            Ref::RunId => Ok(self.run.id.clone()),
            Ref::RunName => Ok(self.run.name.clone()),
            Ref::RunState => Ok(self.run_state.to_owned()),
            Ref::Team => Ok(self.run.team.clone()),
        }
    }

    pub fn render(
        &self,
        row: &StepRow,
        t: &Template,
        inputs: &mut Vec<Input>,
        inputs_dir: &Path,
    ) -> Result<String, Stop> {
        t.render(|r| self.resolve(row, r, inputs, inputs_dir))
    }
}

/// The text a template inserts for a JSON value: strings without their quotes.
fn json_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Characters that need a shell; a `run:` line without them is executed directly.
const SHELL_SYNTAX: &[char] = &[
    '|', '&', ';', '<', '>', '(', ')', '$', '`', '\\', '"', '\'', '*', '?', '[', ']', '#', '~',
    '=', '%', '{', '}', '\n', '!',
];

/// Shell builtins and keywords with no program of the same name: a line starting with one
/// needs the shell even without shell syntax (`exit 3`, `cd data`).
const SHELL_WORDS: &[&str] = &[
    ".", ":", "alias", "bg", "break", "case", "cd", "command", "continue", "do", "done", "elif",
    "else", "esac", "eval", "exec", "exit", "export", "fg", "fi", "for", "getopts", "hash", "if",
    "jobs", "local", "read", "readonly", "return", "set", "shift", "source", "then", "times",
    "trap", "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while",
];

/// The argument vector for a rendered `run:` line: the words themselves when the line has no
/// shell syntax (as make does, saving a shell per step), else `/bin/sh -c LINE`.
pub fn argv_of_line(line: &str) -> Vec<String> {
    let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
    let builtin = words
        .first()
        .is_some_and(|w| SHELL_WORDS.contains(&w.as_str()));
    if words.is_empty() || builtin || line.contains(SHELL_SYNTAX) {
        vec!["/bin/sh".into(), "-c".into(), line.to_owned()]
    } else {
        words
    }
}

/// The object-store prefix of a step's checkpoints (`teams/TEAM/checkpoints/RUN/STEP`).
pub fn checkpoint_prefix(team: &str, run: &str, step: &str) -> String {
    format!("teams/{team}/checkpoints/{run}/{step}")
}

/// The object-store prefixes holding everything of a run: its attempts' outputs and logs
/// (`teams/TEAM/runs/RUN`) and its checkpoints (`teams/TEAM/checkpoints/RUN`).
pub fn run_prefixes(team: &str, run: &str) -> [String; 2] {
    [
        format!("teams/{team}/runs/{run}"),
        format!("teams/{team}/checkpoints/{run}"),
    ]
}

/// The object-store key of an attempt (`teams/TEAM/runs/RUN/STEP/ATTEMPT`).
pub fn object_key(team: &str, run: &str, step: &str, number: i64) -> String {
    format!("teams/{team}/runs/{run}/{step}/{number}")
}

/// Builds the launch of attempt `number` of `row` (an instance of `step`), whose files are at
/// `dir` as its runtime sees them, with the Cluster's runtime `settings`.
pub fn build(
    scope: &Scope<'_>,
    dir: &Path,
    step: &Step,
    row: &StepRow,
    number: i64,
    settings: &Settings,
    machine_gpus: usize,
) -> Result<Launch, Stop> {
    let run = scope.run;
    let wanted = step.resources.gpu as usize * step.resources.workers.max(1) as usize;
    if wanted > machine_gpus {
        return Err(Stop::Fail(format!(
            "it asks for {wanted} GPU(s) ({} per worker x {} worker(s)) and this machine has {machine_gpus} (found with nvidia-smi)",
            step.resources.gpu,
            step.resources.workers.max(1)
        )));
    }
    // Outside cluster mode (`usize::MAX`: the scheduler placed it) nothing counts extended
    // resources, so a step asking for one cannot be honoured here.
    if machine_gpus != usize::MAX
        && let Some((name, n)) = step.resources.extended.iter().find(|(_, n)| **n > 0)
    {
        return Err(Stop::Fail(format!(
            "it asks for {n} {name} per worker, and only a Cluster's pools have extended resources: run it with --cluster FILE (or on a server) whose pools name {name}"
        )));
    }
    let inputs_dir = dir.join("inputs");
    let mut inputs = Vec::new();
    let argv = match &step.action {
        Action::Run(t) => argv_of_line(&scope.render(row, t, &mut inputs, &inputs_dir)?),
        Action::Command(ts) => ts
            .iter()
            .map(|t| scope.render(row, t, &mut inputs, &inputs_dir))
            .collect::<Result<_, _>>()?,
        Action::Sweep { .. } => {
            return Err(Stop::Fail("sweep steps cannot run in this version".into()));
        }
    };
    let base = PathBuf::from(&run.workdir);
    let workdir = match &step.workdir {
        // No folder on this machine (Kubernetes): a folder in the container, never one here.
        Some(t) if run.workdir.is_empty() => {
            let w = scope.render(row, t, &mut inputs, &inputs_dir)?;
            crate::spec::paths::in_container(&w, dir).map_err(Stop::Fail)?
        }
        Some(t) => base.join(scope.render(row, t, &mut inputs, &inputs_dir)?),
        None => base,
    };
    let output_dir = dir.join("out");
    // Per attempt, restored from the object store by the runtime: what the program finds there
    // is the step's latest complete checkpoint, whichever attempt wrote it.
    let checkpoint_dir = dir.join("checkpoint");
    let mut env = BTreeMap::new();
    for (k, t) in &step.env {
        env.insert(k.clone(), scope.render(row, t, &mut inputs, &inputs_dir)?);
    }
    let sluice_env = [
        ("SLUICE_RUN_ID", run.id.clone()),
        ("SLUICE_RUN_NAME", run.name.clone()),
        ("SLUICE_TEAM", run.team.clone()),
        ("SLUICE_STEP", row.name.clone()),
        ("SLUICE_ATTEMPT", number.to_string()),
        (
            "SLUICE_PARAMS",
            match (&row.item, scope.trial) {
                (Some(item), true) => item.clone(),
                _ => run.params.clone(),
            },
        ),
        ("SLUICE_OUTPUT_DIR", output_dir.display().to_string()),
        (
            "SLUICE_CHECKPOINT_DIR",
            checkpoint_dir.display().to_string(),
        ),
        ("SLUICE_RESUMED", "0".to_owned()),
    ];
    for (k, v) in sluice_env {
        env.insert(k.to_owned(), v);
    }
    if scope.trial
        && let Some(n) = row
            .name
            .rsplit_once('[')
            .and_then(|(_, n)| n.strip_suffix(']'))
    {
        env.insert("SLUICE_TRIAL".into(), n.to_owned());
    }
    Ok(Launch {
        argv,
        workdir,
        env,
        timeout_ms: step.timeout.map(millis),
        grace_ms: millis(settings.grace_period),
        inputs,
        outputs: step.outputs.clone(),
        output_dir,
        checkpoint_dir,
        checkpoint: step.checkpoint.map(|every| contract::CheckpointSpec {
            every_ms: millis(every),
            prefix: checkpoint_prefix(&run.team, &run.id, &row.name),
            keep: settings.keep_checkpoints,
            restore_only: false,
        }),
        workers: step.resources.workers.max(1),
        heartbeat_ms: millis(settings.heartbeat_every()),
        gpus: Vec::new(),
        gpus_per_worker: step.resources.gpu,
        hide_gpus: machine_gpus > 0 && step.resources.gpu == 0,
        objects: run.objects.clone(),
        outputs_key: format!(
            "{}/outputs",
            object_key(&run.team, &run.id, &row.name, number)
        ),
        metrics_stdout: step.metrics_stdout,
        collect: step.collect.clone(),
        inherit: match settings.environment {
            crate::executor::StepEnvironment::Allowed => contract::Inherit::Only(
                contract::DEFAULT_INHERIT
                    .iter()
                    .map(|s| (*s).to_owned())
                    .chain(settings.pass_env.iter().cloned())
                    .collect(),
            ),
            crate::executor::StepEnvironment::User => contract::Inherit::AllBut(
                contract::ENGINE_ONLY
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect(),
            ),
        },
    })
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_run_directly_and_shell_lines_through_sh() {
        assert_eq!(argv_of_line("true"), vec!["true"]);
        assert_eq!(
            argv_of_line("python3 t.py --lr 0.1"),
            vec!["python3", "t.py", "--lr", "0.1"]
        );
        assert_eq!(argv_of_line("echo $HOME")[0], "/bin/sh");
        assert_eq!(argv_of_line("a > b")[0], "/bin/sh");
        assert_eq!(argv_of_line("a=1 b")[0], "/bin/sh");
        assert_eq!(argv_of_line("exit 3")[0], "/bin/sh");
        assert_eq!(argv_of_line("cd data")[0], "/bin/sh");
    }
}
