//! [`Lease`]: one acquisition of a lock, as its holder sees it: the name, keys, owner
//! token and fencing token, how long it is certainly ours, and the loss signal.
//!
//! A lease knows nothing of connections or tasks: the renewal scheduler (`crate::renew`)
//! moves its validity on or declares it lost, and the engine (`crate::engine`) gives it
//! back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::keys::LockKeys;
use crate::observe::{self, Hold, HoldEnd, Labels};
use crate::scripts::Kind;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::{claim, ttl_millis};

/// How many ttls a renewal that keeps a lock's holder details sets them for.
const DETAILS_LEASES: u32 = 4;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Ours until this instant, unless renewed.
    Held(Instant),
    /// The token is gone, or the lease ran out without a renewal.
    Lost,
    /// Given back by its owner.
    Released,
    /// Given back by [`Client::shutdown`](crate::Client::shutdown).
    Closed,
    /// Handed to another holder ([`Guard::detach`](crate::Guard::detach)): still held in
    /// Redis, no longer by this process, which neither renews nor releases it.
    Detached,
}

/// How a held lease's renewal stands, as [`Guard::health`](crate::Guard::health) reports
/// it: distinct from [`Guard::lost`](crate::Guard::lost), it warns while there is still
/// time to act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseHealth {
    /// Acquired, or renewed by the latest renewal: certainly ours until `valid_until`
    /// (see [`Guard::valid_until`](crate::Guard::valid_until)).
    Renewed {
        /// Until when the lease is certainly ours unless renewed again.
        valid_until: Instant,
    },
    /// Renewals are failing (Redis cannot be reached or does not answer) and are retried;
    /// the lease is lost at `valid_until` unless one succeeds first.
    Retrying {
        /// Until when the lease is still certainly ours.
        valid_until: Instant,
        /// Failed renewal round trips in a row.
        failures: u32,
    },
    /// Lost: the token is gone, or the lease ran out without a successful renewal.
    Lost,
    /// Given back (released, dropped, or at [`Client::shutdown`](crate::Client::shutdown)).
    Released,
}

impl LeaseHealth {
    /// Time left on the lease: zero once lost or released, or once `valid_until` passed
    /// (as [`Guard::remaining`](crate::Guard::remaining) says it).
    pub fn remaining(&self) -> Duration {
        match self {
            Self::Renewed { valid_until } | Self::Retrying { valid_until, .. } => {
                valid_until.saturating_duration_since(Instant::now())
            }
            Self::Lost | Self::Released => Duration::ZERO,
        }
    }

    /// The old name of [`LeaseHealth::remaining`].
    #[deprecated(note = "renamed `remaining`, as on `Guard` and `Leader`")]
    pub fn time_left(&self) -> Duration {
        self.remaining()
    }

    /// Whether the lease is still held (renewed or retrying).
    pub fn is_held(&self) -> bool {
        matches!(self, Self::Renewed { .. } | Self::Retrying { .. })
    }
}

/// One acquisition of a lock.
pub(crate) struct Lease {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// What it is a lease on (a lock, a permit, a read or write hold).
    kind: Kind,
    /// A write hold that was downgraded to a read hold.
    downgraded: AtomicBool,
    pub(crate) token: OwnerToken,
    pub(crate) fence: FencingToken,
    /// The lease length renewals restore, in ms (changed by `extend`).
    ttl_ms: AtomicU64,
    state: watch::Sender<State>,
    /// One step of the lease's life at a time: a renewal or an extend holds it from before
    /// it reads the lease's ttl until its reply was applied (or it gave up). Redis runs a
    /// lease's requests in an order that need not be their send order (a NOSCRIPT answer
    /// or a retry across a reconnect sends again later), so replies are applied in the
    /// order Redis ran them only when the requests never overlap.
    steps: Arc<tokio::sync::Mutex<()>>,
    /// How its renewal stands, for the holder ([`LeaseHealth`]).
    health: watch::Sender<LeaseHealth>,
    /// Until when a lock's holder details key certainly lives (see
    /// [`Lease::details_due`]).
    details_until: std::sync::Mutex<Instant>,
    /// Its metrics (nothing without the `metrics` feature).
    meter: Hold,
    /// The span every event of this hold is recorded in.
    pub(crate) span: tracing::Span,
}

impl Lease {
    /// A lease of `ttl` set by a request sent at `lease_start`, measured with `labels`.
    pub(crate) fn new(
        name: Arc<str>,
        keys: Arc<LockKeys>,
        kind: Kind,
        (token, fence): (OwnerToken, FencingToken),
        ttl: Duration,
        lease_start: Instant,
        labels: Labels,
    ) -> Self {
        let valid_until = lease_start + claim(ttl);
        let span = observe::hold_span(&name, observe::kind_label(kind), fence, &token);
        tracing::debug!(parent: &span, "acquired");
        Self {
            name,
            keys,
            kind,
            downgraded: AtomicBool::new(false),
            token,
            fence,
            ttl_ms: AtomicU64::new(ttl_millis(ttl)),
            state: watch::Sender::new(State::Held(valid_until)),
            steps: Arc::new(tokio::sync::Mutex::new(())),
            details_until: std::sync::Mutex::new(lease_start + ttl),
            health: watch::Sender::new(LeaseHealth::Renewed { valid_until }),
            meter: Hold::start(labels),
            span,
        }
    }

