//! Shared set-up of the integration tests: a private redis-server per test, a client on
//! it, and a plain redis-rs connection for looking behind the library's back.
#![allow(
    dead_code,
    unreachable_pub,
    clippy::unwrap_used,
    clippy::panic,
    clippy::match_wild_err_arm
)]

pub mod accounts;
pub mod acl;
#[cfg(feature = "cluster")]
pub mod cluster;
pub mod gauge;
pub mod prim;
pub mod replication;
#[cfg(feature = "sentinel")]
pub mod sentinel;

use std::future::Future;
use std::time::Duration;

use redis::AsyncCommands as _;
use redlease::{Client, Retry};
use redlease_local::{RedisServer, Reply};

/// Bound on any single test step, so that a bug shows up as a failure, not a hang.
pub const STEP: Duration = Duration::from_secs(30);

/// Writes the library's logs to stderr when `REDLEASE_TEST_LOG` holds a filter (for
/// instance `redlease=debug`): for reading what a failing test's clients did.
pub fn trace_if_asked() {
    if let Ok(filter) = std::env::var("REDLEASE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot start redis-server: {e}"),
    }
}

pub async fn client(server: &RedisServer) -> Client {
    match Client::connect(&server.url()).await {
        Ok(c) => c,
        Err(e) => panic!("cannot connect to {}: {e:?}", server.url()),
    }
}

/// The user of the clients' URL of `server` (`redis://user:password@...`), or `default`.
pub fn url_user(server: &RedisServer) -> String {
    let url = server.url();
    url.split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(credentials, _)| credentials.split(':').next())
        .unwrap_or("default")
        .to_owned()
}

/// A plain connection that bypasses the library.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let c = redis::Client::open(server.admin_url()).unwrap();
    c.get_multiplexed_async_connection().await.unwrap()
}

/// Awaits `f`, failing the test if it takes longer than [`STEP`] (a hang detector, not a
/// speed assertion).
pub async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    match tokio::time::timeout(STEP, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} did not finish within {STEP:?}"),
    }
}

/// Re-reads `check` until it holds, for states that Redis reaches in the background (a
/// spawned clean-up, a queued waiter). Bounded by [`STEP`].
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    bounded(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Waits until the queue of the lock at `keys` holds `n` places.
pub async fn queued_places(server: &RedisServer, keys: &redlease::LockKeys, n: i64) {
    eventually("the places queued", || async {
        server.query(&["LLEN", keys.queue()]).unwrap() == Reply::Integer(n)
    })
    .await;
}

pub async fn llen(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    conn.llen(key).await.unwrap()
}

pub async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    conn.get(key).await.unwrap()
}

/// Waits until `key` no longer exists (expired, or deleted in the background).
pub async fn until_absent(conn: &redis::aio::MultiplexedConnection, key: &str) {
    eventually(&format!("`{key}` to go away"), || {
        let mut conn = conn.clone();
        async move { get(&mut conn, key).await.is_none() }
    })
    .await;
}

/// How many EVALSHA calls Redis has served (`INFO commandstats`).
pub async fn evalsha_calls(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Every command Redis ran since the last call (scripts' inner calls included, from
/// `INFO commandstats`; the `INFO` and `CONFIG RESETSTAT` of this call left out), then a
/// reset of the counts.
pub async fn commands_run(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let total = info
        .lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter(|l| !l.starts_with("info:") && !l.starts_with("config|"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await
        .unwrap();
    total
}

/// A back-off so long that a waiter relying on polling would time out instead.
pub fn no_polling() -> Retry {
    Retry::new(Duration::from_secs(60), Duration::from_secs(60))
}

/// Subscribers of `channel` on this one server (`PUBSUB NUMSUB`; in a cluster, only those
/// connected to this node).
pub fn subscribers(server: &RedisServer, channel: &str) -> i64 {
    let reply = server.query(&["PUBSUB", "NUMSUB", channel]).unwrap();
    reply
        .array()
        .and_then(|a| a.get(1))
        .and_then(Reply::integer)
        .unwrap_or_else(|| panic!("unexpected PUBSUB NUMSUB reply {reply:?}"))
}

/// `n` copies of this test binary, each running only the ignored test `test` (a child
/// process's part of a test), with `env` set; killed if dropped.
pub fn children(test: &str, n: usize, env: &[(&str, &str)]) -> Vec<tokio::process::Child> {
    let exe = std::env::current_exe().unwrap();
    (0..n)
        .map(|_| {
            tokio::process::Command::new(&exe)
                .args(["--ignored", "--exact", test, "--nocapture"])
                .envs(env.iter().copied())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Waits (bounded by [`STEP`]) for every child and fails the test if one failed.
pub async fn all_succeed(children: Vec<tokio::process::Child>) {
    let statuses = bounded("child processes", async {
        let mut statuses = Vec::new();
        for mut c in children {
            statuses.push(c.wait().await.unwrap());
        }
        statuses
    })
    .await;
    for s in statuses {
        assert!(s.success(), "a child process failed: {s}");
    }
}

/// A quorum client over three fresh nodes (kept alive by the returned handle), with
/// per-node replies bounded tightly so that a dead node costs little.
pub async fn quorum_of_three() -> (redlease_local::Nodes, Client) {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let client = Client::quorum_builder(nodes.urls())
        .response_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    (nodes, client)
}

/// Queues a waiter of `waiter` for the lock `name` that `held` holds, releases `held`, and
/// returns the waiter's guard: the lock handed over through `waiter`'s notifications.
pub async fn handed_over(held: redlease::Guard, waiter: &Client, name: &str) -> redlease::Guard {
    let queued = tokio::spawn({
        let (waiter, name) = (waiter.clone(), name.to_owned());
        async move {
            waiter
                .lock(name)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    bounded("the waiter queues", async {
        while waiter.stats().waiting == 0 {
            tokio::task::yield_now().await;
        }
    })
    .await;
    held.release().await.unwrap();
    bounded("the hand-off", queued).await.unwrap().unwrap()
}

/// Makes the pub/sub links of `server`'s clients go down and stay down while their data
/// connections work, as while a link's reconnection back-off runs after a restart: the
/// clients' user may no longer SUBSCRIBE (scripts still publish) and the links are killed.
/// Returns EVALSHA calls served just after, and the connection that looks on.
pub async fn links_down(server: &RedisServer) -> (u64, redis::aio::MultiplexedConnection) {
    let mut admin = raw(server).await;
    let user = url_user(server);
    let ((), killed): ((), i64) = redis::pipe()
        .atomic()
        .cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("-subscribe")
        .cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(killed >= 1, "no pub/sub link to cut");
    (evalsha_calls(&mut admin).await, admin)
}

/// Waits until a waiter tried again after its link went down (an attempt after `calls`),
/// and the release then cannot reach it.
pub async fn retried_after((calls, admin): (u64, redis::aio::MultiplexedConnection)) {
    eventually("the waiter to try again without its link", || {
        let mut admin = admin.clone();
        async move { evalsha_calls(&mut admin).await > calls }
    })
    .await;
}
