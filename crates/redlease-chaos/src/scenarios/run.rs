//! One row run: the deployment started, the workers and their judge, the faults on a
//! schedule, and the history checked against the row's promise.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use redlease_chaos::{Findings, Kind, Primitive, check_as};
use redlease_local::{Cluster, Nodes, Proxy, RedisServer, Sentinel, ServerOptions};
use serde::Serialize;
use tokio::time::Instant;

use crate::runner::{Runner, WorkerSpec};
use crate::scenario::{Fault, Promise, Scenario};
use crate::worker::{Deployment, ShortenHow};

use super::history::{describe_rates, first_idle_acquire};
use super::inject::inject;
use super::target::{Target, blocking, fast_clock_shim, in_memory};

/// How long and how hard to run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) ttl: Duration,
    pub(crate) workers: usize,
    pub(crate) rounds: usize,
    pub(crate) warmup_sections: usize,
}

/// What a scenario produced.
#[derive(Debug, Serialize)]
pub(crate) struct Outcome {
    pub(crate) name: &'static str,
    pub(crate) fault: Fault,
    pub(crate) primitive: Primitive,
    pub(crate) promise: Promise,
    pub(crate) expected: &'static str,
    pub(crate) findings: Findings,
    pub(crate) injected: usize,
    pub(crate) took: Duration,
    pub(crate) note: String,
    /// The liveness target applies.
    pub(crate) live: bool,
    /// The lease of the run (a dead holder may stall the lock this long).
    pub(crate) ttl: Duration,
    /// Rounds of a row of issue 42's faults with no next holder, or one later than the
    /// claim window + 0.5 s (`crate::heads::bound`): the row fails.
    pub(crate) late: usize,
}

impl Outcome {
    /// Whether what was observed is within what redlease claims.
    pub(crate) fn kept_promise(&self) -> bool {
        match self.promise {
            Promise::Exclusive => self.findings.is_safe(),
            // A holder paused past its lease overlaps the next one's section, but its
            // claim (its `valid_until`) ended before the next grant.
            Promise::Fenced => self.findings.is_fenced_safe() && self.findings.is_truthful(),
            Promise::DataLoss | Promise::ClockBroken => self.findings.is_fenced_safe(),
        }
    }

    /// Whether the liveness target held, where it is promised.
    pub(crate) fn kept_liveness(&self) -> bool {
        self.late == 0 && (!self.live || self.findings.liveness.meets_target(self.ttl))
    }
}

