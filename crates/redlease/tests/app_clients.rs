//! Meeting the code applications already have, against real Redis: a client made from the
//! application's own redis-rs client or connection manager, client-wide defaults that
//! every primitive starts from, guards that ask Redis whether they still hold (`owned`)
//! for every primitive, and an election's `observe()` awaited without pinning.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::Duration;

use common::{bounded, client, quorum_of_three, raw, server};
use futures_util::StreamExt as _;
use redis::AsyncCommands as _;
use redlease::{Client, Error, LeaderChanges, LockKeys, Primitive, Renewal, Wait, redis};

#[tokio::test]
async fn a_client_from_the_apps_redis_client_locks_and_hands_off_like_any_other() {
    let server = server();
    let app_redis = redis::Client::open(server.url()).unwrap();
    let mine = Client::from_redis(app_redis).connect().await.unwrap();
    let other = client(&server).await;

    let guard = mine.lock("shared").acquire().await.unwrap();
    assert!(other.lock("shared").try_acquire().await.unwrap().is_none());
    // A waiter on the application's client is handed the lock over the pub/sub
    // connection redlease opened from that client.
    let handed = common::handed_over(guard, &mine, "shared").await;
    assert!(handed.owned().await.unwrap());
    handed.release().await.unwrap();
}

#[tokio::test]
async fn a_client_on_the_apps_connection_manager_sends_its_commands_there() {
    let server = server();
    let app_redis = redis::Client::open(server.url()).unwrap();
    let mut manager = redis::aio::ConnectionManager::new(app_redis.clone())
        .await
        .unwrap();
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("the-app")
        .query_async(&mut manager)
        .await
        .unwrap();
    let client = Client::from_connection_manager(app_redis, manager)
        .connect()
        .await
        .unwrap();
    let guard = client
        .lock("on-the-apps-connection")
        .acquire()
        .await
        .unwrap();
    // The acquisition's script went over the application's named connection.
    let mut admin = raw(&server).await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut admin)
        .await
        .unwrap();
    let app_line = list
        .lines()
        .find(|l| l.contains("name=the-app"))
        .unwrap_or_else(|| panic!("no connection named the-app in {list}"));
    // The last command there is the script's: EVALSHA, or the SCRIPT LOAD that follows
    // the EVAL of a script the server did not have yet.
    assert!(
        app_line.contains("cmd=evalsha") || app_line.contains("cmd=script|load"),
        "{app_line}"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn client_wide_defaults_apply_to_every_primitive_unless_overridden() {
    let server = server();
    let client = Client::builder(&server.url())
        .prefix("app:")
        .ttl(Duration::from_secs(5))
        .wait(Wait::No)
        .renewal(Renewal::Fixed)
        .connect()
        .await
        .unwrap();
    let mut conn = raw(&server).await;

    let guard = client.lock("job").acquire().await.unwrap();
    let pttl: i64 = conn.pttl("app:job").await.unwrap();
    assert!((4_000..=5_000).contains(&pttl), "pttl {pttl}");
    // The client's wait: none, so a busy lock times out at once.
    let busy = client.lock("job").acquire().await.unwrap_err();
    assert!(matches!(busy, Error::Timeout { .. }), "{busy:?}");
    // The client's prefix for inspection and forced release too; names are passed as
    // any string, as to the builders (`&str`, `String`, `&String`).
    let name = String::from("job");
    let state = client.inspect(&name).await.unwrap();
    assert_eq!(state.key, "app:job");
    assert_eq!(state.snapshot.holders.len(), 1);
    let removed = client.force_release(name).await.unwrap();
    assert_eq!(removed.snapshot.holders.len(), 1);
    assert!(!guard.owned().await.unwrap());
    drop(guard);

    let permit = client.semaphore("pool", 2).acquire().await.unwrap();
    let kind: String = redis::cmd("TYPE")
        .arg("app:pool")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "zset");
    permit.release().await.unwrap();

    // A builder's own options win over the client's.
    let own = client
        .lock("job")
        .prefix("own:")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let pttl: i64 = conn.pttl("own:job").await.unwrap();
    assert!(pttl > 50_000, "pttl {pttl}");
    own.release().await.unwrap();

    // The client's renewal: a fixed lease runs out by itself.
    let fixed = Client::builder(&server.url())
        .ttl(Duration::from_millis(300))
        .renewal(Renewal::Fixed)
        .connect()
        .await
        .unwrap();
    let short = fixed.lock("short").acquire().await.unwrap();
    bounded("the fixed lease runs out", short.lost()).await;
    // Not renewed in Redis either: another client takes it once it expires there.
    let other = common::client(&server).await;
    let next = other
        .lock("short")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert!(next.fencing_token() > short.fencing_token());
}

#[tokio::test]
async fn client_wide_defaults_are_checked_when_connecting() {
    let server = server();
    for builder in [
        Client::builder(&server.url()).ttl(Duration::ZERO),
        Client::builder(&server.url()).wait(Duration::from_secs(31 * 24 * 3600)),
    ] {
        let err = builder.connect().await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { .. }), "{err:?}");
    }
}

