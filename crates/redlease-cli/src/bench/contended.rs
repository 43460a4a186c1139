//! Scenarios 3 and 4: `--workers` tasks fight over one key, each looping
//! acquire -> critical section -> release.
//!
//! The critical section is a deliberately non-atomic read-modify-write of a counter in
//! Redis (`GET`, then `SET` of the value plus one), so that the final counter equals the
//! number of sections only if no two sections ever overlapped.
//!
//! Each redlease setup is compared with its busy-retry floor in interleaved slice pairs
//! (see [`super::pairs`]); the counter is reset once after the warm-up and must equal the
//! sections of all slices together.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::Context;
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::bare::BareLock;
use super::env::Env;
use super::pairs::{Comparison, Side, SliceFigures};
use super::section::{LOCK_WAIT, Locker, MAX_ERRORS, SECTION_COMMANDS, critical_section};
use super::stats::{CommandCost, CommandDelta, Summary, per_second, ratio};

/// The result of one contended run.
#[derive(Debug, Serialize)]
pub(super) struct Contended {
    pub(super) scenario: &'static str,
    pub(super) workers: usize,
    pub(super) sections: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) sections_per_sec: f64,
    /// From the moment a holder sent its release to the moment the next holder's acquire
    /// returned.
    pub(super) handoff_gap: Summary,
    /// Time spent inside one acquire (its max is the longest wait of any worker).
    pub(super) wait: Summary,
    /// Sections completed by each worker.
    pub(super) per_worker: Vec<u64>,
    /// Acquisitions that went to the worker that had released the lock just before.
    pub(super) same_worker_reacquired: u64,
    /// Lock attempts (`SET NX`) per section, for the bare loop.
    pub(super) attempts_per_section: Option<f64>,
    /// Per section; absent when `INFO commandstats` is not allowed.
    pub(super) commands: Option<CommandCost>,
    /// The counter the sections incremented, read at the end.
    pub(super) counter: u64,
    /// Errors of workers (acquire timeouts, lost locks...).
    pub(super) errors: Vec<String>,
}

/// How the workers reach Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sharing {
    /// One redlease `Client` (or one redis-rs connection) shared by all workers.
    Shared,
    /// One each.
    PerWorker,
}

/// What one worker is given.
#[derive(Clone)]
struct Worker {
    id: usize,
    locker: Locker,
    /// For the critical section (and the bare lock's own commands).
    conn: ConnectionManager,
}

/// Shared between the workers of one run: who held the lock last, and when its release
/// was sent.
#[derive(Debug, Default)]
struct Handoff {
    release_sent: Option<Instant>,
    holder: Option<usize>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct WorkerStats {
    sections: u64,
    waits: Vec<Duration>,
    gaps: Vec<Duration>,
    reacquired: u64,
    attempts: u64,
    errors: Vec<String>,
}

impl WorkerStats {
    /// Adds one slice's statistics of the same worker.
    fn add(&mut self, slice: Self) {
        self.sections += slice.sections;
        self.waits.extend(slice.waits);
        self.gaps.extend(slice.gaps);
        self.reacquired += slice.reacquired;
        self.attempts += slice.attempts;
        self.errors.extend(slice.errors);
    }
}

async fn worker(
    mut w: Worker,
    counter: Arc<str>,
    handoff: Arc<Mutex<Handoff>>,
    until: Instant,
) -> anyhow::Result<WorkerStats> {
    let mut stats = WorkerStats::default();
    let mut seq = 0u64;
    while Instant::now() < until && stats.errors.len() < MAX_ERRORS {
        let asked = Instant::now();
        let acquired = w
            .locker
            .acquire(&mut w.conn, w.id + 1, &mut seq, &mut stats.attempts)
            .await?;
        let held = match acquired {
            Ok(held) => held,
            Err(e) => {
                stats.errors.push(format!(
                    "worker {}: acquire: {:#}",
                    w.id,
                    anyhow::Error::from(e)
                ));
                continue;
            }
        };
        let got = Instant::now();
        stats.waits.push(got - asked);
        {
            let mut h = locked(&handoff);
            if let Some(sent) = h.release_sent.take() {
                stats.gaps.push(got.saturating_duration_since(sent));
            }
            if h.holder == Some(w.id) {
                stats.reacquired += 1;
            }
            h.holder = Some(w.id);
        }
        critical_section(&mut w.conn, &counter).await?;
        locked(&handoff).release_sent = Some(Instant::now());
        if let Err(e) = w.locker.release(held, &mut w.conn).await {
            stats
                .errors
                .push(format!("worker {}: release: {e:#}", w.id));
        }
        stats.sections += 1;
    }
    Ok(stats)
}

/// Runs all workers until `until` (each finishes the section it is in) and returns their
/// statistics and the time until the last one finished.
async fn race(
    workers: &[Worker],
    counter: &Arc<str>,
    until: Instant,
) -> anyhow::Result<(Vec<WorkerStats>, Duration)> {
    let handoff = Arc::new(Mutex::new(Handoff::default()));
    let start = Instant::now();
    let tasks: Vec<_> = workers
        .iter()
        .map(|w| {
            tokio::spawn(worker(
                w.clone(),
                Arc::clone(counter),
                Arc::clone(&handoff),
                until,
            ))
        })
        .collect();
    let mut all = Vec::with_capacity(tasks.len());
    for task in tasks {
        all.push(task.await.context("a bench worker panicked")??);
    }
    Ok((all, start.elapsed()))
}

/// One side of a contended comparison: its workers, set up and warmed up, and what they
/// did over all slices so far.
struct Run {
    scenario: &'static str,
    bare: bool,
    workers: Vec<Worker>,
    counter: Arc<str>,
    /// Per worker, summed over the slices.
    stats: Vec<WorkerStats>,
    elapsed: Duration,
    commands: Option<CommandDelta>,
}

impl Run {
    /// Sets up `workers` workers, warms them up and resets the counter.
    async fn start(
        env: &Env,
        scenario: &'static str,
        name: &str,
        bare: bool,
        sharing: Sharing,
        workers: usize,
    ) -> anyhow::Result<Self> {
        env.progress(&format!("contended: warming up {scenario}"));
        let shared_client = if bare || sharing == Sharing::PerWorker {
            None
        } else {
            Some(env.client().await?)
        };
        let shared_conn = env.connection().await?;
        let bare_lock = BareLock::new(env.key(name));
        env.clean_up(&bare_lock.key);
        let mut setups = Vec::with_capacity(workers);
        for id in 0..workers {
            let conn = match sharing {
                Sharing::Shared => shared_conn.clone(),
                Sharing::PerWorker => env.connection().await?,
            };
            let locker = if bare {
                Locker::Bare(bare_lock.clone())
            } else {
                let client = match &shared_client {
                    Some(c) => c.clone(),
                    None => env.client().await?,
                };
                let lock = client.lock(env.name(name)).wait(LOCK_WAIT);
                env.clean_up_lock(&lock)?;
                Locker::Redlease(lock)
            };
            setups.push(Worker { id, locker, conn });
        }
        let counter: Arc<str> = env.key(&format!("{name}:counter")).into();
        env.clean_up(&counter);

        race(&setups, &counter, Instant::now() + env.warm_up).await?;
        env.reset_counter(&counter).await?;
        Ok(Self {
            scenario,
            bare,
            stats: (0..setups.len()).map(|_| WorkerStats::default()).collect(),
            workers: setups,
            counter,
            elapsed: Duration::ZERO,
            commands: Some(CommandDelta::default()),
        })
    }

