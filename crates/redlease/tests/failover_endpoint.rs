//! A single URL that is a failover endpoint (a managed primary endpoint, a Kubernetes
//! Service, `HAProxy`): after a failover, new connections reach the new primary while old
//! ones stay on the demoted one, now its replica. A waiter's grant subscription is such an
//! old connection. The release on the new primary finds nobody listening there and frees
//! the lock (or hands it on); replication then delivers the skipped grants to the old
//! primary's subscribers. No waiter may take such a grant for the lock: the new primary
//! (the server that holds the data) decides who holds it.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::time::Duration;

use common::{bounded, eventually, replicate};
use redlease::{Client, Guard, LockKeys};
use redlease_local::{Proxy, RedisServer, Reply};

const NAME: &str = "behind-the-endpoint";

/// The lock's fencing counter and owner on `server`.
fn lock_on(server: &RedisServer, keys: &LockKeys) -> (Option<String>, bool) {
    let fence = match server.query(&["GET", keys.fence()]).unwrap() {
        Reply::Bulk(b) => Some(String::from_utf8(b).unwrap()),
        _ => None,
    };
    let held = server.query(&["EXISTS", keys.key()]).unwrap() == Reply::Integer(1);
    (fence, held)
}

async fn waiter(client: &Client) -> redlease::Result<Guard> {
    client
        .lock(NAME)
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(20))
        .acquire()
        .await
}

#[tokio::test]
async fn a_grant_relayed_by_the_demoted_primary_is_never_taken() {
    // A, the primary, and B, its replica.
    let old = common::server();
    let new = common::server();
    replicate(&new, &old).await;
    let endpoint = Proxy::start(old.port()).unwrap();
    let keys = LockKeys::new("redlease:", NAME).unwrap();

    let connect = |note: &'static str| {
        let url = endpoint.url();
        async move {
            Client::builder(&url)
                .holder_note(note)
                .connect()
                .await
                .unwrap()
        }
    };
    let (holder, first, second) = (connect("h").await, connect("w").await, connect("x").await);
    let held = holder
        .lock(NAME)
        .ttl(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    // W queues first, X behind it; both on A, where their subscriptions stay.
    let (tx, mut guards) = tokio::sync::mpsc::unbounded_channel();
    for (client, who) in [(&first, "w"), (&second, "x")] {
        let (client, tx) = (client.clone(), tx.clone());
        tokio::spawn(async move {
            let _ = tx.send((who, waiter(&client).await));
        });
        bounded("the waiter queues", async {
            while client_waiting(&first, &second) < if who == "w" { 1 } else { 2 } {
                tokio::task::yield_now().await;
            }
        })
        .await;
    }
    eventually("both places replicated to B", || async {
        new.query(&["LLEN", keys.queue()]).unwrap() == Reply::Integer(2)
    })
    .await;

    // The failover: B is the primary, A its replica, and new connections go to B. The
    // clients' command connections are cut (they reconnect, to B); their grant
    // subscriptions stay on A.
    new.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    replicate(&old, &new).await;
    endpoint.retarget(new.port());
    old.query(&["CLIENT", "KILL", "TYPE", "normal"]).unwrap();

    // H's release runs on B, which nobody's subscription listens to.
    held.release().await.unwrap();

    // Each guard, as it comes, must be the lock's holder on B, and alone: the other
    // waiter's guard comes only after this one is released.
    let mut early = None;
    for _ in 0..2 {
        let (who, guard) = match early.take() {
            Some(next) => next,
            None => bounded("a waiter's turn", guards.recv()).await.unwrap(),
        };
        let guard: Guard = guard.unwrap_or_else(|e| panic!("{who} failed: {e:?}"));
        let (fence, taken) = lock_on(&new, &keys);
        assert!(
            guard.is_held() && taken && fence == Some(guard.fencing_token().to_string()),
            "{who} claims the lock (fence {}) that B gives to nobody or another (fence {fence:?}, held {taken})",
            guard.fencing_token(),
        );
        if let Ok((other, Ok(second))) = guards.try_recv() {
            assert!(
                !(guard.is_held() && second.is_held()),
                "{who} and {other} hold the lock at once"
            );
            early = Some((other, Ok(second)));
        }
        guard.release().await.unwrap();
    }
}

fn client_waiting(w: &Client, x: &Client) -> usize {
    w.stats().waiting + x.stats().waiting
}

/// The holder's command connection stays on the demoted primary (nothing cut it): its
/// release meets `READONLY`, moves to a new connection (the endpoint sends it to the new
/// primary) and goes through there. Before: the release failed with `READONLY` and the
/// lock sat on the new primary, held by nobody, for its whole ttl.
#[tokio::test]
async fn a_command_connection_left_on_the_demoted_primary_moves_to_the_new_one() {
    let old = common::server();
    let new = common::server();
    replicate(&new, &old).await;
    let endpoint = Proxy::start(old.port()).unwrap();
    let keys = LockKeys::new("redlease:", NAME).unwrap();
    let holder = Client::connect(&endpoint.url()).await.unwrap();
    let held = bounded(
        "acquire",
        holder.lock(NAME).ttl(Duration::from_secs(30)).acquire(),
    )
    .await
    .unwrap();
    eventually("the lock replicated to B", || async {
        lock_on(&new, &keys).1
    })
    .await;

    new.query(&["REPLICAOF", "NO", "ONE"]).unwrap();
    replicate(&old, &new).await;
    endpoint.retarget(new.port());

    bounded("release", held.release()).await.unwrap();
    assert!(!lock_on(&new, &keys).1, "the lock is still held on B");
    let again = bounded(
        "acquire again",
        holder.lock(NAME).ttl(Duration::from_secs(30)).acquire(),
    )
    .await
    .unwrap();
    assert!(lock_on(&new, &keys).1, "the new hold is not on B");
    bounded("release again", again.release()).await.unwrap();
}
