//! The mutex's hand-off (`release.lua`) when a queued waiter's client does not listen on
//! its grant channel (its subscription is reconnecting, or following a Sentinel failover):
//! the lock goes to the next waiter who listens, or is freed, and the skipped waiter keeps
//! its place at the head of the queue until it listens again, or for 10 s. Script calls
//! through plain redis-rs against a real redis-server.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;
mod prims;

use prims::{
    Keys, Listener, lrange, mutex_acquire, mutex_hand_off, mutex_join, mutex_try_as, now_ms, pttl,
};
use redis::Value;
use redis::aio::MultiplexedConnection;

const LINGER: u64 = 60_000;

/// The holder's lease ends (its key is deleted, as its expiry would).
async fn end_lease(conn: &mut MultiplexedConnection, keys: &Keys) {
    let _: () = redis::cmd("DEL")
        .arg(keys.mutex.key())
        .query_async(conn)
        .await
        .unwrap();
}

async fn holder(conn: &mut MultiplexedConnection, keys: &Keys) -> Option<String> {
    common::get(conn, keys.mutex.key()).await
}

/// The waiter table's record of `token`, decoded.
async fn entry(
    conn: &mut MultiplexedConnection,
    keys: &Keys,
    token: &str,
) -> Option<serde_json::Map<String, serde_json::Value>> {
    let entry: Option<String> = redis::cmd("HGET")
        .arg(keys.mutex.waiters())
        .arg(token)
        .query_async(conn)
        .await
        .unwrap();
    entry.map(|e| serde_json::from_str(&e).unwrap())
}

#[tokio::test]
async fn a_waiter_not_listening_is_skipped_and_served_next_once_it_listens() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("skipped");
    assert_eq!(mutex_acquire(&mut conn, &keys, "h").await.unwrap().0, 1);
    let mut b = Listener::new(&server, "grant:b").await;
    // "a" queued first, but nobody listens on its channel now; "b" listens.
    for (token, channel) in [("a", "grant:a"), ("b", "grant:b"), ("c", "grant:c")] {
        let reply = mutex_join(&mut conn, &keys, token, Some((channel, LINGER)))
            .await
            .unwrap();
        assert_eq!(reply.0, 0, "{token} queues");
    }
    let released = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    assert!(matches!(released, Value::BulkString(_)), "{released:?}");
    assert_eq!(b.grant().await.1, "b");
    assert_eq!(holder(&mut conn, &keys).await.as_deref(), Some("b"));
    // "a" kept its place, at the head, marked with when it was first skipped.
    assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["a", "c"]);
    let skipped = entry(&mut conn, &keys, "a").await.unwrap();
    let since = skipped["skip"].as_str().unwrap().parse::<i64>().unwrap();
    assert!(now_ms(&mut conn).await - since < 5_000, "{skipped:?}");
    assert!(pttl(&mut conn, keys.mutex.queue()).await > 0);

    // "a" listens again and comes back: same place, the skip forgotten.
    let mut a = Listener::new(&server, "grant:a").await;
    let reply = mutex_join(&mut conn, &keys, "a", Some(("grant:a", LINGER)))
        .await
        .unwrap();
    assert_eq!(reply.0, 0);
    assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["a", "c"]);
    let back = entry(&mut conn, &keys, "a").await.unwrap();
    assert!(
        !back.contains_key("skip") && back.contains_key("since"),
        "{back:?}"
    );
    // The next hand-off is its, ahead of "c", which queued after it.
    mutex_hand_off(&mut conn, &keys, "b").await.unwrap();
    assert_eq!(a.grant().await.1, "a");
    assert_eq!(holder(&mut conn, &keys).await.as_deref(), Some("a"));
    assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["c"]);
}

