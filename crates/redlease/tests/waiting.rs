//! Waiting: hand-off on release instead of polling, FIFO order, cancel safety, and a lost
//! reply that must not make us wait for our own lock.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    clippy::print_stdout,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::time::Duration;
use tokio::time::Instant;

use common::{bounded, client, eventually, get, llen, no_polling, raw, server};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Wait};
use redlease_local::Proxy;
use tokio::sync::mpsc;

async fn queue_len(conn: &redis::aio::MultiplexedConnection, client: &Client, name: &str) -> i64 {
    let keys = client.lock(name).keys().unwrap();
    llen(&mut conn.clone(), keys.queue()).await
}

#[tokio::test]
async fn a_waiter_is_woken_by_the_release_not_by_polling() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let conn = raw(&server).await;
    // The holder's lease outlasts the wait, and the back-off is longer than both: only a
    // release notification can get the waiter in before its wait runs out.
    let holder = holder_client
        .lock("wake")
        .ttl(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("wake")
            .wait(Duration::from_secs(20))
            .retry(no_polling())
            .acquire()
            .await
    });
    eventually("the waiter to queue up", || async {
        queue_len(&conn, &holder_client, "wake").await == 1
    })
    .await;
    let released_fence = holder.fencing_token();
    holder.release().await.unwrap();
    let guard = bounded("the woken waiter", waiter).await.unwrap().unwrap();
    assert!(guard.fencing_token() > released_fence);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let holder = c.lock("fifo").acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..5_i64 {
        let lock = c
            .lock("fifo")
            .wait(Duration::from_secs(20))
            .retry(no_polling());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            tx.send(i).unwrap();
            guard.release().await.unwrap();
        }));
        // Let each waiter queue up before the next one arrives.
        eventually("the waiter to queue up", || async {
            queue_len(&conn, &c, "fifo").await == i + 1
        })
        .await;
    }
    holder.release().await.unwrap();
    for t in tasks {
        bounded("waiters", t).await.unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn a_dropped_acquire_leaves_nothing_behind() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let keys = c.lock("abandoned").keys().unwrap();
    let holder = c.lock("abandoned").acquire().await.unwrap();
    let waiting = {
        let lock = c.lock("abandoned").wait(Wait::Forever);
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter to queue up", || async {
        queue_len(&conn, &c, "abandoned").await == 1
    })
    .await;
    assert_eq!(c.stats().waiting, 1);
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert_eq!(
        c.stats().waiting,
        0,
        "the dropped waiter is still registered"
    );
    eventually("the queue to empty", || async {
        queue_len(&conn, &c, "abandoned").await == 0
    })
    .await;
    let waiters: i64 = conn.hlen(keys.waiters()).await.unwrap();
    assert_eq!(waiters, 0);
    // No per-waiter subscription: nobody listens on the lock's channel, and the client's
    // one shared grant subscription is all there is.
    let (_, subscribers): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(keys.channel())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(subscribers, 0);
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(channels.len(), 1, "{channels:?}");
    // The release is not handed to the departed waiter: the lock is simply free.
    holder.release().await.unwrap();
    assert_eq!(get(&mut conn, keys.key()).await, None);
}

#[tokio::test]
async fn a_waiter_that_times_out_leaves_the_queue() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let holder = c.lock("short-wait").acquire().await.unwrap();
    let err = c
        .lock("short-wait")
        .wait(Duration::from_millis(50))
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("short-wait"));
    eventually("the queue to empty", || async {
        queue_len(&conn, &c, "short-wait").await == 0
    })
    .await;
    holder.release().await.unwrap();
    let again = c.lock("short-wait").try_acquire().await.unwrap();
    assert!(
        again.is_some(),
        "the timed-out waiter got the lock after all"
    );
}

