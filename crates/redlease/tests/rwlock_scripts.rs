//! The read-write lock's scripts (`rw_acquire.lua`, `rw_release.lua`, `rw_downgrade.lua`,
//! `lease_extend.lua`, `lease_renew.lua`) run through plain redis-rs against a real
//! redis-server, before the engine is wired to them: readers overlap, a writer excludes
//! everyone, writer preference, readers granted together, upgrade refused, downgrade,
//! fencing, reclaim of expired holds, conflicts with other primitives, idle expiry.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::similar_names,
    reason = "tests fail loudly"
)]

mod common;
mod prims;

use prims::{
    Keys, Listener, exists, extend, lrange, pttl, renew, rw_acquire, rw_downgrade, rw_release,
    score, sem_acquire, server_error, until_expired, zcard,
};

const LONG: u64 = 60_000;
const LINGER: u64 = 60_000;

async fn mode(conn: &mut redis::aio::MultiplexedConnection, keys: &Keys) -> Option<String> {
    redis::cmd("HGET")
        .arg(&keys.key)
        .arg("mode")
        .query_async(conn)
        .await
        .unwrap()
}

/// An attempt of `token` to hold `mode` for [`LONG`], taking no queue place.
async fn attempt(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
    token: &str,
    mode: &str,
) -> prims::Reply {
    rw_acquire(conn, keys, token, LONG, mode, None)
        .await
        .unwrap()
}

fn owners(keys: &Keys) -> String {
    keys.rw()[5].clone()
}

#[tokio::test]
async fn readers_overlap() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:readers");
    for token in ["r1", "r2", "r3"] {
        let (status, fence, _) = attempt(&mut conn, &keys, token, "read").await;
        assert_eq!(status, 1, "{token} reads beside the others");
        assert!(fence > 0);
    }
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 3);
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("read"));
    // A retried attempt is answered with its own hold's token.
    let (_, fence, _) = attempt(&mut conn, &keys, "r4", "read").await;
    assert_eq!(attempt(&mut conn, &keys, "r4", "read").await, (2, fence, 0));
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 4);
}

#[tokio::test]
async fn a_writer_excludes_readers_and_writers() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:writer");
    let (status, fence, _) = attempt(&mut conn, &keys, "w", "write").await;
    assert_eq!(status, 1);
    for (token, want) in [("r", "read"), ("w2", "write")] {
        let (status, _, pttl) = rw_acquire(&mut conn, &keys, token, LONG, want, None)
            .await
            .unwrap();
        assert_eq!(status, 0, "{token} ({want}) must wait for the writer");
        assert!(pttl > 0, "{pttl}");
    }
    assert_eq!(
        attempt(&mut conn, &keys, "w", "write").await,
        (2, fence, 0),
        "a retried write attempt"
    );
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 1);
    assert_eq!(rw_release(&mut conn, &keys, "w", false).await.unwrap(), 1);
    assert_eq!(rw_release(&mut conn, &keys, "w", false).await.unwrap(), 0);
    // Readers in: now a writer waits for them.
    attempt(&mut conn, &keys, "r", "read").await;
    assert_eq!(attempt(&mut conn, &keys, "w2", "write").await.0, 0);
}

#[tokio::test]
async fn a_queued_writer_stops_new_readers_and_gets_the_lock_from_the_last_reader() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:no-starvation");
    for token in ["r1", "r2"] {
        attempt(&mut conn, &keys, token, "read").await;
    }
    let mut writer = Listener::new(&server, "grant:w").await;
    assert_eq!(
        rw_acquire(
            &mut conn,
            &keys,
            "w",
            LONG,
            "write",
            Some(("grant:w", LINGER))
        )
        .await
        .unwrap()
        .0,
        0
    );
    // A stream of new readers cannot pass the queued writer, queued or not.
    assert_eq!(attempt(&mut conn, &keys, "late", "read").await.0, 0);
    assert_eq!(
        rw_acquire(
            &mut conn,
            &keys,
            "late2",
            LONG,
            "read",
            Some(("grant:l", LINGER))
        )
        .await
        .unwrap()
        .0,
        0
    );
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 2);
    rw_release(&mut conn, &keys, "r1", false).await.unwrap();
    assert_eq!(
        score(&mut conn, &owners(&keys), "w").await,
        None,
        "r2 still reads"
    );
    rw_release(&mut conn, &keys, "r2", false).await.unwrap();
    let (_, token, key) = writer.grant().await;
    assert_eq!((token.as_str(), key.as_str()), ("w", keys.key.as_str()));
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("write"));
    assert!(score(&mut conn, &owners(&keys), "w").await.is_some());
    assert_eq!(lrange(&mut conn, &keys.rw()[3]).await, ["late2"]);
}

