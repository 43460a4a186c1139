//! Hand-off soundness: a guard never claims a lease that Redis gave to someone else, and a
//! lease handed to a waiter that gave up does not sit with nobody. Each test makes a waiter
//! miss the moment of its hand-off the way real programs do (its runtime thread blocked by
//! synchronous code, its Redis killed while it waits), for the mutex, a one-permit
//! semaphore and a read-write lock's writer.
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::unchecked_time_subtraction,
    reason = "tests fail loudly"
)]

mod common;

use std::time::{Duration, Instant};

use common::{bounded, client, eventually, server};
use redlease::{Client, Error, Permit, Wait, WriteGuard};
use redlease_local::{RedisServer, ServerOptions};

/// The primitives whose waiters are handed the lease.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Mutex,
    Semaphore,
    Writer,
}

const KINDS: [Kind; 3] = [Kind::Mutex, Kind::Semaphore, Kind::Writer];

/// A lease of any of the three, kept alive while the test looks at it (a permit is a
/// guard).
enum Held {
    Mutex(redlease::Guard),
    Semaphore(Permit),
    Writer(WriteGuard),
}

impl Held {
    fn is_held(&self) -> bool {
        match self {
            Self::Mutex(g) | Self::Semaphore(g) => g.is_held(),
            Self::Writer(g) => g.is_held(),
        }
    }

    fn remaining(&self) -> Duration {
        match self {
            Self::Mutex(g) | Self::Semaphore(g) => g.remaining(),
            Self::Writer(g) => g.remaining(),
        }
    }

    async fn release(self) -> redlease::Result<()> {
        match self {
            Self::Mutex(g) | Self::Semaphore(g) => g.release().await,
            Self::Writer(g) => g.release().await,
        }
    }
}

async fn take(
    client: &Client,
    kind: Kind,
    name: &str,
    ttl: Duration,
    wait: Wait,
) -> redlease::Result<Held> {
    Ok(match kind {
        Kind::Mutex => Held::Mutex(client.lock(name).ttl(ttl).wait(wait).acquire().await?),
        Kind::Semaphore => Held::Semaphore(
            client
                .semaphore(name, 1)
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await?,
        ),
        Kind::Writer => Held::Writer(
            client
                .rwlock(name)
                .write()
                .ttl(ttl)
                .wait(wait)
                .acquire()
                .await?,
        ),
    })
}

/// Waiters queued for `name`, as an operator sees them.
async fn queued(client: &Client, name: &str) -> usize {
    client.inspect(name).await.unwrap().snapshot.waiters.len()
}

/// What the paused waiter's `acquire` returned, read the moment it returned.
#[derive(Debug)]
enum Outcome {
    Claimed { remaining: Duration },
    Expired,
    Failed(Error),
}

/// A waiter on a runtime of its own (one thread, as many services and tools run), whose
/// thread one of its own tasks blocks with synchronous code from `pause` until `resume`,
/// while its acquisition of `name` (lease `ttl`, wait `wait`) is under way.
struct PausedWaiter {
    pause: tokio::sync::oneshot::Sender<()>,
    paused: std::sync::mpsc::Receiver<()>,
    resume: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Outcome>,
}

impl PausedWaiter {
    fn start(server: &RedisServer, kind: Kind, name: &str, ttl: Duration, wait: Duration) -> Self {
        let (pause, pause_rx) = tokio::sync::oneshot::channel::<()>();
        let (paused_tx, paused) = std::sync::mpsc::channel();
        let (resume, resume_rx) = std::sync::mpsc::channel::<()>();
        let url = server.url();
        let name = name.to_owned();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let client = Client::connect(&url).await.unwrap();
                let blocker = tokio::spawn(async move {
                    if pause_rx.await.is_ok() {
                        paused_tx.send(()).unwrap();
                        // Synchronous code on the runtime's only thread: nothing else of
                        // this runtime runs until it returns.
                        let _ = resume_rx.recv();
                    }
                });
                let outcome = match take(&client, kind, &name, ttl, Wait::For(wait)).await {
                    Ok(held) if held.is_held() => Outcome::Claimed {
                        remaining: held.remaining(),
                    },
                    Ok(_) => Outcome::Expired,
                    Err(e) => Outcome::Failed(e),
                };
                blocker.abort();
                outcome
            })
        });
        Self {
            pause,
            paused,
            resume,
            thread,
        }
    }

    /// Blocks the waiter's runtime; returns once it is blocked.
    async fn pause(self) -> Paused {
        self.pause.send(()).unwrap();
        let paused = self.paused;
        tokio::task::spawn_blocking(move || paused.recv().unwrap())
            .await
            .unwrap();
        Paused {
            resume: self.resume,
            thread: self.thread,
        }
    }
}

