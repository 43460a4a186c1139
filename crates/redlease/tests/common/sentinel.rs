//! A Sentinel deployment whose primary crashes under a lock with waiters queued.

use std::time::Duration;

use redlease::{Client, Guard};
use redlease_local::{Reply, Sentinel};

/// A fresh deployment, a client of it, and that client's 30 s hold of the lock `name`;
/// the lock's key and queue key beside them.
pub async fn held(name: &str) -> (Sentinel, Client, Guard, String, String) {
    let deployment =
        Sentinel::start().unwrap_or_else(|e| panic!("cannot start a sentinel deployment: {e}"));
    let holder = super::bounded(
        "connect the holder",
        Client::connect(&deployment.sentinel_url()),
    )
    .await
    .unwrap();
    let lock = holder.lock(name).ttl(Duration::from_secs(30));
    let keys = lock.keys().unwrap();
    let (key, queue) = (keys.key().to_owned(), keys.queue().to_owned());
    let guard = super::bounded("the holder acquires", lock.acquire())
        .await
        .unwrap();
    (deployment, holder, guard, key, queue)
}

/// SIGKILLs the current primary; its port and its index in `servers()`.
pub fn kill_primary(deployment: &mut Sentinel) -> (u16, usize) {
    let old = deployment.primary().unwrap().port();
    let dead = deployment
        .servers()
        .iter()
        .position(|s| s.port() == old)
        .unwrap();
    deployment.servers_mut()[dead].kill();
    (old, dead)
}

/// SIGKILLs the primary once everything it holds reached both replicas (`WAIT`), and
/// waits until the sentinels promoted one of them; the deployment and the new primary's
/// port. Blocking work, off the test's runtime.
pub async fn crash_primary(deployment: Sentinel) -> (Sentinel, u16) {
    tokio::task::spawn_blocking(move || {
        let mut deployment = deployment;
        let acked = deployment
            .primary()
            .unwrap()
            .query(&["WAIT", "2", "10000"])
            .unwrap();
        assert_eq!(
            acked,
            Reply::Integer(2),
            "the replicas did not catch up before the crash"
        );
        let (old, _) = kill_primary(&mut deployment);
        let new = deployment
            .wait_for_new_primary(old, Duration::from_secs(60))
            .unwrap();
        (deployment, new)
    })
    .await
    .unwrap()
}

/// Waits until the list `queue` on the primary holds `places` entries.
pub async fn queued(deployment: &Sentinel, queue: &str, places: usize) {
    let primary = deployment.primary().unwrap();
    let places = i64::try_from(places).unwrap();
    super::eventually("the waiter queued", || async move {
        primary.query(&["LLEN", queue]).unwrap() == Reply::Integer(places)
    })
    .await;
}