/// Runs one scenario.
#[expect(
    clippy::too_many_lines,
    reason = "set-up, fault rounds and the settled tail, read top to bottom"
)]
pub(crate) async fn run(scenario: Scenario, budget: Budget) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let mut target = blocking(|| -> anyhow::Result<Target> {
        Ok(match scenario.deployment {
            Deployment::Single if scenario.own_links => {
                let mut options = ServerOptions::default();
                let shim = scenario.clock_rate.map(|_| fast_clock_shim()).transpose()?;
                if let (Some(rate), Some(shim)) = (scenario.clock_rate, &shim) {
                    options = options
                        .env("LD_PRELOAD", shim.display().to_string())
                        .env("FAST_CLOCK_RATE", rate);
                }
                let started = crate::partition::Partitioned::start_with(1, &options);
                // The server has mapped it (these rows never restart it).
                if let Some(shim) = shim {
                    let _ = std::fs::remove_file(shim);
                }
                Target::Partitioned(started?)
            }
            Deployment::Single => {
                let server = if scenario.persistent() {
                    RedisServer::start_with(
                        in_memory(ServerOptions::default())
                            .arg("--appendonly")
                            .arg("yes")
                            .arg("--appendfsync")
                            .arg("always"),
                    )?
                } else {
                    RedisServer::start()?
                };
                let proxy = if scenario.proxied {
                    Some(Proxy::start(server.port())?)
                } else {
                    None
                };
                Target::Single(server, proxy)
            }
            Deployment::Quorum if scenario.proxied => {
                Target::Partitioned(crate::partition::Partitioned::start(5)?)
            }
            Deployment::Quorum => Target::Quorum(Nodes::start(5)?),
            Deployment::Sentinel => Target::Sentinel(Box::new(Sentinel::start()?)),
            Deployment::Cluster => Target::Cluster(Box::new(Cluster::start()?)),
        })
    })
    .context("starting redis")?;
    let urls = match &target {
        Target::Single(server, proxy) => {
            vec![proxy.as_ref().map_or_else(|| server.url(), Proxy::url)]
        }
        Target::Quorum(nodes) => nodes.urls(),
        Target::Partitioned(p) => p.urls(),
        Target::Sentinel(s) => s.sentinel_urls(),
        Target::Cluster(c) => c.urls(),
    };
    let ttl = scenario.ttl.unwrap_or(budget.ttl);
    let response_timeout = match scenario.shorten {
        Some(ShortenHow::Slow) => Some(ttl / 20),
        Some(ShortenHow::Dropped) | None => scenario.response_timeout,
    };
    let mut runner = Runner::new(WorkerSpec {
        deployment: scenario.deployment,
        urls,
        ttl,
        response_timeout,
        min_replicas: scenario.min_replicas,
        wait: scenario.wait,
        storm: scenario.storm(),
        primitive: scenario.primitive,
        shorten: scenario.shorten.map(|how| (ttl / 10, how)),
    });
    for _ in 0..scenario.workers.unwrap_or(budget.workers) {
        if let Target::Partitioned(p) = &mut target {
            p.spawn(&mut runner)?;
        } else {
            runner.spawn()?;
        }
    }
    let bound = ttl * 5 + Duration::from_secs(5);
    runner.sections(budget.warmup_sections, bound).await;
    let mut injected = 0;
    let mut note = String::new();
    let fault_deadline = Instant::now() + Duration::from_secs(40);
    for round in 0..budget.rounds {
        if Instant::now() > fault_deadline {
            break;
        }
        injected += inject(
            scenario.fault,
            round,
            &mut runner,
            &mut target,
            ttl,
            &mut note,
        )
        .await?;
        // Let the system settle and work between faults.
        runner.sections(budget.warmup_sections / 2, bound).await;
    }
    let mut late = 0;
    if let Target::Partitioned(p) = &target {
        p.describe(ttl, &mut note);
        late = p.late(ttl);
    }
    let settled = runner.with_judge(redlease_chaos::Judge::now);
    runner.sections(budget.warmup_sections, bound).await;
    let history = runner.finish().await;
    if scenario.clock_rate.is_some() {
        describe_rates(&history, &mut note);
    }
    if injected > 0 {
        // From the first acquisition after the faults: a hold cut in two would read as a
        // release by a non-holder. Multi-lock holders hold several names, and sections over
        // disjoint names run together: from the first acquisition after the faults at which
        // nobody holds any name.
        let start = match scenario.primitive {
            Primitive::MultiLock { .. } => first_idle_acquire(&history, settled),
            Primitive::Mutex
            | Primitive::Election
            | Primitive::Semaphore { .. }
            | Primitive::RwLock => history
                .iter()
                .position(|e| e.at >= settled && e.kind == Kind::Acquire),
        };
        let tail = start.map_or_else(Vec::new, |i| history[i..].to_vec());
        let t = check_as(&tail, scenario.primitive);
        if !t.is_safe() {
            let _ = write!(
                note,
                "after the last fault had been injected and the system had settled, {} sections \
                 still showed {} overlaps, {} mutex violations, {} tokens backwards, {} leases lost. ",
                t.sections, t.overlaps, t.mutex_violations, t.tokens_backwards, t.lost
            );
        }
    }
    drop(target);
    if let Some(dir) = std::env::var_os("REDLEASE_CHAOS_HISTORY") {
        // Named after the row: several rows share a fault.
        let slug: String = scenario
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let file = std::path::Path::new(&dir).join(format!("{slug}.json"));
        std::fs::write(&file, serde_json::to_vec(&history)?)
            .with_context(|| format!("writing {}", file.display()))?;
    }
    Ok(Outcome {
        name: scenario.name,
        fault: scenario.fault,
        primitive: scenario.primitive,
        promise: scenario.promise,
        expected: scenario.expected,
        findings: check_as(&history, scenario.primitive),
        injected,
        took: started.elapsed(),
        note,
        live: scenario.live,
        ttl,
        late,
    })
}