#[tokio::test]
async fn readers_queued_together_are_granted_together() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:group");
    let (_, writer_fence, _) = attempt(&mut conn, &keys, "w", "write").await;
    let mut readers = Listener::new(&server, "grant:readers").await;
    let mut w2 = Listener::new(&server, "grant:w2").await;
    let queue = [
        ("r1", "read", "grant:readers"),
        ("r2", "read", "grant:readers"),
        ("w2", "write", "grant:w2"),
        ("r3", "read", "grant:readers"),
    ];
    for (token, want, channel) in queue {
        assert_eq!(
            rw_acquire(&mut conn, &keys, token, LONG, want, Some((channel, LINGER)))
                .await
                .unwrap()
                .0,
            0
        );
    }
    assert_eq!(rw_release(&mut conn, &keys, "w", false).await.unwrap(), 1);
    // One release grants the whole run of readers at the head, one message each.
    let (f1, t1, _) = readers.grant().await;
    let (f2, t2, _) = readers.grant().await;
    assert_eq!((t1.as_str(), t2.as_str()), ("r1", "r2"));
    assert!(writer_fence < f1 && f1 < f2, "{writer_fence} {f1} {f2}");
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 2);
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("read"));
    // r3 came after the writer w2: it waits for w2, which waits for r1 and r2.
    assert_eq!(lrange(&mut conn, &keys.rw()[3]).await, ["w2", "r3"]);
    rw_release(&mut conn, &keys, "r1", false).await.unwrap();
    rw_release(&mut conn, &keys, "r2", false).await.unwrap();
    let (f3, t3, _) = w2.grant().await;
    assert_eq!(t3, "w2");
    assert!(f3 > f2);
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("write"));
    rw_release(&mut conn, &keys, "w2", false).await.unwrap();
    let (f4, t4, _) = readers.grant().await;
    assert_eq!(t4, "r3");
    assert!(f4 > f3);
}

#[tokio::test]
async fn an_upgrade_is_refused_not_waited_for() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:upgrade");
    let (_, fence, _) = attempt(&mut conn, &keys, "r", "read").await;
    for join in [None, Some(("grant:r", LINGER))] {
        let (code, text) =
            server_error(rw_acquire(&mut conn, &keys, "r", LONG, "write", join).await);
        assert_eq!(code, "REDLEASE_UPGRADE", "{text}");
        assert!(text.contains("cannot be upgraded"), "{text}");
    }
    assert!(!exists(&mut conn, &keys.rw()[3]).await, "nothing queued");
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("read"));
    assert_eq!(
        attempt(&mut conn, &keys, "r", "read").await,
        (2, fence, 0),
        "still reading"
    );
    // Other readers are unaffected.
    assert_eq!(attempt(&mut conn, &keys, "r2", "read").await.0, 1);
}

#[tokio::test]
async fn a_downgrade_keeps_the_token_and_lets_queued_readers_in() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:downgrade");
    let (_, fence, _) = attempt(&mut conn, &keys, "w", "write").await;
    let mut readers = Listener::new(&server, "grant:r").await;
    for (token, want) in [("r1", "read"), ("r2", "read"), ("w2", "write")] {
        rw_acquire(
            &mut conn,
            &keys,
            token,
            LONG,
            want,
            Some(("grant:r", LINGER)),
        )
        .await
        .unwrap();
    }
    let before = score(&mut conn, &owners(&keys), "w").await;
    assert_eq!(rw_downgrade(&mut conn, &keys, "w").await.unwrap(), 1);
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("read"));
    let (f1, t1, _) = readers.grant().await;
    let (_, t2, _) = readers.grant().await;
    assert_eq!((t1.as_str(), t2.as_str()), ("r1", "r2"));
    assert!(f1 > fence);
    // The downgraded hold keeps its token; asked again, its lease is set again from now
    // (so that the asker may date it from that attempt); the queued writer still waits.
    assert_eq!(attempt(&mut conn, &keys, "w", "read").await, (2, fence, 0));
    assert!(score(&mut conn, &owners(&keys), "w").await >= before);
    assert_eq!(score(&mut conn, &owners(&keys), "w2").await, None);
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 3);
    // Retried, it is still a read hold.
    assert_eq!(rw_downgrade(&mut conn, &keys, "w").await.unwrap(), 1);
    // A token that holds nothing has nothing to downgrade.
    assert_eq!(rw_downgrade(&mut conn, &keys, "nobody").await.unwrap(), 0);
    // Now a reader of the downgraded lock, it cannot upgrade back.
    assert_eq!(
        server_error(rw_acquire(&mut conn, &keys, "w", LONG, "write", None).await).0,
        "REDLEASE_UPGRADE"
    );
}