    /// The result over all slices, with the counter read back.
    async fn finish(self, env: &Env) -> anyhow::Result<Contended> {
        let counter = env.read_counter(&self.counter).await?;
        let stats = self.stats;
        let sections: u64 = stats.iter().map(|s| s.sections).sum();
        let attempts: u64 = stats.iter().map(|s| s.attempts).sum();
        let plain = SECTION_COMMANDS * sections + attempts;
        Ok(Contended {
            scenario: self.scenario,
            workers: self.workers.len(),
            sections,
            elapsed: self.elapsed,
            sections_per_sec: per_second(sections, self.elapsed),
            handoff_gap: Summary::of(stats.iter().flat_map(|s| s.gaps.iter().copied()).collect()),
            wait: Summary::of(stats.iter().flat_map(|s| s.waits.iter().copied()).collect()),
            per_worker: stats.iter().map(|s| s.sections).collect(),
            same_worker_reacquired: stats.iter().map(|s| s.reacquired).sum(),
            attempts_per_section: self.bare.then(|| ratio(attempts, sections)),
            commands: self
                .commands
                .map(|d| CommandCost::new(d, plain, SECTION_COMMANDS * sections, sections)),
            counter,
            errors: stats.into_iter().flat_map(|s| s.errors).collect(),
        })
    }
}

impl Side for Run {
    fn label(&self) -> &'static str {
        self.scenario
    }

    async fn slice(&mut self, env: &Env, length: Duration) -> anyhow::Result<SliceFigures> {
        let (raced, delta) = env
            .counting(race(&self.workers, &self.counter, Instant::now() + length))
            .await;
        let (stats, elapsed) = raced?;
        CommandDelta::accumulate(&mut self.commands, delta);
        self.elapsed += elapsed;
        let sections = stats.iter().map(|s| s.sections).sum();
        let mut figures = SliceFigures::new(sections, elapsed);
        figures.longest_wait =
            Some(Summary::of(stats.iter().flat_map(|s| s.waits.iter().copied()).collect()).max);
        figures.gap_p50 =
            Some(Summary::of(stats.iter().flat_map(|s| s.gaps.iter().copied()).collect()).p50);
        for (total, slice) in self.stats.iter_mut().zip(stats) {
            total.add(slice);
        }
        Ok(figures)
    }
}

/// Runs scenarios 3 (redlease) and 4 (bare busy-retry) as two comparisons of interleaved
/// slice pairs: one redlease `Client` shared by all workers against one shared
/// connection, and a `Client` per worker against a connection per worker.
pub(super) async fn run(
    env: &Env,
    workers: usize,
    duration: Duration,
    pairs: u32,
) -> anyhow::Result<(Vec<Contended>, Vec<Comparison>)> {
    let comparisons = [
        (
            "contended, one Client / connection",
            ("redlease, one Client", "contended"),
            ("bare busy-retry, one connection", "bare-contended"),
            Sharing::Shared,
        ),
        (
            "contended, Client / connection per worker",
            ("redlease, Client per worker", "contended-per-worker"),
            (
                "bare busy-retry, conn. per worker",
                "bare-contended-per-worker",
            ),
            Sharing::PerWorker,
        ),
    ];
    let mut ours_results = Vec::new();
    let mut floor_results = Vec::new();
    let mut compared = Vec::new();
    for (what, (ours_title, ours_name), (floor_title, floor_name), sharing) in comparisons {
        let mut ours = Run::start(env, ours_title, ours_name, false, sharing, workers).await?;
        let mut floor = Run::start(env, floor_title, floor_name, true, sharing, workers).await?;
        compared.push(
            super::pairs::interleave(
                env,
                (what, "sections/s"),
                pairs,
                duration / pairs,
                &mut ours,
                &mut floor,
            )
            .await?,
        );
        ours_results.push(ours.finish(env).await?);
        floor_results.push(floor.finish(env).await?);
    }
    ours_results.extend(floor_results);
    Ok((ours_results, compared))
}
