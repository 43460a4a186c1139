//! `redlease bench-worker` (internal): one OS process of the multi-process contended runs
//! (`redlease bench --processes N`, and the scaling scenario).
//!
//! It finds Redis in `REDIS_URL` (set by `redlease bench`, so that credentials never show
//! in `ps`), connects one redlease `Client` and one redis-rs connection, and says `ready`
//! on stdout. Then it reads one [`Slice`] per line on stdin, runs its tasks for that side
//! between the slice's start and end instants (wall-clock, shared by every process of the
//! machine), and answers one [`ProcessReport`] per line. It exits when stdin closes.
//!
//! Each task loops acquire -> critical section (the non-atomic GET + SET of the counter)
//! -> release, like the in-process contended scenarios: with redlease, `acquire()` on the
//! process's one `Client` (wait up to 10s); with the busy-retry floor, `SET NX PX` retried
//! with a yield in between, released by compare-and-delete, on the process's one
//! connection. A task finishes the section it is in when the slice ends.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::time::Instant;

use super::bare::BareLock;
use super::section::{LOCK_WAIT, Locker, MAX_ERRORS, critical_section};
use super::waits::{Waits, nanos};
use crate::connect::RedisArgs;

/// What a worker says on stdout once connected.
pub(super) const READY: &str = "ready";

/// Arguments of `redlease bench-worker` (internal).
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// Contending tasks in this process
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    tasks: u16,

    /// Id of this process's first task (ids are global across the processes of a run)
    #[arg(long, default_value_t = 0)]
    first_task: usize,

    /// The redlease lock's name
    #[arg(long)]
    lock: String,

    /// The busy-retry floor's key
    #[arg(long)]
    bare_key: String,

    /// The counter the critical sections increment
    #[arg(long)]
    counter: String,

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
}

/// Which lock the tasks take in a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(super) enum Side {
    /// redlease `acquire()` / `release()`.
    Redlease,
    /// The bare floor: `SET NX PX` retried with a yield, compare-and-delete release.
    BusyRetry,
}

/// One slice, as the parent sends it (one JSON line on the worker's stdin).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct Slice {
    pub(super) side: Side,
    /// When the tasks start, in nanoseconds since the Unix epoch.
    pub(super) start_unix_ns: u64,
    /// When they stop starting new acquisitions.
    pub(super) end_unix_ns: u64,
}

/// One task's counts in a slice.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct TaskReport {
    /// The task's global id.
    pub(super) id: usize,
    pub(super) sections: u64,
    /// `SET NX` tries (busy-retry only).
    pub(super) attempts: u64,
}

/// What one worker process measured in a slice (one JSON line on its stdout).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct ProcessReport {
    pub(super) tasks: Vec<TaskReport>,
    /// Time inside one acquire, over every task of the process.
    pub(super) waits: Waits,
    /// Time spent inside critical sections (GET + SET), summed over the tasks.
    pub(super) section_ns: u64,
    /// When the tasks started and when the last one finished (Unix epoch, nanoseconds).
    pub(super) started_unix_ns: u64,
    pub(super) ended_unix_ns: u64,
    pub(super) errors: Vec<String>,
}

/// What one task works with.
#[derive(Clone)]
struct Task {
    id: usize,
    /// The lock of each side: redlease's, and the busy-retry floor's.
    redlease: Locker,
    busy_retry: Locker,
    conn: ConnectionManager,
    counter: Arc<str>,
}

