//! Liveness: no lock held by nobody, no wait past its bound. Each test is an everyday event
//! (a cancelled future, a killed connection, a short outage, a program that ends) after
//! which the lock must be free again long before its TTL, or a wait must end in time.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, client, eventually, get, no_polling, prim, raw, server};
use redlease::{Client, Error, Notifications, Owner};
use std::sync::Arc;

use redlease_local::{Proxy, RedisServer, Reply};

/// A lease far longer than any test: a lock left behind would outlive the test.
const LONG: Duration = Duration::from_secs(60);

/// How long a lock left behind may take to be given back in the background: far below
/// [`LONG`], generous for a loaded 2-CPU machine.
const GIVE_BACK: Duration = Duration::from_secs(10);

/// Calls of `command` Redis has served so far (`INFO commandstats`, e.g. `evalsha` or
/// `script|load`).
fn calls(server: &RedisServer, command: &str) -> u64 {
    command_stat(server, command, "calls")
}

/// The `field` count of `command` in `INFO commandstats` (`calls`, `failed_calls`).
fn command_stat(server: &RedisServer, command: &str, field: &str) -> u64 {
    let reply = server.query(&["INFO", "commandstats"]).unwrap();
    let info = reply.text().unwrap_or_default();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|pair| pair.strip_prefix(field)?.strip_prefix('='))
        })
        .map_or(0, |n| n.parse().unwrap())
}

async fn until_calls(server: &RedisServer, command: &str, at_least: u64) {
    until_stat(server, command, "calls", at_least).await;
}

async fn until_stat(server: &RedisServer, command: &str, field: &str, at_least: u64) {
    eventually(&format!("{at_least} {field} of {command}"), || async {
        command_stat(server, command, field) >= at_least
    })
    .await;
}

/// Whether `key` exists, asked over a fresh connection.
fn exists(server: &RedisServer, key: &str) -> bool {
    !matches!(server.query(&["GET", key]).unwrap(), Reply::Nil)
}