struct Paused {
    resume: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Outcome>,
}

impl Paused {
    /// Lets the waiter's runtime run again; its acquisition's outcome.
    async fn resume(self) -> Outcome {
        self.resume.send(()).unwrap();
        let thread = self.thread;
        bounded(
            "the paused waiter's acquisition",
            tokio::task::spawn_blocking(move || thread.join().unwrap()),
        )
        .await
        .unwrap()
    }
}

/// Holder A releases into waiter B while B's runtime is blocked; B's lease runs out in
/// Redis and C takes the lock; then B's runtime runs again. B must not come back holding
/// the lock C holds: its grant is older than what Redis says now.
async fn a_stale_grant_is_never_claimed(kind: Kind) {
    let server = server();
    let a = client(&server).await;
    let c = client(&server).await;
    let name = format!("stale-{kind:?}");
    let holder = take(&a, kind, &name, Duration::from_secs(30), Wait::No)
        .await
        .unwrap();
    let waiter = PausedWaiter::start(
        &server,
        kind,
        &name,
        Duration::from_millis(500),
        Duration::from_secs(3),
    );
    eventually("the waiter to queue up", || async {
        queued(&a, &name).await == 1
    })
    .await;
    let paused = waiter.pause().await;
    holder.release().await.unwrap();
    // The hand-off went to B, whose lease runs out while it cannot run; C gets the lock
    // after that.
    let third = take(
        &c,
        kind,
        &name,
        Duration::from_secs(30),
        Wait::For(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    let outcome = paused.resume().await;
    assert!(third.is_held(), "{kind:?}: C lost its lease");
    assert!(
        matches!(outcome, Outcome::Failed(Error::Timeout { .. })),
        "{kind:?}: while C holds the lock, the resumed waiter got {outcome:?}"
    );
    third.release().await.unwrap();
}

#[tokio::test]
async fn a_stale_grant_is_never_claimed_by_a_lock_waiter() {
    a_stale_grant_is_never_claimed(Kind::Mutex).await;
}

#[tokio::test]
async fn a_stale_grant_is_never_claimed_by_a_semaphore_waiter() {
    a_stale_grant_is_never_claimed(Kind::Semaphore).await;
}

#[tokio::test]
async fn a_stale_grant_is_never_claimed_by_a_writer() {
    a_stale_grant_is_never_claimed(Kind::Writer).await;
}

/// B is handed the lock while its runtime is blocked and comes back after its lease ran
/// out, with nobody else wanting the lock: it gets the lock, with a whole lease, rather
/// than an `Ok` already expired (or a wait for nothing).
#[tokio::test]
async fn a_waiter_paused_past_its_handed_lease_takes_a_whole_one() {
    for kind in KINDS {
        let server = server();
        let a = client(&server).await;
        let name = format!("late-{kind:?}");
        let ttl = Duration::from_millis(400);
        let holder = take(&a, kind, &name, Duration::from_secs(30), Wait::No)
            .await
            .unwrap();
        let waiter = PausedWaiter::start(&server, kind, &name, ttl, Duration::from_secs(20));
        eventually("the waiter to queue up", || async {
            queued(&a, &name).await == 1
        })
        .await;
        let paused = waiter.pause().await;
        holder.release().await.unwrap();
        // The pause is the fault: it lasts longer than the handed lease.
        eventually("the handed lease to run out", || async {
            !a.inspect(&name).await.unwrap().snapshot.is_held()
        })
        .await;
        match paused.resume().await {
            Outcome::Claimed { remaining } => assert!(
                remaining > ttl / 2,
                "{kind:?}: an acquisition handed out {remaining:?} of a {ttl:?} lease"
            ),
            other => panic!("{kind:?}: the waiter got {other:?} for a free lock"),
        }
    }
}

/// A lease that outlasts the patient waiter's wait.
const LONG: Duration = Duration::from_secs(60);

/// Waits for `name` in a task of its own, with a lease of `ttl`, for up to `wait`.
fn queue_up(
    client: &Client,
    kind: Kind,
    name: &str,
    ttl: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<redlease::Result<Held>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move { take(&client, kind, &name, ttl, Wait::For(wait)).await })
}

/// How long Redis stays down after the quitter gave up: four of its response timeouts.
const OUTAGE: Duration = Duration::from_secs(2);

/// A waiter that gives up while Redis is down cannot withdraw its queue place then; when
/// Redis is back (restarted from its AOF, the place with it), the place must not be
/// handed the lock and keep it for its whole lease while another client waits.
#[tokio::test]
async fn a_place_left_during_an_outage_is_not_handed_the_lock() {
    for kind in KINDS {
        let mut server = RedisServer::start_with(
            ServerOptions::default()
                .arg("--appendonly")
                .arg("yes")
                .arg("--appendfsync")
                .arg("always"),
        )
        .unwrap();
        let name = format!("quitter-{kind:?}");
        let holder_client = Client::builder(&server.url())
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        let quitter_client = Client::builder(&server.url())
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .unwrap();
        let patient_client = client(&server).await;
        let holder = take(
            &holder_client,
            kind,
            &name,
            Duration::from_secs(60),
            Wait::No,
        )
        .await
        .unwrap();
        // The quitter queues first, with a lease that would outlast the patient's wait.
        let quitter = queue_up(&quitter_client, kind, &name, LONG, Duration::from_secs(1));
        eventually("the quitter to queue up", || async {
            queued(&holder_client, &name).await == 1
        })
        .await;
        let patient = queue_up(
            &patient_client,
            kind,
            &name,
            LONG / 2,
            Duration::from_secs(20),
        );
        eventually("the patient waiter to queue up", || async {
            queued(&holder_client, &name).await == 2
        })
        .await;
        server.kill();
        // The quitter gives up while Redis is down.
        let gave_up = bounded("the quitter's wait", quitter).await.unwrap();
        assert!(
            gave_up.is_err(),
            "{kind:?}: the quitter got the lock with Redis down"
        );
        // The outage is the fault: it outlasts the quitter's response timeout by far, so
        // that a give-back that tries only that long has given up before Redis is back.
        tokio::time::sleep(OUTAGE).await;
        server.restart().unwrap();
        let released = Instant::now();
        bounded("the holder's release", holder.release())
            .await
            .unwrap();
        let got = bounded("the patient waiter", patient).await.unwrap();
        let waited = released.elapsed();
        let got = got.unwrap_or_else(|e| {
            panic!("{kind:?}: the patient waiter did not get the lock {waited:?} after its release: {e}")
        });
        assert!(got.is_held());
        got.release().await.unwrap();
        drop(quitter_client);
    }
}

/// A wait honours its bound even when its first attempt gets no answer: Redis stopped
/// (SIGSTOP) with the lock busy.
#[tokio::test]
async fn a_wait_ends_at_its_bound_while_redis_does_not_answer() {
    for kind in KINDS {
        let server = server();
        let a = client(&server).await;
        let b = Client::builder(&server.url())
            .response_timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        let name = format!("stuck-{kind:?}");
        let holder = take(&a, kind, &name, Duration::from_secs(30), Wait::No)
            .await
            .unwrap();
        server.pause().unwrap();
        let wait = Duration::from_millis(200);
        let started = Instant::now();
        let outcome = take(&b, kind, &name, Duration::from_secs(30), Wait::For(wait)).await;
        let waited = started.elapsed();
        server.resume().unwrap();
        assert!(
            matches!(outcome, Err(Error::Timeout { .. })),
            "{kind:?}: {:?}",
            outcome.err()
        );
        // The bound is the point, not the speed: the attempt would otherwise have waited for
        // the 10 s response timeout.
        assert!(
            waited < Duration::from_secs(5),
            "{kind:?}: a {wait:?} wait returned after {waited:?}"
        );
        holder.release().await.unwrap();
        // What the cut attempt left (a queue place) is given back: the lock is free.
        eventually("the cut attempt's place to be given back", || async {
            queued(&a, &name).await == 0
        })
        .await;
    }
}
