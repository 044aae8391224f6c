//! `/metrics`: Prometheus text, without authentication, so it holds aggregates per team,
//! pool and state only (no run names, parameters or paths; `spec/server.md`). Counters of
//! what this process did (API requests by route and status, their latency, runs it drove to
//! an end) live in a prometheus-client registry; what the store holds (steps by team and
//! state, GPUs held by team) is read from the store when scraped, so that every server of a
//! store reports the same.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteOnly {
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamState {
    team: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamPool {
    team: String,
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamOutcome {
    team: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbResource {
    verb: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TeamPriority {
    team: String,
    priority: String,
}

/// What the queue's metrics read of a waiting step's request.
#[derive(serde::Deserialize)]
struct Asked {
    team: String,
    priority: i64,
}

pub struct Metrics {
    registry: Mutex<Registry>,
    requests: Family<RouteLabels, Counter>,
    latency: Family<RouteOnly, Histogram>,
    runs_ended: Family<StateLabels, Counter>,
    steps: Family<TeamState, Gauge>,
    gpus: Family<TeamPool, Gauge>,
    attempts: Family<TeamState, Gauge>,
    queued: Family<TeamPriority, Gauge>,
    fires: Family<TeamOutcome, Gauge>,
    oldest_wait: Family<TeamPriority, Gauge<f64, std::sync::atomic::AtomicU64>>,
    driven: Gauge,
    leader: Gauge,
    kubernetes_calls: Family<VerbResource, Gauge>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("sluice");
        let requests = Family::<RouteLabels, Counter>::default();
        let latency = Family::<RouteOnly, Histogram>::new_with_constructor(|| {
            Histogram::new([
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
            ])
        });
        let runs_ended = Family::<StateLabels, Counter>::default();
        let steps = Family::<TeamState, Gauge>::default();
        let gpus = Family::<TeamPool, Gauge>::default();
        let driven = Gauge::default();
        let leader = Gauge::default();
        let attempts = Family::<TeamState, Gauge>::default();
        let queued = Family::<TeamPriority, Gauge>::default();
        let fires = Family::<TeamOutcome, Gauge>::default();
        registry.register(
            "schedule_fires",
            "Ticks of schedules decided, by team and outcome (started, skipped, missed)",
            fires.clone(),
        );
        let oldest_wait =
            Family::<TeamPriority, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "queue_length",
            "Steps waiting for admission onto a Cluster, by team and priority value",
            queued.clone(),
        );
        registry.register(
            "attempts",
            "Attempts started (admissions), by team and state: Preempted, Lost, Failed, Timeout, Succeeded, Cancelled, Running",
            attempts.clone(),
        );
        registry.register(
            "queue_oldest_wait_seconds",
            "How long the longest-waiting step has waited for admission, by team and priority value",
            oldest_wait.clone(),
        );
        registry.register(
            "api_requests",
            "API requests answered, by method, route and status",
            requests.clone(),
        );
        registry.register(
            "api_request_duration_seconds",
            "Time to answer an API request, by route",
            latency.clone(),
        );
        registry.register(
            "runs_ended",
            "Runs this server drove to their end, by final state",
            runs_ended.clone(),
        );
        registry.register(
            "steps",
            "Steps of running runs, by team and state (Pending and Queued wait)",
            steps.clone(),
        );
        registry.register(
            "gpus_held",
            "GPUs held by running attempts, by team and pool (`local` without a Cluster)",
            gpus.clone(),
        );
        registry.register("runs_driven", "Runs this server drives now", driven.clone());
        let kubernetes_calls = Family::<VerbResource, Gauge>::default();
        registry.register(
            "kubernetes_api_calls",
            "Kubernetes API requests this server has made (executor: kubernetes), by verb and resource",
            kubernetes_calls.clone(),
        );
        registry.register(
            "leader",
            "1 while this server drives runs (the leader), 0 while it stands by",
            leader.clone(),
        );
        Metrics {
            registry: Mutex::new(registry),
            requests,
            latency,
            runs_ended,
            steps,
            gpus,
            attempts,
            queued,
            fires,
            oldest_wait,
            driven,
            leader,
            kubernetes_calls,
        }
    }

    /// An API request answered: `route` is the matched route's template, never the path
    /// (which holds run ids).
    pub fn request(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status,
            })
            .inc();
        self.latency
            .get_or_create(&RouteOnly {
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    pub fn run_ended(&self, state: &str) {
        self.runs_ended
            .get_or_create(&StateLabels {
                state: state.to_owned(),
            })
            .inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// The text a scrape gets: what the store holds now, then the registry.
    pub async fn render(&self, service: &crate::service::Service, driven: usize) -> String {
        let store = service.store();
        let now_ms = service.clock().now_ms();
        match service.gpus_held().await {
            Ok(held) => {
                self.gpus.clear();
                for (team, pool, n) in held {
                    self.gpus
                        .get_or_create(&TeamPool { team, pool })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
            Err(e) => tracing::warn!("metrics: cannot read the GPUs held: {e}"),
        }
        self.driven.set(i64::try_from(driven).unwrap_or(i64::MAX));
        for (call, n) in crate::executor::kubernetes::calls() {
            let (verb, resource) = call.split_once(' ').unwrap_or((call.as_str(), ""));
            self.kubernetes_calls
                .get_or_create(&VerbResource {
                    verb: verb.to_owned(),
                    resource: resource.to_owned(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        match store.load_by_team().await {
            Ok(load) => {
                self.steps.clear();
                for (team, state, n) in load.steps {
                    self.steps.get_or_create(&TeamState { team, state }).set(n);
                }
                self.attempts.clear();
                for (team, state, n) in load.attempts {
                    self.attempts
                        .get_or_create(&TeamState { team, state })
                        .set(n);
                }
                self.fires.clear();
                for (team, outcome, n) in load.fires {
                    self.fires
                        .get_or_create(&TeamOutcome { team, outcome })
                        .set(n);
                }
                self.queued.clear();
                self.oldest_wait.clear();
                let mut oldest: std::collections::HashMap<TeamPriority, i64> = Default::default();
                for (job, since) in load.waiting {
                    let Ok(asked) = serde_json::from_str::<Asked>(&job) else {
                        continue;
                    };
                    let key = TeamPriority {
                        team: asked.team,
                        priority: asked.priority.to_string(),
                    };
                    self.queued.get_or_create(&key).inc();
                    let o = oldest.entry(key).or_insert(since);
                    *o = (*o).min(since);
                }
                for (key, since) in oldest {
                    let waited = (now_ms - since).max(0) as f64 / 1000.0;
                    self.oldest_wait.get_or_create(&key).set(waited);
                }
            }
            Err(e) => tracing::warn!("metrics: cannot read the store: {e}"),
        }
        let mut text = String::new();
        match self.registry.lock() {
            Ok(registry) => {
                if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
                    tracing::warn!("metrics: cannot encode: {e}");
                }
            }
            Err(_) => tracing::warn!("metrics: the registry is poisoned"),
        }
        text
    }
}