#[tokio::test]
async fn a_retry_after_a_lost_reply_finds_its_own_lock() {
    let server = server();
    let proxy = Proxy::start(server.port()).unwrap();
    let c = Client::connect(&proxy.url()).await.unwrap();
    let mut conn = raw(&server).await;
    // The acquire script runs, but its reply is lost and the connection cut. The retry
    // must recognise our own token rather than wait for the lock until its TTL.
    proxy.lose_next_reply();
    let guard = bounded(
        "acquire after a lost reply",
        c.lock("lost-reply")
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(2))
            .acquire(),
    )
    .await
    .unwrap();
    assert_eq!(proxy.lost_replies(), 1, "the proxy did not lose the reply");
    // Each grant reads the server's TIME once (the hybrid-clock fencing rule): one grant.
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        info.contains("cmdstat_time:calls=1,"),
        "the first attempt's grant is the one we hold, not a second one: {info}"
    );
    let key = c.lock("lost-reply").keys().unwrap().key().to_owned();
    let pttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(pttl > 0);
    guard.release().await.unwrap();
    assert_eq!(get(&mut conn, &key).await, None);
}

/// A queued waiter that takes a lock whose holder crashed must leave the queue, or the
/// release would hand the lock to its own stale place and orphan it until the TTL.
#[tokio::test]
async fn a_waiter_taking_an_expired_lock_leaves_the_queue() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let keys = c.lock("crashed").keys().unwrap();
    let crashed = c
        .lock("crashed")
        .ttl(Duration::from_millis(100))
        .renewal(redlease::Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed); // the holder "crashes": no release, the lease expires
    let guard = c
        .lock("crashed")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    assert_eq!(
        llen(&mut conn, keys.queue()).await,
        0,
        "the new holder is still queued"
    );
    guard.release().await.unwrap();
    assert_eq!(
        get(&mut conn, keys.key()).await,
        None,
        "the release orphaned the lock"
    );
}

/// A client's first waiter makes two attempts before it is queued and one to confirm its
/// grant: busy (not yet subscribed for grants), queued (subscribed now), then the
/// confirmation of the hand-off. Its grant subscription coming up is a change its queued
/// attempt already saw: it must not wake the waiter for another attempt. Counted by Redis
/// (`INFO commandstats`): the waiter's attempts and the holder's release (4; 5 when the
/// subscription's coming up woke the queued waiter).
#[tokio::test]
async fn a_first_waiter_queues_without_a_spare_attempt() {
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let mut conn = raw(&server).await;
    // The release script loaded beforehand: its first call's NOSCRIPT would count too.
    let warm = holder_client
        .lock("first-wait-warm")
        .acquire()
        .await
        .unwrap();
    warm.release().await.unwrap();
    // Longer than the test: no renewal counts.
    let holder = holder_client
        .lock("first-wait")
        .ttl(Duration::from_secs(120))
        .acquire()
        .await
        .unwrap();
    let before = common::evalsha_calls(&mut conn).await;
    let waiter = tokio::spawn(async move {
        waiter_client
            .lock("first-wait")
            .wait(Duration::from_secs(20))
            .retry(no_polling())
            .acquire()
            .await
    });
    eventually("the waiter to queue up", || async {
        queue_len(&conn, &holder_client, "first-wait").await == 1
    })
    .await;
    holder.release().await.unwrap();
    let guard = bounded("the waiter's turn", waiter).await.unwrap().unwrap();
    let requests = common::evalsha_calls(&mut conn).await - before;
    assert!(
        requests <= 4,
        "{requests} requests: at most 3 attempts of the waiter and the holder's release expected"
    );
    guard.release().await.unwrap();
}

/// A hand-off to a waiter of the releasing client itself is granted for the whole ttl and
/// told from the release's reply: the waiter takes it without a confirming attempt, for
/// every primitive (the only script call between the waiter's queued attempt and its
/// guard is the holder's release, by Redis' `INFO commandstats`). A pushed grant to
/// another client's waiter would cost a confirming attempt more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_within_one_client_needs_no_confirming_attempt() {
    let server = server();
    let one = client(&server).await;
    let mut conn = raw(&server).await;
    for prim in common::prim::ALL {
        let ttl = Duration::from_secs(120);
        // Every script loaded beforehand: a first call's NOSCRIPT would count too.
        let warm = prim
            .acquire_for(&one, "within-warm", ttl, Duration::ZERO)
            .await
            .unwrap();
        warm.release().await.unwrap();
        let name = "within-one-client";
        let held = prim
            .acquire_for(&one, name, ttl, Duration::ZERO)
            .await
            .unwrap();
        let waiter = tokio::spawn({
            let one = one.clone();
            async move {
                prim.acquire_for(&one, name, ttl, Duration::from_secs(20))
                    .await
            }
        });
        common::prim::queued_for_grants(&server, &prim.keys(name), 1).await;
        let before = common::evalsha_calls(&mut conn).await;
        held.release().await.unwrap();
        let guard = bounded("the waiter's turn", waiter).await.unwrap().unwrap();
        let requests = common::evalsha_calls(&mut conn).await - before;
        assert_eq!(
            requests, 1,
            "{prim:?}: {requests} script calls from the release to the waiter's guard"
        );
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
}

