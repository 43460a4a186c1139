//! The semaphore against real Redis: at most N holders across tasks and OS processes (and
//! N reached), a killed holder's permit coming back after its ttl, FIFO waiters, renewal,
//! Cluster, and bad input.
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
use redlease::{Client, Error, Renewal};
use tokio::time::Instant;

const SEMAPHORE: &str = "backups";
const PERMITS: u32 = 3;
/// Holders inside right now (INCR on entry, DECR before leaving), kept on the admin side.
const INSIDE: &str = "test:inside";
/// Every value `INSIDE` reached on an entry.
const SEEN: &str = "test:seen";
const CHILD_URL: &str = "REDLEASE_TEST_SEM_URL";
const CHILD_RESOURCE: &str = "REDLEASE_TEST_SEM_RESOURCE";
const CHILD_HOLD: &str = "REDLEASE_TEST_SEM_HOLD";

/// `sections` sections under a permit, each counting the holders inside on entry.
async fn worker(client: Client, resource: String, sections: u32) {
    let mut conn = redis::Client::open(resource)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let semaphore = client
        .semaphore(SEMAPHORE, PERMITS)
        .wait(Duration::from_secs(60));
    let mut last = 0;
    for _ in 0..sections {
        let permit = semaphore.acquire().await.unwrap();
        let fence = permit.fencing_token().get();
        assert!(
            fence > last,
            "this holder's tokens went from {last} to {fence}"
        );
        last = fence;
        let inside: i64 = conn.incr(INSIDE, 1).await.unwrap();
        let _: i64 = conn.rpush(SEEN, inside).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
        let _: i64 = conn.decr(INSIDE, 1).await.unwrap();
        permit.release().await.unwrap();
    }
}

