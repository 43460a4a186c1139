//! The read-write lock against real Redis: a writer never overlaps a reader or another
//! writer while readers do overlap (tasks and OS processes, single node, Cluster, quorum),
//! a queued writer is not starved by a stream of readers, queued readers are granted
//! together, upgrade is refused at once, downgrade works.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, eventually, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Owner};

const NAME: &str = "config";
/// Readers and writers inside right now, counted on the admin side.
const READERS: &str = "test:readers";
const WRITERS: &str = "test:writers";
/// Violations seen, and the most readers seen together.
const BAD: &str = "test:bad";
const MOST_READERS: &str = "test:most-readers";
const CHILD_URL: &str = "REDLEASE_TEST_RW_URL";
const CHILD_RESOURCE: &str = "REDLEASE_TEST_RW_RESOURCE";

/// Enters as a reader (`write` false) or writer, checks who else is inside, leaves.
async fn section(conn: &mut redis::aio::MultiplexedConnection, write: bool) {
    if write {
        let writers: i64 = conn.incr(WRITERS, 1).await.unwrap();
        let readers: i64 = conn.get(READERS).await.unwrap();
        if writers != 1 || readers != 0 {
            let _: i64 = conn
                .rpush(
                    BAD,
                    format!("writer with {writers} writers, {readers} readers"),
                )
                .await
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        let _: i64 = conn.decr(WRITERS, 1).await.unwrap();
    } else {
        let readers: i64 = conn.incr(READERS, 1).await.unwrap();
        let writers: i64 = conn.get(WRITERS).await.unwrap();
        if writers != 0 {
            let _: i64 = conn
                .rpush(BAD, format!("reader with {writers} writers"))
                .await
                .unwrap();
        }
        let _: i64 = redis::cmd("EVAL")
            .arg("local m = tonumber(redis.call('GET', KEYS[1]) or '0'); if tonumber(ARGV[1]) > m then redis.call('SET', KEYS[1], ARGV[1]) end; return 0")
            .arg(1)
            .arg(MOST_READERS)
            .arg(readers)
            .query_async(conn)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
        let _: i64 = conn.decr(READERS, 1).await.unwrap();
    }
}

/// `sections` sections, one write in three, each checked by [`section`].
async fn worker(client: Client, resource: String, sections: u32, seed: u32) {
    let mut conn = redis::Client::open(resource)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lock = client.rwlock(NAME).wait(Duration::from_secs(60));
    let mut last = 0;
    for i in 0..sections {
        let write = (i + seed).is_multiple_of(3);
        let fence = if write {
            let guard = lock.write().acquire().await.unwrap();
            section(&mut conn, true).await;
            let fence = guard.fencing_token().get();
            guard.release().await.unwrap();
            fence
        } else {
            let guard = lock.read().acquire().await.unwrap();
            section(&mut conn, false).await;
            let fence = guard.fencing_token().get();
            guard.release().await.unwrap();
            fence
        };
        assert!(
            fence > last,
            "this holder's tokens went from {last} to {fence}"
        );
        last = fence;
    }
}

async fn run_workers(client: &Client, resource: &str, tasks: u32, sections: u32) {
    let handles: Vec<_> = (0..tasks)
        .map(|seed| tokio::spawn(worker(client.clone(), resource.to_owned(), sections, seed)))
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

/// No violation was recorded, and readers did overlap.
async fn check(conn: &mut redis::aio::MultiplexedConnection) {
    let bad: Vec<String> = conn.lrange(BAD, 0, -1).await.unwrap();
    assert!(bad.is_empty(), "exclusion broken: {bad:?}");
    let most: i64 = conn.get(MOST_READERS).await.unwrap();
    assert!(most >= 2, "readers never overlapped (at most {most})");
}

async fn reset(conn: &mut redis::aio::MultiplexedConnection) {
    let () = conn.set(READERS, 0).await.unwrap();
    let () = conn.set(WRITERS, 0).await.unwrap();
}

/// Run by `writers_exclude_everyone_and_readers_share_across_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of writers_exclude_everyone_and_readers_share_across_processes"]
async fn rwlock_child_workers() {
    let (Ok(url), Ok(resource)) = (std::env::var(CHILD_URL), std::env::var(CHILD_RESOURCE)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    run_workers(&client, &resource, 4, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_exclude_everyone_and_readers_share_across_processes() {
    const PROCESSES: usize = 4;
    let server = server();
    let mut conn = raw(&server).await;
    reset(&mut conn).await;
    let children = common::children(
        "rwlock_child_workers",
        PROCESSES,
        &[
            (CHILD_URL, &server.url()),
            (CHILD_RESOURCE, &server.admin_url()),
        ],
    );
    common::all_succeed(children).await;
    check(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_writer_stops_new_readers_and_queued_readers_come_in_together() {
    let server = server();
    let other = client(&server).await;
    let client = client(&server).await;
    let lock = client.rwlock("fair").wait(Duration::from_secs(30));
    let conn = raw(&server).await;
    let queue = lock.keys().unwrap().queue().to_owned();
    let queued = |n: i64| {
        let conn = conn.clone();
        let queue = queue.clone();
        async move {
            eventually("the waiter to queue", || {
                let mut conn = conn.clone();
                let queue = queue.clone();
                async move { common::llen(&mut conn, &queue).await == n }
            })
            .await;
        }
    };

    let first_reader = lock.read().acquire().await.unwrap();
    let writer = tokio::spawn({
        let lock = other.rwlock("fair").wait(Duration::from_secs(30));
        async move { lock.write().acquire().await.unwrap() }
    });
    queued(1).await;
    // A stream of new readers does not get past the queued writer.
    for _ in 0..5 {
        assert!(
            lock.read().try_acquire().await.unwrap().is_none(),
            "a new reader overtook the queued writer"
        );
    }
    // Two readers queue behind the writer.
    let late_readers: Vec<_> = (0..2)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move { lock.read().acquire().await.unwrap() })
        })
        .collect();
    queued(3).await;
    first_reader.release().await.unwrap();
    let writer = bounded("the writer", writer).await.unwrap();
    assert!(
        lock.read().try_acquire().await.unwrap().is_none(),
        "a reader came in beside the writer"
    );
    writer.release().await.unwrap();
    // The two queued readers are granted together: both hold at once.
    let mut readers = Vec::new();
    for r in late_readers {
        readers.push(bounded("a queued reader", r).await.unwrap());
    }
    assert!(readers.iter().all(redlease::Guard::is_held));
    for r in readers {
        r.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_is_refused_at_once_and_downgrade_lets_readers_in() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("grades").wait(Duration::from_secs(30));
    let owner = Owner::new();
    owner
        .clone()
        .scope(async {
            let read = lock.read().acquire().await.unwrap();
            let started = tokio::time::Instant::now();
            match lock.write().acquire().await {
                Err(e @ Error::Upgrade { .. }) => {
                    assert!(e.to_string().contains("cannot be upgraded"), "{e}");
                }
                other => panic!("expected Upgrade, got {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "the upgrade was waited for instead of refused"
            );
            // A read re-entered by its owner shares the outer hold.
            let again = lock.read().acquire().await.unwrap();
            assert_eq!(again.fencing_token(), read.fencing_token());
            again.release().await.unwrap();
            read.release().await.unwrap();
        })
        .await;

    let write = lock.write().acquire().await.unwrap();
    let token = write.fencing_token();
    assert!(lock.read().try_acquire().await.unwrap().is_none());
    let read = write.downgrade().await.unwrap();
    assert_eq!(read.fencing_token(), token, "the downgrade keeps the token");
    let other_reader = lock
        .read()
        .try_acquire()
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("a reader comes in after the downgrade"));
    assert!(
        lock.write().try_acquire().await.unwrap().is_none(),
        "a writer came in beside the downgraded reader"
    );
    other_reader.release().await.unwrap();
    read.release().await.unwrap();
    let write = lock.write().try_acquire().await.unwrap();
    assert!(write.is_some(), "free again once both readers left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_holding_write_reads_inside_it() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("nested");
    lock.write()
        .run(async |write| {
            // A read by the writing owner re-enters the write hold.
            let read = lock.read().acquire().await?;
            assert_eq!(read.fencing_token(), write.fencing_token());
            read.release().await?;
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_writers_exclude_and_readers_share() {
    let cluster = redlease_local::Cluster::start().unwrap();
    let client = bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap();
    // The counters live on a server of their own.
    let resource = server();
    let mut conn = raw(&resource).await;
    reset(&mut conn).await;
    bounded(
        "workers",
        run_workers(&client, &resource.admin_url(), 8, 12),
    )
    .await;
    check(&mut conn).await;
}

/// A reader holds; a writer waits and keeps a place without a hand-off (a Cluster, or
/// polling), which stops every later reader until the writer had its turn.
async fn a_waiting_writer_stops_new_readers(client: &Client, name: &str) {
    let lock = client.rwlock(name).wait(Duration::from_secs(30));
    let first_reader = lock.read().acquire().await.unwrap();
    let writer = tokio::spawn({
        let lock = lock.clone();
        async move { lock.write().acquire().await.unwrap() }
    });
    // Once the writer keeps its place, new readers stay out.
    eventually("the writer to keep a place", || {
        let lock = lock.clone();
        async move {
            match lock.read().try_acquire().await.unwrap() {
                Some(reader) => {
                    reader.release().await.unwrap();
                    false
                }
                None => true,
            }
        }
    })
    .await;
    for _ in 0..5 {
        assert!(
            lock.read().try_acquire().await.unwrap().is_none(),
            "a new reader overtook the waiting writer"
        );
    }
    first_reader.release().await.unwrap();
    let writer = bounded("the writer", writer).await.unwrap();
    writer.release().await.unwrap();
    let reader = lock.read().try_acquire().await.unwrap();
    assert!(reader.is_some(), "readers come in again after the writer");
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_cluster_writer_stops_new_readers() {
    let cluster = redlease_local::Cluster::start().unwrap();
    let client = bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap();
    a_waiting_writer_stops_new_readers(&client, "cluster-fair").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_polling_writer_stops_new_readers() {
    let server = server();
    let client = Client::builder(&server.url())
        .notifications(redlease::Notifications::Polling)
        .connect()
        .await
        .unwrap();
    a_waiting_writer_stops_new_readers(&client, "polling-fair").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_writers_exclude_and_readers_share() {
    let (_nodes, client) = common::quorum_of_three().await;
    let resource = server();
    let mut conn = raw(&resource).await;
    reset(&mut conn).await;
    bounded(
        "workers",
        run_workers(&client, &resource.admin_url(), 8, 12),
    )
    .await;
    check(&mut conn).await;
    // A write downgraded over the quorum lets a reader in and keeps writers out.
    let lock = client.rwlock(NAME);
    let read = lock
        .write()
        .acquire()
        .await
        .unwrap()
        .downgrade()
        .await
        .unwrap();
    let reader = lock.read().try_acquire().await.unwrap();
    assert!(
        reader.is_some(),
        "a reader comes in after a quorum downgrade"
    );
    assert!(lock.write().try_acquire().await.unwrap().is_none());
    drop(reader);
    read.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_write_hold_is_not_downgraded_under_its_outer_writer() {
    let server = server();
    let client = client(&server).await;
    let lock = client.rwlock("nested-downgrade");
    Owner::new()
        .scope(async {
            let outer = lock.write().acquire().await.unwrap();
            let inner = lock.write().acquire().await.unwrap();
            match inner.downgrade().await {
                Err(e @ Error::NestedDowngrade { .. }) => {
                    assert!(e.to_string().contains("nested"), "{e}");
                }
                other => panic!("expected NestedDowngrade, got {other:?}"),
            }
            assert!(
                lock.read()
                    .owner(&Owner::new())
                    .try_acquire()
                    .await
                    .unwrap()
                    .is_none(),
                "a reader came in beside the outer writer"
            );
            // Alone again, the outer hold downgrades.
            let read = outer.downgrade().await.unwrap();
            let other = lock
                .read()
                .owner(&Owner::new())
                .try_acquire()
                .await
                .unwrap();
            assert!(other.is_some(), "a reader comes in after the downgrade");
            read.release().await.unwrap();
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_clash_over_a_quorum_is_a_clear_error_not_an_endless_wait() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let client = Client::quorum(nodes.urls()).await.unwrap();
    let lock = client.lock("taken").acquire().await.unwrap();
    let started = tokio::time::Instant::now();
    let result = bounded(
        "the clash",
        client
            .rwlock("taken")
            .wait(redlease::Wait::Forever)
            .write()
            .acquire(),
    )
    .await;
    assert!(
        matches!(result, Err(Error::WrongType { .. })),
        "expected WrongType, got {result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    lock.release().await.unwrap();
}
