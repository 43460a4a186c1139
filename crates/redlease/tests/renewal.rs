//! Lease keeping: renewal, loss detection, cancellation of `run`, and the renewal cost of
//! many held locks.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    clippy::print_stdout,
    reason = "tests fail loudly and say what they measured"
)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{bounded, client, evalsha_calls, get, raw, server, until_absent};
use redis::AsyncCommands as _;
use redlease::{Client, Error, Renewal};
use tokio::sync::oneshot;

#[tokio::test]
async fn a_section_three_times_the_ttl_keeps_the_lock() {
    let server = server();
    let holder = client(&server).await;
    let rival = client(&server).await;
    let ttl = Duration::from_millis(300);
    let fence = holder
        .lock("long")
        .ttl(ttl)
        .run(async |guard| {
            // The work itself takes 3 x TTL; a rival keeps trying meanwhile.
            for _ in 0..9 {
                tokio::time::sleep(ttl / 3).await;
                assert!(guard.is_held());
                assert!(
                    rival.lock("long").try_acquire().await?.is_none(),
                    "a rival got in"
                );
            }
            Ok::<_, Error>(guard.fencing_token())
        })
        .await
        .unwrap();
    assert!(
        holder.stats().renewal_round_trips >= 3,
        "{}",
        holder.stats().renewal_round_trips
    );
    // Released at the end: the rival gets it now, with a larger token.
    let next = rival.lock("long").try_acquire().await.unwrap().unwrap();
    assert!(next.fencing_token() > fence);
}

#[tokio::test]
async fn deleting_the_key_cancels_run_and_fires_lost() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let key = c.lock("deleted").keys().unwrap().key().to_owned();
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = oneshot::channel();
    let run = {
        let lock = c.lock("deleted").ttl(Duration::from_millis(300));
        let finished = Arc::clone(&finished);
        tokio::spawn(async move {
            lock.run(async |_guard| {
                started_tx.send(()).unwrap();
                tokio::time::sleep(Duration::from_secs(20)).await;
                // Would run unprotected after the loss: must never happen.
                finished.store(true, Ordering::SeqCst);
                Ok::<_, Error>(())
            })
            .await
        })
    };
    started_rx.await.unwrap();
    let _: i64 = conn.del(&key).await.unwrap();
    let outcome = bounded("run to notice the loss", run).await.unwrap();
    assert!(matches!(outcome, Err(Error::Lost { .. })), "{outcome:?}");
    assert!(!finished.load(Ordering::SeqCst));
}

#[tokio::test]
async fn a_paused_redis_past_the_ttl_fires_lost() {
    let server = server();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let guard = c
        .lock("paused")
        .ttl(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    server.pause().unwrap();
    bounded("lost() while Redis is paused", guard.lost()).await;
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
    server.resume().unwrap();
    assert!(matches!(
        guard.release().await,
        Err(Error::Lost { .. } | Error::Redis { .. })
    ));
}

#[tokio::test]
async fn a_fixed_lease_expires_and_reports_it() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let key = c.lock("fixed").keys().unwrap().key().to_owned();
    let guard = c
        .lock("fixed")
        .ttl(Duration::from_millis(100))
        .renewal(Renewal::Fixed)
        .acquire()
        .await
        .unwrap();
    assert!(guard.is_held());
    bounded("lost() of a fixed lease", guard.lost()).await;
    assert!(!guard.is_held());
    until_absent(&conn, &key).await;
    assert_eq!(c.stats().renewal_round_trips, 0);
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));
}

#[tokio::test]
async fn max_hold_stops_renewal() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let key = c.lock("budget").keys().unwrap().key().to_owned();
    let guard = c
        .lock("budget")
        .ttl(Duration::from_millis(150))
        .max_hold(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    bounded("lost() after the hold budget", guard.lost()).await;
    until_absent(&conn, &key).await;
    assert!(
        c.stats().renewal_round_trips >= 1,
        "it was renewed before the budget ran out"
    );
    assert!(matches!(
        c.lock("budget")
            .max_hold(Duration::ZERO)
            .try_acquire()
            .await,
        Err(Error::InvalidOption {
            option: "max_hold",
            ..
        })
    ));
}

#[tokio::test]
async fn a_dropped_guard_stops_renewing_and_releases() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let key = c.lock("dropped").keys().unwrap().key().to_owned();
    drop(
        c.lock("dropped")
            .ttl(Duration::from_millis(90))
            .acquire()
            .await
            .unwrap(),
    );
    until_absent(&conn, &key).await;
    let trips = c.stats().renewal_round_trips;
    // Over several renewal intervals, nothing more is sent for the dropped lease.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(c.stats().renewal_round_trips, trips);
    assert_eq!(get(&mut conn.clone(), &key).await, None);
}

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    OutOfStock,
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        Self::Lock(e.to_string())
    }
}

#[tokio::test]
async fn run_passes_the_closures_error_through_and_releases() {
    let server = server();
    let c = client(&server).await;
    let conn = raw(&server).await;
    let out: Result<(), AppError> = c.lock("app").run(async |_| Err(AppError::OutOfStock)).await;
    assert_eq!(out, Err(AppError::OutOfStock));
    until_absent(&conn, c.lock("app").keys().unwrap().key()).await;
    let holder = c.lock("app").acquire().await.unwrap();
    let busy: Result<(), AppError> = c
        .lock("app")
        .wait(redlease::Wait::No)
        .run(async |_| Ok(()))
        .await;
    assert!(
        matches!(busy, Err(AppError::Lock(ref m)) if m.contains("busy")),
        "{busy:?}"
    );
    holder.release().await.unwrap();
}

