//! Several locks at once against real Redis: transfers between random pairs of accounts
//! keep the total exact and never deadlock (A,B and B,A at once) across tasks and OS
//! processes, on a single node, a Cluster (names in different slots) and a quorum; a
//! multi-lock is not starved by single-name holders; bad input; loss of one name.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error};

const ACCOUNTS: u32 = 10;
const START: i64 = 100;
const CHILD_URL: &str = "REDLEASE_TEST_MULTI_URL";
const CHILD_RESOURCE: &str = "REDLEASE_TEST_MULTI_RESOURCE";

fn balance_key(account: u32) -> String {
    format!("test:balance:{account}")
}

async fn open_accounts(conn: &mut redis::aio::MultiplexedConnection) {
    for account in 0..ACCOUNTS {
        let () = conn.set(balance_key(account), START).await.unwrap();
    }
}

/// `transfers` transfers between random pairs, each a non-atomic read-modify-write of two
/// balances under a multi-lock of both accounts, named in a random order.
async fn transfer(client: Client, resource: String, transfers: u32) {
    let mut conn = redis::Client::open(resource)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for _ in 0..transfers {
        let from = rand::random_range(0..ACCOUNTS);
        let to = (from + rand::random_range(1..ACCOUNTS)) % ACCOUNTS;
        let amount = rand::random_range(1..=5);
        // A lease of a few seconds: a waiter that misses its wake-up (a lost pub/sub
        // message) looks again when the holder's lease can have run out, and with the
        // default 30 s lease one such miss would take this test's whole time bound.
        let guard = client
            .multi_lock([format!("account:{from}"), format!("account:{to}")])
            .ttl(Duration::from_secs(5))
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .unwrap();
        let a: i64 = conn.get(balance_key(from)).await.unwrap();
        let b: i64 = conn.get(balance_key(to)).await.unwrap();
        tokio::task::yield_now().await;
        let () = conn.set(balance_key(from), a - amount).await.unwrap();
        let () = conn.set(balance_key(to), b + amount).await.unwrap();
        guard.release().await.unwrap();
    }
}

async fn run_transfers(client: &Client, resource: &str, tasks: u32, transfers: u32) {
    let handles: Vec<_> = (0..tasks)
        .map(|_| tokio::spawn(transfer(client.clone(), resource.to_owned(), transfers)))
        .collect();
    for h in handles {
        h.await.unwrap();
    }
}

async fn check_total(conn: &mut redis::aio::MultiplexedConnection) {
    let mut total = 0;
    for account in 0..ACCOUNTS {
        let balance: i64 = conn.get(balance_key(account)).await.unwrap();
        total += balance;
    }
    assert_eq!(
        total,
        START * i64::from(ACCOUNTS),
        "money appeared or vanished: two transfers touched one account at once"
    );
}

