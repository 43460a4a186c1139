//! The scale scenario's queued waiters: W tasks of one `Client` queued on one lock that
//! another task of the same client holds (ttl 5 s, renewed), or on a semaphore of 3 whose
//! permits are all held, measured while nothing else happens; then, for the lock at the
//! fewest and the most W, the hand-off: the holder lets go and the W tasks loop acquire ->
//! 1 ms section -> release on that lock.
//!
//! A point with no waiter (the holder alone) comes first, so that what the waiters add can
//! be told from what the holder's renewals cost.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::env::Env;
use super::gauges::{self, Mark};
use super::stats::{per_second, ratio};

/// The holder's (and every waiter's) lease length.
pub(super) const HOLDER_TTL: Duration = Duration::from_secs(5);
/// The critical section of the hand-off loop.
pub(super) const SECTION: Duration = Duration::from_millis(1);
/// The hand-off loop runs this long before it is measured.
const HANDOFF_WARM_UP: Duration = Duration::from_millis(500);
/// How long the waiters may take to be queued, and the previous point's background work
/// to end.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// What the waiters queue on: a lock (1 permit) or a semaphore of `permits`, every
/// permit held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Shape {
    Lock,
    Semaphore { permits: u32 },
}

impl Shape {
    /// How many holds keep it busy.
    fn holds(self) -> usize {
        match self {
            Self::Lock => 1,
            Self::Semaphore { permits } => permits as usize,
        }
    }

    /// Its name in the tables.
    pub(super) fn label(self) -> String {
        match self {
            Self::Lock => "lock".to_owned(),
            Self::Semaphore { permits } => format!("semaphore of {permits}"),
        }
    }
}

/// A lock or a semaphore, behind one `acquire`.
#[derive(Clone)]
enum Target {
    Lock(redlease::Lock),
    Semaphore(redlease::Semaphore),
}

impl Target {
    /// `shape` named `name` on `client`, and its keys.
    fn of(
        client: &redlease::Client,
        shape: Shape,
        name: String,
    ) -> redlease::Result<(Self, redlease::LockKeys)> {
        Ok(match shape {
            Shape::Lock => {
                let lock = client
                    .lock(name)
                    .ttl(HOLDER_TTL)
                    .wait(redlease::Wait::Forever);
                let keys = lock.keys()?;
                (Self::Lock(lock), keys)
            }
            Shape::Semaphore { permits } => {
                let semaphore = client
                    .semaphore(name, permits)
                    .ttl(HOLDER_TTL)
                    .wait(redlease::Wait::Forever);
                let keys = semaphore.keys()?;
                (Self::Semaphore(semaphore), keys)
            }
        })
    }

    async fn acquire(&self) -> redlease::Result<redlease::Guard> {
        match self {
            Self::Lock(lock) => lock.acquire().await,
            Self::Semaphore(semaphore) => semaphore.acquire().await,
        }
    }
}

/// One point: W waiters queued on a held lock (or semaphore).
#[derive(Debug, Clone, Serialize)]
pub(super) struct QueuedPoint {
    pub(super) shape: Shape,
    pub(super) waiters: usize,
    #[serde(rename = "window_us", serialize_with = "super::stats::micros")]
    pub(super) window: Duration,
    /// Every command Redis ran per second, scripts' inner calls included.
    pub(super) commands_per_sec: f64,
    /// `EVALSHA` requests per second.
    pub(super) requests_per_sec: f64,
    /// Redis' CPU time over wall time.
    pub(super) redis_cpu: f64,
    /// This process' CPU time over wall time.
    pub(super) client_cpu: f64,
    /// Redis' `used_memory` with the waiters queued, less with the holder alone, per waiter.
    pub(super) redis_bytes_per_waiter: Option<f64>,
    /// The client's resident memory likewise, per waiter.
    pub(super) client_bytes_per_waiter: Option<f64>,
    /// Calls per second of each command.
    pub(super) by_command: Vec<(String, f64)>,
    /// The hand-off loop, at the fewest and the most waiters.
    pub(super) handoff: Option<Handoff>,
}

/// W tasks looping acquire -> 1 ms section -> release on one lock.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Handoff {
    pub(super) sections: u64,
    #[serde(rename = "window_us", serialize_with = "super::stats::micros")]
    pub(super) window: Duration,
    pub(super) sections_per_sec: f64,
    /// Every command Redis ran per section, scripts' inner calls included.
    pub(super) commands_per_section: f64,
    /// `EVALSHA` requests per section.
    pub(super) requests_per_section: f64,
    /// Task errors (acquire or release failures): must be 0.
    pub(super) errors: usize,
}

