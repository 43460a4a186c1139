//! The blocking API on every thread that is not polling an async task: a
//! `tokio::task::spawn_blocking` thread of an application's runtime included, where a
//! dropped guard still releases before its drop returns; guards that ask Redis whether
//! they hold, `std::time::Instant` validity, and the quorum constructors.
#![cfg(feature = "blocking")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use redis::Commands as _;
use redlease::blocking::Client;
use redlease::{Error, FencingToken, Wait};
use redlease_local::RedisServer;

fn admin(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.admin_url())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn the_blocking_api_works_on_a_spawn_blocking_thread() {
    let server = common::server();
    let url = server.url();
    let app = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (token, released) = app
        .block_on(app.spawn_blocking(move || {
            let client = Client::connect(&url)?;
            let guard = client.lock("from-spawn-blocking").acquire()?;
            assert!(guard.owned()?);
            assert!(guard.valid_until() > std::time::Instant::now());
            let token = guard.fencing_token();
            let total = client
                .lock("run-there")
                .run(|g| Ok::<_, Error>(g.fencing_token()))?;
            assert!(total > FencingToken::new(0));
            // Dropped here, on this thread: released before the drop returns.
            drop(guard);
            let released = client
                .lock("from-spawn-blocking")
                .wait(Wait::No)
                .try_acquire()?
                .is_some();
            client.shutdown()?;
            Ok::<_, Error>((token, released))
        }))
        .unwrap()
        .unwrap();
    assert!(token > FencingToken::new(0));
    assert!(released, "the dropped guard released at once");
    // Inside a task of the same runtime it still refuses instead of blocking the worker.
    let refused = app.block_on(async {
        tokio::spawn(async { Client::connect("redis://127.0.0.1:1").map(|_| ()) })
            .await
            .unwrap()
    });
    assert!(matches!(refused, Err(Error::Runtime { .. })), "{refused:?}");
}

#[test]
fn a_blocking_guard_asks_redis_whether_it_holds() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let mut conn = admin(&server);
    let guard = client
        .lock("asked")
        .ttl(Duration::from_secs(5))
        .acquire()
        .unwrap();
    let left = guard.valid_until() - std::time::Instant::now();
    assert!(
        left <= Duration::from_secs(5) && left > Duration::from_secs(4),
        "{left:?}"
    );
    assert!(guard.owned().unwrap());
    let _: () = conn.del("redlease:asked").unwrap();
    assert!(!guard.owned().unwrap());
    assert!(!guard.is_held());
    let token = guard.fencing_token();
    assert!(token > FencingToken::new(0));

    let both = client.multi_lock(["b1", "b2"]).acquire().unwrap();
    assert!(both.owned().unwrap());
    let b1 = both.fencing_token("b1").unwrap();
    both.release().unwrap();

    let leader = client.election("blocking-e").campaign("me").unwrap();
    assert!(leader.owned().unwrap());
    leader.resign().unwrap();
    assert!(b1 > FencingToken::new(0));
}

#[test]
fn a_blocking_quorum_client_has_the_async_constructors() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let client = Client::quorum_builder(nodes.urls())
        .response_timeout(Duration::from_millis(500))
        .prefix("blocking-q:")
        .connect()
        .unwrap();
    let guard = client.lock("job").acquire().unwrap();
    assert!(guard.owned().unwrap());
    // Under the client's prefix, on a majority: the acquisition returns at a majority, and
    // the last node is granted in the background.
    let holding = nodes
        .urls()
        .iter()
        .filter(|url| {
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            conn.exists::<_, bool>("blocking-q:job").unwrap()
        })
        .count();
    assert!(
        holding >= 2,
        "the client's prefix: {holding} of 3 nodes hold the key"
    );
    guard.release().unwrap();
    let plain = Client::quorum(nodes.urls()).unwrap();
    plain.lock("job").acquire().unwrap().release().unwrap();
}

#[test]
fn a_blocking_client_dropped_inside_an_async_task_does_not_panic() {
    let server = common::server();
    let client = Client::connect(&server.url()).unwrap();
    let guard = client
        .lock("dropped-in-a-task")
        .ttl(Duration::from_secs(1))
        .acquire()
        .unwrap();
    let app = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    app.block_on(async move {
        drop(guard);
        drop(client);
    });
    // Whether the background release ran or not, the lock is free within its TTL.
    let next = Client::connect(&server.url()).unwrap();
    let again = next
        .lock("dropped-in-a-task")
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    again.release().unwrap();
}
