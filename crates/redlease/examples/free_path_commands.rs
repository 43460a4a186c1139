//! Redis commands per uncontended acquire and release, for each primitive: every command
//! Redis runs (`INFO commandstats`, the scripts' inner calls included), counted separately
//! for the acquisition and the release of a free name.
//!
//! `cargo run --release -p redlease --example free_path_commands` (part of `make bench`).
//! Starts a private redis-server on a free loopback port. The counts are deterministic:
//! they depend on the scripts, not on the machine.
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::collections::BTreeMap;
use std::future::Future;

use redis::aio::MultiplexedConnection;

/// Operations measured per primitive; the counts are the same for each, so a few suffice.
const ROUNDS: u32 = 20;

/// Calls per command name since the last reset, without the measuring commands themselves.
async fn calls(conn: &mut MultiplexedConnection) -> redis::RedisResult<BTreeMap<String, u64>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut counts = BTreeMap::new();
    for line in info.lines() {
        let Some(rest) = line.strip_prefix("cmdstat_") else {
            continue;
        };
        let Some((name, stats)) = rest.split_once(':') else {
            continue;
        };
        if name == "info" || name.starts_with("config") {
            continue;
        }
        let n = stats
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        counts.insert(name.to_owned(), n);
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    Ok(counts)
}

/// "9.00: del 1, evalsha 2, ..." for counts taken over `ROUNDS` operations.
fn shown(counts: &BTreeMap<String, u64>) -> String {
    let total: u64 = counts.values().sum();
    let list: Vec<String> = counts
        .iter()
        .map(|(name, n)| format!("{name} {}", *n as f64 / f64::from(ROUNDS)))
        .collect();
    format!(
        "{:.2}: {}",
        total as f64 / f64::from(ROUNDS),
        list.join(", ")
    )
}

/// Measures `ROUNDS` acquisitions (`acquire`) and releases (`release`) of one primitive.
async fn measure<G, A, AF, R, RF>(
    conn: &mut MultiplexedConnection,
    what: &str,
    acquire: A,
    release: R,
) -> Result<(), Box<dyn std::error::Error>>
where
    A: Fn() -> AF,
    AF: Future<Output = redlease::Result<G>>,
    R: Fn(G) -> RF,
    RF: Future<Output = redlease::Result<()>>,
{
    // Warm up: scripts loaded, connections open.
    release(acquire().await?).await?;
    let mut acquired = BTreeMap::<String, u64>::new();
    let mut released = BTreeMap::<String, u64>::new();
    calls(conn).await?;
    for _ in 0..ROUNDS {
        let guard = acquire().await?;
        for (name, n) in calls(conn).await? {
            *acquired.entry(name).or_default() += n;
        }
        release(guard).await?;
        for (name, n) in calls(conn).await? {
            *released.entry(name).or_default() += n;
        }
    }
    let mut both = acquired.clone();
    for (name, n) in &released {
        *both.entry(name.clone()).or_default() += n;
    }
    println!("{what}");
    println!("  acquire            {}", shown(&acquired));
    println!("  release            {}", shown(&released));
    println!("  acquire + release  {}", shown(&both));
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = redlease_local::RedisServer::start()?;
    let client = redlease::Client::connect(&server.url()).await?;
    let mut conn = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown version");
    println!(
        "Redis commands per uncontended operation on a free name ({ROUNDS} of each, Redis {version})"
    );
    let lock = client.lock("free-path:lock");
    measure(
        &mut conn,
        "lock",
        || lock.acquire(),
        redlease::Guard::release,
    )
    .await?;
    let semaphore = client.semaphore("free-path:semaphore", 3);
    measure(
        &mut conn,
        "semaphore, 3 permits",
        || semaphore.acquire(),
        redlease::Permit::release,
    )
    .await?;
    let rwlock = client.rwlock("free-path:rwlock");
    let (read, write) = (rwlock.read(), rwlock.write());
    measure(
        &mut conn,
        "read-write lock, read",
        || read.acquire(),
        redlease::ReadGuard::release,
    )
    .await?;
    measure(
        &mut conn,
        "read-write lock, write",
        || write.acquire(),
        redlease::WriteGuard::release,
    )
    .await?;
    let multi = client.multi_lock(["free-path:a", "free-path:b"]);
    measure(
        &mut conn,
        "multi-lock of 2",
        || multi.acquire(),
        redlease::MultiGuard::release,
    )
    .await?;
    Ok(())
}
