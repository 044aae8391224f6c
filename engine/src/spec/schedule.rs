//! `kind: Schedule` decoding: the pipeline it runs, its cron expression (each field checked
//! where it is written, by `schedule::cron`), its IANA time zone (with a suggestion), its
//! parameters, and the settings of `spec/cluster.md` ("Schedule"). That the pipeline is
//! applied and takes these parameters is checked when the schedule is applied.

use super::decode::Cx;
use super::model::{CatchUp, Concurrency, Metadata, Schedule};
use super::yaml::Node;

const FIELDS: &[&str] = &[
    "pipeline",
    "cron",
    "timezone",
    "params",
    "concurrency",
    "catchUp",
    "startingDeadline",
    "keepRuns",
    "suspend",
];

pub(super) fn decode(cx: &mut Cx<'_>, metadata: Metadata, spec: &Node) -> Option<Schedule> {
    cx.fields(spec, "spec", FIELDS)?;
    let mut ok = true;
    let pipeline = match spec.get("pipeline") {
        Some(p) => cx
            .plain_string(p, "pipeline")
            .map(|name| (name, p.pos))
            .filter(|(name, _)| cx.check_name(p, "pipeline", name)),
        None => {
            cx.d.error(spec.pos, "the Schedule names no pipeline").help(
                "add pipeline: NAME, the name of an applied Pipeline or Sweep of the same team",
            );
            None
        }
    };
    let cron = match spec.get("cron") {
        Some(c) => cron(cx, c),
        None => {
            cx.d.error(spec.pos, "the Schedule has no cron expression")
                .help("add cron: \"0 2 * * *\" (02:00 every day), or @hourly, @daily, @weekly, @monthly");
            None
        }
    };
    let timezone = match spec.get("timezone") {
        None => Some("UTC".to_owned()),
        Some(t) => {
            cx.string(t, "timezone")
                .and_then(|name| match crate::schedule::cron::zone(&name) {
                    Ok(_) => Some(name),
                    Err((message, help)) => {
                        let d = cx.d.error(t.pos, format!("timezone: {message}"));
                        if let Some(h) = help {
                            d.help(h);
                        }
                        None
                    }
                })
        }
    };
    let mut params = Vec::new();
    if let Some(p) = spec.get("params") {
        match p.as_map() {
            Some(entries) => {
                for e in entries {
                    match e.value.as_scalar() {
                        Some(v) => params.push((format!("{}={}", e.key, v.text), e.value.pos)),
                        None => {
                            cx.expected(&e.value, &format!("params.{}", e.key), "a value");
                            ok = false;
                        }
                    }
                }
            }
            None => {
                cx.expected(p, "params", "a mapping of parameter names to values");
                ok = false;
            }
        }
    }
    let concurrency = match spec.get("concurrency") {
        None => Some(Concurrency::default()),
        Some(c) => super::cluster::one_of(cx, c, "concurrency", &["allow", "forbid", "replace"])
            .map(|v| match v.as_str() {
                "forbid" => Concurrency::Forbid,
                "replace" => Concurrency::Replace,
                _ => Concurrency::Allow,
            }),
    };
    let catch_up = match spec.get("catchUp") {
        None => Some(CatchUp::default()),
        Some(c) => super::cluster::one_of(cx, c, "catchUp", &["none", "latest", "all"]).map(|v| {
            match v.as_str() {
                "none" => CatchUp::None,
                "all" => CatchUp::All,
                _ => CatchUp::Latest,
            }
        }),
    };
    let starting_deadline = match spec.get("startingDeadline") {
        None => Some(None),
        Some(d) => cx.duration(d, "startingDeadline").map(Some),
    };
    let keep_runs = match spec.get("keepRuns") {
        None => Some(None),
        Some(k) => cx.uint(k, "keepRuns", 1).map(Some),
    };
    let suspend = match spec.get("suspend") {
        None => Some(false),
        Some(s) => cx.bool(s, "suspend"),
    };
    let (
        Some((pipeline, pipeline_pos)),
        Some(cron),
        Some(timezone),
        Some(concurrency),
        Some(catch_up),
        Some(starting_deadline),
        Some(keep_runs),
        Some(suspend),
    ) = (
        pipeline,
        cron,
        timezone,
        concurrency,
        catch_up,
        starting_deadline,
        keep_runs,
        suspend,
    )
    else {
        return None;
    };
    ok.then_some(Schedule {
        metadata,
        pipeline,
        pipeline_pos,
        cron,
        timezone,
        params,
        concurrency,
        catch_up,
        starting_deadline,
        keep_runs,
        suspend,
    })
}

/// The expression, checked; a mistake is reported at the field it is in.
fn cron(cx: &mut Cx<'_>, node: &Node) -> Option<String> {
    let text = cx.string(node, "cron")?;
    match crate::schedule::cron::parse(&text) {
        Ok(e) => Some(e.text().to_owned()),
        Err(e) => {
            let token: String = text[e.offset.min(text.len())..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            let pos = cx.pos_in(node, &text, e.offset, &token);
            let d = cx.d.error(pos, format!("cron: {}", e.message));
            if let Some(h) = e.help {
                d.help(h);
            }
            None
        }
    }
}