/// Waits (at most [`GIVE_BACK`]) until `key` is gone; fails when it is still there.
async fn given_back(conn: &redis::aio::MultiplexedConnection, key: &str) {
    let gone = tokio::time::timeout(GIVE_BACK, async {
        while get(&mut conn.clone(), key).await.is_some() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "`{key}` was still held {GIVE_BACK:?} later: a lock held by nobody until its ttl"
    );
}

async fn client_via(proxy: &Proxy, notifications: Notifications) -> Client {
    Client::builder(&proxy.url())
        .notifications(notifications)
        .connect()
        .await
        .unwrap()
}

/// Item 1: `run` dropped while its release is on the way (a `select!` against a timeout
/// that fires as the work ends) must still free the lock.
#[tokio::test]
async fn a_run_dropped_during_its_release_still_frees_the_lock() {
    let server = server();
    let proxy = Arc::new(Proxy::start(server.port()).unwrap());
    let client = client_via(&proxy, Notifications::PubSub).await;
    let conn = raw(&server).await;
    let key = client.lock("cut-release").keys().unwrap().key().to_owned();
    // Scripts loaded: the acquisition below runs at once, only the release meets NOSCRIPT.
    let warm = client.lock("cut-release").acquire().await.unwrap();
    warm.release().await.unwrap();
    let refused = command_stat(&server, "evalsha", "failed_calls");
    let run = {
        let client = client.clone();
        let proxy = Arc::clone(&proxy);
        let mut flush = raw(&server).await;
        tokio::spawn(async move {
            client
                .lock("cut-release")
                .ttl(LONG)
                .run(async |_| {
                    // The release will meet NOSCRIPT and a slow link: it takes two round
                    // trips (EVALSHA, then EVAL with SCRIPT LOAD) of 300 ms each.
                    let () = redis::cmd("SCRIPT")
                        .arg("FLUSH")
                        .query_async(&mut flush)
                        .await
                        .unwrap();
                    proxy.delay_replies(Duration::from_millis(300));
                    Ok::<_, Error>(())
                })
                .await
        })
    };
    // The release's EVALSHA met NOSCRIPT, whose reply is still on its way: it has not sent
    // its EVAL yet. Cancel it.
    until_stat(&server, "evalsha", "failed_calls", refused + 1).await;
    run.abort();
    let _ = run.await;
    assert!(
        get(&mut conn.clone(), &key).await.is_some(),
        "the release was not cut off: the test proves nothing"
    );
    proxy.delay_replies(Duration::ZERO);
    given_back(&conn, &key).await;
}

/// Item 2: a cancelled `acquire` whose later attempt took the lock (its reply still on the
/// way) gives it back, also when it polls.
#[tokio::test]
async fn a_cancelled_polling_acquire_gives_back_what_its_later_attempt_took() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let holder_client = client(&server).await;
    let waiter_client = client_via(&proxy, Notifications::Polling).await;
    let conn = raw(&server).await;
    let key = holder_client
        .lock("orphan")
        .keys()
        .unwrap()
        .key()
        .to_owned();
    let holder = holder_client
        .lock("orphan")
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    proxy.delay_replies(Duration::from_millis(300));
    let before = calls(&server, "evalsha");
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("orphan")
            .ttl(LONG)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    // The waiter's first attempt found the lock busy (its reply is on the way back).
    until_calls(&server, "evalsha", before + 1).await;
    holder.release().await.unwrap();
    // Its next attempt takes the free lock; the reply is again 300 ms away. Cancel then.
    eventually("the waiter's second attempt to take the lock", || async {
        get(&mut conn.clone(), &key).await.is_some()
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    proxy.delay_replies(Duration::ZERO);
    given_back(&conn, &key).await;
}

/// Item 3: an auto-renewed guard extended to a shorter lease is renewed on the shorter
/// lease's schedule.
#[tokio::test]
async fn a_guard_extended_to_a_shorter_lease_is_renewed_on_its_schedule() {
    let server = server();
    let client = client(&server).await;
    let mut guard = client
        .lock("shorter")
        .ttl(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_millis(600)).await.unwrap();
    let kept = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    assert!(
        kept.is_err(),
        "the lease extended to 600 ms was lost: renewal kept the 30 s schedule"
    );
    assert!(guard.is_held());
    assert!(client.stats().renewal_round_trips > 0);
    guard.release().await.unwrap();
}

/// Item 6: two tasks of one owner: one waits for a busy lock; the other's `try_acquire`
/// and short `acquire` keep their own bounds instead of queueing behind it.
#[tokio::test]
async fn tasks_of_one_owner_keep_their_own_bounds() {
    let server = server();
    let holder_client = client(&server).await;
    let client = client(&server).await;
    let _holder = holder_client
        .lock("shared-owner")
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let owner = Owner::new();
    let long_wait = {
        let lock = client
            .lock("shared-owner")
            .owner(&owner)
            .wait(Duration::from_secs(8));
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the first task to wait", || async {
        client.stats().waiting == 1
    })
    .await;

    let started = Instant::now();
    let tried = bounded(
        "try_acquire",
        client.lock("shared-owner").owner(&owner).try_acquire(),
    )
    .await
    .unwrap();
    assert!(tried.is_none());
    let try_took = started.elapsed();

    let started = Instant::now();
    let waited = bounded(
        "acquire",
        client
            .lock("shared-owner")
            .owner(&owner)
            .wait(Duration::from_millis(200))
            .acquire(),
    )
    .await;
    assert!(matches!(waited, Err(Error::Timeout { .. })), "{waited:?}");
    let acquire_took = started.elapsed();
    // Liveness bounds with a wide margin; the bug made both last the other task's 8 s.
    assert!(
        try_took < Duration::from_secs(3),
        "try_acquire took {try_took:?}"
    );
    assert!(
        acquire_took < Duration::from_secs(3),
        "a 200 ms wait took {acquire_took:?}"
    );
    long_wait.abort();
}

/// Item 7: a release whose connection was killed just before is sent again after the
/// reconnect.
#[tokio::test]
async fn a_release_meeting_a_killed_connection_is_sent_again() {
    let server = server();
    let client = client(&server).await;
    let guard = client.lock("killed").ttl(LONG).acquire().await.unwrap();
    let key = client.lock("killed").keys().unwrap().key().to_owned();
    let killed = server.query(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();
    assert!(
        matches!(killed, Reply::Integer(n) if n > 0),
        "no connection was killed: {killed:?}"
    );
    guard.release().await.unwrap();
    assert!(!exists(&server, &key), "the release did not happen");
}

/// Item 8: an outage shorter than the wait is ridden out; `try_acquire` still fails fast,
/// and a Redis that stays down fails no later than the wait.
#[tokio::test]
async fn a_restart_shorter_than_the_wait_is_ridden_out() {
    let mut server = server();
    let client = client(&server).await;
    // Connected and used once, so the outage meets a live connection.
    client.lock("warm").try_acquire().await.unwrap();
    server.kill();

    let tried = bounded("try_acquire while down", client.lock("down").try_acquire()).await;
    assert!(
        matches!(&tried, Err(e) if e.is_connection()),
        "try_acquire while Redis is down: {tried:?}"
    );
    let started = Instant::now();
    let short = bounded(
        "a 1 s wait while down",
        client.lock("down").wait(Duration::from_secs(1)).acquire(),
    )
    .await;
    let short_took = started.elapsed();
    assert!(
        matches!(&short, Err(e) if e.is_connection()),
        "a wait that ends while Redis is down returns the connection error: {short:?}"
    );
    assert!(
        short_took >= Duration::from_secs(1),
        "gave up after {short_took:?}, before its 1 s wait ended"
    );
    assert!(
        short_took < Duration::from_secs(3),
        "a 1 s wait took {short_took:?}"
    );

    let waiter = {
        let lock = client.lock("down").wait(Duration::from_secs(10));
        tokio::spawn(async move { lock.acquire().await })
    };
    // The outage itself: Redis stays down this long (a fault, not a synchronisation).
    tokio::time::sleep(Duration::from_secs(1)).await;
    server.restart().unwrap();
    let guard = bounded("the waiter across the restart", waiter)
        .await
        .unwrap()
        .unwrap();
    guard.release().await.unwrap();
}

/// Item 9: a client whose first runtime ended while its renewal scheduler slept renews
/// again in the next runtime (a `static` client shared by `#[tokio::test]`s).
#[test]
fn renewal_starts_again_in_a_new_runtime() {
    let server = server();
    let first = tokio::runtime::Runtime::new().unwrap();
    let client = first.block_on(client(&server));
    // The scheduler task sleeps, due in 10 s, as its runtime ends.
    let guard = first
        .block_on(client.lock("sleeping").ttl(LONG).acquire())
        .unwrap();
    drop(first);
    drop(guard);

    let second = tokio::runtime::Runtime::new().unwrap();
    let before = client.stats().renewal_round_trips;
    let outcome = second.block_on(
        client
            .lock("renewed")
            .ttl(Duration::from_millis(600))
            .wait(Duration::from_secs(10))
            .run(async |_| {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<_, Error>(())
            }),
    );
    assert!(
        outcome.is_ok(),
        "a 600 ms lease over a 2 s section: {outcome:?}"
    );
    assert!(client.stats().renewal_round_trips > before);
}

/// Item 10: a program that ends right after dropping its guard (or while holding one)
/// leaves no lock behind when it shuts its client down.
#[test]
fn shutdown_gives_back_every_lease_before_the_runtime_ends() {
    let server = server();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (held, dropped) = runtime.block_on(async {
        let client = client(&server).await;
        let held = client.lock("held").ttl(LONG).acquire().await.unwrap();
        let dropped = client.lock("dropped").ttl(LONG).acquire().await.unwrap();
        let keys = (
            client.lock("held").keys().unwrap().key().to_owned(),
            client.lock("dropped").keys().unwrap().key().to_owned(),
        );
        drop(dropped);
        client.shutdown().await.unwrap();
        assert!(!held.is_held());
        held.release().await.unwrap();
        keys
    });
    drop(runtime);
    for key in [held, dropped] {
        assert!(!exists(&server, &key), "`{key}` still held");
    }
}

/// Item 10: `run` under way when its client shuts down is cancelled with `ShutDown`.
#[tokio::test]
async fn shutdown_cancels_work_under_run() {
    let server = server();
    let client = client(&server).await;
    let conn = raw(&server).await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let run = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .lock("work")
                .ttl(LONG)
                .run(async |_| {
                    let _ = started_tx.send(());
                    std::future::pending::<()>().await;
                    Ok::<_, Error>(())
                })
                .await
        })
    };
    started_rx.await.unwrap();
    client.shutdown().await.unwrap();
    let outcome = bounded("run after shutdown", run).await.unwrap();
    assert!(
        matches!(outcome, Err(Error::ShutDown { .. })),
        "{outcome:?}"
    );
    let key = client.lock("work").keys().unwrap().key().to_owned();
    assert_eq!(get(&mut conn.clone(), &key).await, None);
}

