//! Scenarios 5 and 6: holds that may be shared. 16 tasks loop acquire -> section -> release
//! on one name: a semaphore of 4 permits (the section is one `INCR` of a counter), and a
//! read-write lock where each section is a read (`GET`) with probability 0.9, else a write
//! (a non-atomic `GET` + `SET` of the counter, which ends equal to the number of writes
//! only if no two writes overlapped).
//!
//! Both run on one redlease `Client` shared by the tasks. Each task also tracks in memory
//! who is inside: a 5th permit holder, or a writer beside anyone, is a failure. There is
//! no bare floor: plain `SET NX` has no counting or shared mode to compare with.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::env::Env;
use super::section::{LOCK_WAIT, MAX_ERRORS};
use super::stats::{CommandCost, Summary, per_second};

/// Tasks contending in each scenario.
pub(super) const CONTENDERS: usize = 16;
/// Permits of the semaphore.
pub(super) const PERMITS: u32 = 4;
/// Sections that are reads in the read-write lock scenario, in percent.
const READ_PERCENT: u64 = 90;

/// The result of one scenario.
#[derive(Debug, Serialize)]
pub(super) struct Shared {
    pub(super) scenario: &'static str,
    pub(super) contenders: usize,
    /// The permits of the semaphore; `None` for the read-write lock.
    pub(super) permits: Option<u32>,
    pub(super) sections: u64,
    /// Sections that were reads (read-write lock).
    pub(super) reads: u64,
    /// Sections that were writes (read-write lock).
    pub(super) writes: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) sections_per_sec: f64,
    /// Time spent inside one acquire (its max is the longest wait of any task).
    pub(super) wait: Summary,
    /// The most tasks inside their sections at once.
    pub(super) most_inside: usize,
    /// Sections that began beside a hold they must exclude (a 5th permit holder; a writer
    /// beside anyone, or a reader beside a writer).
    pub(super) violations: u64,
    /// Per section; absent when `INFO commandstats` is not allowed.
    pub(super) commands: Option<CommandCost>,
    /// The counter: incremented by every semaphore section, by every write.
    pub(super) counter: u64,
    /// What the counter must be.
    pub(super) expected_counter: u64,
    pub(super) errors: Vec<String>,
}

/// Which primitive a scenario holds.
#[derive(Clone)]
enum Primitive {
    Semaphore(redlease::Semaphore),
    RwLock(redlease::RwLock),
}

/// Who is inside a section right now, and the most ever.
#[derive(Debug, Default)]
struct Inside {
    holders: AtomicUsize,
    writers: AtomicUsize,
    most: AtomicUsize,
    violations: AtomicUsize,
}

