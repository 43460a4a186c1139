//! Waiting for a busy lock: FIFO hand-off over pub/sub, with polling as a fallback.
//!
//! Each [`Client`](crate::Client) subscribes once, on a RESP3 connection of its own, to its
//! *grant channel* `redlease:grant:<client id>`. A waiter registers its token here, then
//! joins the lock's FIFO queue in Redis (one script call). When the holder releases, the
//! release script hands the lock straight to the oldest waiter whose client still listens
//! (`PUBLISH` reaches a subscriber) and publishes the grant on that client's channel, which
//! this module routes to the waiting task: no thundering herd, no starvation. The
//! hand-off is one protocol for every primitive (`scripts/lib/grants.lua`): a pushed grant
//! lasts a short claim window (a tenth of the ttl, 50 ms to 1 s) until its waiter confirms
//! it with one attempt, and is never proof by itself; a waiter whose link was cut silently
//! (Redis still counts it) costs the others that window, after which the queue's watchers
//! (its first three places, nudged by every grant and every withdrawal from the front) or
//! the releasing client serve the next waiter, whether or not the releaser still lives; an
//! attempt never takes a free lease past an older queued waiter. A lock handed to a waiter
//! of the releasing client is granted directly, for its whole ttl, from the release's reply.
//! A queued head that keeps others out (a writer while readers hold, a request for more
//! permits than are free) and whose client no longer listens (its process ended) stops
//! counting at the next attempt behind it, which comes within a claim window. Queued
//! waiters send nothing else: the watchers re-check only when the holder's lease can have
//! run out (it may have crashed), the others rarely, and all of them when the pub/sub
//! connection drops or comes back, so a lost message costs time, never correctness. A dropped subscription is restored in the background, however long the
//! outage (see `crate::conn::pubsub`); meanwhile waiters do not queue for hand-offs.
//! A mutex waiter already queued keeps its place while its client does not listen (a
//! reconnect, a subscription following a Sentinel failover): a hand-off skips it and goes
//! to the next waiter who listens (the lock never waits for one who cannot be told), and
//! the waiter is served by the first hand-off after its subscription is back, ahead of
//! those who queued after it. A place unreachable for 10 s is dropped (its client is
//! gone). Semaphore and read-write lock waiters are still dropped by the first hand-off
//! that cannot reach them, and queue again at the tail.
//!
//! A Redis Cluster hands locks on the same way, over sharded pub/sub: a client's grant
//! channel there is one per lock, `{K}\0grant:<client id>`, in the lock's slot, subscribed
//! (`SSUBSCRIBE`) on the primary that owns the slot and moved with it (a slot migration,
//! a failover); the release script `SPUBLISH`es the grant, which stays in the lock's shard
//! (a classic `PUBLISH` crosses the whole cluster bus), and counts the primary's
//! subscribers, so it knows whether the waiter listens as on one node. A Cluster grant
//! only wakes its waiter, which confirms with one attempt (a primary being demoted may
//! still deliver a grant its successor did not count). A Cluster's semaphores and
//! read-write locks, and quorum clients, do not queue for hand-offs (over a quorum, each
//! node's queue could hand the lock to a different waiter): their waiters subscribe to the
//! lease's own release channel (sharded too on a Cluster) and try again when the release
//! script announces that it is free (no FIFO order there). With
//! [`Notifications::Polling`](crate::Notifications::Polling), or when no subscription can
//! be made, waiters poll with a jittered exponential back-off bounded by [`Retry`].

use std::time::Duration;

use crate::error::{Error, Result};

/// How long [`Lock::acquire`](crate::Lock::acquire) waits for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wait {
    /// One attempt only.
    No,
    /// Up to this long.
    For(Duration),
    /// Until the lock is acquired (or the future is dropped).
    Forever,
}

impl Wait {
    /// Checks that a bounded wait fits the longest lease Redis keeps.
    pub(crate) fn validate(self) -> Result<()> {
        match self {
            Self::For(d) if d > crate::ttl::MAX_TTL => Err(Error::InvalidOption {
                option: "wait",
                reason: format!("{d:?} is longer than 30 days; use Wait::Forever"),
            }),
            _ => Ok(()),
        }
    }
}

impl From<Duration> for Wait {
    fn from(d: Duration) -> Self {
        Self::For(d)
    }
}

/// Bounds of the jittered exponential back-off between polls.
///
/// Delay `n` is drawn uniformly from `0..=min(max, min * 2^n)` ("full jitter"): the
/// polling of waiters that nothing can tell of a release (notifications off, a pub/sub
/// link down). A waiter that is told (queued for a hand-off, or listening for release
/// notices) sends nothing until the holder's lease can have ended; it then notices a lock
/// deleted by something that does not notify (another library's `DEL`) only at that end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    min: Duration,
    max: Duration,
}

impl Retry {
    /// Default first delay bound: fast, so that a short critical section costs little.
    pub const DEFAULT_MIN: Duration = Duration::from_millis(1);
    /// Default ceiling.
    pub const DEFAULT_MAX: Duration = Duration::from_millis(200);

    /// Back-off from `min` up to `max` (checked when the lock is used).
    pub const fn new(min: Duration, max: Duration) -> Self {
        Self { min, max }
    }

    /// The first delay bound.
    pub const fn min(&self) -> Duration {
        self.min
    }

    /// The ceiling.
    pub const fn max(&self) -> Duration {
        self.max
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.min.is_zero() || self.min > self.max {
            return Err(Error::InvalidOption {
                option: "retry",
                reason: format!(
                    "need 0 < min <= max, got min {:?} and max {:?}",
                    self.min, self.max
                ),
            });
        }
        Ok(())
    }

    /// The `n`-th delay, fully jittered.
    pub(crate) fn delay(&self, n: u32) -> Duration {
        self.delay_within(n, self.max)
    }

    /// The `n`-th delay, fully jittered, bounded by `cap` as well as by the ceiling.
    pub(crate) fn delay_within(&self, n: u32, cap: Duration) -> Duration {
        let bound = self
            .min
            .saturating_mul(1u32 << n.min(20))
            .min(self.max)
            .min(cap);
        jitter(bound)
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self::new(Self::DEFAULT_MIN, Self::DEFAULT_MAX)
    }
}

/// A uniformly random duration in `0..=bound`.
pub(crate) fn jitter(bound: Duration) -> Duration {
    let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_bounded_and_jittered() {
        let r = Retry::new(Duration::from_millis(1), Duration::from_millis(50));
        for n in 0..40 {
            let d = r.delay(n);
            assert!(d <= Duration::from_millis(50));
            if n == 0 {
                assert!(d <= Duration::from_millis(1));
            }
        }
        assert!(
            Retry::new(Duration::ZERO, Duration::from_millis(1))
                .validate()
                .is_err()
        );
        assert!(
            Retry::new(Duration::from_secs(2), Duration::from_secs(1))
                .validate()
                .is_err()
        );
    }
}
