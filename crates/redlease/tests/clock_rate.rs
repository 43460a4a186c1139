//! A Redis server whose clock runs fast expires keys early against the client's clock:
//! inside the drift allowance (x1.005) nothing is said; outside it (x1.05) the client's
//! estimate from fresh grants says so. The server runs with an `LD_PRELOAD` library that
//! scales its wall clock (`tests/clock/fast_clock.c`, built here with the C compiler).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::path::PathBuf;
use std::time::Duration;

use common::bounded;
use redlease::Client;
use redlease_local::{RedisServer, ServerOptions};
use tokio::time::Instant;

/// The shim, compiled into the test's scratch directory.
fn shim() -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fast_clock.so");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clock/fast_clock.c");
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(source)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `cc` (Debian: gcc): {e}"));
    assert!(status.success(), "cc failed to build {source}");
    out
}

fn server_at_rate(shim: &std::path::Path, rate: &str) -> RedisServer {
    RedisServer::start_with(
        ServerOptions::default()
            .env("LD_PRELOAD", shim.display().to_string())
            .env("FAST_CLOCK_RATE", rate),
    )
    .unwrap_or_else(|e| panic!("cannot start redis-server at clock rate {rate}: {e}"))
}

/// Takes and releases locks for 2.5 s; returns the client's estimate then.
async fn estimate(server: &RedisServer) -> Option<f64> {
    let client = Client::connect(&server.url()).await.unwrap();
    let until = Instant::now() + Duration::from_millis(2500);
    let mut n = 0;
    while Instant::now() < until {
        let guard = bounded("acquire", client.lock(format!("rate-{n}")).acquire())
            .await
            .unwrap();
        bounded("release", guard.release()).await.unwrap();
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    client.server_clock_rate()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_clock_faster_than_the_allowance_is_detected() {
    let shim = shim();
    let fast = server_at_rate(&shim, "1.05");
    let rate = estimate(&fast).await.unwrap();
    assert!(rate > 1.01, "a server clock at x1.05 estimated at {rate}");

    let within = server_at_rate(&shim, "1.005");
    let rate = estimate(&within).await.unwrap();
    assert!(
        rate <= 1.01,
        "a server clock at x1.005 (within the allowance) estimated at {rate}"
    );
}