/// Run by `transfers_keep_the_total_across_tasks_and_processes`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of transfers_keep_the_total_across_tasks_and_processes"]
async fn multilock_child_transfers() {
    let (Ok(url), Ok(resource)) = (std::env::var(CHILD_URL), std::env::var(CHILD_RESOURCE)) else {
        return;
    };
    let client = Client::connect(&url).await.unwrap();
    run_transfers(&client, &resource, 2, 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_keep_the_total_across_tasks_and_processes() {
    let server = server();
    let mut conn = raw(&server).await;
    open_accounts(&mut conn).await;
    // 4 processes x 2 tasks: 8 contenders over 10 accounts.
    let children = common::children(
        "multilock_child_transfers",
        4,
        &[
            (CHILD_URL, &server.url()),
            (CHILD_RESOURCE, &server.admin_url()),
        ],
    );
    common::all_succeed(children).await;
    check_total(&mut conn).await;
}

#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_transfers_across_slots_keep_the_total() {
    common::trace_if_asked();
    let cluster = redlease_local::Cluster::start().unwrap();
    let client = bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap();
    let slots: std::collections::HashSet<u16> = (0..ACCOUNTS)
        .map(|a| {
            let keys = client.lock(format!("account:{a}")).keys().unwrap();
            cluster.slot(keys.key()).unwrap()
        })
        .collect();
    assert!(slots.len() > 1, "the accounts should live in several slots");
    let resource = server();
    let mut conn = raw(&resource).await;
    open_accounts(&mut conn).await;
    bounded(
        "transfers",
        run_transfers(&client, &resource.admin_url(), 8, 10),
    )
    .await;
    check_total(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_transfers_keep_the_total() {
    let (_nodes, client) = common::quorum_of_three().await;
    let resource = server();
    let mut conn = raw(&resource).await;
    open_accounts(&mut conn).await;
    bounded(
        "transfers",
        run_transfers(&client, &resource.admin_url(), 8, 10),
    )
    .await;
    check_total(&mut conn).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_single_holders_does_not_starve_a_multi_lock() {
    let server = server();
    let client = client(&server).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Four tasks take the hot lock back to back, each queueing behind the others: it is
    // never free for long, and never free with nobody queued.
    let hammers: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock("hot").wait(Duration::from_secs(30));
            let stop = stop.clone();
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let guard = lock.acquire().await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let multi = client
        .multi_lock(["hot", "cold"])
        .wait(Duration::from_secs(10))
        .acquire()
        .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let multi = multi.unwrap_or_else(|e| panic!("the multi-lock starved: {e}"));
    assert!(multi.is_held());
    multi.release().await.unwrap();
    for h in hammers {
        bounded("a hammer", h).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_deduplicated_sorted_and_exclude_plain_locks() {
    let server = server();
    let client = client(&server).await;
    assert!(matches!(
        client.multi_lock(Vec::<String>::new()).try_acquire().await,
        Err(Error::InvalidOption {
            option: "names",
            ..
        })
    ));
    let multi = client.multi_lock(["b", "a", "b"]);
    assert_eq!(multi.names().collect::<Vec<_>>(), ["a", "b"]);
    let guard = multi.acquire().await.unwrap();
    assert_eq!(guard.guards().len(), 2);
    let (a, b) = (
        guard.fencing_token("a").unwrap(),
        guard.fencing_token("b").unwrap(),
    );
    assert!(a.get() > 0 && b.get() > 0);
    assert!(guard.fencing_token("c").is_none());
    // A plain lock of either name is busy, and the reverse.
    assert!(client.lock("b").try_acquire().await.unwrap().is_none());
    guard.release().await.unwrap();
    let plain = client.lock("a").acquire().await.unwrap();
    assert!(
        client
            .multi_lock(["a", "b"])
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    // Nothing of a failed attempt stays held: `b` is free again.
    let b = client.lock("b").try_acquire().await.unwrap();
    assert!(b.is_some(), "the failed multi-lock kept `b`");
    plain.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_one_name_is_losing_the_multi_lock() {
    let server = server();
    let client = client(&server).await;
    let guard = client
        .multi_lock(["x", "y"])
        .ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let mut conn = raw(&server).await;
    let _: i64 = conn.del("redlease:y").await.unwrap();
    bounded("the loss", guard.lost()).await;
    assert!(!guard.is_held());
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));

    // `run` drops the work when a name is lost.
    let ran = client
        .multi_lock(["x", "y"])
        .ttl(Duration::from_millis(300))
        .run(async |_| {
            let mut conn = raw(&server).await;
            let _: i64 = conn.del("redlease:x").await.unwrap();
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, Error>("finished")
        })
        .await;
    assert!(matches!(ran, Err(Error::Lost { .. })), "{ran:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_on_one_node_are_taken_by_one_script_all_or_nothing() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    // Warm up: the script is loaded, the connection up.
    client
        .multi_lock(["w1", "w2"])
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = common::evalsha_calls(&mut conn).await;
    let guard = client.multi_lock(["a", "b", "c"]).acquire().await.unwrap();
    let calls = common::evalsha_calls(&mut conn).await - before;
    assert_eq!(
        calls, 1,
        "three free names on one node cost one script call"
    );
    for name in ["a", "b", "c"] {
        assert!(guard.fencing_token(name).is_some());
        assert!(
            common::get(&mut conn, &format!("redlease:{name}"))
                .await
                .is_some()
        );
    }
    guard.release().await.unwrap();

    // One busy name: nothing is taken, not even for a moment.
    let b = client.lock("b").acquire().await.unwrap();
    assert!(
        client
            .multi_lock(["a", "b", "c"])
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    for name in ["a", "c"] {
        assert_eq!(
            common::get(&mut conn, &format!("redlease:{name}")).await,
            None
        );
    }
    b.release().await.unwrap();
}
