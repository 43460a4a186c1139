//! Mutual exclusion and fencing across tasks and OS processes, against a real Redis.
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
use redlease::{Client, Notifications};

const LOCK: &str = "counter";
const COUNTER: &str = "test:counter";
const FENCES: &str = "test:fences";
const CHILD_URL: &str = "REDLEASE_TEST_CHILD_URL";
/// Where the counter and the fences are kept: the server's admin URL (under
/// `REDLEASE_TEST_ACL` the lock user may not touch them).
const CHILD_RESOURCE: &str = "REDLEASE_TEST_CHILD_RESOURCE";

/// `sections` critical sections, each a non-atomic read-modify-write of a counter that a
/// second holder would corrupt, logging its fencing token in section order.
async fn worker(client: Client, resource: String, sections: u32) {
    let mut conn = redis::Client::open(resource)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lock = client.lock(LOCK).wait(Duration::from_secs(60));
    let mut last = 0;
    for _ in 0..sections {
        let guard = lock.acquire().await.unwrap();
        let fence = guard.fencing_token().get();
        assert!(fence > last, "fencing token went from {last} to {fence}");
        last = fence;
        let n: i64 = conn
            .get::<_, Option<i64>>(COUNTER)
            .await
            .unwrap()
            .unwrap_or(0);
        tokio::task::yield_now().await;
        let () = conn.set(COUNTER, n + 1).await.unwrap();
        let _: i64 = conn.rpush(FENCES, fence).await.unwrap();
        guard.release().await.unwrap();
    }
}

async fn run_workers(
    url: &str,
    resource: &str,
    tasks: u32,
    sections: u32,
    notifications: Notifications,
) {
    let client = Client::builder(url)
        .notifications(notifications)
        .connect()
        .await
        .unwrap();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let client = client.clone();
        let resource = resource.to_owned();
        handles.push(tokio::spawn(worker(client, resource, sections)));
    }
    for h in handles {
        h.await.unwrap();
    }
}

async fn check_history(conn: &mut redis::aio::MultiplexedConnection, expected: i64) {
    let count: i64 = conn.get(COUNTER).await.unwrap();
    assert_eq!(count, expected, "lost updates: the lock let two holders in");
    let fences: Vec<u64> = conn.lrange(FENCES, 0, -1).await.unwrap();
    assert_eq!(fences.len(), usize::try_from(expected).unwrap());
    for pair in fences.windows(2) {
        assert!(
            pair[0] < pair[1],
            "fencing tokens not strictly increasing: {pair:?}"
        );
    }
}

/// Run by `tasks_and_processes_exclude_each_other` in child processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of tasks_and_processes_exclude_each_other"]
async fn child_process_workers() {
    let (Ok(url), Ok(resource)) = (std::env::var(CHILD_URL), std::env::var(CHILD_RESOURCE)) else {
        return;
    };
    run_workers(&url, &resource, 4, 25, Notifications::PubSub).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_and_processes_exclude_each_other() {
    const PROCESSES: u32 = 4;
    let server = server();
    let url = server.url();
    let resource = server.admin_url();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            tokio::process::Command::new(&exe)
                .args([
                    "--ignored",
                    "--exact",
                    "child_process_workers",
                    "--nocapture",
                ])
                .env(CHILD_URL, &url)
                .env(CHILD_RESOURCE, &resource)
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        })
        .collect();
    // 16 tasks here, 4 x 4 tasks in the children: 32 contenders in 5 processes.
    let here = run_workers(&url, &resource, 16, 25, Notifications::PubSub);
    let ((), statuses) = bounded("workers", async {
        tokio::join!(here, async {
            let mut statuses = Vec::new();
            for mut c in children {
                statuses.push(c.wait().await.unwrap());
            }
            statuses
        })
    })
    .await;
    for s in statuses {
        assert!(s.success(), "a child process failed: {s}");
    }
    let mut conn = raw(&server).await;
    check_history(&mut conn, i64::from(16 * 25 + PROCESSES * 4 * 25)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_waiters_exclude_each_other() {
    let server = server();
    bounded(
        "workers",
        run_workers(
            &server.url(),
            &server.admin_url(),
            8,
            25,
            Notifications::Polling,
        ),
    )
    .await;
    check_history(&mut raw(&server).await, 8 * 25).await;
}

#[tokio::test]
async fn fencing_tokens_increase_across_clients_and_releases() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let mut last = 0;
    for i in 0..20 {
        let c = if i % 2 == 0 { &a } else { &b };
        let guard = c.lock("fenced").acquire().await.unwrap();
        assert!(guard.fencing_token().get() > last);
        last = guard.fencing_token().get();
        guard.release().await.unwrap();
    }
    // A lease that expires instead of being released also never repeats a token.
    let guard = a
        .lock("fenced")
        .ttl(Duration::from_millis(50))
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    let expired = guard.fencing_token();
    std::mem::forget(guard);
    let next = b.lock("fenced").acquire().await.unwrap();
    assert!(next.fencing_token() > expired);
    next.release().await.unwrap();
}
