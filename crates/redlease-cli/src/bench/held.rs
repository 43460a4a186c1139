//! The scale scenario's held leases: N locks held at once by one `Client` (ttl 3 s,
//! renewed by the library), then the physical floor of the same job: the same N keys kept
//! alive by a plain loop of pipelined `PEXPIRE`, one per key per ttl/3, spread evenly over
//! the period.
//!
//! Each is measured in a quiet window (no probe: Redis' commands and CPU, the client's CPU)
//! and the leases again in a probed window ([`super::gauges::Probes`]: another client's
//! `PING` latency, the least `PTTL` of sampled lock keys), so that the probes' own commands
//! stay out of the counts.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use rand::seq::IndexedRandom as _;
use redis::aio::ConnectionManager;
use serde::Serialize;
use tokio::time::Instant;

use super::env::Env;
use super::gauges::{self, Mark, Probed, Probes, Window};

/// The lease length of every held lock.
pub(super) const TTL: Duration = Duration::from_secs(3);
/// Lock keys whose `PTTL` the lease probe reads every round.
const SAMPLE: usize = 1000;
/// Acquisitions (and releases, and floor `SET`s) in flight at once.
const CHUNK: usize = 1000;
/// Ticks per renewal period of the floor's loop (each sends its share of the keys).
const FLOOR_TICKS: u32 = 100;

/// One point: N held leases against the floor.
#[derive(Debug, Clone, Serialize)]
pub(super) struct HeldPoint {
    pub(super) leases: usize,
    #[serde(rename = "acquire_all_us", serialize_with = "super::stats::micros")]
    pub(super) acquire_all: Duration,
    pub(super) ours: Rates,
    pub(super) floor: Rates,
    /// Redis' `used_memory` after acquiring, less before, per lease.
    pub(super) redis_bytes_per_lease: f64,
    /// `MEMORY USAGE` of one lock's keys (lock key, holder details, fencing counter).
    pub(super) one_lock_bytes: u64,
    /// The client's resident memory after acquiring, less before, per lease.
    pub(super) client_bytes_per_lease: Option<f64>,
    /// The client's resident memory while holding, in bytes.
    pub(super) client_rss: Option<u64>,
    /// During the probed window.
    pub(super) probed: Probed,
    /// Leases the guards no longer claimed at the end (must be 0).
    pub(super) lost: usize,
}

/// What one side cost in its quiet window.
#[derive(Debug, Clone, Serialize)]
pub(super) struct Rates {
    #[serde(rename = "window_us", serialize_with = "super::stats::micros")]
    pub(super) window: Duration,
    /// Every command Redis ran, scripts' inner calls included.
    pub(super) commands_per_sec: f64,
    /// Requests: `EVALSHA` (ours) or `PEXPIRE` (floor).
    pub(super) requests_per_sec: f64,
    /// Redis' CPU time over wall time.
    pub(super) redis_cpu: f64,
    /// This process' CPU time over wall time.
    pub(super) client_cpu: f64,
    /// Calls per second of each command.
    pub(super) by_command: Vec<(String, f64)>,
}

impl Rates {
    fn of(w: &Window, request: &str) -> Self {
        Self {
            window: w.elapsed,
            commands_per_sec: w.commands_per_sec(),
            requests_per_sec: w.calls_per_sec(request),
            redis_cpu: w.redis_cpu,
            client_cpu: w.client_cpu,
            by_command: w
                .commands
                .by_command
                .keys()
                .map(|name| (name.clone(), w.calls_per_sec(name)))
                .collect(),
        }
    }
}

