//! Scenario 7: a quorum (Redlock) of 5 independent redis-servers, one task looping
//! acquire + release, against a bare parallel Redlock loop in redis-rs.
//!
//! The 5 servers are private ones started for this scenario on free loopback ports (also
//! with `--redis`, which names one server only) and stopped at its end. The bare loop has
//! a `ConnectionManager` per node; per pair it sends `SET key token NX PX 30000` to all 5
//! at once (joined futures), counts the lock taken when a majority (3) said OK, then sends
//! the `EVALSHA` compare-and-delete to all 5 at once. Both sides run in interleaved slice
//! pairs (see [`super::pairs`]). Every acquire must succeed and every release release:
//! for the bare loop, each node that granted the `SET` must have deleted the key again.
//! Command counts are `INFO commandstats` deltas summed over the 5 nodes, given per node
//! (divided by 5).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use redis::Value;
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::pairs::{Comparison, Side, SliceFigures};
use super::stats::{CommandCost, CommandDelta, CommandStats, LoopChecks, Summary, per_second};
use super::{BARE_TTL_MS, COMPARE_AND_DELETE, Env};

/// Independent Redis servers of the quorum.
pub(super) const NODES: usize = 5;
/// A majority of them.
const MAJORITY: usize = NODES / 2 + 1;

/// The result of one side of the quorum comparison.
#[derive(Debug, Serialize)]
pub(super) struct Quorum {
    pub(super) scenario: &'static str,
    pub(super) nodes: usize,
    /// Acquire + release pairs.
    pub(super) ops: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) ops_per_sec: f64,
    /// One acquire + release pair.
    pub(super) latency: Summary,
    /// Per pair and per node (summed over the nodes, divided by their number); absent when
    /// `INFO commandstats` is not allowed.
    pub(super) commands_per_node: Option<CommandCost>,
    /// Every acquire succeeded, every release released.
    pub(super) checks: LoopChecks,
}

/// A plain connection to every node, for `INFO commandstats`.
struct Admin(Vec<ConnectionManager>);

impl Admin {
    /// Calls per command on every node; `None` when one node refused `INFO commandstats`.
    async fn stats(&self) -> Option<Vec<CommandStats>> {
        let infos = join_all(self.0.iter().map(|conn| {
            let mut conn = conn.clone();
            async move {
                redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async::<String>(&mut conn)
                    .await
            }
        }))
        .await;
        infos
            .into_iter()
            .map(|info| {
                info.inspect_err(
                    |e| tracing::warn!(error = %e, "INFO commandstats failed; no command counts"),
                )
                .ok()
                .map(|info| CommandStats::parse(&info))
            })
            .collect()
    }
}

/// The bare Redlock: one connection per node.
struct BareRedlock {
    conns: Vec<ConnectionManager>,
    key: String,
    seq: u64,
}

impl BareRedlock {
    /// `SET NX PX` on every node at once: the nodes that granted it.
    async fn acquire(&mut self, token: &str) -> Vec<bool> {
        let key = &self.key;
        join_all(self.conns.iter_mut().map(|conn| async move {
            let reply: redis::RedisResult<Value> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(BARE_TTL_MS)
                .query_async(conn)
                .await;
            matches!(reply, Ok(v) if !matches!(v, Value::Nil))
        }))
        .await
    }

    /// Compare-and-delete on every node at once: the nodes where it deleted our key.
    async fn release(&mut self, token: &str) -> Vec<bool> {
        let key = &self.key;
        join_all(self.conns.iter_mut().map(|conn| async move {
            let deleted: redis::RedisResult<i64> = COMPARE_AND_DELETE
                .key(key)
                .arg(token)
                .invoke_async(conn)
                .await;
            matches!(deleted, Ok(1))
        }))
        .await
    }
}

enum Subject {
    Redlease(redlease::Lock),
    Bare(BareRedlock),
}

impl Subject {
    async fn pair(&mut self, checks: &mut LoopChecks) {
        match self {
            Self::Redlease(lock) => match lock.acquire().await {
                Ok(guard) => {
                    if let Err(e) = guard.release().await {
                        checks.release_failed(format!("release: {e}"));
                    }
                }
                Err(e) => checks.acquire_failed(format!("acquire: {e}")),
            },
            Self::Bare(redlock) => {
                redlock.seq += 1;
                let token = super::bare_token(0, redlock.seq);
                let granted = redlock.acquire(&token).await;
                let grants = granted.iter().filter(|g| **g).count();
                let released = redlock.release(&token).await;
                if grants < MAJORITY {
                    checks.acquire_failed(format!(
                        "bare Redlock: {grants} of {NODES} nodes granted SET NX, fewer than \
                         a majority"
                    ));
                } else if granted != released {
                    checks.release_failed(format!(
                        "bare Redlock: granted by nodes {granted:?}, deleted on {released:?}"
                    ));
                }
            }
        }
    }
}