    /// What it is a lease on now (a downgraded write hold is a read hold).
    pub(crate) fn kind(&self) -> Kind {
        if self.kind == Kind::Write && self.downgraded.load(Ordering::Acquire) {
            Kind::Read
        } else {
            self.kind
        }
    }

    /// Records that Redis turned this write hold into a read hold.
    pub(crate) fn downgrade(&self) {
        self.downgraded.store(true, Ordering::Release);
    }

    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    /// Sets the lease length renewals restore (an extension).
    pub(crate) fn set_ttl(&self, ttl: Duration) {
        self.ttl_ms.store(ttl_millis(ttl), Ordering::Relaxed);
    }

    /// Waits for the lease's turn to take a step (an extend): no renewal of it is in
    /// flight while the returned guard lives.
    ///
    /// Cancel safe: nothing was sent while waiting.
    pub(crate) async fn step(&self) -> tokio::sync::OwnedMutexGuard<()> {
        Arc::clone(&self.steps).lock_owned().await
    }

    /// Whether a renewal of this lock sent at `sent` for `ttl` must keep its holder
    /// details key too, and for how long. A grant sets the details for one ttl; renewals
    /// set them for [`DETAILS_LEASES`] ttls at a time, and again only once less than a
    /// ttl and a third is left (a renewal answered a third of a ttl late then sets a
    /// lock that still ends before them): one renewal in eight, at a third of a ttl
    /// apart, costs the extra call. `None` for the others.
    pub(crate) fn details_due(&self, sent: Instant, ttl: Duration) -> Option<Duration> {
        let until = *self
            .details_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (until < sent + ttl + ttl / 3).then(|| ttl * DETAILS_LEASES)
    }

    /// A renewal sent at `sent` set the holder details to last `span`.
    pub(crate) fn details_kept(&self, sent: Instant, span: Duration) {
        let mut until = self
            .details_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *until = (*until).max(sent + span);
    }

    /// The lease's turn for a renewal, unless another step is in flight.
    pub(crate) fn try_step(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        Arc::clone(&self.steps).try_lock_owned().ok()
    }

    /// Before a request that may shorten the lease to `ttl` is sent at `sent`: lowers the
    /// claim to what that request would leave (if lower), and makes `ttl` the length later
    /// renewals restore. Both stay if the request is cancelled or fails: it may still run
    /// in Redis, even after a later renewal.
    pub(crate) fn shorten(&self, sent: Instant, ttl: Duration) {
        let until = sent + claim(ttl);
        self.ttl_ms.fetch_min(ttl_millis(ttl), Ordering::Relaxed);
        let lowered = self.state.send_if_modified(|s| match s {
            State::Held(before) if until < *before => {
                *s = State::Held(until);
                true
            }
            _ => false,
        });
        if lowered {
            self.health.send_modify(|health| match health {
                LeaseHealth::Renewed { valid_until }
                | LeaseHealth::Retrying { valid_until, .. } => {
                    *valid_until = (*valid_until).min(until);
                }
                LeaseHealth::Lost | LeaseHealth::Released => {}
            });
        }
    }

    pub(crate) fn state(&self) -> State {
        *self.state.borrow()
    }

    /// Ends the lease without a release (a guard dropped where nothing can send one: it
    /// expires by itself).
    pub(crate) fn abandon(&self) {
        if matches!(replace(&self.state, State::Released), State::Held(_)) {
            self.hold_ended(HoldEnd::Released);
        }
    }

    /// Hands the lease on ([`State::Detached`]); true when it was held. Its renewal is the
    /// caller's to stop.
    pub(crate) fn detach(&self) -> bool {
        let detached = self.state.send_if_modified(|s| {
            if matches!(s, State::Held(_)) {
                *s = State::Detached;
                true
            } else {
                false
            }
        });
        if detached {
            tracing::debug!(parent: &self.span, lock = %self.name, "detached: handed to another holder");
            self.hold_ended(HoldEnd::Released);
        }
        detached
    }

    /// Moves to `Released` for a release about to be sent; returns where it stood. The
    /// hold's metrics wait for [`Lease::release_found`]: the release may find the token
    /// gone, which is a loss.
    pub(crate) fn release_begun(&self) -> State {
        let before = replace(&self.state, State::Released);
        if matches!(before, State::Held(_)) {
            replace(&self.health, LeaseHealth::Released);
        }
        before
    }

    /// What the release found: the token still there (`held`), or gone (a loss, counted
    /// and reported as one).
    pub(crate) fn release_found(&self, held: bool) {
        if held {
            self.meter.end(HoldEnd::Released);
        } else {
            self.meter.end(HoldEnd::Lost);
            replace(&self.health, LeaseHealth::Lost);
        }
    }