/// 10,000 locks held by one client are renewed with a handful of round trips per
/// interval, counted both by the client and by Redis (`INFO commandstats`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_renew_in_a_few_round_trips() {
    const LOCKS: usize = 10_000;
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let ttl = Duration::from_secs(3);
    let mut guards = Vec::with_capacity(LOCKS);
    for chunk in 0..LOCKS / 500 {
        let batch = (0..500).map(|i| c.lock(format!("many:{}", chunk * 500 + i)).ttl(ttl));
        let acquired =
            futures_util::future::join_all(batch.map(|l| async move { l.acquire().await })).await;
        guards.extend(acquired.into_iter().map(Result::unwrap));
    }
    let evalsha_before = evalsha_calls(&mut conn).await;
    let trips_before = c.stats().renewal_round_trips;
    // Two and a half TTLs: without renewal every lock would be gone.
    tokio::time::sleep(ttl * 5 / 2).await;
    let trips = c.stats().renewal_round_trips - trips_before;
    let calls = evalsha_calls(&mut conn).await - evalsha_before;
    let intervals = 7; // 7.5 s / (ttl / 3)
    assert!(trips >= 5, "renewal stalled: {trips} round trips");
    // Two per interval, and one more per interval for a batch that a loaded machine did
    // not answer within a third of the ttl (it is retried): far from one per lease.
    assert!(
        trips <= 3 * intervals,
        "{trips} round trips for {intervals} intervals"
    );
    assert!(
        calls <= trips * 25,
        "{calls} script calls in {trips} round trips"
    );
    let held = guards.iter().filter(|g| g.is_held()).count();
    assert_eq!(held, LOCKS);
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    // Each lock: key, holder details, fencing counter.
    assert_eq!(keys, i64::try_from(LOCKS * 3).unwrap());
    eprintln!(
        "{LOCKS} locks: {trips} renewal round trips and {calls} script calls in {intervals} intervals"
    );
}

#[tokio::test]
async fn a_redis_pause_shorter_than_the_lease_does_not_lose_it() {
    let server = server();
    let c = Client::builder(&server.url())
        .response_timeout(Duration::from_millis(100))
        .connect()
        .await
        .unwrap();
    let ttl = Duration::from_millis(900);
    let guard = c.lock("blip").ttl(ttl).acquire().await.unwrap();
    // Redis stops answering across the first renewal (due at ttl/3) for 350 ms, well
    // within the lease: the renewal fails, is retried, and succeeds after the pause.
    tokio::time::sleep(ttl / 4).await;
    server.pause().unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    server.resume().unwrap();
    let trips = c.stats().renewal_round_trips;
    tokio::select! {
        () = guard.lost() => panic!("a short pause lost the lease"),
        () = tokio::time::sleep(ttl * 2) => {}
    }
    assert!(guard.is_held());
    assert!(c.stats().renewal_round_trips > trips);
    guard.release().await.unwrap();
}

/// A client that takes and releases locks one after another keeps one renewal scheduler
/// task (not one spawned per lease); the task ends a second after the last lease, and the
/// next lease starts it again and is renewed by it.
#[tokio::test]
async fn one_renewal_task_serves_leases_one_after_another() {
    let server = server();
    let c = client(&server).await;
    for _ in 0..50 {
        let guard = bounded("acquire", c.lock("serial").acquire())
            .await
            .unwrap();
        bounded("release", guard.release()).await.unwrap();
    }
    assert_eq!(c.stats().renewal_tasks_started, 1);
    // Idle past the scheduler's linger: its task ends, and the next lease restarts it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ttl = Duration::from_millis(300);
    let guard = bounded("acquire", c.lock("serial").ttl(ttl).acquire())
        .await
        .unwrap();
    assert_eq!(c.stats().renewal_tasks_started, 2);
    tokio::time::sleep(ttl * 3).await;
    assert!(guard.is_held(), "the restarted scheduler did not renew");
    bounded("release", guard.release()).await.unwrap();
}

/// Calls of one command in Redis' `INFO commandstats` (scripts' inner calls included).
async fn calls_of(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A lock's renewal costs two calls in Redis, `GET` and `PEXPIRE` of the lock: its holder
/// details are kept several leases at a time, by about one renewal in eight (it was a
/// `PEXPIRE` of the details with every renewal: as many as `GET`s). Counted by Redis over
/// about thirty renewals of each of 50 held locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_costs_a_get_and_a_pexpire() {
    const TTL: Duration = Duration::from_millis(600);
    let server = server();
    let client = client(&server).await;
    let mut conn = raw(&server).await;
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(
            client
                .lock(format!("renewed-{i}"))
                .ttl(TTL)
                .acquire()
                .await
                .unwrap(),
        );
    }
    common::commands_run(&mut conn).await;
    // The measurement's window (counts need one), not a synchronisation.
    tokio::time::sleep(TTL * 10).await;
    let (gets, pexpires) = (
        calls_of(&mut conn, "get").await,
        calls_of(&mut conn, "pexpire").await,
    );
    println!("50 locks over 10 ttls: {gets} GET, {pexpires} PEXPIRE");
    assert!(gets >= 50 * 10, "{gets} renewals of 50 locks over 10 ttls");
    assert!(
        pexpires * 4 <= gets * 5,
        "{pexpires} PEXPIRE for {gets} renewals: at most one in four may keep the details"
    );
    for guard in guards {
        assert!(guard.is_held());
        guard.release().await.unwrap();
    }
}
