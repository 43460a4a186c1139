//! [`Lease`]: one acquisition of a lock, as its holder sees it: the name, keys, owner
//! token and fencing token, how long it is certainly ours, and the loss signal.
//!
//! A lease knows nothing of connections or tasks: the renewal scheduler (`crate::renew`)
//! moves its validity on or declares it lost, and the engine (`crate::engine`) gives it
//! back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use crate::keys::LockKeys;
use crate::scripts::Kind;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::{drift, ttl_millis};

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
    /// Send time of the request behind the current `State::Held` validity. Expiry is set
    /// by whichever request Redis ran last, so an older reply never overrides a newer one.
    set_at: std::sync::Mutex<Instant>,
}

impl Lease {
    /// A lease of `ttl` set by a request sent at `lease_start`.
    pub(crate) fn new(
        name: Arc<str>,
        keys: Arc<LockKeys>,
        kind: Kind,
        token: OwnerToken,
        fence: FencingToken,
        ttl: Duration,
        lease_start: Instant,
    ) -> Self {
        Self {
            name,
            keys,
            kind,
            downgraded: AtomicBool::new(false),
            token,
            fence,
            ttl_ms: AtomicU64::new(ttl_millis(ttl)),
            state: watch::Sender::new(State::Held(lease_start + ttl - drift(ttl))),
            set_at: std::sync::Mutex::new(lease_start),
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

    pub(crate) fn state(&self) -> State {
        *self.state.borrow()
    }

    /// Moves to `state` whatever the lease stood at; returns where it stood.
    pub(crate) fn end(&self, state: State) -> State {
        self.state.send_replace(state)
    }

    /// True while held and within its validity.
    pub(crate) fn is_held(&self) -> bool {
        matches!(self.state(), State::Held(until) if Instant::now() < until)
    }

    /// Records a successful renewal or extension sent at `sent` for `ttl`, unless the lease
    /// already ended or a later request already set it. The validity may move back (an
    /// extension to a shorter TTL), as the expiry in Redis did.
    pub(crate) fn renewed(&self, sent: Instant, ttl: Duration) {
        let until = sent + ttl - drift(ttl);
        self.state.send_if_modified(|s| {
            if !matches!(s, State::Held(_)) {
                return false;
            }
            let mut set_at = self.set_at.lock().unwrap_or_else(PoisonError::into_inner);
            if sent < *set_at {
                return false;
            }
            *set_at = sent;
            *s = State::Held(until);
            true
        });
    }

    /// Marks the lease lost (once), with a warning.
    pub(crate) fn lose(&self, why: &'static str) {
        let changed = self.state.send_if_modified(|s| {
            if matches!(s, State::Held(_)) {
                *s = State::Lost;
                true
            } else {
                false
            }
        });
        if changed {
            tracing::warn!(lock = %self.name, token = %self.token, fence = %self.fence, why, "lock lost");
        }
    }

    /// Marks a held lease closed by a shutdown; true when it was held.
    pub(crate) fn close(&self) -> bool {
        self.state.send_if_modified(|s| {
            if matches!(s, State::Held(_)) {
                *s = State::Closed;
                true
            } else {
                false
            }
        })
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