/// Runs one worker process until its stdin closes.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let url = args
        .redis
        .urls()
        .into_iter()
        .next()
        .context("no Redis URL")?;
    let client = args.redis.client(None).await?;
    let conn = ConnectionManager::new(redis::Client::open(url).context("opening the Redis URL")?)
        .await
        .context("connecting to Redis")?;
    let counter: Arc<str> = args.counter.into();
    let tasks: Vec<Task> = (0..usize::from(args.tasks))
        .map(|i| Task {
            id: args.first_task + i,
            redlease: Locker::Redlease(client.lock(args.lock.as_str()).wait(LOCK_WAIT)),
            busy_retry: Locker::Bare(BareLock::new(args.bare_key.clone())),
            conn: conn.clone(),
            counter: Arc::clone(&counter),
        })
        .collect();

    let mut stdout = tokio::io::stdout();
    say(&mut stdout, READY).await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        let slice: Slice = serde_json::from_str(&line).context("reading a slice")?;
        let report = run_slice(&tasks, slice).await;
        say(&mut stdout, &serde_json::to_string(&report)?).await?;
    }
    drop(client);
    Ok(ExitCode::SUCCESS)
}

async fn say(stdout: &mut tokio::io::Stdout, line: &str) -> anyhow::Result<()> {
    stdout.write_all(line.as_bytes()).await?;
    stdout.write_all(b"\n").await?;
    stdout.flush().await.context("writing to the parent")
}

/// Nanoseconds since the Unix epoch, now.
pub(super) fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, nanos)
}

/// The local instant of a Unix-epoch time (in the past: now).
fn instant_at(unix: u64) -> Instant {
    let (now, wall) = (Instant::now(), unix_ns());
    now + Duration::from_nanos(unix.saturating_sub(wall))
}

/// Runs every task for one slice and sums them up.
async fn run_slice(tasks: &[Task], slice: Slice) -> ProcessReport {
    let (start, end) = (
        instant_at(slice.start_unix_ns),
        instant_at(slice.end_unix_ns),
    );
    tokio::time::sleep_until(start).await;
    let started_unix_ns = unix_ns();
    let handles: Vec<_> = tasks
        .iter()
        .map(|t| tokio::spawn(task(t.clone(), slice.side, end)))
        .collect();
    let mut report = ProcessReport {
        started_unix_ns,
        ..ProcessReport::default()
    };
    for (handle, t) in handles.into_iter().zip(tasks) {
        match handle.await {
            Ok(stats) => {
                report.tasks.push(TaskReport {
                    id: t.id,
                    sections: stats.sections,
                    attempts: stats.attempts,
                });
                report.waits.merge(&stats.waits);
                report.section_ns += stats.section_ns;
                report.errors.extend(stats.errors);
            }
            Err(e) => report.errors.push(format!("task {}: {e}", t.id)),
        }
    }
    report.ended_unix_ns = unix_ns();
    report
}

#[derive(Debug, Default)]
struct TaskStats {
    sections: u64,
    attempts: u64,
    waits: Waits,
    section_ns: u64,
    errors: Vec<String>,
}

/// One task: acquire -> section -> release until `end`.
async fn task(mut t: Task, side: Side, end: Instant) -> TaskStats {
    let mut stats = TaskStats::default();
    let mut seq = 0u64;
    let locker = match side {
        Side::Redlease => &t.redlease,
        Side::BusyRetry => &t.busy_retry,
    };
    while Instant::now() < end && stats.errors.len() < MAX_ERRORS {
        let asked = Instant::now();
        let acquired = locker
            .acquire(&mut t.conn, t.id + 1, &mut seq, &mut stats.attempts)
            .await;
        let held = match acquired {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => {
                stats.errors.push(format!(
                    "task {}: acquire: {:#}",
                    t.id,
                    anyhow::Error::from(e)
                ));
                continue;
            }
            Err(e) => {
                stats.errors.push(format!("task {}: {e:#}", t.id));
                return stats;
            }
        };
        let got = Instant::now();
        stats.waits.record(got - asked);
        let section = critical_section(&mut t.conn, &t.counter).await;
        stats.section_ns += nanos(got.elapsed());
        let released = locker.release(held, &mut t.conn).await;
        if let Err(e) = section {
            stats.errors.push(format!("task {}: {e:#}", t.id));
            return stats;
        }
        if let Err(e) = released {
            stats.errors.push(format!("task {}: release: {e:#}", t.id));
        }
        stats.sections += 1;
    }
    stats
}
