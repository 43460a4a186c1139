//! What holding many locks costs: memory per held guard, and renewal round trips per
//! interval for 10,000 locks on one client.
//!
//! `cargo run --release -p redlease --example renewal_cost` (part of `make bench`). Starts
//! a private redis-server on a free loopback port.
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static ALLOCATOR: &StatsAlloc<std::alloc::System> = &INSTRUMENTED_SYSTEM;

const LOCKS: usize = 10_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = redlease_local::RedisServer::start()?;
    let client = redlease::Client::connect(&server.url()).await?;
    let mut conn = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let ttl = Duration::from_secs(3);
    // Warm up: scripts loaded, connections and scheduler running.
    drop(client.lock("warm-up").acquire().await?);

    let mut guards = Vec::with_capacity(LOCKS);
    let region = Region::new(ALLOCATOR);
    let started = Instant::now();
    for chunk in 0..LOCKS / 1000 {
        let locks = (0..1000).map(|i| client.lock(format!("held:{}", chunk * 1000 + i)).ttl(ttl));
        let acquired =
            futures_util::future::join_all(locks.map(|l| async move { l.acquire().await })).await;
        for g in acquired {
            guards.push(g?);
        }
    }
    let acquire_time = started.elapsed();
    let change = region.change();
    let live = change.bytes_allocated.cast_signed() - change.bytes_deallocated.cast_signed()
        + change.bytes_reallocated;
    let per_guard = live / LOCKS.cast_signed();

    let calls_before = evalsha_calls(&mut conn).await?;
    let trips_before = client.stats().renewal_round_trips;
    let window = ttl * 3; // 9 renewal intervals of ttl/3
    tokio::time::sleep(window).await;
    let trips = client.stats().renewal_round_trips - trips_before;
    let calls = evalsha_calls(&mut conn).await? - calls_before;
    let held = guards.iter().filter(|g| g.is_held()).count();
    let intervals = 9;

    println!("locks held:                 {LOCKS} (ttl {ttl:?}, acquired in {acquire_time:.1?})");
    println!("heap per held guard:        {per_guard} bytes (guard, lease, renewal entry, keys)");
    println!("renewal window:             {window:?} = {intervals} intervals of ttl/3");
    println!(
        "renewal round trips:        {trips} ({:.2} per interval)",
        trips as f64 / f64::from(intervals)
    );
    println!(
        "lock_renew.lua calls (EVALSHA):  {calls} ({:.1} per interval, up to {} leases each)",
        calls as f64 / f64::from(intervals),
        500
    );
    println!("still held at the end:      {held} of {LOCKS}");
    Ok(())
}

async fn evalsha_calls(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<u64, Box<dyn std::error::Error>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0))
}
