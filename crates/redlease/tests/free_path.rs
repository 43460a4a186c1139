//! Redis commands per uncontended acquire + release of a free name, for each primitive:
//! the deterministic cost BENCHMARKS.md quotes ("Redis commands per uncontended
//! operation"; `cargo run --release -p redlease --example free_path_commands` prints each
//! command). A change that adds a command to a free path fails here: update the bound and
//! BENCHMARKS.md together.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::future::Future;

use redis::aio::MultiplexedConnection;

/// Commands of 5 acquire + release pairs of a free name, after one pair that warms up
/// (scripts loaded, subscriptions made), checked against `per_pair` each.
async fn pairs<G, A, AF, R, RF>(
    conn: &mut MultiplexedConnection,
    what: &str,
    per_pair: u64,
    acquire: A,
    release: R,
) where
    A: Fn() -> AF,
    AF: Future<Output = redlease::Result<G>>,
    R: Fn(G) -> RF,
    RF: Future<Output = redlease::Result<()>>,
{
    release(acquire().await.unwrap()).await.unwrap();
    common::commands_run(conn).await;
    for pair in 0..5 {
        let guard = acquire().await.unwrap();
        release(guard).await.unwrap();
        let run = common::commands_run(conn).await;
        assert_eq!(
            run, per_pair,
            "{what}, pair {pair}: {run} Redis commands for a free acquire + release, \
             {per_pair} expected (BENCHMARKS.md)"
        );
    }
}

#[tokio::test]
async fn each_primitive_takes_and_gives_back_a_free_name_in_a_known_number_of_commands() {
    let server = common::server();
    let client = common::client(&server).await;
    let mut conn = common::raw(&server).await;
    let lock = client.lock("free:lock");
    pairs(
        &mut conn,
        "lock",
        10,
        || lock.acquire(),
        redlease::Guard::release,
    )
    .await;
    let semaphore = client.semaphore("free:semaphore", 3);
    pairs(
        &mut conn,
        "semaphore",
        21,
        || semaphore.acquire(),
        redlease::Permit::release,
    )
    .await;
    let rwlock = client.rwlock("free:rwlock");
    let (read, write) = (rwlock.read(), rwlock.write());
    pairs(
        &mut conn,
        "read",
        22,
        || read.acquire(),
        redlease::ReadGuard::release,
    )
    .await;
    pairs(
        &mut conn,
        "write",
        22,
        || write.acquire(),
        redlease::WriteGuard::release,
    )
    .await;
    let multi = client.multi_lock(["free:a", "free:b"]);
    pairs(
        &mut conn,
        "multi-lock of 2",
        18,
        || multi.acquire(),
        redlease::MultiGuard::release,
    )
    .await;
}