/// Measures N held leases for `window` (quiet, then probed), then the floor for `window`.
pub(super) async fn point(env: &Env, leases: usize, window: Duration) -> anyhow::Result<HeldPoint> {
    let admin = &env.admin;
    let client = redlease::Client::builder(&env.url)
        .ttl(TTL)
        .connect()
        .await
        .context("connecting a redlease client")?;
    drop(client.lock(env.name("held-warm-up")).acquire().await?);
    let locks: Vec<redlease::Lock> = (0..leases)
        .map(|i| client.lock(env.name(&format!("held-{leases}-{i}"))))
        .collect();
    let keys: Vec<redlease::LockKeys> = locks
        .iter()
        .map(redlease::Lock::keys)
        .collect::<Result<_, _>>()?;
    let memory_before = gauges::used_memory(admin).await?;
    let rss_before = gauges::client_rss();

    env.progress(&format!("scale: acquiring {leases} locks"));
    let started = Instant::now();
    let mut guards = Vec::with_capacity(leases);
    for chunk in locks.chunks(CHUNK) {
        for guard in join_all(chunk.iter().map(redlease::Lock::acquire)).await {
            guards.push(guard.context("acquiring the held locks")?);
        }
    }
    let acquire_all = started.elapsed();
    let memory_after = gauges::used_memory(admin).await?;
    let rss_after = gauges::client_rss();

    env.progress(&format!("scale: {leases} leases held, quiet window"));
    let ours = Rates::of(&quiet_window(admin, window).await?, "evalsha");
    env.progress(&format!("scale: {leases} leases held, probed window"));
    let sample: Vec<String> = keys
        .sample(&mut rand::rng(), SAMPLE.min(leases))
        .map(|k| k.key().to_owned())
        .collect();
    let running = Probes::start(&env.redis, sample)?;
    tokio::time::sleep(window).await;
    let probed = running.finish()?;
    let lost = guards.iter().filter(|g| !g.is_held()).count();
    let one = keys
        .first()
        .map_or_else(Vec::new, |k| vec![k.key(), k.holder(), k.fence()]);
    let one_lock_bytes = gauges::memory_usage(admin, &one).await?;

    env.progress(&format!("scale: releasing {leases} locks"));
    let mut guards = guards.into_iter();
    loop {
        let chunk: Vec<redlease::Guard> = guards.by_ref().take(CHUNK).collect();
        if chunk.is_empty() {
            break;
        }
        // A lease lost meanwhile is counted above; its release error adds nothing.
        drop(join_all(chunk.into_iter().map(redlease::Guard::release)).await);
    }
    client
        .shutdown()
        .await
        .context("shutting the client down")?;
    drop(client);
    let mut all: Vec<&str> = Vec::with_capacity(keys.len() * 3);
    for k in &keys {
        all.extend([k.key(), k.holder(), k.fence()]);
    }
    delete(admin, &all).await?;

    env.progress(&format!("scale: floor, {leases} keys renewed by PEXPIRE"));
    let floor = floor(env, leases, window).await?;

    #[allow(clippy::cast_precision_loss)] // byte and lease counts far below 2^52
    let per_lease = |after: u64, before: u64| (after as f64 - before as f64) / leases as f64;
    Ok(HeldPoint {
        leases,
        acquire_all,
        ours,
        floor,
        redis_bytes_per_lease: per_lease(memory_after, memory_before),
        one_lock_bytes,
        client_bytes_per_lease: rss_before.zip(rss_after).map(|(b, a)| per_lease(a, b)),
        client_rss: rss_after,
        probed,
        lost,
    })
}

/// A window of `length` between two marks.
async fn quiet_window(admin: &ConnectionManager, length: Duration) -> anyhow::Result<Window> {
    let start = Mark::take(admin).await?;
    tokio::time::sleep(length).await;
    Ok(start.until(&Mark::take(admin).await?))
}

/// Deletes `keys`, in chunks.
async fn delete(admin: &ConnectionManager, keys: &[&str]) -> anyhow::Result<()> {
    let mut conn = admin.clone();
    for chunk in keys.chunks(CHUNK) {
        let _: u64 = redis::cmd("UNLINK")
            .arg(chunk)
            .query_async(&mut conn)
            .await
            .context("removing the held locks' keys")?;
    }
    Ok(())
}

/// The floor: `leases` keys set with the ttl, each renewed by one `PEXPIRE` per ttl/3 from
/// a loop that sends a 1/100th of them every 1/100th of the period, pipelined.
async fn floor(env: &Env, leases: usize, window: Duration) -> anyhow::Result<Rates> {
    let mut conn = env.connection().await?;
    let keys: Vec<String> = (0..leases)
        .map(|i| env.key(&format!("floor-{leases}-{i}")))
        .collect();
    let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
    for chunk in keys.chunks(CHUNK) {
        let mut pipe = redis::pipe();
        for key in chunk {
            // A value as long as an owner token.
            pipe.cmd("SET")
                .arg(key)
                .arg("0123456789abcdef0123456789abcdef")
                .arg("PX")
                .arg(ttl_ms)
                .ignore();
        }
        let () = pipe
            .query_async(&mut conn)
            .await
            .context("setting the floor's keys")?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (stop, keys, mut conn) = (Arc::clone(&stop), keys.clone(), conn.clone());
        tokio::spawn(async move {
            let tick = TTL / 3 / FLOOR_TICKS;
            let mut interval = tokio::time::interval(tick);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let per_tick = keys.len().div_ceil(FLOOR_TICKS as usize).max(1);
            let mut slices = keys.chunks(per_tick).cycle();
            while !stop.load(Ordering::Relaxed) {
                interval.tick().await;
                let Some(slice) = slices.next() else { break };
                let mut pipe = redis::pipe();
                for key in slice {
                    pipe.cmd("PEXPIRE").arg(key).arg(ttl_ms).ignore();
                }
                let sent: redis::RedisResult<()> = pipe.query_async(&mut conn).await;
                sent?;
            }
            Ok::<(), redis::RedisError>(())
        })
    };
    // One period first, so that every key has been renewed once by the loop.
    tokio::time::sleep(TTL / 3).await;
    let measured = quiet_window(&env.admin, window).await;
    stop.store(true, Ordering::Relaxed);
    renewer
        .await
        .context("the floor's renewal loop panicked")?
        .context("the floor's renewal loop")?;
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    delete(&env.admin, &refs).await?;
    drop(conn);
    Ok(Rates::of(&measured?, "pexpire"))
}
