//! The dating rule: when a lease an acquisition took (by its own attempt, or handed over
//! by a grant message) began at the earliest, as far as the waiter can tell, and whether
//! it still has enough validity left to hand out. The rule of "What a guard may claim" in
//! the crate docs; `redlease-model` checks it.

use std::time::Duration;

use tokio::time::Instant;

use crate::ttl::claim;

/// What the replies of one waiter's attempts prove about a lease handed to it over pub/sub,
/// whose grant message may have been delayed, reordered against those replies, or read
/// late by a paused process (the rule of "What a guard may claim" in the crate docs).
///
/// A hand-off happens in Redis after the waiter's latest attempt that found the lease busy
/// was processed, or it happened before and that attempt saw the lease held by someone
/// else: the handed lease was over by then. The busy reply carries the fencing counter
/// it saw, and grants' fences grow, so a grant whose fence is at most that counter is the
/// second case (void), and any other grant began after that attempt was sent.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Dating {
    /// The send time of the latest attempt that found the lease busy, else of the first.
    floor: Option<Instant>,
    /// The largest fencing counter a busy reply saw.
    seen: u64,
}

impl Dating {
    /// An attempt is sent now; when.
    pub(super) fn send(&mut self) -> Instant {
        let sent = Instant::now();
        self.floor.get_or_insert(sent);
        sent
    }

    /// The attempt sent at `sent` found the lease busy, with the counter at `seen`.
    pub(super) fn busy(&mut self, sent: Instant, seen: u64) {
        self.floor = Some(sent);
        self.seen = self.seen.max(seen);
    }

    /// When a lease handed over with `fence` began at the earliest, as far as this waiter
    /// can tell; `None` when the grant is older than a busy reply (void).
    pub(super) fn grant(&self, fence: u64) -> Option<Instant> {
        if fence <= self.seen {
            return None;
        }
        self.floor
    }
}

/// The least validity an acquisition hands out: a lease whose reply (or grant) came later
/// than this before its end is confirmed by another attempt instead (one that finds the
/// lease ours sets its expiry again), so that an `Ok` never carries a lease about to end.
pub(super) fn min_validity(ttl: Duration) -> Duration {
    ttl / 10
}

/// Whether a lease of `ttl` dated from `start` has at least [`min_validity`] left.
pub(super) fn lasts(ttl: Duration, start: Instant) -> bool {
    start + claim(ttl) >= Instant::now() + min_validity(ttl)
}