/// Item 10: a client shut down while one of its acquisitions waits behind another
/// client's holder withdraws that waiter's queue place before `shutdown` returns (the
/// waiting task, still alive, ends with `ShutDown`). Before: the dead place stayed in the
/// queue for minutes (the queue's linger), shown to operators, until a hand-off skipped it.
#[tokio::test]
async fn shutdown_withdraws_the_queue_places_of_waiting_acquisitions() {
    let server = server();
    let ops = Client::connect(&server.admin_url()).await.unwrap();
    for prim in prim::ALL {
        let name = format!("queued-{prim:?}");
        let keys = prim.keys(&name);
        let holder = client(&server).await;
        let waiting = client(&server).await;
        let held = prim.acquire(&holder, &name, Duration::ZERO).await.unwrap();
        let waiter = tokio::spawn({
            let (waiting, name) = (waiting.clone(), name.clone());
            async move { prim.acquire(&waiting, &name, LONG).await.map(|_| ()) }
        });
        common::queued_places(&server, &keys, 1).await;

        waiting.shutdown().await.unwrap();
        // At once: a program ends right after its shutdown, its waiting task with it.
        let queue = server.query(&["LLEN", keys.queue()]).unwrap();
        let table = server.query(&["HLEN", keys.waiters()]).unwrap();
        let seen = ops.inspect(&name).await.unwrap().snapshot;
        assert!(
            queue == Reply::Integer(0) && table == Reply::Integer(0) && seen.waiters.is_empty(),
            "{prim:?}: a place left after shutdown (queue {queue:?}, table {table:?}, inspect {:?})",
            seen.waiters,
        );
        let outcome = bounded("the waiter after shutdown", waiter).await.unwrap();
        assert!(
            matches!(outcome, Err(Error::ShutDown { .. })),
            "{prim:?}: {outcome:?}"
        );
        held.release().await.unwrap();
    }
}

