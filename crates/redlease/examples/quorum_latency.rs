//! Latency of an uncontended acquire + release: one Redis against a quorum of 5, measured
//! in the same run (alternating slices, so both see the same machine).
//!
//! `cargo run --release -p redlease --example quorum_latency` (part of `make bench`).
//! Starts 6 private redis-servers on free loopback ports, and measures twice: over plain
//! loopback, where every node's work competes for this machine's few cores, and with each
//! node behind a proxy that holds every reply back for [`LINK_DELAY`] (a network round
//! trip of a few hundred microseconds, as between hosts of one data centre), where the
//! fan-out's parallelism shows.
#![allow(clippy::print_stdout, clippy::cast_precision_loss)]

use std::time::{Duration, Instant};

const SLICES: usize = 3;
const PER_SLICE: usize = 2000;
/// Added to every reply in the second measurement.
const LINK_DELAY: Duration = Duration::from_micros(250);

async fn measure(client: &redlease::Client, out: &mut Vec<Duration>) -> redlease::Result<()> {
    let lock = client.lock("latency");
    for _ in 0..PER_SLICE {
        let started = Instant::now();
        let guard = lock.acquire().await?;
        guard.release().await?;
        out.push(started.elapsed());
    }
    Ok(())
}

/// Nearest-rank percentile `p` (1..=100) of a sorted, non-empty sample.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (p * sorted.len()).div_ceil(100);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let single_server = redlease_local::RedisServer::start()?;
    let nodes = redlease_local::Nodes::start(5)?;
    compare("over loopback", &[single_server.url()], &nodes.urls()).await?;

    let single_proxy = redlease_local::Proxy::start(single_server.port())?;
    let node_proxies = nodes
        .servers()
        .iter()
        .map(|s| redlease_local::Proxy::start(s.port()))
        .collect::<Result<Vec<_>, _>>()?;
    for proxy in std::iter::once(&single_proxy).chain(&node_proxies) {
        proxy.delay_replies(LINK_DELAY);
    }
    let node_urls: Vec<String> = node_proxies
        .iter()
        .map(redlease_local::Proxy::url)
        .collect();
    compare(
        &format!("every reply delayed {LINK_DELAY:?} by a proxy"),
        &[single_proxy.url()],
        &node_urls,
    )
    .await
}

/// One Redis at `single[0]` against a quorum over `quorum`, in alternating slices.
async fn compare(
    label: &str,
    single: &[String],
    quorum: &[String],
) -> Result<(), Box<dyn std::error::Error>> {
    let single = redlease::Client::connect(&single[0]).await?;
    let quorum = redlease::Client::quorum(quorum).await?;
    // Warm up: scripts loaded, connections up.
    let (mut warm, mut single_times, mut quorum_times) = (Vec::new(), Vec::new(), Vec::new());
    measure(&single, &mut warm).await?;
    measure(&quorum, &mut warm).await?;
    for _ in 0..SLICES {
        measure(&single, &mut single_times).await?;
        measure(&quorum, &mut quorum_times).await?;
    }
    println!(
        "uncontended acquire + release, {label}: {} pairs each, {SLICES} alternating slices",
        SLICES * PER_SLICE
    );
    println!("  deployment        p50       p99    pairs/s");
    let mut p50s = Vec::new();
    for (name, times) in [
        ("one Redis", &mut single_times),
        ("quorum of 5", &mut quorum_times),
    ] {
        times.sort();
        let total: Duration = times.iter().sum();
        let p50 = percentile(times, 50);
        p50s.push(p50);
        println!(
            "  {name:<12} {:>6}µs {:>6}µs {:>10.0}",
            p50.as_micros(),
            percentile(times, 99).as_micros(),
            times.len() as f64 / total.as_secs_f64()
        );
    }
    println!(
        "  quorum / single p50: {:.2}x\n",
        p50s[1].as_secs_f64() / p50s[0].as_secs_f64()
    );
    Ok(())
}