async fn run_workers(url: &str, resource: &str, tasks: u32, sections: u32) {
    let client = Client::connect(url).await.unwrap();
    let handles: Vec<_> = (0..tasks)
        .map(|_| tokio::spawn(worker(client.clone(), resource.to_owned(), sections)))
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

/// Run by `at_most_n_hold_across_tasks_and_processes` in child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of at_most_n_hold_across_tasks_and_processes"]
async fn semaphore_child_workers() {
    let (Ok(url), Ok(resource)) = (std::env::var(CHILD_URL), std::env::var(CHILD_RESOURCE)) else {
        return;
    };
    run_workers(&url, &resource, 4, 15).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_hold_across_tasks_and_processes() {
    const PROCESSES: usize = 4;
    let server = server();
    let url = server.url();
    let resource = server.admin_url();
    // 4 processes x 4 tasks: 16 contenders for 3 permits.
    let children = common::children(
        "semaphore_child_workers",
        PROCESSES,
        &[(CHILD_URL, &url), (CHILD_RESOURCE, &resource)],
    );
    common::all_succeed(children).await;
    let mut conn = raw(&server).await;
    let seen: Vec<i64> = conn.lrange(SEEN, 0, -1).await.unwrap();
    assert_eq!(seen.len(), PROCESSES * 4 * 15, "every section ran");
    let most = seen.iter().copied().max().unwrap_or(0);
    assert!(
        most <= i64::from(PERMITS),
        "{most} holders at once with {PERMITS} permits"
    );
    assert_eq!(
        most,
        i64::from(PERMITS),
        "16 contenders never filled the {PERMITS} permits"
    );
    // Nothing is left behind but the fencing counter.
    let keys = redlease_test_keys(&mut conn).await;
    let fence = redlease::LockKeys::new("redlease:", SEMAPHORE).unwrap();
    assert_eq!(keys, vec![fence.fence().to_owned()]);
}

/// The library's keys left on the server.
async fn redlease_test_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = conn.keys("*redlease:*").await.unwrap();
    keys.sort();
    keys
}

/// Run by `a_killed_holders_permit_comes_back_after_its_ttl`: takes a permit and holds it
/// until killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of a_killed_holders_permit_comes_back_after_its_ttl"]
async fn semaphore_child_holder() {
    let (Ok(url), Ok(_)) = (std::env::var(CHILD_URL), std::env::var(CHILD_HOLD)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    let permit = client
        .semaphore("killed", 1)
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let _held = permit;
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_permit_comes_back_after_its_ttl() {
    let server = server();
    let mut child = common::children(
        "semaphore_child_holder",
        1,
        &[(CHILD_URL, &server.url()), (CHILD_HOLD, "1")],
    )
    .remove(0);
    let conn = raw(&server).await;
    eventually("the child to hold the permit", || {
        let mut conn = conn.clone();
        async move {
            let held: i64 = conn.zcard("redlease:killed").await.unwrap();
            held == 1
        }
    })
    .await;
    child.start_kill().unwrap();
    let killed = Instant::now();
    child.wait().await.unwrap();
    let client = client(&server).await;
    let semaphore = client.semaphore("killed", 1);
    assert!(
        semaphore.try_acquire().await.unwrap().is_none(),
        "the dead holder's permit is still counted until its ttl"
    );
    let permit = bounded(
        "the permit",
        semaphore.wait(Duration::from_secs(20)).acquire(),
    )
    .await
    .unwrap();
    let waited = killed.elapsed();
    assert!(
        waited < Duration::from_secs(2) + Duration::from_millis(1500),
        "the permit came back {waited:?} after the kill, its ttl is 2 s"
    );
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_arrival_order() {
    const WAITERS: usize = 5;
    let server = server();
    let client = client(&server).await;
    let semaphore = client
        .semaphore("fifo", 2)
        .wait(Duration::from_secs(30))
        .retry(common::no_polling());
    let first = semaphore.acquire().await.unwrap();
    let second = semaphore.acquire().await.unwrap();
    let conn = raw(&server).await;
    let queue = semaphore.keys().unwrap().queue().to_owned();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let semaphore = semaphore.clone();
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let permit = semaphore.acquire().await.unwrap();
            tx.send((permit.fencing_token(), i)).unwrap();
            permit.release().await.unwrap();
        }));
        // The next waiter arrives only once this one is queued.
        let queue = queue.clone();
        eventually("the waiter to queue", || {
            let mut conn = conn.clone();
            let queue = queue.clone();
            async move { common::llen(&mut conn, &queue).await == i64::try_from(i + 1).unwrap() }
        })
        .await;
    }
    first.release().await.unwrap();
    second.release().await.unwrap();
    let mut grants = Vec::new();
    for _ in 0..WAITERS {
        grants.push(bounded("a waiter", rx.recv()).await.unwrap());
    }
    // Fencing tokens are handed out in grant order: sorted by token, the waiters must
    // come in the order they arrived.
    grants.sort_unstable();
    let order: Vec<usize> = grants.iter().map(|&(_, i)| i).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "served out of arrival order: {grants:?}"
    );
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_permit_outlives_its_ttl_and_a_lost_one_is_reported() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client
        .semaphore("renewed", 1)
        .ttl(Duration::from_millis(300));
    let permit = semaphore.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(permit.is_held(), "renewal kept the permit");
    assert!(semaphore.try_acquire().await.unwrap().is_none());
    permit.release().await.unwrap();

    // A permit whose entry vanished (an operator deleted the key) is reported lost by the
    // next renewal, and its release says so.
    let permit = semaphore.acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let _: i64 = conn.del("redlease:renewed").await.unwrap();
    bounded("the loss", permit.lost()).await;
    assert!(matches!(permit.release().await, Err(Error::Lost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_permit_expires_and_extend_moves_it() {
    let server = server();
    let client = client(&server).await;
    let semaphore = client
        .semaphore("fixed", 1)
        .ttl(Duration::from_millis(200))
        .renewal(Renewal::Fixed);
    let mut permit = semaphore.acquire().await.unwrap();
    permit.extend(Duration::from_secs(5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(permit.is_held(), "the extension outlasted the first ttl");
    assert!(semaphore.try_acquire().await.unwrap().is_none());
    permit.release().await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!permit.is_held(), "a fixed permit ran out");
    assert!(
        semaphore.try_acquire().await.unwrap().is_some(),
        "the expired permit came back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors() {
    let server = server();
    let client = client(&server).await;
    assert!(matches!(
        client.semaphore("zero", 0).try_acquire().await,
        Err(Error::InvalidOption {
            option: "permits",
            ..
        })
    ));
    assert!(matches!(
        client.semaphore("", 2).try_acquire().await,
        Err(Error::InvalidName { .. })
    ));
    let held = client.semaphore("count", 2).acquire().await.unwrap();
    match client.semaphore("count", 3).try_acquire().await {
        Err(e @ Error::PermitsMismatch { in_use: 2, .. }) => {
            assert!(e.to_string().contains("2 permits"), "{e}");
        }
        other => panic!("expected a permit count mismatch, got {other:?}"),
    }
    held.release().await.unwrap();
    // Once nothing holds or waits, the count may change.
    let three = client.semaphore("count", 3).acquire().await.unwrap();
    three.release().await.unwrap();

    // A lock and a semaphore of one name exclude each other with a clear error.
    let lock = client.lock("shared-name").acquire().await.unwrap();
    assert!(matches!(
        client.semaphore("shared-name", 2).try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    lock.release().await.unwrap();
    let permit = client.semaphore("shared-name", 2).acquire().await.unwrap();
    assert!(matches!(
        client.lock("shared-name").try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        client.rwlock("shared-name").read().try_acquire().await,
        Err(Error::WrongType { .. })
    ));
    permit.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_refuses_semaphores() {
    let nodes = redlease_local::Nodes::start(3).unwrap();
    let client = Client::quorum(nodes.urls()).await.unwrap();
    match client.semaphore("jobs", 2).try_acquire().await {
        Err(e @ Error::Unsupported { .. }) => {
            assert!(e.to_string().contains("majority"), "{e}");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // The read-write lock is sound there.
    let read = client.rwlock("jobs").read().acquire().await.unwrap();
    read.release().await.unwrap();
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_semaphores_admit_at_most_n() {
    let cluster = redlease_local::Cluster::start().unwrap();
    let client = bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap();
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for name in ["jobs-a", "{tenant}:jobs"] {
        inside.store(0, std::sync::atomic::Ordering::SeqCst);
        most.store(0, std::sync::atomic::Ordering::SeqCst);
        for _ in 0..8 {
            let semaphore = client.semaphore(name, 2).wait(Duration::from_secs(30));
            let (inside, most) = (inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..10 {
                    let permit = semaphore.acquire().await.unwrap();
                    let now = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                    most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            }));
        }
        for t in tasks.drain(..) {
            bounded("cluster workers", t).await.unwrap();
        }
        let most = most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(most <= 2, "{most} holders of {name} with 2 permits");
        assert_eq!(most, 2, "8 contenders never filled 2 permits of {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_taken_by_another_primitive_costs_only_its_own_lease() {
    let server = server();
    let client = client(&server).await;
    let ttl = Duration::from_millis(300);
    let lock = client.lock("kept").ttl(ttl).acquire().await.unwrap();
    let permit = client
        .semaphore("clash", 1)
        .ttl(ttl)
        .acquire()
        .await
        .unwrap();
    // The permit's key is deleted and a lock of the same name takes it: the next renewal
    // of the batch meets WRONGTYPE for the permit only.
    let mut conn = raw(&server).await;
    let _: i64 = conn.del("redlease:clash").await.unwrap();
    let () = conn.set("redlease:clash", "someone").await.unwrap();
    bounded("the permit's loss", permit.lost()).await;
    tokio::time::sleep(ttl * 3).await;
    assert!(
        lock.is_held(),
        "the lock renewed in the same batch was lost with the permit"
    );
    lock.release().await.unwrap();
}