#[tokio::test]
async fn a_lock_no_waiter_can_be_told_of_is_freed_and_places_kept() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("nobody-listens");
    mutex_acquire(&mut conn, &keys, "h").await.unwrap();
    for token in ["a", "b"] {
        mutex_join(&mut conn, &keys, token, Some(("grant:gone", LINGER)))
            .await
            .unwrap();
    }
    // Never held by nobody: freed at once, the places kept in their order, with expiry.
    let released = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    assert_eq!(released, Value::Int(1));
    assert_eq!(holder(&mut conn, &keys).await, None);
    assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["a", "b"]);
    let linger = pttl(&mut conn, keys.mutex.queue()).await;
    assert!(
        linger > 0 && linger <= i64::try_from(LINGER).unwrap(),
        "{linger}"
    );
}

#[tokio::test]
async fn a_place_unreachable_for_10_s_is_dropped() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("gone-for-good");
    mutex_acquire(&mut conn, &keys, "h").await.unwrap();
    let mut b = Listener::new(&server, "grant:b").await;
    for (token, channel) in [("a", "grant:a"), ("b", "grant:b")] {
        mutex_join(&mut conn, &keys, token, Some((channel, LINGER)))
            .await
            .unwrap();
    }
    // "a" was first skipped a little over 10 s ago (its client has not come back).
    let mut skipped = entry(&mut conn, &keys, "a").await.unwrap();
    skipped.insert(
        "skip".to_owned(),
        (now_ms(&mut conn).await - 10_001).to_string().into(),
    );
    let _: () = redis::cmd("HSET")
        .arg(keys.mutex.waiters())
        .arg("a")
        .arg(serde_json::to_string(&skipped).unwrap())
        .query_async(&mut conn)
        .await
        .unwrap();
    mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    assert_eq!(b.grant().await.1, "b");
    assert!(lrange(&mut conn, keys.mutex.queue()).await.is_empty());
    assert_eq!(entry(&mut conn, &keys, "a").await, None);
}

#[tokio::test]
async fn a_holder_is_never_handed_its_own_place() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("own-place");
    mutex_acquire(&mut conn, &keys, "x").await.unwrap();
    let _h = Listener::new(&server, "grant:h").await;
    mutex_join(&mut conn, &keys, "h", Some(("grant:h", LINGER)))
        .await
        .unwrap();
    // x's lease ends; h, not queueing this time (its subscription was down), takes the
    // free lock: its old place, at the head, was its turn, and is gone with it.
    end_lease(&mut conn, &keys).await;
    let taken = mutex_acquire(&mut conn, &keys, "h").await.unwrap();
    assert_eq!(taken.0, 1);
    assert!(lrange(&mut conn, keys.mutex.queue()).await.is_empty());
    assert_eq!(entry(&mut conn, &keys, "h").await, None);
    // Its release frees the lock rather than handing it back to h.
    let released = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    assert_eq!(released, Value::Int(1));
    assert_eq!(holder(&mut conn, &keys).await, None);
}

/// A queued waiter whose later attempt only tries (`c`: its grants cannot reach it now;
/// `w`: a Cluster waiter listening for release notices after its grant subscription moved
/// with a slot) and takes the free lock withdraws its place, wherever it is in the queue:
/// else a later release hands the lock to that finished acquisition, and the lock sits with
/// nobody for its ttl while the others wait.
#[tokio::test]
async fn a_waiter_taking_the_lock_by_a_later_attempt_leaves_no_place() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    for flag in ["leave", "listen"] {
        let keys = Keys::new(&format!("later-{flag}"));
        mutex_acquire(&mut conn, &keys, "x").await.unwrap();
        let _h = Listener::new(&server, "grant:h").await;
        for token in ["a", "h"] {
            let channel = format!("grant:{token}");
            mutex_join(&mut conn, &keys, token, Some((&channel, LINGER)))
                .await
                .unwrap();
        }
        // x's lease ends; h, second in the queue, takes the free lock: a, ahead of it,
        // does not listen now (it is skipped, and keeps its place).
        end_lease(&mut conn, &keys).await;
        let taken = mutex_try_as(&mut conn, &keys, "h", flag).await.unwrap();
        assert_eq!(taken.0, 1, "{flag}");
        assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["a"], "{flag}");
        assert_eq!(entry(&mut conn, &keys, "h").await, None, "{flag}");
        // h hands the lock to a, listening again, and a's release frees it: nothing is
        // handed to h again.
        let _a = Listener::new(&server, "grant:a").await;
        let handed = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
        assert!(matches!(handed, Value::BulkString(_)), "{flag}: {handed:?}");
        assert_eq!(
            holder(&mut conn, &keys).await.as_deref(),
            Some("a"),
            "{flag}"
        );
        let freed = mutex_hand_off(&mut conn, &keys, "a").await.unwrap();
        assert_eq!(freed, Value::Int(1), "{flag}");
        assert_eq!(holder(&mut conn, &keys).await, None, "{flag}");
    }
}