/// Queued waiters send nothing until the holder's lease can have run out (the grant is
/// pushed to them), not every `retry.max` (200 ms). Counted by Redis (`INFO commandstats`)
/// over a window of two leases of held, renewed holds: at most one attempt per waiter per
/// two thirds of a lease (the holders renew every third), plus the holders' renewals.
/// Before: about ten attempts per waiter per lease of 2 s. The same for a lock, for a
/// semaphore of 3 with its 3 permits held, and for a read-write lock held for writing with
/// readers queued.
async fn queued_waiters_stay_silent(shape: Shape) {
    const WAITERS: u64 = 20;
    const WINDOW: Duration = Duration::from_secs(4);
    let name = format!("idle-{shape:?}");
    let server = server();
    let holder_client = client(&server).await;
    let waiter_client = client(&server).await;
    let mut conn = raw(&server).await;
    let holds = shape.hold(&holder_client, &name).await;
    let waiters: Vec<_> = (0..WAITERS)
        .map(|_| tokio::spawn(shape.take_turn(waiter_client.clone(), name.clone())))
        .collect();
    let queue = shape.keys(&holder_client, &name);
    eventually("every waiter queued", || async {
        llen(&mut conn.clone(), queue.queue()).await == i64::try_from(WAITERS).unwrap()
    })
    .await;
    common::commands_run(&mut conn).await;
    let before = common::evalsha_calls(&mut conn).await;
    // The measurement's window (a rate needs one), not a synchronisation.
    tokio::time::sleep(WINDOW).await;
    let requests = common::evalsha_calls(&mut conn).await - before;
    let commands = common::commands_run(&mut conn).await;
    let per_window = |interval: Duration| WINDOW.as_millis() / interval.as_millis() + 1;
    let holders = u64::try_from(holds.len()).unwrap();
    let renewals = holders * u64::try_from(per_window(Shape::TTL / 3)).unwrap();
    let rechecks = u64::try_from(per_window(Shape::TTL * 2 / 3)).unwrap();
    println!(
        "{shape:?}: {WAITERS} queued waiters over {WINDOW:?} of {holders} held {:?} leases: \
         {requests} requests ({commands} Redis commands), the holders' renewals included",
        Shape::TTL
    );
    assert!(
        requests <= WAITERS * rechecks + renewals,
        "{requests} requests: at most {rechecks} per waiter and {renewals} renewals expected"
    );
    for hold in holds {
        hold.await.unwrap();
    }
    for waiter in waiters {
        bounded("a waiter's turn", waiter).await.unwrap().unwrap();
    }
}

/// What the waiters of [`queued_waiters_stay_silent`] queue on.
#[derive(Debug, Clone, Copy)]
enum Shape {
    Lock,
    SemaphoreOf3,
    ReadWrite,
}

/// A boxed future of a hold's release or a waiter's turn.
type Step = std::pin::Pin<Box<dyn Future<Output = redlease::Result<()>> + Send>>;

impl Shape {
    const TTL: Duration = Duration::from_secs(2);
    const WAIT: Duration = Duration::from_secs(60);

    fn keys(self, client: &Client, name: &str) -> redlease::LockKeys {
        match self {
            Self::Lock => client.lock(name).keys(),
            Self::SemaphoreOf3 => client.semaphore(name, 3).keys(),
            Self::ReadWrite => client.rwlock(name).keys(),
        }
        .unwrap()
    }

    /// Takes every hold there is (one lock, 3 permits, the write lock) and returns their
    /// releases.
    async fn hold(self, client: &Client, name: &str) -> Vec<Step> {
        match self {
            Self::Lock => {
                let guard = client.lock(name).ttl(Self::TTL).acquire().await.unwrap();
                vec![Box::pin(guard.release())]
            }
            Self::SemaphoreOf3 => {
                let semaphore = client.semaphore(name, 3).ttl(Self::TTL);
                let mut holds: Vec<Step> = Vec::new();
                for _ in 0..3 {
                    let permit = semaphore.acquire().await.unwrap();
                    holds.push(Box::pin(permit.release()));
                }
                holds
            }
            Self::ReadWrite => {
                let rwlock = client.rwlock(name);
                let write = rwlock.write().ttl(Self::TTL).acquire().await.unwrap();
                vec![Box::pin(write.release())]
            }
        }
    }