    /// Records the end of the hold: health, metrics.
    fn hold_ended(&self, end: HoldEnd) {
        self.meter.end(end);
        replace(
            &self.health,
            match end {
                HoldEnd::Lost => LeaseHealth::Lost,
                HoldEnd::Released | HoldEnd::Closed => LeaseHealth::Released,
            },
        );
    }

    /// A receiver of the lease's [`LeaseHealth`].
    pub(crate) fn health(&self) -> watch::Receiver<LeaseHealth> {
        self.health.subscribe()
    }

    /// Records a renewal round trip that failed (no answer, or Redis unreachable): it is
    /// retried until the lease runs out. Warns once when renewals start failing.
    pub(crate) fn renewal_failed(&self, error: &dyn std::fmt::Display) {
        let State::Held(valid_until) = self.state() else {
            return;
        };
        self.meter.renewal_failed();
        let mut first = false;
        self.health.send_if_modified(|health| match *health {
            LeaseHealth::Renewed { .. } => {
                first = true;
                *health = LeaseHealth::Retrying {
                    valid_until,
                    failures: 1,
                };
                true
            }
            LeaseHealth::Retrying { failures, .. } => {
                *health = LeaseHealth::Retrying {
                    valid_until,
                    failures: failures.saturating_add(1),
                };
                true
            }
            LeaseHealth::Lost | LeaseHealth::Released => false,
        });
        let left = valid_until.saturating_duration_since(Instant::now());
        if first {
            tracing::warn!(parent: &self.span, lock = %self.name, %error, ?left, "renewal failing; retrying until the lease runs out");
        } else {
            tracing::debug!(parent: &self.span, %error, ?left, "renewal failed again; retrying");
        }
    }

    /// True while held and within its validity.
    pub(crate) fn is_held(&self) -> bool {
        matches!(self.state(), State::Held(until) if Instant::now() < until)
    }

    /// Records a successful renewal or extension sent at `sent` for `ttl`, unless the lease
    /// already ended. The validity may move back (an extension to a shorter TTL), as the
    /// expiry in Redis did. The caller holds the lease's [`step`](Lease::step), so this
    /// reply is of the request Redis ran last.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent + claim(ttl);
        let changed = self.state.send_if_modified(|s| {
            if !matches!(s, State::Held(_)) {
                return false;
            }
            *s = State::Held(until);
            true
        });
        if !changed {
            return;
        }
        let before = replace(&self.health, LeaseHealth::Renewed { valid_until: until });
        if let LeaseHealth::Retrying { failures, .. } = before {
            tracing::info!(parent: &self.span, lock = %self.name, failures, "renewal recovered");
        } else {
            tracing::trace!(parent: &self.span, "renewed");
        }
    }

    /// Marks the lease lost (once), with a warning.
    pub(crate) fn lose(&self, why: &'static str) {
        self.state.send_if_modified(|s| {
            if matches!(s, State::Held(_)) {
                // Said and counted before the change wakes anyone: a holder that learns
                // of the loss finds the warning in its logs and the loss in its metrics.
                tracing::warn!(parent: &self.span, lock = %self.name, token = %self.token, fence = %self.fence, why, "lock lost");
                self.hold_ended(HoldEnd::Lost);
                *s = State::Lost;
                true
            } else {
                false
            }
        });
    }

    /// Marks a held lease closed by a shutdown; true when it was held.
    pub(crate) fn close(&self) -> bool {
        let closed = self.state.send_if_modified(|s| {
            if matches!(s, State::Held(_)) {
                *s = State::Closed;
                true
            } else {
                false
            }
        });
        if closed {
            self.hold_ended(HoldEnd::Closed);
        }
        closed
    }

    /// Resolves once the lease is lost (token gone, or validity ran out) or released.
    pub(crate) async fn ended(&self) {
        let mut rx = self.state.subscribe();
        loop {
            let state = *rx.borrow_and_update();
            let State::Held(until) = state else {
                return;
            };
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep_until(until) => {
                    if self.state() == State::Held(until) {
                        self.lose("the lease ran out without a successful renewal");
                    }
                }
            }
        }
    }

    /// The error for work whose lease ended under it: [`Error::ShutDown`] when the client
    /// was shut down, else [`Error::Lost`].
    pub(crate) fn ended_error(&self) -> Error {
        if self.state() == State::Closed {
            Error::ShutDown {
                name: self.name.to_string(),
            }
        } else {
            lost(&self.name)
        }
    }
}

/// [`Error::Lost`] for the lock `name`.
pub(crate) fn lost(name: &str) -> Error {
    Error::Lost {
        name: name.to_owned(),
    }
}

/// Sets a lease's watched value and returns the one before, waking its receivers only when
/// it has any. A watch's sender wakes all its notifier slots on every send, receivers or
/// not (about 850 client instructions), and most leases end with nobody watching them. A
/// receiver subscribed afterwards reads the new value all the same: `borrow` and
/// `wait_for` look at the value, not at whether a send woke them.
fn replace<T>(watched: &watch::Sender<T>, mut value: T) -> T {
    watched.send_if_modified(|now| {
        std::mem::swap(now, &mut value);
        watched.receiver_count() > 0
    });
    value
}
