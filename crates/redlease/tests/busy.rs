//! A script that keeps Redis busy (`BUSY`): a clear, retryable error without a wait, and
//! retried within a wait until the script ends.
//!
//! This file installs a global log subscriber: the test that needs to know an attempt was
//! refused listens for it in the logs.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{bounded, client, raw, server};
use redlease_local::RedisServer;
use tokio::sync::Notify;

/// Sends the `SPIN` script on its own connection: it keeps Redis busy until `SCRIPT KILL`
/// (or 20 s). Returns once Redis answers `BUSY` to others.
async fn make_busy(server: &RedisServer) -> std::thread::JoinHandle<()> {
    const SPIN: &str = "local s = redis.call('TIME') \
        while true do local t = redis.call('TIME') if t[1] - s[1] > 20 then break end end \
        return 1";
    let conn = raw(server).await;
    // Redis 7.0's name for it; 6.2 knows only the older `lua-time-limit`.
    let set = |name: &'static str| {
        let mut conn = conn.clone();
        async move {
            redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(50)
                .query_async::<()>(&mut conn)
                .await
        }
    };
    if set("busy-reply-threshold").await.is_err() {
        set("lua-time-limit").await.unwrap();
    }
    let url = server.url();
    let spinner = std::thread::spawn(move || {
        let mut spin = redis::Client::open(url).unwrap().get_connection().unwrap();
        // Killed by the test: an error reply is the expected outcome.
        let _ = redis::cmd("EVAL").arg(SPIN).arg(0).exec(&mut spin);
    });
    common::eventually("Redis to answer BUSY", || {
        let mut conn = conn.clone();
        async move {
            let reply: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
            reply.is_err_and(|e| e.code() == Some("BUSY"))
        }
    })
    .await;
    spinner
}

/// Sends `SCRIPT KILL` on a fresh connection (the busy server accepts only that).
fn kill_script(server: &RedisServer) {
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    redis::cmd("SCRIPT").arg("KILL").exec(&mut conn).unwrap();
}

/// Notified when the `busy-waited` lock's acquisition logs that Redis refused an attempt.
fn refused() -> Arc<Notify> {
    static REFUSED: OnceLock<Arc<Notify>> = OnceLock::new();
    Arc::clone(REFUSED.get_or_init(|| {
        let seen = Arc::new(Notify::new());
        let writer = Arc::clone(&seen);
        // Global: a thread-local subscriber races with callsites first hit by other
        // threads, whose cached interest then skips it.
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Watcher(Arc::clone(&writer)))
            .try_init()
            .unwrap();
        seen
    }))
}

/// Signals a formatted log line of a refused attempt on the `busy-waited` lock.
struct Watcher(Arc<Notify>);

impl std::io::Write for Watcher {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let line = String::from_utf8_lossy(data);
        if line.contains("lock=busy-waited") && line.contains("attempt refused for now") {
            self.0.notify_one();
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_busy_script_is_waited_out_not_returned() {
    let server = server();
    let c = client(&server).await;
    let refused = refused();
    let spinner = make_busy(&server).await;

    // Without waiting, the refusal is the answer: a clear, retryable error.
    let err = bounded("try_acquire while busy", c.lock("busy-tried").try_acquire())
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");
    assert!(err.to_string().contains("BUSY"), "{err}");

    // A waiting acquisition keeps trying until the script is killed.
    let lock = c.lock("busy-waited").wait(Duration::from_secs(30));
    let acquiring = tokio::spawn(async move { lock.acquire().await });
    bounded("an attempt refused with BUSY", refused.notified()).await;
    kill_script(&server);
    let guard = bounded("acquire after SCRIPT KILL", acquiring)
        .await
        .unwrap()
        .unwrap();
    assert!(guard.is_held());
    guard.release().await.unwrap();
    spinner.join().unwrap();
}

#[tokio::test]
async fn a_wait_that_ends_while_redis_is_busy_says_so() {
    let server = server();
    let c = client(&server).await;
    let spinner = make_busy(&server).await;
    let err = bounded(
        "a short wait while busy",
        c.lock("busy-short")
            .wait(Duration::from_millis(300))
            .acquire(),
    )
    .await
    .unwrap_err();
    kill_script(&server);
    spinner.join().unwrap();
    assert!(err.is_transient(), "not a plain timeout: {err:?}");
}
