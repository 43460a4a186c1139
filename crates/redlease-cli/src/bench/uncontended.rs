//! Scenarios 1 and 2: one task, one key, acquire + release in a loop, as fast as it goes.
//!
//! The two loops run in alternating slices (redlease, bare, redlease, bare, ...) so that
//! drift in the machine's speed during the run affects both alike.

use std::time::Duration;

use anyhow::{Context, bail};
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::stats::{CommandCost, CommandDelta, Summary, per_second};
use super::{BareLock, Env};

/// Slices each uncontended loop's measuring time is cut into.
const SLICES: u32 = 3;

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
    async fn pair(&mut self) -> anyhow::Result<()> {
        match self {
            Self::Redlease(lock) => {
                let guard = lock
                    .acquire()
                    .await
                    .context("acquiring the uncontended lock")?;
                guard
                    .release()
                    .await
                    .context("releasing the uncontended lock")?;
            }
            Self::Bare { conn, lock, seq } => {
                *seq += 1;
                let token = super::bare_token(0, *seq);
                if !lock.try_acquire(conn, &token).await? {
                    bail!("the bare uncontended lock `{}` was busy", lock.key);
                }
                if !lock.release(conn, &token).await? {
                    bail!(
                        "the bare uncontended lock `{}` was lost before release",
                        lock.key
                    );
                }
            }
        }
        Ok(())
    }
}

struct Runner {
    scenario: &'static str,
    subject: Subject,
    samples: Vec<Duration>,
    elapsed: Duration,
    commands: Option<CommandDelta>,
}

impl Runner {
    fn new(scenario: &'static str, subject: Subject) -> Self {
        Self {
            scenario,
            subject,
            samples: Vec::new(),
            elapsed: Duration::ZERO,
            commands: Some(CommandDelta::default()),
        }
    }

    async fn warm_up(&mut self, length: Duration) -> anyhow::Result<()> {
        let until = Instant::now() + length;
        while Instant::now() < until {
            self.subject.pair().await?;
        }
        Ok(())
    }

    async fn slice(&mut self, env: &Env, length: Duration) -> anyhow::Result<()> {
        let before = env.command_stats().await;
        let start = Instant::now();
        let until = start + length;
        let mut now = start;
        while now < until {
            self.subject.pair().await?;
            let end = Instant::now();
            self.samples.push(end - now);
            now = end;
        }
        self.elapsed += now - start;
        let after = env.command_stats().await;
        self.commands = match (self.commands, before, after) {
            (Some(mut sum), Some(before), Some(after)) => {
                sum += before.delta(&after);
                Some(sum)
            }
            _ => None,
        };
        Ok(())
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
        }
    }
}

/// Runs scenarios 1 (redlease) and 2 (bare floor), `duration` each.
pub(super) async fn run(env: &Env, duration: Duration) -> anyhow::Result<Vec<Uncontended>> {
    let client = env.client().await?;
    let lock = client.lock(env.name("uncontended"));
    env.clean_up_lock(&lock)?;
    let bare = BareLock::new(env.key("bare-uncontended"));
    env.clean_up(&bare.key);
    let mut runners = [
        Runner::new("redlease acquire + release", Subject::Redlease(lock)),
        Runner::new(
            "bare SET NX PX + EVALSHA del",
            Subject::Bare {
                conn: env.connection().await?,
                lock: bare,
                seq: 0,
            },
        ),
    ];
    for runner in &mut runners {
        env.progress(&format!("warming up: {}", runner.scenario));
        runner.warm_up(env.warm_up).await?;
    }
    let slice = duration / SLICES;
    for round in 1..=SLICES {
        for runner in &mut runners {
            env.progress(&format!(
                "uncontended: {} (slice {round}/{SLICES})",
                runner.scenario
            ));
            runner.slice(env, slice).await?;
        }
    }
    Ok(runners.into_iter().map(Runner::finish).collect())
}
