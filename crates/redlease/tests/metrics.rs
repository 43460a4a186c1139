//! Metrics (feature `metrics`) read back from `metrics-util`'s debugging recorder, against a
//! real redis-server: acquisitions and their waits, timeouts, cancellations, holds and
//! their ends, losses, renewal failures, and the `held` / `waiting` gauges, for every
//! primitive. Every test names its locks with `name_in_metrics`, so that tests running at
//! once in this process (one global recorder) read only their own series.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "a test")]
#![allow(
    clippy::float_cmp,
    reason = "the gauges hold small whole numbers, exactly"
)]

mod common;

use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use redis::AsyncCommands as _;
use redlease::{Error, Wait};

use common::{bounded, client, eventually, raw, server};

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

/// Every value recorded so far. The debugging recorder drains what it hands out (counters
/// and gauges are swapped to zero, histograms cleared): a snapshot holds what changed since
/// the previous one, so the tests add them up here (redlease only increments and decrements
/// its gauges, so their changes add up too).
fn recorded() -> Vec<(CompositeKey, DebugValue)> {
    static TOTALS: Mutex<Vec<(CompositeKey, DebugValue)>> = Mutex::new(Vec::new());
    let mut totals = TOTALS.lock().unwrap_or_else(PoisonError::into_inner);
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let Some((_, total)) = totals.iter_mut().find(|(k, _)| *k == key) else {
            totals.push((key, value));
            continue;
        };
        match (total, value) {
            (DebugValue::Counter(t), DebugValue::Counter(v)) => *t += v,
            (DebugValue::Gauge(t), DebugValue::Gauge(v)) => *t += v,
            (DebugValue::Histogram(t), DebugValue::Histogram(v)) => t.extend(v),
            (t, v) => panic!("{key:?} changed type: {t:?} then {v:?}"),
        }
    }
    totals
        .iter()
        .map(|(key, value)| {
            let value = match value {
                DebugValue::Counter(n) => DebugValue::Counter(*n),
                DebugValue::Gauge(v) => DebugValue::Gauge(*v),
                DebugValue::Histogram(v) => DebugValue::Histogram(v.clone()),
            };
            (key.clone(), value)
        })
        .collect()
}

/// What the recorder holds for one lock name.
#[derive(Debug, Default)]
struct Seen(Vec<(CompositeKey, DebugValue)>);

impl Seen {
    /// The series of `name` (the lock's name label), as recorded so far.
    fn of(name: &str) -> Self {
        Self(
            recorded()
                .into_iter()
                .filter(|(key, _)| {
                    key.key()
                        .labels()
                        .any(|l| l.key() == "name" && l.value() == name)
                })
                .collect(),
        )
    }

    fn find(&self, kind: MetricKind, metric: &str, labels: &[(&str, &str)]) -> Option<&DebugValue> {
        self.0
            .iter()
            .find(|(key, _)| {
                key.kind() == kind
                    && key.key().name() == metric
                    && labels
                        .iter()
                        .all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
            })
            .map(|(_, value)| value)
    }

    fn counter(&self, metric: &str, labels: &[(&str, &str)]) -> u64 {
        match self.find(MetricKind::Counter, metric, labels) {
            Some(DebugValue::Counter(n)) => *n,
            None => 0,
            Some(other) => panic!("{metric} is not a counter: {other:?}"),
        }
    }

    fn gauge(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        match self.find(MetricKind::Gauge, metric, labels) {
            Some(DebugValue::Gauge(v)) => v.into_inner(),
            None => 0.0,
            Some(other) => panic!("{metric} is not a gauge: {other:?}"),
        }
    }

