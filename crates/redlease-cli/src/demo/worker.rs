//! `redlease demo-worker`: one OS process of the demo, with several buyer tasks. It finds
//! Redis in `REDIS_URL` (set by `redlease demo`, so that credentials never show in `ps`)
//! and reports through keys under its namespace.

use std::process::ExitCode;
use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context as _;
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

use super::setup::{Keys, LOCK};
use crate::connect::RedisArgs;

/// The resource's fencing check (see the script's header).
static FENCED_WRITE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("fenced_write.lua")));

/// "Business logic" between reading the stock and writing it back: what makes the
/// read-modify-write race visible.
const THINK: Duration = Duration::from_millis(1);

/// What one worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Mode {
    /// Buy until sold out, by GET + SET with no lock.
    Unlocked,
    /// Buy until sold out, each purchase under the lock.
    Locked,
    /// Take the lock, say so, then hang in the section until killed (SIGKILL).
    Crash,
    /// Take the lock, read the stock, stop itself (SIGSTOP, a stop-the-world pause); once
    /// continued, write with its old fencing token and release.
    Pause,
    /// Wait for the lock, sell the last coupon through the fenced resource, release.
    Next,
}

/// Arguments of `redlease demo-worker` (internal).
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {
    /// What to do
    #[arg(long, value_enum)]
    mode: Mode,

    /// Key namespace of this demo run
    #[arg(long)]
    ns: String,

    /// Buyer tasks in this process
    #[arg(long, default_value_t = 8)]
    tasks: u16,

    /// Lease of the lock
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s")]
    ttl: Duration,

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,
}

/// Runs one worker.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let keys = Keys::new(&args.ns);
    let conn = args.redis.raw().await?;
    let client = args.redis.client(Some("cmd=redlease-demo".into())).await?;
    let lock = client
        .lock(LOCK)
        .prefix(args.ns.as_str())
        .ttl(args.ttl)
        .wait(Duration::from_secs(60));
    match args.mode {
        Mode::Unlocked | Mode::Locked => {
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..args.tasks {
                let (conn, keys, lock) = (conn.clone(), keys.clone(), lock.clone());
                let locked = args.mode == Mode::Locked;
                tasks.spawn(async move { buy_until_sold_out(conn, &keys, &lock, locked).await });
            }
            while let Some(done) = tasks.join_next().await {
                done??;
            }
        }
        Mode::Crash => {
            let guard = lock.acquire().await?;
            let mut conn = conn;
            let () = conn
                .set(&keys.in_section, guard.fencing_token().get())
                .await?;
            // In the section until SIGKILL: the lock is never released.
            std::future::pending::<()>().await;
        }
        Mode::Pause => paused_holder(conn, &keys, &lock).await?,
        Mode::Next => next_holder(conn, &keys, &lock).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// One buyer: GET stock, think, SET stock-1, record the sale; until sold out.
async fn buy_until_sold_out(
    mut conn: MultiplexedConnection,
    keys: &Keys,
    lock: &redlease::Lock,
    locked: bool,
) -> anyhow::Result<()> {
    loop {
        let sold = if locked {
            lock.run(async |guard| sell_one(&mut conn, keys, guard.fencing_token().get()).await)
                .await?
        } else {
            sell_one(&mut conn, keys, 0).await?
        };
        if !sold {
            return Ok(());
        }
    }
}

/// The non-atomic read-modify-write of the seed article; false when sold out.
async fn sell_one(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    fence: u64,
) -> anyhow::Result<bool> {
    let stock: i64 = conn.get(&keys.stock).await?;
    if stock <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(THINK).await;
    let () = conn.set(&keys.stock, stock - 1).await?;
    let _: i64 = conn.rpush(&keys.sold, fence).await?;
    Ok(true)
}

/// Holds the lock, reads the stock, then stops (SIGSTOP) like a process in a long GC pause;
/// when continued, it writes with its old token as if nothing happened.
async fn paused_holder(
    mut conn: MultiplexedConnection,
    keys: &Keys,
    lock: &redlease::Lock,
) -> anyhow::Result<()> {
    let guard = lock.acquire().await?;
    let fence = guard.fencing_token().get();
    let stock: i64 = conn.get(&keys.stock).await?;
    let () = conn.set(&keys.in_section, fence).await?;
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP).context("stopping itself")?;
    // Continued, long after the lease ran out; the write was "already on its way".
    let applied = fenced_write(&mut conn, keys, stock - 1, fence).await?;
    let released = match guard.release().await {
        Ok(()) => "ok",
        Err(redlease::Error::Lost { .. }) => "lost",
        Err(e) => return Err(e.into()),
    };
    report(
        &mut conn,
        keys,
        "pause",
        &[
            ("fence", fence.to_string()),
            ("applied", applied.to_string()),
            ("release", released.into()),
        ],
    )
    .await
}

/// Waits for the lock, then sells the last coupon through the fenced resource.
async fn next_holder(
    mut conn: MultiplexedConnection,
    keys: &Keys,
    lock: &redlease::Lock,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let guard = lock.acquire().await?;
    let waited = started.elapsed();
    let fence = guard.fencing_token().get();
    let stock: i64 = conn.get(&keys.stock).await?;
    let applied = fenced_write(&mut conn, keys, stock - 1, fence).await?;
    if applied == 1 {
        let _: i64 = conn.rpush(&keys.sold, fence).await?;
    }
    guard.release().await?;
    let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
    report(
        &mut conn,
        keys,
        "next",
        &[
            ("fence", fence.to_string()),
            ("applied", applied.to_string()),
            ("waited_ms", waited_ms.to_string()),
        ],
    )
    .await
}

/// Writes `stock` through the fenced resource: 1 applied, 0 refused (a newer token wrote).
async fn fenced_write(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    stock: i64,
    fence: u64,
) -> anyhow::Result<i64> {
    Ok(FENCED_WRITE
        .key(&keys.stock)
        .key(&keys.fence_seen)
        .arg(stock)
        .arg(fence)
        .invoke_async(conn)
        .await?)
}

/// Stores `fields` in the hash `report:<name>` for the demo to read.
async fn report(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    name: &str,
    fields: &[(&str, String)],
) -> anyhow::Result<()> {
    let () = conn.hset_multiple(keys.report(name), fields).await?;
    Ok(())
}
