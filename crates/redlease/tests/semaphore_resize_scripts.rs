//! `sem_resize.lua` run through plain redis-rs against a real redis-server, with the
//! semaphore's other scripts reading the count it stores: expired permits reclaimed, a
//! raised count handed to the queue, a lowered one revoking nobody, the resized count taken
//! by acquisitions asking another one and by releases, kept while the semaphore is idle.
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;
mod prims;

use prims::{
    Keys, Listener, exists, lrange, pttl, sem_acquire, sem_attempt as attempt, sem_release,
    sem_resize, server_error, until_expired, zcard,
};
use redis::Script;

const LONG: u64 = 60_000;
const LINGER: u64 = 60_000;
/// The keep sent with each resize: a day, as the library's `RESIZE_KEEP`.
const KEEP: u64 = 24 * 3_600_000;

/// `token` "e" asking `take` permits at once of `asked`, without queueing.
async fn ask(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
    asked: u64,
    take: u64,
) -> redis::RedisResult<redis::Value> {
    let script = Script::new(prims::SEM_ACQUIRE);
    let mut invocation = script.key(&keys.sem()[..]);
    invocation
        .arg("e")
        .arg(LONG)
        .arg("host")
        .arg(asked)
        .arg("no")
        .arg("")
        .arg("")
        .arg(take);
    invocation.invoke_async(conn).await
}

/// The count as stored, raw.
async fn stored(conn: &mut redis::aio::MultiplexedConnection, keys: &Keys) -> Option<String> {
    common::get(conn, &keys.sem()[5]).await
}

#[tokio::test]
async fn a_resize_reclaims_expired_permits_first() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-reclaim");
    // A live holder keeps the keys alive: the script must notice the crashed one's end.
    for (token, ttl) in [("live", LONG), ("crashed", 50)] {
        sem_acquire(&mut conn, &keys, token, ttl, 2, None)
            .await
            .unwrap();
    }
    until_expired(&conn, &keys.key, "crashed").await;
    assert_eq!(zcard(&mut conn, &keys.key).await, 2, "not reclaimed yet");
    assert_eq!(
        sem_resize(&mut conn, &keys, 3, KEEP, false).await.unwrap(),
        2
    );
    assert_eq!(
        zcard(&mut conn, &keys.key).await,
        1,
        "reclaimed by the resize"
    );
    let crashed: bool = redis::cmd("HEXISTS")
        .arg(&keys.sem()[2])
        .arg("crashed")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!crashed, "its holder details went with it");
}

#[tokio::test]
async fn acquisitions_take_the_resized_count_and_the_weight_check_uses_it() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-acquire");
    assert_eq!(attempt(&mut conn, &keys, "a", 2).await.0, 1);
    assert_eq!(
        sem_resize(&mut conn, &keys, 3, KEEP, false).await.unwrap(),
        2
    );
    let count = stored(&mut conn, &keys).await.unwrap();
    assert!(count.starts_with("3!"), "{count}");
    let left = pttl(&mut conn, &keys.sem()[5]).await;
    assert!(
        left > i64::try_from(KEEP).unwrap() - 60_000,
        "kept a day: {left}"
    );
    // Asking with the old count (2) acquires against the stored one (3).
    assert_eq!(attempt(&mut conn, &keys, "b", 2).await.0, 1);
    assert_eq!(attempt(&mut conn, &keys, "c", 2).await.0, 1);
    assert_eq!(attempt(&mut conn, &keys, "d", 2).await.0, 0, "3 is the cap");
    // An acquisition's weight is checked against the count in force.
    let (code, text) = server_error(ask(&mut conn, &keys, 2, 4).await);
    assert_eq!(code, "REDLEASE_ASKED", "{text}");
    assert!(text.contains("4 3"), "{text}");
    // Asking 3 at once with a count of 2 is not refused: 3 is in force (all held now).
    assert!(matches!(
        ask(&mut conn, &keys, 2, 3).await.unwrap(),
        redis::Value::Array(_)
    ));
    // The count outlives the semaphore going idle.
    for token in ["a", "b", "c"] {
        assert_eq!(
            sem_release(&mut conn, &keys, token, false).await.unwrap(),
            1
        );
    }
    assert!(exists(&mut conn, &keys.sem()[5]).await, "kept while idle");
    assert!(pttl(&mut conn, &keys.sem()[5]).await > LONG.try_into().unwrap());
    // 3 at once of the resized count, on the idle semaphore: a fresh grant.
    assert!(matches!(
        ask(&mut conn, &keys, 2, 3).await.unwrap(),
        redis::Value::Int(_)
    ));
    // And a short lease's settle does not shorten the count's keep.
    assert!(pttl(&mut conn, &keys.sem()[5]).await > LONG.try_into().unwrap());
}