#[tokio::test]
async fn owned_asks_redis_for_every_primitive() {
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;

    let lock = client.lock("l").acquire().await.unwrap();
    assert!(lock.owned().await.unwrap());
    let _: () = conn.del("redlease:l").await.unwrap();
    assert!(lock.is_held(), "the guard has not noticed yet");
    assert!(!lock.owned().await.unwrap());
    assert!(!lock.is_held(), "owned() marks the lease lost");

    let permit = client.semaphore("s", 2).acquire().await.unwrap();
    assert!(permit.owned().await.unwrap());
    let _: () = conn.del("redlease:s").await.unwrap();
    assert!(!permit.owned().await.unwrap());

    let rw = client.rwlock("rw");
    let holds = LockKeys::of("redlease:", "rw", Primitive::RwLock).unwrap();
    let holds = holds.holds().unwrap().to_owned();
    let write = rw.write().acquire().await.unwrap();
    assert!(write.owned().await.unwrap());
    let read = write.downgrade().await.unwrap();
    assert!(read.owned().await.unwrap());
    let _: () = conn.del(&holds).await.unwrap();
    assert!(!read.owned().await.unwrap());

    let both = client.multi_lock(["m1", "m2"]).acquire().await.unwrap();
    assert!(both.owned().await.unwrap());
    let _: () = conn.del("redlease:m2").await.unwrap();
    assert!(!both.owned().await.unwrap());

    let leadership = client.election("e").campaign("me").await.unwrap();
    assert!(leadership.owned().await.unwrap());
    let _: () = conn.del("redlease:e").await.unwrap();
    assert!(!leadership.owned().await.unwrap());
    assert!(!leadership.is_leading());
}

#[tokio::test]
async fn owned_over_a_quorum_needs_a_majority() {
    let (nodes, client) = quorum_of_three().await;
    let guard = client.lock("q").acquire().await.unwrap();
    assert!(guard.owned().await.unwrap());
    let mut conns = Vec::new();
    for url in nodes.urls() {
        conns.push(
            redis::Client::open(url.as_str())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        );
    }
    // The acquisition returned at a majority; the last node is granted in the background.
    common::eventually("every node to hold the lock", || {
        let mut conns = conns.clone();
        async move {
            for conn in &mut conns {
                if !conn.exists::<_, bool>("redlease:q").await.unwrap() {
                    return false;
                }
            }
            true
        }
    })
    .await;
    // One node losing the key leaves a majority; two do not.
    for (node, still) in [(0, true), (1, false)] {
        let conn = &mut conns[node];
        let _: () = conn.del("redlease:q").await.unwrap();
        assert_eq!(guard.owned().await.unwrap(), still);
    }
}

#[tokio::test]
async fn observe_is_a_named_unpin_stream() {
    let server = server();
    let client = client(&server).await;
    let election = client.election("watched");
    let mut changes: LeaderChanges = election.observe();
    // `next()` needs `Unpin`: no `pin!` here.
    let first = bounded("the first change", changes.next()).await;
    assert!(matches!(first, Some(Ok(None))), "{first:?}");
    let leadership = election.campaign("leader-a").await.unwrap();
    let second = bounded("the leader", changes.next()).await;
    match second {
        Some(Ok(Some(leader))) => assert_eq!(leader.term, leadership.term()),
        other => panic!("expected the leader, got {other:?}"),
    }
    leadership.resign().await.unwrap();
}

/// Every constructor of both clients type-checks with the argument types applications
/// have (compile test: never run).
#[allow(dead_code, clippy::unused_async)]
async fn every_constructor_takes_what_applications_have(
    app: redis::Client,
    manager: redis::aio::ConnectionManager,
    #[cfg(feature = "cluster")] cluster: redis::cluster_async::ClusterConnection,
) -> redlease::Result<()> {
    let seeds = ["redis://10.0.0.1:7000"];
    let _ = Client::from_redis(app.clone())
        .prefix("p:")
        .connect()
        .await?;
    let _ = Client::from_connection_manager(app.clone(), manager.clone())
        .connect()
        .await?;
    #[cfg(feature = "cluster")]
    let _ = Client::cluster_from(seeds, cluster).connect().await?;
    let _ = Client::quorum(seeds).await?;
    #[cfg(feature = "blocking")]
    {
        use redlease::blocking;
        let _: blocking::Client = blocking::Client::builder("redis://h")
            .ttl(Duration::from_secs(1))
            .connect()?;
        let _: blocking::Client = blocking::Client::quorum(seeds)?;
        let _: blocking::Client = blocking::Client::quorum_builder(seeds)
            .wait(Wait::No)
            .connect()?;
        #[cfg(feature = "cluster")]
        let _: blocking::Client = blocking::Client::cluster(seeds)?;
        #[cfg(feature = "cluster")]
        let _: blocking::Client = blocking::Client::cluster_builder(seeds).connect()?;
        #[cfg(feature = "sentinel")]
        let _: blocking::Client = blocking::Client::sentinel(seeds, "primary")?;
        #[cfg(feature = "sentinel")]
        let _: blocking::Client = blocking::Client::sentinel_builder(seeds, "primary").connect()?;
        let _: blocking::Client = blocking::Client::from_redis(app.clone()).connect()?;
        let _: blocking::Client =
            blocking::Client::from_connection_manager(app, manager).connect()?;
    }
    Ok(())
}