#[tokio::test]
async fn a_writer_that_asks_for_read_keeps_its_write_hold() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:write-then-read");
    let (_, fence, _) = attempt(&mut conn, &keys, "w", "write").await;
    assert_eq!(attempt(&mut conn, &keys, "w", "read").await, (2, fence, 0));
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("write"));
}

#[tokio::test]
async fn expired_holds_are_reclaimed() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:reclaim");
    rw_acquire(&mut conn, &keys, "crashed-reader", 50, "read", None)
        .await
        .unwrap();
    attempt(&mut conn, &keys, "live-reader", "read").await;
    until_expired(&conn, &owners(&keys), "crashed-reader").await;
    assert_eq!(
        zcard(&mut conn, &owners(&keys)).await,
        2,
        "not yet reclaimed"
    );
    // The live reader keeps the keys alive: the script itself drops the crashed hold.
    attempt(&mut conn, &keys, "another-reader", "read").await;
    assert_eq!(
        zcard(&mut conn, &owners(&keys)).await,
        2,
        "crashed hold dropped"
    );
    assert_eq!(
        score(&mut conn, &owners(&keys), "crashed-reader").await,
        None
    );
    rw_release(&mut conn, &keys, "another-reader", false)
        .await
        .unwrap();
    rw_release(&mut conn, &keys, "live-reader", false)
        .await
        .unwrap();
    assert_eq!(
        rw_acquire(&mut conn, &keys, "w", 50, "write", None)
            .await
            .unwrap()
            .0,
        1,
        "the crashed reader's hold is gone"
    );
    until_expired(&conn, &owners(&keys), "w").await;
    assert_eq!(
        attempt(&mut conn, &keys, "r", "read").await.0,
        1,
        "the crashed writer's hold is gone"
    );
    assert_eq!(mode(&mut conn, &keys).await.as_deref(), Some("read"));
    let holders: Vec<String> = redis::cmd("HKEYS")
        .arg(&keys.rw()[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(holders, ["r"]);
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_grants() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:fence");
    let mut listener = Listener::new(&server, "grant:f").await;
    let mut last = 0;
    for round in 0..4 {
        let r = format!("r{round}");
        let (_, fence, _) = attempt(&mut conn, &keys, &r, "read").await;
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        let w = format!("w{round}");
        rw_acquire(
            &mut conn,
            &keys,
            &w,
            LONG,
            "write",
            Some(("grant:f", LINGER)),
        )
        .await
        .unwrap();
        rw_release(&mut conn, &keys, &r, false).await.unwrap();
        let (fence, token, _) = listener.grant().await;
        assert_eq!(token, w);
        assert!(fence > last, "hand-off {fence} after {last}");
        last = fence;
        rw_release(&mut conn, &keys, &w, false).await.unwrap();
    }
}

#[tokio::test]
async fn extend_and_renew_report_lost_holds() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:renew");
    let sem = Keys::new("rw:renew-sem");
    let lease = keys.rw_lease();
    rw_acquire(&mut conn, &keys, "short", 50, "read", None)
        .await
        .unwrap();
    rw_acquire(&mut conn, &keys, "live", 1_000, "read", None)
        .await
        .unwrap();
    sem_acquire(&mut conn, &sem, "permit", 1_000, 1, None)
        .await
        .unwrap();
    assert_eq!(extend(&mut conn, &lease, "live", LONG).await.unwrap(), 1);
    for key in &lease {
        assert!(pttl(&mut conn, key).await > 50_000, "{key} lives as long");
    }
    until_expired(&conn, &owners(&keys), "short").await;
    assert_eq!(extend(&mut conn, &lease, "short", LONG).await.unwrap(), 0);
    // Mixed kinds in one renewal call.
    let renewed = renew(
        &mut conn,
        &[
            (&lease, "short", LONG),
            (&sem.sem_lease(), "permit", LONG),
            (&lease, "live", LONG),
            (&lease, "never", LONG),
        ],
    )
    .await
    .unwrap();
    assert_eq!(renewed, [0, 1, 1, 0]);
    assert!(pttl(&mut conn, &sem.key).await > 50_000);
}