struct Runner {
    scenario: &'static str,
    subject: Subject,
    admin: Arc<Admin>,
    samples: Vec<Duration>,
    elapsed: Duration,
    commands: Option<CommandDelta>,
    checks: LoopChecks,
}

impl Runner {
    fn new(scenario: &'static str, subject: Subject, admin: Arc<Admin>) -> Self {
        Self {
            scenario,
            subject,
            admin,
            samples: Vec::new(),
            elapsed: Duration::ZERO,
            commands: Some(CommandDelta::default()),
            checks: LoopChecks::default(),
        }
    }

    async fn warm_up(&mut self, length: Duration) {
        let until = Instant::now() + length;
        while Instant::now() < until && !self.checks.stop() {
            self.subject.pair(&mut self.checks).await;
        }
    }

    fn finish(self) -> Quorum {
        let ops = self.samples.len() as u64;
        // The bare loop sends one plain SET per pair to each node; redlease only EVALSHA.
        let plain = match self.subject {
            Subject::Bare(_) => ops * NODES as u64,
            Subject::Redlease(_) => 0,
        };
        Quorum {
            scenario: self.scenario,
            nodes: NODES,
            ops,
            elapsed: self.elapsed,
            ops_per_sec: per_second(ops, self.elapsed),
            latency: Summary::of(self.samples),
            commands_per_node: self
                .commands
                .map(|d| CommandCost::new(d, plain, 0, ops * NODES as u64)),
            checks: self.checks,
        }
    }
}

impl Side for Runner {
    fn label(&self) -> &'static str {
        self.scenario
    }

    async fn slice(&mut self, _env: &Env, length: Duration) -> anyhow::Result<SliceFigures> {
        let before = self.admin.stats().await;
        let start = Instant::now();
        let until = start + length;
        let mut now = start;
        let mut ops = 0;
        while now < until && !self.checks.stop() {
            self.subject.pair(&mut self.checks).await;
            let end = Instant::now();
            self.samples.push(end - now);
            now = end;
            ops += 1;
        }
        self.elapsed += now - start;
        let after = self.admin.stats().await;
        // Summed over the nodes.
        let delta = before.zip(after).map(|(before, after)| {
            let mut sum = CommandDelta::default();
            for (before, after) in before.iter().zip(&after) {
                sum += before.delta(after);
            }
            sum
        });
        CommandDelta::accumulate(&mut self.commands, delta);
        Ok(SliceFigures::new(ops, now - start))
    }
}

/// Starts 5 private redis-servers and runs the redlease quorum client against the bare
/// parallel Redlock loop in `pairs` interleaved slice pairs, `duration` in all per side.
pub(super) async fn run(
    env: &Env,
    duration: Duration,
    pairs: u32,
) -> anyhow::Result<(Vec<Quorum>, Comparison)> {
    env.progress(&format!("quorum: starting {NODES} private redis-servers"));
    // Dropped last, after every connection to them.
    let nodes = tokio::task::spawn_blocking(|| redlease_local::Nodes::start(NODES))
        .await?
        .context("starting the quorum's private redis-servers")?;
    let urls = nodes.urls();
    let mut conns = Vec::with_capacity(NODES);
    for url in &urls {
        let client = redis::Client::open(url.as_str()).context("opening a node's URL")?;
        conns.push(
            ConnectionManager::new(client)
                .await
                .context("connecting to a quorum node")?,
        );
    }
    let mut admins = Vec::with_capacity(NODES);
    for url in &urls {
        let client = redis::Client::open(url.as_str()).context("opening a node's URL")?;
        admins.push(
            ConnectionManager::new(client)
                .await
                .context("connecting to a quorum node")?,
        );
    }
    let admin = Arc::new(Admin(admins));
    let client = redlease::Client::quorum(&urls)
        .await
        .context("connecting a redlease quorum client")?;
    let lock = client.lock(env.name("quorum"));
    let mut ours = Runner::new(
        "redlease quorum acquire + release",
        Subject::Redlease(lock),
        Arc::clone(&admin),
    );
    let mut floor = Runner::new(
        "bare parallel Redlock",
        Subject::Bare(BareRedlock {
            conns,
            key: env.key("bare-quorum"),
            seq: 0,
        }),
        admin,
    );
    for runner in [&mut ours, &mut floor] {
        env.progress(&format!("warming up: {}", runner.scenario));
        runner.warm_up(env.warm_up).await;
    }
    let comparison = super::pairs::interleave(
        env,
        ("quorum of 5", "ops/s"),
        pairs,
        duration / pairs,
        &mut ours,
        &mut floor,
    )
    .await?;
    let results = vec![ours.finish(), floor.finish()];
    drop(client);
    drop(nodes);
    Ok((results, comparison))
}
