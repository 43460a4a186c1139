//! Least privilege: every library path works as a Redis ACL user that may run only the
//! commands redlease sends and the scripts call, on redlease's own keys and channels; and a
//! missing permission is a clear `Error::Redis` (NOPERM), not a hang or a panic.
//!
//! The servers here disable the `default` user, so nothing works without credentials. The
//! ACL line under test is the one of `docs/SECURITY.md`.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::collections::HashMap;
use std::error::Error as _;
use std::time::Duration;

use common::acl::{ADMIN_PASSWORD, PASSWORD, RULES, acl_server, admin, options, url, without};
use common::{bounded, eventually, no_polling};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Owner, Renewal};
use redlease_local::{Nodes, RedisServer};

async fn connect(server: &RedisServer) -> Client {
    bounded("connect", Client::connect(&url(server)))
        .await
        .unwrap_or_else(|e| panic!("cannot connect as the ACL user: {e:?}"))
}

/// The whole error chain on one line, as the CLI prints it.
fn chain(err: &Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

async fn script_flush(conn: &mut redis::aio::MultiplexedConnection) {
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(conn)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_default_user_is_off_and_the_acl_user_may_not_do_more() {
    let server = acl_server(RULES);
    // No credentials: refused.
    let err = bounded(
        "connect without credentials",
        Client::connect(&server.url()),
    )
    .await;
    if let Ok(c) = err {
        // A lazily authenticated connection fails on its first command instead.
        assert!(c.lock("x").try_acquire().await.is_err());
    }
    // The ACL user cannot read or write keys outside the patterns, not even from a script
    // of its own (`EVAL` is allowed, for a call that met NOSCRIPT: `SCRIPT LOAD` and
    // `EVALSHA` ran any script before; a script has its caller's permissions).
    let mut conn = redis::Client::open(url(&server))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let e = conn.set::<_, _, ()>("app:data", "1").await.unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
    let e = redis::cmd("EVAL")
        .arg("return redis.call('SET', KEYS[1], '1')")
        .arg(1)
        .arg("app:data")
        .query_async::<()>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
    let set: Option<String> = admin(&server).await.get("app:data").await.unwrap();
    assert_eq!(set, None);
    let e = redis::cmd("FLUSHALL")
        .query_async::<()>(&mut conn)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("NOPERM"), "{e}");
}

#[tokio::test]
async fn every_single_redis_path_works_as_the_acl_user() {
    let server = acl_server(RULES);
    let c = connect(&server).await;
    let rival = connect(&server).await;
    let mut adm = admin(&server).await;

    // try_acquire, busy, release; fencing tokens grow.
    let g1 = c.lock("acl").try_acquire().await.unwrap().unwrap();
    assert!(rival.lock("acl").try_acquire().await.unwrap().is_none());
    let f1 = g1.fencing_token();
    g1.release().await.unwrap();
    let mut g2 = c
        .lock("acl")
        .renewal(Renewal::Fixed)
        .ttl(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(g2.fencing_token() > f1);

    // extend.
    let key = c.lock("acl").keys().unwrap().key().to_owned();
    g2.extend(Duration::from_secs(60)).await.unwrap();
    assert!(g2.owned().await.unwrap(), "asked as the ACL user");
    let pttl: i64 = adm.pttl(&key).await.unwrap();
    assert!(pttl > 5_000, "extend did not take: pttl {pttl}");

    // A waiter that gives up leaves the queue (HDEL, LREM in release.lua).
    let err = rival
        .lock("acl")
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    eventually("the waiter to leave the queue", || {
        let mut adm = adm.clone();
        async move {
            let keys = redlease::LockKeys::new("redlease:", "acl").unwrap();
            let queued: i64 = adm.llen(keys.queue()).await.unwrap();
            let waiters: i64 = adm.hlen(keys.waiters()).await.unwrap();
            queued == 0 && waiters == 0
        }
    })
    .await;

    // A queued waiter is handed the lock over pub/sub (its polling is too slow to matter).
    let waiter = {
        let rival = rival.clone();
        tokio::spawn(async move {
            rival
                .lock("acl")
                .retry(no_polling())
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    eventually("the waiter to queue", || async {
        rival.stats().waiting == 1
    })
    .await;
    let f2 = g2.fencing_token();
    g2.release().await.unwrap();
    let handed = bounded("hand-off", waiter).await.unwrap().unwrap();
    assert!(handed.fencing_token() > f2);
    handed.release().await.unwrap();

    // Reentrancy: a nested acquisition of the same owner re-enters.
    Owner::new()
        .scope(async {
            let outer = c.lock("acl-nested").acquire().await.unwrap();
            let inner = c.lock("acl-nested").acquire().await.unwrap();
            assert_eq!(inner.fencing_token(), outer.fencing_token());
            inner.release().await.unwrap();
            outer.release().await.unwrap();
        })
        .await;

    // Renewal: a section three times its lease keeps the lock.
    let ttl = Duration::from_millis(300);
    let before = c.stats().renewal_round_trips;
    c.lock("acl-renewed")
        .ttl(ttl)
        .run(async |guard| {
            for _ in 0..9 {
                tokio::time::sleep(ttl / 3).await;
                assert!(guard.is_held());
            }
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    assert!(c.stats().renewal_round_trips >= before + 3);

    // An admin flushes the scripts: every script is loaded again (SCRIPT LOAD), including
    // renewal's pipeline.
    script_flush(&mut adm).await;
    let mut g = c.lock("acl").acquire().await.unwrap();
    script_flush(&mut adm).await;
    g.extend(Duration::from_secs(10)).await.unwrap();
    script_flush(&mut adm).await;
    g.release().await.unwrap();
    script_flush(&mut adm).await;
    c.lock("acl-renewed")
        .ttl(ttl)
        .run(async |guard| {
            tokio::time::sleep(ttl).await;
            assert!(guard.is_held());
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    assert_nothing_denied(&server).await;
}

#[tokio::test]
async fn semaphores_and_read_write_locks_work_as_the_acl_user() {
    let server = acl_server(RULES);
    let c = connect(&server).await;
    let rival = connect(&server).await;
    let mut adm = admin(&server).await;
    script_flush(&mut adm).await;

    // Semaphore: acquire, busy, hand-off to a queued waiter, renewal, extend, release.
    let semaphore = c
        .semaphore("acl-sem", 1)
        .ttl(Duration::from_millis(300))
        .wait(Duration::from_secs(10))
        .retry(no_polling());
    let mut permit = semaphore.acquire().await.unwrap();
    assert!(
        rival
            .semaphore("acl-sem", 1)
            .try_acquire()
            .await
            .unwrap()
            .is_none()
    );
    let waiter = tokio::spawn({
        let semaphore = rival.semaphore("acl-sem", 1).wait(Duration::from_secs(10));
        async move { semaphore.acquire().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(permit.is_held(), "renewed as the ACL user");
    assert!(permit.owned().await.unwrap(), "asked as the ACL user");
    permit.extend(Duration::from_secs(5)).await.unwrap();
    permit.release().await.unwrap();
    bounded("the handed-off permit", waiter)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Read-write lock: readers share, a writer waits, downgrade.
    let lock = c.rwlock("acl-rw").wait(Duration::from_secs(10));
    let read = lock.read().acquire().await.unwrap();
    let other = rival.rwlock("acl-rw").read().acquire().await.unwrap();
    assert!(lock.write().try_acquire().await.unwrap().is_none());
    read.release().await.unwrap();
    other.release().await.unwrap();
    let write = lock.write().acquire().await.unwrap();
    assert!(write.owned().await.unwrap());
    let read = write.downgrade().await.unwrap();
    read.release().await.unwrap();
    assert_nothing_denied(&server).await;
}

#[tokio::test]
async fn multi_locks_and_elections_work_as_the_acl_user() {
    let server = acl_server(RULES);
    let c = connect(&server).await;
    let mut adm = admin(&server).await;
    script_flush(&mut adm).await;
    // At once (one script), then one by one behind a busy name.
    let all = c.multi_lock(["acl-a", "acl-b"]).acquire().await.unwrap();
    all.release().await.unwrap();
    let b = c.lock("acl-b").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let multi = c
            .multi_lock(["acl-a", "acl-b"])
            .wait(Duration::from_secs(10));
        async move { multi.acquire().await.unwrap() }
    });
    b.release().await.unwrap();
    bounded("the multi-lock", waiter)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // An election: campaign, who leads, observe, resign.
    let election = c.election("acl-leader");
    let leadership = election.campaign("node-1").await.unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(leader.term, leadership.term());
    let mut observed = Box::pin(election.observe());
    let first = bounded(
        "the first observation",
        futures_util::StreamExt::next(&mut observed),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(first.map(|l| l.note), Some("node-1".to_owned()));
    leadership.resign().await.unwrap();
    assert_nothing_denied(&server).await;
}

#[tokio::test]
async fn min_replicas_waits_for_a_replica_as_the_acl_user() {
    let primary = acl_server(RULES);
    // The replica authenticates to its primary as the admin (replication is not redlease's
    // business, and its user needs no replication rights).
    let _replica = RedisServer::start_with(
        options(RULES)
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(primary.port().to_string())
            .arg("--masteruser")
            .arg("admin")
            .arg("--masterauth")
            .arg(ADMIN_PASSWORD),
    )
    .unwrap();
    let adm = admin(&primary).await;
    eventually("the replica to connect", || {
        let mut adm = adm.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut adm)
                .await
                .unwrap();
            info.contains("connected_slaves:1") && info.contains("state=online")
        }
    })
    .await;
    let c = connect(&primary).await;
    let guard = c
        .lock("acl-replicated")
        // "online" on the primary does not mean the replica has loaded the snapshot and
        // acknowledges: on a slow disk that has taken seconds.
        .min_replicas(1, Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_quorum_of_acl_nodes_works_as_the_acl_user() {
    let nodes = Nodes::start_with(3, &options(RULES)).unwrap();
    let urls: Vec<String> = nodes.servers().iter().map(url).collect();
    let quorum = |urls: Vec<String>| async move {
        bounded(
            "quorum connect",
            Client::quorum_builder(&urls)
                .response_timeout(Duration::from_millis(500))
                .connect(),
        )
        .await
        .unwrap()
    };
    let c = quorum(urls.clone()).await;
    let rival = quorum(urls).await;

    let mut g = c
        .lock("acl-q")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    assert!(rival.lock("acl-q").try_acquire().await.unwrap().is_none());
    g.extend(Duration::from_secs(60)).await.unwrap();
    // A waiter woken by the release notice on every node (not by polling).
    let waiter = {
        let rival = rival.clone();
        tokio::spawn(async move {
            rival
                .lock("acl-q")
                .retry(no_polling())
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        })
    };
    eventually("the waiter to listen", || async {
        rival.stats().waiting == 1
    })
    .await;
    let keys = redlease::LockKeys::new("redlease:", "acl-q").unwrap();
    let channel = keys.channel();
    for node in nodes.servers() {
        let mut adm = admin(node).await;
        eventually("the waiter to subscribe on every node", || {
            let mut adm = adm.clone();
            async move {
                let (_, n): (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut adm)
                    .await
                    .unwrap();
                n == 1
            }
        })
        .await;
        // Scripts flushed on every node: the next calls load them again.
        script_flush(&mut adm).await;
    }
    let f = g.fencing_token();
    g.release().await.unwrap();
    let next = bounded("woken by the release notice", waiter)
        .await
        .unwrap()
        .unwrap();
    assert!(next.fencing_token() > f);
    next.release().await.unwrap();
    // The last waiter gone, its subscriptions are given back (UNSUBSCRIBE).
    for node in nodes.servers() {
        let adm = admin(node).await;
        eventually("the waiter to unsubscribe on every node", || {
            let mut adm = adm.clone();
            async move {
                let (_, n): (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(channel)
                    .query_async(&mut adm)
                    .await
                    .unwrap();
                n == 0
            }
        })
        .await;
    }
    // Renewal over the quorum.
    let ttl = Duration::from_millis(600);
    c.lock("acl-q")
        .ttl(ttl)
        .run(async |guard| {
            tokio::time::sleep(ttl * 2).await;
            assert!(guard.is_held());
            Ok::<_, Error>(())
        })
        .await
        .unwrap();
    // Nothing was refused on the way and ridden out by a retry (a script calling a
    // command outside the rules fails on that node, and a quorum may still get by).
    // First the work a quorum finishes in the background (the last node's release, after
    // a majority answered) is waited for, so that its commands are in the logs too: the
    // key is gone from every node (released, or run out: then the log shows why).
    gone_from_every_node(&nodes, "redlease:acl-q").await;
    for node in nodes.servers() {
        assert_nothing_denied(node).await;
    }
}

/// Waits until `key` is on none of `nodes` (read as the admin).
async fn gone_from_every_node(nodes: &Nodes, key: &str) {
    let mut admins = Vec::new();
    for node in nodes.servers() {
        admins.push(admin(node).await);
    }
    eventually(&format!("`{key}` to leave every node"), || {
        let mut admins = admins.clone();
        async move {
            for conn in &mut admins {
                if conn.exists::<_, bool>(key).await.unwrap() {
                    return false;
                }
            }
            true
        }
    })
    .await;
}

/// Asserts that the server's `ACL LOG` is empty: no command, key or channel was refused,
/// but for redis-rs's `CLIENT SETINFO` at connect, whose answer it ignores (logged by Redis
/// 6.2 as `client`, by 7.2+ and Valkey as `client|setinfo`; see docs/SECURITY.md).
async fn assert_nothing_denied(server: &RedisServer) {
    let log: Vec<HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin(server).await)
        .await
        .unwrap();
    let refused: Vec<_> = log
        .iter()
        .filter(|entry| {
            !matches!(
                entry.get("object"),
                Some(redis::Value::BulkString(o)) if o == b"client" || o == b"client|setinfo"
            )
        })
        .collect();
    assert!(refused.is_empty(), "the ACL user was refused: {refused:?}");
}

/// Asserts `err` is `Error::Redis` that says a permission is missing, and mentions `what`.
fn assert_noperm(err: &Error, what: &str) {
    assert!(matches!(err, Error::Redis { .. }), "{err:?}");
    let text = chain(err);
    assert!(
        text.contains("the Redis ACL user lacks a permission that redlease needs"),
        "{text}"
    );
    assert!(
        text.to_lowercase().contains(&what.to_lowercase()),
        "`{what}` missing from: {text}"
    );
    assert!(!text.contains(PASSWORD), "{text}");
}

#[tokio::test]
async fn a_missing_command_is_a_clear_noperm_error() {
    let server = acl_server(&without("+evalsha"));
    let c = connect(&server).await;
    let err = bounded("try_acquire without EVALSHA", c.lock("x").try_acquire())
        .await
        .unwrap_err();
    assert_noperm(&err, "evalsha");
    let err = bounded("acquire without EVALSHA", c.lock("x").acquire())
        .await
        .unwrap_err();
    assert_noperm(&err, "evalsha");
}

/// The least-privilege line of earlier versions had no `+eval`: a call that meets
/// `NOSCRIPT` is then refused its `EVAL`, and gets through by `EVALSHA` again after the
/// `SCRIPT LOAD` sent with it.
#[tokio::test]
async fn without_eval_a_flushed_script_still_runs() {
    let server = acl_server(&without("+eval"));
    let c = connect(&server).await;
    let mut adm = admin(&server).await;
    let g = c.lock("no-eval").acquire().await.unwrap();
    script_flush(&mut adm).await;
    g.release().await.unwrap();
    script_flush(&mut adm).await;
    let g = c.lock("no-eval").acquire().await.unwrap();
    g.release().await.unwrap();
}

#[tokio::test]
async fn a_command_the_scripts_need_is_a_clear_noperm_error() {
    let server = acl_server(&without("+time"));
    let c = connect(&server).await;
    let err = bounded("acquire without TIME", c.lock("x").acquire())
        .await
        .unwrap_err();
    // Redis 7.0 does not name the command a script may not run: the error names the script.
    assert_noperm(&err, "acquire.lua");
}

#[tokio::test]
async fn a_key_outside_the_patterns_is_a_clear_noperm_error() {
    let server = acl_server(RULES);
    let c = connect(&server).await;
    let err = bounded(
        "acquire with another prefix",
        c.lock("x").prefix("app:").try_acquire(),
    )
    .await
    .unwrap_err();
    // "No permissions to access a key" (Redis 7.2+, Valkey), "... access one of the keys" (7.0)
    assert_noperm(&err, "key");
}

#[tokio::test]
async fn without_channel_rights_waiters_fall_back_to_polling() {
    let rules: Vec<&str> = RULES
        .iter()
        .copied()
        .filter(|r| !r.starts_with('&'))
        .collect();
    let server = acl_server(&rules);
    let c = connect(&server).await;
    let rival = connect(&server).await;
    let g = c
        .lock("acl-poll")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = {
        let rival = rival.clone();
        tokio::spawn(async move {
            rival
                .lock("acl-poll")
                .retry(redlease::Retry::new(
                    Duration::from_millis(1),
                    Duration::from_millis(20),
                ))
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        })
    };
    g.release().await.unwrap();
    let next = bounded("a polling waiter", waiter).await.unwrap().unwrap();
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_fails_fast_without_echoing_it() {
    let server = acl_server(RULES);
    let bad = format!(
        "redis://redlease:not-{PASSWORD}@127.0.0.1:{}",
        server.port()
    );
    let err = bounded("connect with a wrong password", Client::connect(&bad))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Auth { .. }), "{err:?}");
    let text = format!("{} {err:?}", chain(&err));
    assert!(!text.contains(PASSWORD), "{text}");
    assert!(
        text.contains("WRONGPASS") || text.to_lowercase().contains("auth"),
        "{text}"
    );
}

/// Puts a queue place whose client is gone ahead of the waiters of the lock at `keys` (what a release
/// finds while a waiter's grant subscription is reconnecting or following a failover).
async fn place_of_a_gone_client(server: &RedisServer, keys: &redlease::LockKeys) {
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(keys.waiters())
        .arg("gone")
        .arg(r#"{"ttl":"30000","ch":"redlease:grant:gone","who":"gone","since":"0"}"#)
        .ignore()
        .cmd("LPUSH")
        .arg(keys.queue())
        .arg("gone")
        .ignore()
        .query_async(&mut admin(server).await)
        .await
        .unwrap();
}

/// A release that skips a waiter no one listens for puts its place back (`LPUSH`) and
/// hands the lock to the next waiter; without `+lpush` it is a clear NOPERM.
#[tokio::test]
async fn a_release_that_skips_a_waiter_needs_lpush() {
    for (rules, works) in [(RULES.to_vec(), true), (without("+lpush"), false)] {
        let server = acl_server(&rules);
        let holder = connect(&server).await;
        let waiter = connect(&server).await;
        let lock = holder.lock("skipped").ttl(Duration::from_secs(30));
        let keys = lock.keys().unwrap();
        let queue = keys.queue().to_owned();
        let held = bounded("acquire", lock.acquire()).await.unwrap();
        let waiting = waiter.lock("skipped").wait(Duration::from_secs(30));
        let waiting = tokio::spawn(async move { waiting.acquire().await });
        let mut conn = admin(&server).await;
        eventually("the waiter queued", || {
            let mut conn = conn.clone();
            let queue = queue.clone();
            async move { conn.llen::<_, i64>(&queue).await.unwrap() == 1 }
        })
        .await;
        place_of_a_gone_client(&server, &keys).await;
        let released = bounded("release", held.release()).await;
        if !works {
            assert_noperm(&released.unwrap_err(), "release.lua");
            waiting.abort();
            continue;
        }
        released.unwrap();
        let guard = bounded("the waiter is handed the lock", waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(guard.is_held());
        let left: Vec<String> = conn.lrange(&queue, 0, -1).await.unwrap();
        assert_eq!(left, ["gone"], "the skipped place is kept");
        guard.release().await.unwrap();
    }
}