#[tokio::test]
async fn a_rwlock_refuses_a_mutex_and_a_semaphore_of_the_same_name() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("shared:rw");

    // Read-write lock first.
    attempt(&mut conn, &keys, "r", "read").await;
    assert_eq!(
        server_error(prims::mutex_acquire(&mut conn, &keys, "m").await).0,
        "WRONGTYPE"
    );
    assert_eq!(
        server_error(sem_acquire(&mut conn, &keys, "s", LONG, 2, None).await).0,
        "WRONGTYPE"
    );
    assert!(
        !exists(&mut conn, &keys.sem()[5]).await,
        "no semaphore state written"
    );
    assert_eq!(rw_release(&mut conn, &keys, "r", false).await.unwrap(), 1);
    assert!(!exists(&mut conn, &keys.key).await);

    // Mutex first.
    assert_eq!(
        prims::mutex_acquire(&mut conn, &keys, "m").await.unwrap().0,
        1
    );
    for want in ["read", "write"] {
        let (code, text) = server_error(
            rw_acquire(&mut conn, &keys, "r", LONG, want, Some(("grant:r", LINGER))).await,
        );
        assert_eq!(code, "WRONGTYPE", "{text}");
    }
    assert_eq!(
        server_error(rw_release(&mut conn, &keys, "m", false).await).0,
        "WRONGTYPE"
    );
    assert_eq!(
        server_error(rw_downgrade(&mut conn, &keys, "m").await).0,
        "WRONGTYPE"
    );
    for side in &keys.rw()[2..] {
        assert!(!exists(&mut conn, side).await, "{side} was written");
    }
    let release = prims::mutex_release(&mut conn, &keys, "m").await.unwrap();
    assert_eq!(release, 1);

    // Semaphore first.
    sem_acquire(&mut conn, &keys, "s", LONG, 2, None)
        .await
        .unwrap();
    assert_eq!(
        server_error(rw_acquire(&mut conn, &keys, "r", LONG, "write", None).await).0,
        "WRONGTYPE"
    );
}

#[tokio::test]
async fn a_waiter_that_gives_up_lets_the_readers_behind_it_in() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:withdraw");
    attempt(&mut conn, &keys, "r1", "read").await;
    let mut reader = Listener::new(&server, "grant:r2").await;
    // The writer's client listens (a writer whose client is gone stops counting at once).
    let _writer = Listener::new(&server, "grant:w").await;
    rw_acquire(
        &mut conn,
        &keys,
        "w",
        LONG,
        "write",
        Some(("grant:w", LINGER)),
    )
    .await
    .unwrap();
    rw_acquire(
        &mut conn,
        &keys,
        "r2",
        LONG,
        "read",
        Some(("grant:r2", LINGER)),
    )
    .await
    .unwrap();
    // The writer gives up: its withdrawal lets the reader queued behind it in at once.
    assert_eq!(rw_release(&mut conn, &keys, "w", false).await.unwrap(), 0);
    let (_, token, _) = reader.grant().await;
    assert_eq!(token, "r2");
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 2);
    assert!(!exists(&mut conn, &keys.rw()[3]).await);
}

#[tokio::test]
async fn the_release_channel_hears_when_the_lock_is_free() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:announce");
    let mut released = Listener::new(&server, &keys.channel()).await;
    for token in ["r1", "r2"] {
        attempt(&mut conn, &keys, token, "read").await;
    }
    rw_release(&mut conn, &keys, "r1", true).await.unwrap();
    rw_release(&mut conn, &keys, "r2", true).await.unwrap();
    attempt(&mut conn, &keys, "w", "write").await;
    rw_release(&mut conn, &keys, "w", true).await.unwrap();
    let () = redis::cmd("PUBLISH")
        .arg(keys.channel())
        .arg("end")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut heard = Vec::new();
    loop {
        let payload = released.payload().await;
        if payload == "end" {
            break;
        }
        heard.push(payload);
    }
    // Only the releases that left the lock free were announced (not r1's).
    assert_eq!(heard, [keys.key.clone(), keys.key.clone()]);
}

