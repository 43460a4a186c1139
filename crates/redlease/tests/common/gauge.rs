//! How many holders are inside a section at once: the most ever seen, and a wait (bounded)
//! until a count was reached, so that a test can require N holders together without
//! guessing at timing.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// How long a holder waits for the others to come in before it gives up and leaves (the
/// test then fails on the maximum, slowly, instead of hanging).
pub const TOGETHER: Duration = Duration::from_secs(20);

#[derive(Debug, Default)]
pub struct Gauge {
    /// (inside now, most inside at once).
    counts: Mutex<(usize, usize)>,
    changed: Condvar,
    notify: Notify,
    /// Set once a wait ran out: later ones return at once, so that a test that cannot
    /// reach its count fails after one [`TOGETHER`], not one per holder.
    gave_up: AtomicBool,
}

impl Gauge {
    /// One more inside; returns how many are inside now.
    pub fn enter(&self) -> usize {
        let mut counts = self.counts.lock().unwrap();
        counts.0 += 1;
        counts.1 = counts.1.max(counts.0);
        let now = counts.0;
        drop(counts);
        self.changed.notify_all();
        self.notify.notify_waiters();
        now
    }

    pub fn leave(&self) {
        self.counts.lock().unwrap().0 -= 1;
    }

    pub fn inside(&self) -> usize {
        self.counts.lock().unwrap().0
    }

    pub fn max(&self) -> usize {
        self.counts.lock().unwrap().1
    }

    /// Blocks until `n` were inside at once, or [`TOGETHER`] has passed.
    pub fn reached(&self, n: usize) {
        if self.gave_up.load(Ordering::SeqCst) {
            return;
        }
        let counts = self.counts.lock().unwrap();
        let (counts, waited) = self
            .changed
            .wait_timeout_while(counts, TOGETHER, |c| c.1 < n)
            .unwrap();
        drop(counts);
        if waited.timed_out() {
            self.gave_up.store(true, Ordering::SeqCst);
        }
    }

    /// As [`Gauge::reached`], for a task.
    pub async fn reached_async(&self, n: usize) {
        if self.gave_up.load(Ordering::SeqCst) {
            return;
        }
        let waited = tokio::time::timeout(TOGETHER, async {
            loop {
                let notified = self.notify.notified();
                if self.max() >= n {
                    return;
                }
                notified.await;
            }
        })
        .await;
        if waited.is_err() {
            self.gave_up.store(true, Ordering::SeqCst);
        }
    }
}
