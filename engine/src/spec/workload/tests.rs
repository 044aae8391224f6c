use super::*;

fn errors(yaml: &str) -> (Option<WorkloadSpec>, Vec<String>) {
    let loaded = super::super::load("w.yaml", yaml.to_owned());
    let mut d = Diagnostics::new("w.yaml");
    let spec = read(&loaded, &mut d);
    let mut all = loaded.diagnostics.into_sorted();
    all.extend(d.into_sorted());
    let shown = all
        .iter()
        .filter(|d| d.severity == super::super::Severity::Error)
        .map(|d| {
            let pos = d
                .pos
                .map_or(String::new(), |p| format!("{}:{}", p.line, p.column));
            format!("{pos}: {} | {}", d.message, d.help.join("; "))
        })
        .collect();
    (spec, shown)
}

const HEAD: &str = "apiVersion: sluice.dev/v1\nkind: Workload\nmetadata: {name: w}\nspec:\n";

#[test]
fn jobs_decode_with_durations_quantities_and_defaults() {
    let (spec, errs) = errors(&format!(
        "{HEAD}  jobs:\n    - {{submit: 0, team: vision, workers: 2, gpu: 4, cpu: 8, memory: 64Gi, duration: 2h, priority: production, checkpointEvery: 15m, flavor: a100}}\n    - {{submit: 90s, team: nlp, duration: 600}}\n"
    ));
    assert!(errs.is_empty(), "{errs:?}");
    let Some(WorkloadSpec::Jobs(jobs)) = spec else {
        panic!("{spec:?}")
    };
    assert_eq!(jobs[0].duration, 7200);
    assert_eq!(jobs[0].millicpu, Some(8000));
    assert_eq!(jobs[0].memory, 64 << 30);
    assert_eq!(jobs[0].checkpoint_every, Some(900));
    assert_eq!(jobs[1].submit, 90);
    assert_eq!(
        (jobs[1].workers, jobs[1].gpu, jobs[1].millicpu),
        (1, 0, None)
    );
}

#[test]
fn bad_jobs_are_all_reported_where_they_are_written() {
    let (spec, errs) = errors(&format!(
        "{HEAD}  jobs:\n    - {{submit: 0, team: vision, gpus: 4, duration: 2h}}\n    - {{submit: soon, team: nlp, duration: 1h}}\n    - {{team: nlp, duration: 1h, interruptible: maybe}}\n"
    ));
    assert!(spec.is_none());
    assert_eq!(errs.len(), 4, "{errs:?}");
    assert!(
        errs[0].starts_with("6:33: unknown field 'gpus'") && errs[0].contains("did you mean 'gpu'"),
        "{errs:?}"
    );
    assert!(
        errs[1].starts_with("7:16: jobs[1].submit: expected whole seconds or a duration"),
        "{errs:?}"
    );
    assert!(
        errs[2].starts_with("8:7: jobs[2] has no 'submit'"),
        "{errs:?}"
    );
    assert!(
        errs[3].contains("interruptible: expected true or false"),
        "{errs:?}"
    );
}

#[test]
fn generate_decodes_distributions_and_rates() {
    let (spec, errs) = errors(&format!(
        "{HEAD}  generate:\n    seed: 7\n    jobs: 100\n    arrivalRate: 120\n    teams: [{{name: vision, weight: 3}}, {{name: nlp}}]\n    workers: {{choice: [{{value: 1, weight: 8}}, {{value: 4, weight: 2}}]}}\n    gpu: {{uniform: {{min: 1, max: 8}}}}\n    duration: {{lognormal: {{median: 30m, sigma: 1}}}}\n    interruptible: 0.25\n    checkpointEvery: 15m\n"
    ));
    assert!(errs.is_empty(), "{errs:?}");
    let Some(WorkloadSpec::Generate(g)) = spec else {
        panic!("{spec:?}")
    };
    assert_eq!(g.mean_interarrival, 30.0);
    assert_eq!(g.teams[1].1, 1.0);
    assert_eq!(g.workers, Dist::Choice(vec![(1, 8.0), (4, 2.0)]));
    assert_eq!(g.gpu, Dist::Uniform { min: 1, max: 8 });
    assert_eq!(
        g.duration,
        Dist::LogNormal {
            median: 1800.0,
            sigma: 1.0
        }
    );
    assert_eq!(g.checkpoint_every, Some(900));
    assert_eq!(g.millicpu_per_gpu, 4000);
}

#[test]
fn bad_generators_say_what_was_expected_and_how_to_fix_it() {
    let (spec, errs) = errors(&format!(
        "{HEAD}  generate:\n    jobs: 0\n    meanInterarrival: 30s\n    arrivalRate: 10\n    teams: vision\n    duration: {{lognormal: {{median: 30m}}}}\n    gpu: {{poisson: {{mean: 2}}}}\n"
    ));
    assert!(spec.is_none());
    let all = errs.join("\n");
    assert!(
        all.contains("6:11: generate.jobs: expected a positive integer"),
        "{all}"
    );
    assert!(
        all.contains("8:18: generate has both meanInterarrival and arrivalRate"),
        "{all}"
    );
    assert!(
        all.contains("9:12: generate.teams: expected a list of {name, weight}"),
        "{all}"
    );
    assert!(
        all.contains("generate.duration.lognormal: needs median and sigma"),
        "{all}"
    );
    assert!(
        all.contains("unknown field 'poisson' in generate.gpu"),
        "{all}"
    );
    // Neither, and both.
    let (_, errs) = errors(&format!("{HEAD}  jobz: []\n"));
    assert!(
        errs.iter().any(|e| e.contains("did you mean 'jobs'")),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.contains("neither jobs nor generate")),
        "{errs:?}"
    );
    // Not YAML at all: no panic, a position.
    let (spec, errs) = errors("{HEAD\n  jobs: [\n");
    assert!(spec.is_none() && !errs.is_empty());
}
