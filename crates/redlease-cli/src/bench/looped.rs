//! One task looping acquire + release as fast as it goes: a side of the uncontended and the
//! quorum comparisons. Both compare a redlease lock with a bare loop of their own in
//! interleaved slice pairs (see [`super::pairs`]); every acquire must succeed and every
//! release release (a failure makes the run fail with exit code 1).

use std::time::Duration;

use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::env::Env;
use super::pairs::{Comparison, Side, SliceFigures};
use super::stats::{CommandCost, CommandDelta, LoopChecks, Summary, per_second};

/// The bare floor of a loop.
pub(super) trait Bare {
    /// One acquire + release; a failed acquire or release is recorded in `checks`.
    async fn pair(&mut self, checks: &mut LoopChecks);
}

/// What one loop iteration does.
pub(super) enum Subject<B> {
    Redlease(redlease::Lock),
    /// Sends one plain `SET` per pair to each server (redlease only `EVALSHA`).
    Bare(B),
}

impl<B: Bare> Subject<B> {
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
            Self::Bare(bare) => bare.pair(checks).await,
        }
    }
}

/// What a loop measured over all its slices.
#[derive(Debug, Serialize)]
pub(super) struct LoopResult {
    pub(super) scenario: &'static str,
    /// Acquire + release pairs.
    pub(super) ops: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) ops_per_sec: f64,
    /// One acquire + release pair.
    pub(super) latency: Summary,
    /// Per pair and per server (summed over the servers, divided by their number); absent
    /// when `INFO commandstats` is not allowed.
    pub(super) commands: Option<CommandCost>,
    /// Every acquire succeeded, every release released.
    pub(super) checks: LoopChecks,
}

/// One side: the loop, and what it did over all slices so far.
pub(super) struct Runner<B> {
    scenario: &'static str,
    subject: Subject<B>,
    /// The servers whose commands are counted (`INFO commandstats`, summed).
    servers: Vec<ConnectionManager>,
    samples: Vec<Duration>,
    elapsed: Duration,
    commands: Option<CommandDelta>,
    checks: LoopChecks,
}

impl<B: Bare> Runner<B> {
    pub(super) fn new(
        scenario: &'static str,
        subject: Subject<B>,
        servers: Vec<ConnectionManager>,
    ) -> Self {
        Self {
            scenario,
            subject,
            servers,
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

    /// Runs the loop until `length` has passed: the pairs done, and the time they took.
    async fn run(&mut self, length: Duration) -> (u64, Duration) {
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
        (ops, now - start)
    }

    pub(super) fn finish(self) -> LoopResult {
        let ops = self.samples.len() as u64;
        let servers = self.servers.len() as u64;
        let plain = match self.subject {
            Subject::Bare(_) => ops * servers,
            Subject::Redlease(_) => 0,
        };
        LoopResult {
            scenario: self.scenario,
            ops,
            elapsed: self.elapsed,
            ops_per_sec: per_second(ops, self.elapsed),
            latency: Summary::of(self.samples),
            commands: self
                .commands
                .map(|d| CommandCost::new(d, plain, 0, ops * servers)),
            checks: self.checks,
        }
    }
}

impl<B: Bare> Side for Runner<B> {
    fn label(&self) -> &'static str {
        self.scenario
    }

    async fn slice(&mut self, _env: &Env, length: Duration) -> anyhow::Result<SliceFigures> {
        let servers = self.servers.clone();
        let ((ops, elapsed), delta) = super::env::counting(&servers, self.run(length)).await;
        self.elapsed += elapsed;
        CommandDelta::accumulate(&mut self.commands, delta);
        Ok(SliceFigures::new(ops, elapsed))
    }
}

/// Warms both loops up, then compares them in `pairs` interleaved slice pairs, `duration`
/// in all per side; `name` names the comparison.
pub(super) async fn compare<B: Bare>(
    env: &Env,
    name: &'static str,
    duration: Duration,
    pairs: u32,
    ours: &mut Runner<B>,
    floor: &mut Runner<B>,
) -> anyhow::Result<Comparison> {
    for runner in [&mut *ours, &mut *floor] {
        env.progress(&format!("warming up: {}", runner.scenario));
        runner.warm_up(env.warm_up).await;
    }
    super::pairs::interleave(env, (name, "ops/s"), pairs, duration / pairs, ours, floor).await
}