/// Item 10: a blocking guard dropped just before the program ends releases the lock
/// before the drop returns.
#[cfg(feature = "blocking")]
#[test]
fn a_dropped_blocking_guard_is_released_before_the_drop_returns() {
    let server = server();
    let client = redlease::blocking::Client::connect(&server.url()).unwrap();
    let key = client.lock("sync").keys().unwrap().key().to_owned();
    let guard = client
        .lock("sync")
        .ttl(LONG)
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .unwrap();
    drop(guard);
    drop(client);
    assert!(!exists(&server, &key), "`{key}` still held");
}

/// Item 2 over a quorum, with default settings: a waiter aborted while the replies to its
/// attempt are on their way leaves no token on the nodes that granted it (tokens of
/// abandoned attempts, one here and one there, keep everyone from a majority until their
/// ttl).
#[tokio::test]
async fn a_cancelled_quorum_acquire_gives_back_its_grants() {
    let nodes = redlease_local::Nodes::start(5).unwrap();
    let proxies: Vec<Arc<Proxy>> = nodes
        .servers()
        .iter()
        .map(|server| Arc::new(Proxy::start(server.port()).unwrap()))
        .collect();
    let holder_client = Client::quorum(nodes.urls()).await.unwrap();
    let waiter_client = Client::quorum(proxies.iter().map(|p| p.url()))
        .await
        .unwrap();
    let key = holder_client
        .lock("q-orphan")
        .keys()
        .unwrap()
        .key()
        .to_owned();
    let holder = holder_client
        .lock("q-orphan")
        .ttl(LONG)
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let client = waiter_client.clone();
        tokio::spawn(async move {
            client
                .lock("q-orphan")
                .ttl(LONG)
                .wait(Duration::from_secs(30))
                .retry(no_polling())
                .acquire()
                .await
        })
    };
    eventually("the waiter to listen for the release", || async {
        waiter_client.stats().waiting == 1
    })
    .await;
    for proxy in &proxies {
        proxy.delay_replies(Duration::from_millis(500));
    }
    holder.release().await.unwrap();
    // The release notice woke the waiter (500 ms late): its attempt took the lock on the
    // nodes, and their replies are 500 ms away. Cancel it there.
    eventually("the waiter's attempt to take a majority", || async {
        nodes
            .servers()
            .iter()
            .filter(|server| exists(server, &key))
            .count()
            >= 3
    })
    .await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    for proxy in &proxies {
        proxy.delay_replies(Duration::ZERO);
    }
    let gone = tokio::time::timeout(GIVE_BACK, async {
        while nodes.servers().iter().any(|server| exists(server, &key)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(
        gone.is_ok(),
        "the cancelled waiter's token stayed on nodes {:?} until its ttl",
        nodes
            .servers()
            .iter()
            .map(|server| exists(server, &key))
            .collect::<Vec<_>>()
    );
}