impl Inside {
    /// Enters a section (as a writer or not); counts a violation if `limit` holders were
    /// already inside, or a writer, or (for a writer) anyone.
    fn enter(&self, write: bool, limit: usize) {
        let writers = if write {
            self.writers.fetch_add(1, Ordering::SeqCst)
        } else {
            self.writers.load(Ordering::SeqCst)
        };
        let before = self.holders.fetch_add(1, Ordering::SeqCst);
        self.most.fetch_max(before + 1, Ordering::SeqCst);
        if before >= limit || writers > 0 || (write && before > 0) {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, write: bool) {
        self.holders.fetch_sub(1, Ordering::SeqCst);
        if write {
            self.writers.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[derive(Debug, Default)]
struct TaskStats {
    reads: u64,
    writes: u64,
    waits: Vec<Duration>,
    errors: Vec<String>,
}

/// A small xorshift, for the read/write choice.
struct Dice(u64);

impl Dice {
    fn percent(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % 100
    }
}

async fn task(
    id: usize,
    primitive: Primitive,
    mut conn: ConnectionManager,
    counter: Arc<str>,
    inside: Arc<Inside>,
    until: Instant,
) -> anyhow::Result<TaskStats> {
    let mut stats = TaskStats::default();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15 ^ (id as u64 + 1).wrapping_mul(0x2545_f491));
    while Instant::now() < until && stats.errors.len() < MAX_ERRORS {
        let asked = Instant::now();
        let (write, limit, acquired) = match &primitive {
            Primitive::Semaphore(s) => {
                (false, PERMITS as usize, s.acquire().await.map(Hold::Permit))
            }
            Primitive::RwLock(rw) if dice.percent() < READ_PERCENT => (
                false,
                usize::MAX,
                rw.read().acquire().await.map(Hold::Permit),
            ),
            Primitive::RwLock(rw) => (true, 1, rw.write().acquire().await.map(Hold::Write)),
        };
        let hold = match acquired {
            Ok(hold) => hold,
            Err(e) => {
                stats
                    .errors
                    .push(format!("task {id}: acquire: {:#}", anyhow::Error::from(e)));
                continue;
            }
        };
        stats.waits.push(asked.elapsed());
        inside.enter(write, limit);
        let section = section(&mut conn, &counter, &primitive, write).await;
        inside.leave(write);
        section?;
        if write {
            stats.writes += 1;
        } else {
            stats.reads += 1;
        }
        if let Err(e) = hold.release().await {
            stats
                .errors
                .push(format!("task {id}: release: {:#}", anyhow::Error::from(e)));
        }
    }
    Ok(stats)
}

/// A permit or read hold, or a write hold.
enum Hold {
    Permit(redlease::Guard),
    Write(redlease::WriteGuard),
}

impl Hold {
    async fn release(self) -> redlease::Result<()> {
        match self {
            Hold::Permit(guard) => guard.release().await,
            Hold::Write(guard) => guard.release().await,
        }
    }
}

/// The section: `INCR` for a permit, `GET` for a read, `GET` + `SET` for a write.
async fn section(
    conn: &mut ConnectionManager,
    counter: &str,
    primitive: &Primitive,
    write: bool,
) -> anyhow::Result<()> {
    if matches!(primitive, Primitive::Semaphore(_)) {
        let _: u64 = redis::cmd("INCR")
            .arg(counter)
            .query_async(conn)
            .await
            .context("incrementing the counter in the section")?;
        return Ok(());
    }
    let value: Option<u64> = redis::cmd("GET")
        .arg(counter)
        .query_async(conn)
        .await
        .context("reading the counter in the section")?;
    if write {
        let () = redis::cmd("SET")
            .arg(counter)
            .arg(value.unwrap_or(0) + 1)
            .query_async(conn)
            .await
            .context("writing the counter in the section")?;
    }
    Ok(())
}

/// Runs every task until `until` (each finishes the section it is in).
async fn race(
    primitive: &Primitive,
    conns: &[ConnectionManager],
    counter: &Arc<str>,
    until: Instant,
) -> anyhow::Result<(Vec<TaskStats>, Arc<Inside>, Duration)> {
    let inside = Arc::new(Inside::default());
    let start = Instant::now();
    let tasks: Vec<_> = conns
        .iter()
        .enumerate()
        .map(|(id, conn)| {
            tokio::spawn(task(
                id,
                primitive.clone(),
                conn.clone(),
                Arc::clone(counter),
                Arc::clone(&inside),
                until,
            ))
        })
        .collect();
    let mut all = Vec::with_capacity(tasks.len());
    for task in tasks {
        all.push(task.await.context("a bench task panicked")??);
    }
    Ok((all, inside, start.elapsed()))
}

/// One scenario: set up, warm up, measure.
async fn scenario(
    env: &Env,
    title: &'static str,
    name: &str,
    duration: Duration,
) -> anyhow::Result<Shared> {
    env.progress(&format!("shared holds: {title}"));
    let client = env.client().await?;
    let (primitive, permits) = if name.starts_with("semaphore") {
        let semaphore = client.semaphore(env.name(name), PERMITS).wait(LOCK_WAIT);
        env.clean_up_keys(&semaphore.keys()?);
        (Primitive::Semaphore(semaphore), Some(PERMITS))
    } else {
        let rw = client.rwlock(env.name(name)).wait(LOCK_WAIT);
        env.clean_up_keys(&rw.keys()?);
        (Primitive::RwLock(rw), None)
    };
    let conn = env.connection().await?;
    let conns = vec![conn; CONTENDERS];
    let counter: Arc<str> = env.key(&format!("{name}:counter")).into();
    env.clean_up(&counter);

    race(&primitive, &conns, &counter, Instant::now() + env.warm_up).await?;

    env.reset_counter(&counter).await?;
    let (raced, delta) = env
        .counting(race(
            &primitive,
            &conns,
            &counter,
            Instant::now() + duration,
        ))
        .await;
    let (stats, inside, elapsed) = raced?;
    let counter_value = env.read_counter(&counter).await?;

    let reads: u64 = stats.iter().map(|s| s.reads).sum();
    let writes: u64 = stats.iter().map(|s| s.writes).sum();
    let sections = reads + writes;
    // INCR, or GET (+ SET for a write).
    let plain = if permits.is_some() {
        sections
    } else {
        sections + writes
    };
    Ok(Shared {
        scenario: title,
        contenders: CONTENDERS,
        permits,
        sections,
        reads: if permits.is_some() { 0 } else { reads },
        writes: if permits.is_some() { 0 } else { writes },
        elapsed,
        sections_per_sec: per_second(sections, elapsed),
        wait: Summary::of(stats.iter().flat_map(|s| s.waits.iter().copied()).collect()),
        most_inside: inside.most.load(Ordering::SeqCst),
        violations: inside.violations.load(Ordering::SeqCst) as u64,
        commands: delta.map(|d| CommandCost::new(d, plain, plain, sections)),
        counter: counter_value,
        expected_counter: if permits.is_some() { sections } else { writes },
        errors: stats.into_iter().flat_map(|s| s.errors).collect(),
    })
}

/// Runs scenarios 5 (semaphore of 4 permits) and 6 (read-write lock, 90% reads).
pub(super) async fn run(env: &Env, duration: Duration) -> anyhow::Result<Vec<Shared>> {
    Ok(vec![
        scenario(env, "semaphore, 4 permits", "semaphore", duration).await?,
        scenario(env, "rwlock, 90% reads", "rwlock", duration).await?,
    ])
}