/// Measures `waiters` queued on a held `shape` for `window`; then, when `handoff` is
/// given, the hand-off loop for that long.
pub(super) async fn point(
    env: &Env,
    shape: Shape,
    waiters: usize,
    window: Duration,
    handoff: Option<Duration>,
) -> anyhow::Result<QueuedPoint> {
    let admin = &env.admin;
    gauges::quiesce(admin, SETTLE_LIMIT).await?;
    let client = env.client().await?;
    let name = env.name(&format!("queued-{}-{waiters}", shape.holds()));
    let (target, keys) = Target::of(&client, shape, name)?;
    env.clean_up_keys(&keys);
    let mut holders = Vec::with_capacity(shape.holds());
    for _ in 0..shape.holds() {
        holders.push(target.acquire().await.context("taking the held permits")?);
    }
    let memory_before = gauges::used_memory(admin).await?;
    let rss_before = gauges::client_rss();

    env.progress(&format!("scale: queueing {waiters} waiters"));
    let sections = Arc::new(AtomicU64::new(0));
    let tasks: Vec<JoinHandle<redlease::Result<()>>> = (0..waiters)
        .map(|_| {
            let (target, sections) = (target.clone(), Arc::clone(&sections));
            tokio::spawn(async move {
                loop {
                    let guard = target.acquire().await?;
                    tokio::time::sleep(SECTION).await;
                    guard.release().await?;
                    sections.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    wait_queued(admin, keys.queue(), waiters).await?;
    gauges::quiesce(admin, Duration::from_secs(2)).await?;

    let start = Mark::take(admin).await?;
    tokio::time::sleep(window).await;
    let idle = start.until(&Mark::take(admin).await?);
    let memory_after = gauges::used_memory(admin).await?;
    let rss_after = gauges::client_rss();

    let handoff = match handoff {
        Some(length) => {
            env.progress(&format!("scale: hand-off among {waiters} waiters"));
            for holder in holders.drain(..) {
                holder.release().await.context("releasing the held lock")?;
            }
            tokio::time::sleep(HANDOFF_WARM_UP).await;
            let start = Mark::take(admin).await?;
            let before = sections.load(Ordering::Relaxed);
            tokio::time::sleep(length).await;
            let done = sections.load(Ordering::Relaxed) - before;
            let w = start.until(&Mark::take(admin).await?);
            Some(Handoff {
                sections: done,
                window: w.elapsed,
                sections_per_sec: per_second(done, w.elapsed),
                commands_per_section: ratio(w.commands.total, done),
                requests_per_section: ratio(
                    w.commands.by_command.get("evalsha").copied().unwrap_or(0),
                    done,
                ),
                errors: tasks.iter().filter(|t| t.is_finished()).count(),
            })
        }
        None => None,
    };
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        // Aborted, or ended by an error counted above.
        drop(task.await);
    }
    for holder in holders {
        holder.release().await.context("releasing the held lock")?;
    }
    client
        .shutdown()
        .await
        .context("shutting the client down")?;
    drop(client);

    #[allow(clippy::cast_precision_loss)] // byte and waiter counts far below 2^52
    let per_waiter = |after: u64, before: u64| {
        (waiters > 0).then(|| (after as f64 - before as f64) / waiters as f64)
    };
    Ok(QueuedPoint {
        shape,
        waiters,
        window: idle.elapsed,
        commands_per_sec: idle.commands_per_sec(),
        requests_per_sec: idle.calls_per_sec("evalsha"),
        redis_cpu: idle.redis_cpu,
        client_cpu: idle.client_cpu,
        redis_bytes_per_waiter: per_waiter(memory_after, memory_before),
        client_bytes_per_waiter: rss_before
            .zip(rss_after)
            .and_then(|(b, a)| per_waiter(a, b)),
        by_command: idle
            .commands
            .by_command
            .keys()
            .map(|name| (name.clone(), idle.calls_per_sec(name)))
            .collect(),
        handoff,
    })
}

/// Waits until the lock's queue holds `waiters` owner tokens.
async fn wait_queued(admin: &ConnectionManager, queue: &str, waiters: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + SETTLE_LIMIT;
    let mut conn = admin.clone();
    loop {
        let queued: usize = redis::cmd("LLEN")
            .arg(queue)
            .query_async(&mut conn)
            .await
            .context("reading the queue's length")?;
        if queued >= waiters {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("only {queued} of {waiters} waiters were queued after {SETTLE_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