#[tokio::test]
async fn every_key_expires_when_the_lock_is_idle() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:idle");
    attempt(&mut conn, &keys, "w", "write").await;
    rw_release(&mut conn, &keys, "w", false).await.unwrap();
    for key in &keys.rw() {
        if *key != keys.fence() {
            assert!(!exists(&mut conn, key).await, "{key} left after release");
        }
    }
    for token in ["r1", "r2"] {
        rw_acquire(&mut conn, &keys, token, 100, "read", None)
            .await
            .unwrap();
    }
    rw_acquire(&mut conn, &keys, "w", LONG, "write", Some(("nobody", 300)))
        .await
        .unwrap();
    prims::all_but_the_fence_expire(&mut conn, &keys.rw(), &keys.fence(), 300, "lock").await;
}

#[tokio::test]
async fn every_script_runs_after_script_flush_and_with_eval() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:flush");
    prims::script_flush(&mut conn).await;
    assert_eq!(attempt(&mut conn, &keys, "w", "write").await.0, 1);
    prims::script_flush(&mut conn).await;
    assert_eq!(rw_downgrade(&mut conn, &keys, "w").await.unwrap(), 1);
    prims::script_flush(&mut conn).await;
    assert_eq!(rw_release(&mut conn, &keys, "w", false).await.unwrap(), 1);
    // The EVAL path.
    prims::script_flush(&mut conn).await;
    let rw = keys.rw().to_vec();
    let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let reply = prims::eval(
        &mut conn,
        prims::RW_ACQUIRE,
        &rw,
        &s(&["x", "60000", "d", "write", "no"]),
    )
    .await
    .unwrap();
    // A fresh grant: its fencing token alone.
    assert!(
        matches!(reply, redis::Value::Int(fence) if fence >= 1),
        "{reply:?}"
    );
    let reply = prims::eval(&mut conn, prims::RW_DOWNGRADE, &rw, &s(&["x"]))
        .await
        .unwrap();
    assert_eq!(reply, redis::Value::Int(1));
    let reply = prims::eval(&mut conn, prims::RW_RELEASE, &rw, &s(&["x"]))
        .await
        .unwrap();
    assert_eq!(reply, redis::Value::Int(1));
}

/// A silent join (`ARGV[5] = "silent"`, Cluster waiters): the place keeps later readers out
/// without a hand-off, its waiter takes the lock on its own attempt, and a place whose
/// waiter stops coming back is dropped after its `stale` time.
async fn rw_join_silently(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
    token: &str,
    mode: &str,
    stale_ms: u64,
) -> prims::Reply {
    let script = redis::Script::new(prims::RW_ACQUIRE);
    let mut invocation = script.key(&keys.rw()[..]);
    invocation
        .arg(token)
        .arg(LONG)
        .arg(format!("host of {token}"))
        .arg(mode)
        .arg("silent")
        .arg("")
        .arg(LINGER)
        .arg(stale_ms);
    prims::acquired(&invocation, conn).await.unwrap()
}

#[tokio::test]
async fn a_silent_place_keeps_readers_out_until_its_waiter_takes_it_or_stops_coming() {
    let server = common::server();
    let mut conn = common::raw(&server).await;
    let keys = Keys::new("rw:silent");
    attempt(&mut conn, &keys, "r1", "read").await;
    assert_eq!(
        rw_join_silently(&mut conn, &keys, "w", "write", 60_000)
            .await
            .0,
        0
    );
    // A newcomer reader stays out behind the silent writer.
    let (status, _, _) = attempt(&mut conn, &keys, "r2", "read").await;
    assert_eq!(status, 0, "a reader overtook the silent writer");
    // The last reader leaves: nobody is handed the lock, the writer takes it itself.
    let mut notices = Listener::new(&server, &keys.channel()).await;
    assert_eq!(rw_release(&mut conn, &keys, "r1", true).await.unwrap(), 1);
    notices.payload().await;
    assert_eq!(zcard(&mut conn, &owners(&keys)).await, 0);
    let (status, fence, _) = rw_join_silently(&mut conn, &keys, "w", "write", 60_000).await;
    assert_eq!(status, 1);
    assert!(fence > 0);
    assert_eq!(rw_release(&mut conn, &keys, "w", true).await.unwrap(), 1);

    // A silent place whose waiter never comes back is dropped once stale.
    attempt(&mut conn, &keys, "r3", "read").await;
    assert_eq!(
        rw_join_silently(&mut conn, &keys, "gone", "write", 50)
            .await
            .0,
        0
    );
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    let (status, _, _) = attempt(&mut conn, &keys, "r4", "read").await;
    assert_eq!(status, 1, "a stale silent place still kept readers out");
    assert!(
        !exists(&mut conn, &keys.rw()[3]).await,
        "the stale place is gone"
    );
}