    fn samples(&self, metric: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        match self.find(MetricKind::Histogram, metric, labels) {
            Some(DebugValue::Histogram(v)) => v.iter().map(|x| x.into_inner()).collect(),
            None => Vec::new(),
            Some(other) => panic!("{metric} is not a histogram: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_records_its_acquisition_hold_and_release() {
    snapshotter();
    let server = server();
    let client = client(&server).await;
    let name = "metrics-lock";
    let guard = client.lock(name).name_in_metrics().acquire().await.unwrap();
    let seen = Seen::of(name);
    assert_eq!(
        seen.counter("redlease_acquired_total", &[("kind", "lock")]),
        1
    );
    assert_eq!(seen.gauge("redlease_held", &[("kind", "lock")]), 1.0);
    guard.release().await.unwrap();

    let seen = Seen::of(name);
    assert_eq!(seen.gauge("redlease_held", &[("kind", "lock")]), 0.0);
    let waits = seen.samples(
        "redlease_acquire_wait_seconds",
        &[("kind", "lock"), ("outcome", "acquired")],
    );
    assert_eq!(waits.len(), 1, "{seen:?}");
    let holds = seen.samples(
        "redlease_hold_seconds",
        &[("kind", "lock"), ("outcome", "released")],
    );
    assert_eq!(holds.len(), 1, "{seen:?}");
    assert!(holds[0] > 0.0 && holds[0] < 30.0, "{holds:?}");
    assert_eq!(seen.counter("redlease_lost_total", &[]), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_timeouts_and_cancelled_waits_are_counted() {
    snapshotter();
    let server = server();
    let client = client(&server).await;
    let name = "metrics-wait";
    let lock = client.lock(name).name_in_metrics();
    let holder = lock.acquire().await.unwrap();

    // A waiter shows in the `waiting` gauge while it waits.
    let waiter = tokio::spawn({
        let lock = lock.clone().wait(Wait::Forever);
        async move { lock.acquire().await }
    });
    eventually("the waiter counted as waiting", async || {
        Seen::of(name).gauge("redlease_waiting", &[("kind", "lock")]) == 1.0
    })
    .await;

    // A wait that runs out is a timeout.
    let timed_out = lock.clone().wait(Duration::from_millis(50)).acquire().await;
    assert!(
        matches!(timed_out, Err(Error::Timeout { .. })),
        "{timed_out:?}"
    );

    // A wait cut short by the caller (a `timeout` around it) is a cancellation.
    let cut = tokio::time::timeout(
        Duration::from_millis(50),
        lock.clone().wait(Wait::Forever).acquire(),
    )
    .await;
    assert!(cut.is_err());

    holder.release().await.unwrap();
    let second = bounded("the waiter's hand-off", waiter)
        .await
        .unwrap()
        .unwrap();
    second.release().await.unwrap();

    let seen = Seen::of(name);
    assert_eq!(
        seen.gauge("redlease_waiting", &[("kind", "lock")]),
        0.0,
        "{seen:?}"
    );
    assert_eq!(
        seen.counter("redlease_timeouts_total", &[("kind", "lock")]),
        1
    );
    assert_eq!(
        seen.counter("redlease_acquired_total", &[("kind", "lock")]),
        2
    );
    let outcome = |o| {
        seen.samples(
            "redlease_acquire_wait_seconds",
            &[("kind", "lock"), ("outcome", o)],
        )
        .len()
    };
    assert_eq!(
        (
            outcome("acquired"),
            outcome("timeout"),
            outcome("cancelled")
        ),
        (2, 1, 1),
        "{seen:?}"
    );
    assert_eq!(seen.gauge("redlease_held", &[("kind", "lock")]), 0.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_lease_and_failing_renewals_are_counted() {
    snapshotter();
    let server = server();
    let client = redlease::Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .unwrap();
    let name = "metrics-lost";
    let guard = client
        .lock(name)
        .name_in_metrics()
        .ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();

    // Redis stops answering: the renewal due after ttl/3 fails and is retried.
    server.pause().unwrap();
    let mut health = guard.health();
    let failing = bounded(
        "a failed renewal",
        health.wait_for(|h| matches!(h, redlease::LeaseHealth::Retrying { .. })),
    )
    .await
    .map(|h| *h);
    server.resume().unwrap();
    assert!(failing.is_ok(), "{failing:?}");

    // Someone deletes the key: the next renewal finds the token gone.
    let mut conn = raw(&server).await;
    let _: () = conn.del(format!("redlease:{name}")).await.unwrap();
    bounded("the loss", guard.lost()).await;
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));

    let seen = Seen::of(name);
    assert!(
        seen.counter("redlease_renewal_failures_total", &[("kind", "lock")]) >= 1,
        "{seen:?}"
    );
    assert_eq!(seen.counter("redlease_lost_total", &[("kind", "lock")]), 1);
    assert_eq!(seen.gauge("redlease_held", &[("kind", "lock")]), 0.0);
    let lost = seen.samples(
        "redlease_hold_seconds",
        &[("kind", "lock"), ("outcome", "lost")],
    );
    assert_eq!(lost.len(), 1, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_primitive_has_its_kind_label() {
    snapshotter();
    let server = server();
    let client = client(&server).await;

    let permit = client
        .semaphore("metrics-sem", 2)
        .name_in_metrics()
        .acquire()
        .await
        .unwrap();
    let read = client
        .rwlock("metrics-rw")
        .read()
        .name_in_metrics()
        .acquire()
        .await
        .unwrap();
    let leadership = client
        .election("metrics-leader")
        .name_in_metrics()
        .campaign("here")
        .await
        .unwrap();
    let multi = client
        .multi_lock(["metrics-a", "metrics-b"])
        .name_in_metrics()
        .acquire()
        .await
        .unwrap();

    let held = |name: &str, kind: &str| Seen::of(name).gauge("redlease_held", &[("kind", kind)]);
    assert_eq!(held("metrics-sem", "semaphore"), 1.0);
    assert_eq!(held("metrics-rw", "read"), 1.0);
    assert_eq!(held("metrics-leader", "election"), 1.0);
    // A multi-lock holds one lease per name, and is one acquisition.
    assert_eq!(held("metrics-a", "multi_lock"), 1.0);
    assert_eq!(held("metrics-b", "multi_lock"), 1.0);
    assert_eq!(
        Seen::of("metrics-a,metrics-b")
            .counter("redlease_acquired_total", &[("kind", "multi_lock")]),
        1
    );
    assert_eq!(
        Seen::of("metrics-a").counter("redlease_acquired_total", &[]),
        0
    );

    permit.release().await.unwrap();
    read.release().await.unwrap();
    leadership.resign().await.unwrap();
    multi.release().await.unwrap();
    let write = client
        .rwlock("metrics-rw")
        .write()
        .name_in_metrics()
        .acquire()
        .await
        .unwrap();
    assert_eq!(held("metrics-rw", "write"), 1.0);
    write.release().await.unwrap();
    for (name, kind) in [
        ("metrics-sem", "semaphore"),
        ("metrics-rw", "read"),
        ("metrics-rw", "write"),
        ("metrics-leader", "election"),
        ("metrics-a", "multi_lock"),
    ] {
        assert_eq!(held(name, kind), 0.0, "{name} {kind}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_opt_in_no_name_label_is_recorded() {
    snapshotter();
    let server = server();
    let client = client(&server).await;
    let name = "metrics-unnamed";
    client
        .lock(name)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(Seen::of(name).0.is_empty());
    let any_unnamed = recorded().into_iter().any(|(key, _)| {
        key.key().name() == "redlease_acquired_total"
            && !key.key().labels().any(|l| l.key() == "name")
    });
    assert!(any_unnamed, "an unnamed series of acquisitions");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_that_finds_the_token_gone_counts_a_loss() {
    snapshotter();
    let server = server();
    let client = client(&server).await;
    let name = "metrics-gone";
    let guard = client.lock(name).name_in_metrics().acquire().await.unwrap();
    let mut conn = raw(&server).await;
    let _: () = conn.del(format!("redlease:{name}")).await.unwrap();
    // Released before any renewal could notice: the release itself finds the loss.
    assert!(matches!(guard.release().await, Err(Error::Lost { .. })));

    let seen = Seen::of(name);
    assert_eq!(
        seen.counter("redlease_lost_total", &[("kind", "lock")]),
        1,
        "{seen:?}"
    );
    assert_eq!(seen.gauge("redlease_held", &[("kind", "lock")]), 0.0);
    let outcomes = |o| {
        seen.samples("redlease_hold_seconds", &[("kind", "lock"), ("outcome", o)])
            .len()
    };
    assert_eq!((outcomes("lost"), outcomes("released")), (1, 0), "{seen:?}");
}

/// A multi-lock that takes its names one by one (a quorum cannot take them in one script)
/// counts as one waiting acquisition while one of its names is busy.
#[tokio::test(flavor = "multi_thread")]
async fn a_multi_lock_taken_name_by_name_counts_as_waiting() {
    snapshotter();
    let (_nodes, client) = common::quorum_of_three().await;
    let holder = client.lock("metrics-mq-b").acquire().await.unwrap();
    let waiter = tokio::spawn({
        let multi = client
            .multi_lock(["metrics-mq-a", "metrics-mq-b"])
            .name_in_metrics()
            .wait(Wait::Forever);
        async move { multi.acquire().await }
    });
    let both = "metrics-mq-a,metrics-mq-b";
    eventually("the multi-lock counted as waiting", async || {
        Seen::of(both).gauge("redlease_waiting", &[("kind", "multi_lock")]) == 1.0
    })
    .await;
    holder.release().await.unwrap();
    let taken = bounded("the multi-lock", waiter).await.unwrap().unwrap();
    let seen = Seen::of(both);
    assert_eq!(
        seen.gauge("redlease_waiting", &[("kind", "multi_lock")]),
        0.0,
        "{seen:?}"
    );
    assert_eq!(
        seen.counter("redlease_acquired_total", &[("kind", "multi_lock")]),
        1
    );
    taken.release().await.unwrap();
}
