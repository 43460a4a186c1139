//! Scenarios 1 and 2: one task, one key, acquire + release in a loop, as fast as it goes.
//!
//! The two loops run in interleaved slice pairs (see [`super::pairs`]) so that drift in the
//! machine's speed during the run affects both alike. Every acquire must succeed and every
//! release must release (checked; a failure makes the run fail with exit code 1).

use std::time::Duration;

use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::pairs::{Comparison, Side, SliceFigures};
use super::stats::{CommandCost, CommandDelta, LoopChecks, Summary, per_second};
use super::{BareLock, Env};

/// The result of one uncontended loop.
#[derive(Debug, Serialize)]
pub(super) struct Uncontended {
    pub(super) scenario: &'static str,
    pub(super) ops: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) ops_per_sec: f64,
    /// One acquire + release pair.
    pub(super) latency: Summary,
    /// Per pair; absent when `INFO commandstats` is not allowed.
    pub(super) commands: Option<CommandCost>,
    /// Every acquire succeeded, every release released.
    pub(super) checks: LoopChecks,
}

/// What one loop iteration does.
enum Subject {
    Redlease(redlease::Lock),
    Bare {
        conn: ConnectionManager,
        lock: BareLock,
        seq: u64,
    },
}

impl Subject {
    /// One acquire + release; a failed acquire or release is recorded in `checks`.
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
            Self::Bare { conn, lock, seq } => {
                *seq += 1;
                let token = super::bare_token(0, *seq);
                match lock.try_acquire(conn, &token).await {
                    Ok(true) => match lock.release(conn, &token).await {
                        Ok(true) => {}
                        Ok(false) => checks.release_failed(format!(
                            "the bare lock `{}` was lost before release",
                            lock.key
                        )),
                        Err(e) => checks.release_failed(format!("{e:#}")),
                    },
                    Ok(false) => {
                        checks.acquire_failed(format!("the bare lock `{}` was busy", lock.key));
                    }
                    Err(e) => checks.acquire_failed(format!("{e:#}")),
                }
            }
        }
    }
}

struct Runner {
    scenario: &'static str,
    subject: Subject,
    samples: Vec<Duration>,
    elapsed: Duration,
    commands: Option<CommandDelta>,
    checks: LoopChecks,
}

impl Side for Runner {
    fn label(&self) -> &'static str {
        self.scenario
    }

    async fn slice(&mut self, env: &Env, length: Duration) -> anyhow::Result<SliceFigures> {
        let before = env.command_stats().await;
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
        let after = env.command_stats().await;
        CommandDelta::accumulate(
            &mut self.commands,
            before
                .zip(after)
                .map(|(before, after)| before.delta(&after)),
        );
        Ok(SliceFigures::new(ops, now - start))
    }
}

impl Runner {
    fn new(scenario: &'static str, subject: Subject) -> Self {
        Self {
            scenario,
            subject,
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

    fn finish(self) -> Uncontended {
        let ops = self.samples.len() as u64;
        // The bare loop sends one plain SET per pair itself; redlease sends only EVALSHA.
        let plain = match self.subject {
            Subject::Bare { .. } => ops,
            Subject::Redlease(_) => 0,
        };
        Uncontended {
            scenario: self.scenario,
            ops,
            elapsed: self.elapsed,
            ops_per_sec: per_second(ops, self.elapsed),
            latency: Summary::of(self.samples),
            commands: self.commands.map(|d| CommandCost::new(d, plain, 0, ops)),
            checks: self.checks,
        }
    }
}

/// Runs scenarios 1 (redlease) and 2 (bare floor) in `pairs` interleaved slice pairs,
/// `duration` in all for each side.
pub(super) async fn run(
    env: &Env,
    duration: Duration,
    pairs: u32,
) -> anyhow::Result<(Vec<Uncontended>, Comparison)> {
    let client = env.client().await?;
    let lock = client.lock(env.name("uncontended"));
    env.clean_up_lock(&lock)?;
    let bare = BareLock::new(env.key("bare-uncontended"));
    env.clean_up(&bare.key);
    let mut ours = Runner::new("redlease acquire + release", Subject::Redlease(lock));
    let mut floor = Runner::new(
        "bare SET NX PX + EVALSHA del",
        Subject::Bare {
            conn: env.connection().await?,
            lock: bare,
            seq: 0,
        },
    );
    for runner in [&mut ours, &mut floor] {
        env.progress(&format!("warming up: {}", runner.scenario));
        runner.warm_up(env.warm_up).await;
    }
    let comparison = super::pairs::interleave(
        env,
        ("uncontended", "ops/s"),
        pairs,
        duration / pairs,
        &mut ours,
        &mut floor,
    )
    .await?;
    Ok((vec![ours.finish(), floor.finish()], comparison))
}