    /// One waiter: waits for its turn, then gives it back.
    fn take_turn(self, client: Client, name: String) -> Step {
        Box::pin(async move {
            match self {
                Self::Lock => {
                    let lock = client.lock(&name).ttl(Self::TTL).wait(Self::WAIT);
                    lock.acquire().await?.release().await
                }
                Self::SemaphoreOf3 => {
                    let semaphore = client.semaphore(&name, 3).ttl(Self::TTL).wait(Self::WAIT);
                    semaphore.acquire().await?.release().await
                }
                Self::ReadWrite => {
                    let rwlock = client.rwlock(&name);
                    let read = rwlock.read().ttl(Self::TTL).wait(Self::WAIT);
                    read.acquire().await?.release().await
                }
            }
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_stay_silent_on_a_lock() {
    queued_waiters_stay_silent(Shape::Lock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_stay_silent_on_a_semaphore() {
    queued_waiters_stay_silent(Shape::SemaphoreOf3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_stay_silent_on_a_read_write_lock() {
    queued_waiters_stay_silent(Shape::ReadWrite).await;
}

/// A waiter queued behind the first two places re-checks only to keep its place alive
/// (every 45 s), yet a holder that crashes does not stall it that long: every hand-off
/// tells the waiter now next in line, which re-checks when the new holder's lease can
/// end. Here the third waiter is told when the second is handed the lock, and takes over
/// once that holder, cut off, lets its 1 s lease run out. Before the nudge it would have
/// waited for its own re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiter_next_in_line_takes_over_from_a_crashed_holder() {
    const TTL: Duration = Duration::from_secs(1);
    let server = server();
    let holder = client(&server).await;
    let proxy = Proxy::start(server.port()).unwrap();
    let doomed_client = Client::builder(&proxy.url()).connect().await.unwrap();
    let conn = raw(&server).await;
    let queued = |n: i64| {
        let (conn, holder) = (conn.clone(), holder.clone());
        async move {
            eventually("the waiter queued", || async {
                queue_len(&conn, &holder, "crash-next").await == n
            })
            .await;
        }
    };
    let wait = |client: &Client| {
        client
            .lock("crash-next")
            .ttl(TTL)
            .wait(Duration::from_secs(120))
    };
    let held = wait(&holder).acquire().await.unwrap();
    let (first_done, first_may_go) = tokio::sync::oneshot::channel::<()>();
    let first = tokio::spawn({
        let lock = wait(&client(&server).await);
        async move {
            let guard = lock.acquire().await?;
            let _ = first_may_go.await;
            guard.release().await
        }
    });
    queued(1).await;
    let doomed = tokio::spawn({
        let lock = wait(&doomed_client);
        async move { lock.acquire().await }
    });
    queued(2).await;
    let last = tokio::spawn({
        let lock = wait(&client(&server).await);
        async move {
            let guard = lock.acquire().await?;
            let took = Instant::now();
            guard.release().await?;
            Ok::<_, Error>(took)
        }
    });
    queued(3).await;
    held.release().await.unwrap();
    first_done.send(()).unwrap();
    bounded("the first waiter's turn", first)
        .await
        .unwrap()
        .unwrap();
    let doomed_guard = bounded("the second waiter's turn", doomed)
        .await
        .unwrap()
        .unwrap();
    proxy.cut();
    let cut = Instant::now();
    let took = bounded("the third waiter's turn", last)
        .await
        .unwrap()
        .unwrap();
    println!(
        "the third waiter took the lock {:?} after its holder was cut off",
        took - cut
    );
    // The holder's lease (1 s) runs out, then the third waiter's re-check: far below its
    // 45 s re-check as a waiter behind the first two.
    assert!(
        took - cut < Duration::from_secs(10),
        "the waiter next in line took over {:?} after the holder was cut off",
        took - cut
    );
    drop(doomed_guard);
}
