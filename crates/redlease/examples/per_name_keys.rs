//! What locking many distinct names once each leaves in Redis: `DBSIZE` and `INFO memory`'s
//! `used_memory` right after, and once the fencing counters' keep has passed.
//!
//! `cargo run --release -p redlease --example per_name_keys [-- NAMES [KEEP_SECS]]`
//! (defaults 100,000 names, a 2 s keep: the counters' expiry is then seen within seconds;
//! with a keep over a minute, 3600 the default, it reports the keys left and stops). Starts a private
//! redis-server on a free loopback port; locks through the library, 32 at a time, each
//! acquired and released once.
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

use futures_util::StreamExt as _;

/// `DBSIZE` and `used_memory` now.
async fn footprint(
    conn: &mut redis::aio::MultiplexedConnection,
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let keys: u64 = redis::cmd("DBSIZE").query_async(conn).await?;
    let info: String = redis::cmd("INFO").arg("memory").query_async(conn).await?;
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok((keys, used))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let names: usize = args.next().map_or(Ok(100_000), |a| a.parse())?;
    let keep = Duration::from_secs(args.next().map_or(Ok(2), |a| a.parse())?);
    let server = redlease_local::RedisServer::start()?;
    let client = redlease::Client::builder(&server.url())
        .fence_keep(keep)
        .connect()
        .await?;
    let mut conn = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let (keys_before, used_before) = footprint(&mut conn).await?;
    let started = Instant::now();
    let mut locked = futures_util::stream::iter(0..names)
        .map(|i| {
            let lock = client.lock(format!("order:{i}"));
            async move {
                let guard = lock.acquire().await?;
                guard.release().await
            }
        })
        .buffer_unordered(32);
    while let Some(done) = locked.next().await {
        done?;
    }
    let took = started.elapsed();
    let (keys_after, used_after) = footprint(&mut conn).await?;
    let per_key = (used_after.saturating_sub(used_before)) as f64
        / (keys_after.saturating_sub(keys_before)).max(1) as f64;
    println!(
        "{names} names locked once each in {:.1} s, fence keep {keep:?}",
        took.as_secs_f64()
    );
    println!("before:            DBSIZE {keys_before:>7}  used_memory {used_before:>10} B");
    println!(
        "right after:       DBSIZE {keys_after:>7}  used_memory {used_after:>10} B  ({per_key:.1} B per key)"
    );
    if keep > Duration::from_secs(60) {
        println!("(a keep over a minute: not waited for)");
        client.shutdown().await?;
        return Ok(());
    }
    // Past the keep, counted from the last grant; Redis' active expiry then takes a moment.
    let last_grant = Instant::now();
    let deadline = last_grant + keep + Duration::from_secs(30);
    tokio::time::sleep(keep).await;
    let mut gone = footprint(&mut conn).await?;
    while gone.0 > keys_before && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        gone = footprint(&mut conn).await?;
    }
    println!(
        "after the keep:    DBSIZE {:>7}  used_memory {:>10} B  ({:.1} s after the last grant)",
        gone.0,
        gone.1,
        last_grant.elapsed().as_secs_f64()
    );
    client.shutdown().await?;
    Ok(())
}