/// A hand-off sets the lock for a short claim window only (a tenth of the ttl, at most
/// 1 s): the waiter's confirming attempt finds its token and sets the whole ttl. A grant
/// its waiter never confirms (its link cut silently: Redis still counted it) leaves the
/// lock free once the window is over, and the next attempt (a newcomer's included) or
/// release serves the oldest waiter first.
#[tokio::test]
async fn an_unconfirmed_hand_off_lasts_its_window_then_the_next_waiter_is_served() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("window");
    mutex_acquire(&mut conn, &keys, "h").await.unwrap();
    let mut a = Listener::new(&server, "grant:a").await;
    let mut b = Listener::new(&server, "grant:b").await;
    for token in ["a", "b", "c"] {
        let channel = format!("grant:{token}");
        mutex_join(&mut conn, &keys, token, Some((&channel, LINGER)))
            .await
            .unwrap();
    }
    // The release names the claim window (ms) before the grant message.
    let Value::BulkString(reply) = mutex_hand_off(&mut conn, &keys, "h").await.unwrap() else {
        panic!("no hand-off");
    };
    let reply = String::from_utf8(reply).unwrap();
    assert!(reply.starts_with("claim 1000 "), "{reply}");
    assert_eq!(a.grant().await.1, "a");
    let window = pttl(&mut conn, keys.mutex.key()).await;
    assert!(window > 0 && window <= 1_000, "{window}");
    assert!(pttl(&mut conn, keys.mutex.holder()).await <= 1_000);

    // a never confirms; its window ends. A newcomer's attempt serves b, not itself.
    end_lease(&mut conn, &keys).await;
    let newcomer = mutex_acquire(&mut conn, &keys, "n").await.unwrap();
    assert_eq!(newcomer.0, 0, "the newcomer waits behind b and c");
    assert_eq!(b.grant().await.1, "b");
    assert_eq!(holder(&mut conn, &keys).await.as_deref(), Some("b"));
    // b confirms: its whole ttl.
    let confirmed = mutex_join(&mut conn, &keys, "b", Some(("grant:b", LINGER)))
        .await
        .unwrap();
    assert_eq!(confirmed.0, 2, "{confirmed:?}");
    assert!(pttl(&mut conn, keys.mutex.key()).await > 1_000);
    assert!(pttl(&mut conn, keys.mutex.holder()).await > 1_000);

    // b's lease ends; a release by someone who no longer holds it (the releasing
    // client's check after the window) serves c, which does not listen: skipped, kept.
    end_lease(&mut conn, &keys).await;
    let outcome = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    assert_eq!(outcome, Value::Int(0));
    assert_eq!(holder(&mut conn, &keys).await, None);
    assert_eq!(lrange(&mut conn, keys.mutex.queue()).await, ["c"]);
    let mut c = Listener::new(&server, "grant:c").await;
    let outcome = mutex_hand_off(&mut conn, &keys, "h").await.unwrap();
    let Value::Array(outcome) = outcome else {
        panic!("{outcome:?}");
    };
    assert_eq!(outcome[0], Value::Int(0));
    assert_eq!(c.grant().await.1, "c");
    assert_eq!(holder(&mut conn, &keys).await.as_deref(), Some("c"));
}