#[tokio::test]
async fn an_unresized_count_still_refuses_another() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-mismatch");
    assert_eq!(attempt(&mut conn, &keys, "a", 2).await.0, 1);
    let (code, text) = server_error(sem_acquire(&mut conn, &keys, "b", LONG, 3, None).await);
    assert_eq!(code, "REDLEASE_PERMITS", "{text}");
    assert_eq!(stored(&mut conn, &keys).await.as_deref(), Some("2"));
}

#[tokio::test]
async fn a_raised_count_is_handed_to_the_queue_and_a_lowered_one_revokes_nobody() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-serve");
    assert_eq!(attempt(&mut conn, &keys, "a", 1).await.0, 1);
    let mut w1 = Listener::new(&server, "grant:1").await;
    let mut w2 = Listener::new(&server, "grant:2").await;
    for (token, channel) in [("w1", "grant:1"), ("w2", "grant:2")] {
        let reply = sem_acquire(&mut conn, &keys, token, LONG, 1, Some((channel, LINGER)))
            .await
            .unwrap();
        assert_eq!(reply.0, 0, "{token} waits");
    }
    // 1 -> 2: the oldest waiter is handed the new permit by the resize itself.
    assert_eq!(
        sem_resize(&mut conn, &keys, 2, KEEP, false).await.unwrap(),
        1
    );
    let (_, token, key) = w1.grant().await;
    assert_eq!((token.as_str(), key.as_str()), ("w1", keys.key.as_str()));
    assert_eq!(zcard(&mut conn, &keys.key).await, 2);
    assert_eq!(lrange(&mut conn, &keys.sem()[3]).await, ["w2"]);
    // 2 -> 1 with 2 held: nobody is revoked, and the releases read the lowered count.
    assert_eq!(
        sem_resize(&mut conn, &keys, 1, KEEP, false).await.unwrap(),
        2
    );
    assert_eq!(zcard(&mut conn, &keys.key).await, 2, "nobody revoked");
    assert_eq!(sem_release(&mut conn, &keys, "a", false).await.unwrap(), 1);
    assert_eq!(
        lrange(&mut conn, &keys.sem()[3]).await,
        ["w2"],
        "1 in use of 1: no grant"
    );
    assert_eq!(sem_release(&mut conn, &keys, "w1", false).await.unwrap(), 1);
    let (_, token, _) = w2.grant().await;
    assert_eq!(token, "w2", "granted once none is in use");
    assert_eq!(
        attempt(&mut conn, &keys, "fresh", 2).await.0,
        0,
        "1 is the cap"
    );
}

#[tokio::test]
async fn a_queued_request_larger_than_a_lowered_count_is_dropped() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-drop");
    assert_eq!(attempt(&mut conn, &keys, "a", 3).await.0, 1);
    // "big" asks for 3 at once and queues (1 of 3 held); "small" queues behind it. Both
    // listen, so neither place is dropped as dead.
    let _big = Listener::new(&server, "grant:big").await;
    let script = Script::new(prims::SEM_ACQUIRE);
    let mut invocation = script.key(&keys.sem()[..]);
    invocation
        .arg("big")
        .arg(LONG)
        .arg("host")
        .arg(3)
        .arg("grants")
        .arg("grant:big")
        .arg(LINGER)
        .arg(3);
    let _: redis::Value = invocation.invoke_async(&mut conn).await.unwrap();
    let mut small = Listener::new(&server, "grant:small").await;
    let reply = sem_acquire(
        &mut conn,
        &keys,
        "small",
        LONG,
        3,
        Some(("grant:small", LINGER)),
    )
    .await
    .unwrap();
    assert_eq!(reply.0, 0, "behind the bigger head");
    // Lowered to 2: the head can never be served; it is dropped and "small" served.
    assert_eq!(
        sem_resize(&mut conn, &keys, 2, KEEP, false).await.unwrap(),
        3
    );
    let (_, token, _) = small.grant().await;
    assert_eq!(token, "small");
    assert!(!exists(&mut conn, &keys.sem()[3]).await, "queue empty");
}

#[tokio::test]
async fn a_resize_announces_free_permits_and_bad_counts_are_refused() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("sem:resize-announce");
    assert_eq!(attempt(&mut conn, &keys, "a", 1).await.0, 1);
    let mut released = Listener::new(&server, &keys.channel()).await;
    assert_eq!(
        sem_resize(&mut conn, &keys, 2, KEEP, true).await.unwrap(),
        1
    );
    assert_eq!(released.payload().await, keys.key);
    let (code, text) = server_error(sem_resize(&mut conn, &keys, 0, KEEP, false).await);
    assert_eq!(code, "ERR", "{text}");
    // The largest count the library sends is stored exactly.
    let max = u64::from(u32::MAX);
    assert_eq!(
        sem_resize(&mut conn, &keys, max, KEEP, false)
            .await
            .unwrap(),
        2
    );
    let count = stored(&mut conn, &keys).await.unwrap();
    assert!(count.starts_with(&format!("{max}!")), "{count}");
}
