//! [`Guard`]: proof of a held lock, with its fencing token, validity and loss signal.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::{drift, ttl_millis, validate_ttl};

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

/// One acquisition of a lock, shared by its guard, the renewal scheduler and nested
/// (reentrant) guards of the same owner.
pub(crate) struct Lease {
    pub(crate) client: Client,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: OwnerToken,
    pub(crate) fence: FencingToken,
    /// The lease length renewals restore, in ms (changed by `extend`).
    ttl_ms: AtomicU64,
    state: watch::Sender<State>,
    /// Send time of the request behind the current `State::Held` validity. Expiry is set
    /// by whichever request Redis ran last, so an older reply never overrides a newer one.
    set_at: std::sync::Mutex<Instant>,
    /// Guards alive on this lease: 1, plus one per nested acquisition.
    holds: AtomicUsize,
    /// The lease's entry in the renewal scheduler, when renewed.
    renewal: std::sync::OnceLock<u64>,
    /// The lease's entry in its client's [`Leases`].
    id: u64,
}

impl Lease {
    pub(crate) fn new(
        client: Client,
        name: Arc<str>,
        keys: Arc<LockKeys>,
        token: OwnerToken,
        fence: FencingToken,
        ttl: Duration,
        lease_start: Instant,
    ) -> Arc<Self> {
        let id = client.inner.leases.next_id();
        let lease = Arc::new(Self {
            id,
            client,
            name,
            keys,
            token,
            fence,
            ttl_ms: AtomicU64::new(ttl_millis(ttl)),
            state: watch::Sender::new(State::Held(lease_start + ttl - drift(ttl))),
            set_at: std::sync::Mutex::new(lease_start),
            holds: AtomicUsize::new(1),
            renewal: std::sync::OnceLock::new(),
        });
        lease.client.inner.leases.add(id, &lease);
        lease
    }

    /// Records the lease's renewal entry, removed again when the lease is given back.
    pub(crate) fn renewed_by(&self, entry: u64) {
        let _ = self.renewal.set(entry);
    }

    /// Whether the renewal scheduler renews this lease ([`Renewal::Auto`](crate::Renewal)).
    pub(crate) fn is_renewed(&self) -> bool {
        self.renewal.get().is_some()
    }

    fn stop_renewal(&self) {
        if let Some(&entry) = self.renewal.get() {
            self.client.inner.renewer.remove(entry);
        }
    }

    /// Tells the renewal scheduler (when it renews this lease) that the lease was just set
    /// for `ttl` by a request sent at `sent`, so that the next renewal falls due a third of
    /// that `ttl` later, also when an extension shortened the lease.
    fn reschedule(&self, sent: Instant, ttl: Duration) {
        if let Some(&entry) = self.renewal.get() {
            self.client.inner.renewer.reschedule(entry, sent + ttl / 3);
        }
    }

    pub(crate) fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn state(&self) -> State {
        *self.state.borrow()
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

    /// Adds a nested hold if the lease is still held; false once it ended.
    pub(crate) fn enter(&self) -> bool {
        if !self.is_held() {
            return false;
        }
        self.holds.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Drops one hold; true when it was the last, so the lock must be given back.
    fn exit(&self) -> bool {
        self.holds.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Gives the lock back: stops renewal, then runs the release script.
    /// `Err(Lost)` when the token was no longer there or the lease had been declared lost.
    ///
    /// Until Redis confirmed the release, a background give-back stands armed: a caller
    /// that drops this future (a `select!`, a `timeout`) still frees the lock at once.
    async fn release(&self) -> Result<()> {
        let before = self.state.send_replace(State::Released);
        self.stop_renewal();
        if before == State::Closed {
            // `Client::shutdown` gave it back already.
            return Ok(());
        }
        let mut give_back = GiveBack::new(&self.client, &self.keys, &self.token);
        let released = release_token(&self.client, &self.keys, &self.token).await;
        if released.is_ok() {
            give_back.disarm();
        }
        match (before, released?) {
            (State::Held(_), true) => {
                tracing::debug!(lock = %self.name, "released");
                Ok(())
            }
            (State::Held(_), false) => {
                tracing::warn!(lock = %self.name, token = %self.token, "lock lost before release");
                Err(lost(&self.name))
            }
            _ => Err(lost(&self.name)),
        }
    }

    /// Ends the lease for [`Client::shutdown`](crate::Client::shutdown): true when it was
    /// held, so that the caller gives the lock back.
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
            self.stop_renewal();
        }
        closed
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

impl Drop for Lease {
    fn drop(&mut self) {
        self.client.inner.leases.remove(self.id);
    }
}

/// Every lease a client has handed out and not yet dropped, so that
/// [`Client::shutdown`](crate::Client::shutdown) can give them back.
#[derive(Default)]
pub(crate) struct Leases {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Weak<Lease>>>,
}

impl Leases {
    fn next_id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<Lease>>> {
        // Single inserts and removes: a panic cannot leave the map inconsistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, id: u64, lease: &Arc<Lease>) {
        self.live().insert(id, Arc::downgrade(lease));
    }

    fn remove(&self, id: u64) {
        self.live().remove(&id);
    }

    /// The leases still alive.
    pub(crate) fn all(&self) -> Vec<Arc<Lease>> {
        self.live().values().filter_map(Weak::upgrade).collect()
    }
}

/// Gives back, in the background, whatever an operation that may have taken something
/// leaves in Redis when it is dropped or fails before Redis confirmed the outcome: a lock
/// taken by an attempt whose reply never came, a place in the waiter queue (and a lock
/// handed to that place), or a release in flight. The release script does all of these,
/// atomically and idempotently.
///
/// Armed from the start. The give-back is a task of the client's, which
/// [`Client::shutdown`](crate::Client::shutdown) waits for.
pub(crate) struct GiveBack {
    client: Client,
    keys: Arc<LockKeys>,
    token: OwnerToken,
    armed: bool,
}

impl GiveBack {
    pub(crate) fn new(client: &Client, keys: &Arc<LockKeys>, token: &OwnerToken) -> Self {
        Self {
            client: client.clone(),
            keys: Arc::clone(keys),
            token: token.clone(),
            armed: true,
        }
    }

    /// Something may be left in Redis from now on.
    pub(crate) fn arm(&mut self) {
        self.armed = true;
    }

    /// Redis confirmed that nothing is left (or the lease passed to a guard).
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for GiveBack {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let client = self.client.clone();
        let keys = Arc::clone(&self.keys);
        let token = self.token.clone();
        let spawned = self.client.background(async move {
            match release_token(&client, &keys, &token).await {
                Ok(true) => tracing::debug!(key = %keys.key, "gave back a lock left by an abandoned operation"),
                Ok(false) => {}
                Err(e) => tracing::warn!(key = %keys.key, error = %e, "could not give back a lock left by an abandoned operation; it expires by itself"),
            }
        });
        if !spawned {
            tracing::debug!(key = %self.keys.key, "no runtime to give back an abandoned operation's lock; it expires by itself");
        }
    }
}

/// A held lock.
///
/// Release it with [`release`](Guard::release) to learn whether mutual exclusion held.
///
/// # Dropping a guard
/// Dropping a guard instead stops its renewal and releases the lock in a background task
/// of its [`Client`](crate::Client); any error is then only logged. Where that task runs:
/// - inside a tokio runtime that keeps running: at once;
/// - as a program ends (returning from `main`, a runtime shutting down): the runtime drops
///   its tasks unfinished, and the lock would stay held until its TTL ran out. Call
///   [`Client::shutdown`](crate::Client::shutdown) before the runtime ends: it gives back
///   every lease the client still holds and waits for background releases;
/// - outside any runtime: nothing can be sent; the lease expires after its TTL.
///
/// A [`blocking::Guard`](crate::blocking::Guard) releases synchronously in its `Drop`
/// instead, bounded by the response timeout.
///
/// A guard from a nested (reentrant) acquisition shares its lease with the outer guard:
/// the lock is given back when the last of them is released or dropped.
#[must_use = "dropping a Guard releases the lock at once"]
pub struct Guard {
    lease: Arc<Lease>,
    /// Set once released, so that `Drop` does nothing.
    done: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.lease.name)
            .field("token", &self.lease.token)
            .field("fencing_token", &self.lease.fence)
            .field("state", &self.lease.state())
            .finish_non_exhaustive()
    }
}

impl Guard {
    pub(crate) fn new(lease: Arc<Lease>) -> Self {
        Self { lease, done: false }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lease.name
    }

    /// The fencing token of this acquisition: greater than that of every earlier
    /// acquisition of the same name on this deployment. Nested guards share the outer one's.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.fence
    }

    /// The instant until which the lease is certainly ours: measured from when the request
    /// that last set or renewed it was *sent*, minus [`drift`]. Each renewal moves it on.
    /// Once the lease is lost or released, the instant it was lost is not tracked and this
    /// returns a time in the past.
    pub fn valid_until(&self) -> Instant {
        match self.lease.state() {
            State::Held(until) => until,
            State::Lost | State::Released | State::Closed => {
                Instant::now() - Duration::from_nanos(1)
            }
        }
    }

    /// Time left until [`valid_until`](Guard::valid_until), zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Whether the lease is still ours, without asking Redis: false once the token was
    /// found gone or the lease ran past [`valid_until`](Guard::valid_until).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Resolves when the lease is lost: the token was found gone by a renewal, or the lease
    /// ran out without a successful renewal. Never resolves while the lease is held and kept
    /// renewed. The loss is logged at `warn`.
    ///
    /// # Cancel safety
    /// Cancel safe; it only watches.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(guard: redlease::Guard) {
    /// tokio::select! {
    ///     () = guard.lost() => eprintln!("lost the lock; stopping"),
    ///     () = async { /* exclusive work */ } => {}
    /// }
    /// # }
    /// ```
    pub async fn lost(&self) {
        self.lease.ended().await;
    }

    /// Resets the lease to `ttl` from now, if the lock still holds our token; renewals
    /// (when on) keep that length from then on.
    ///
    /// # Errors
    /// [`Error::Lost`] when the lock no longer holds our token; [`Error::InvalidOption`]
    /// for a zero or huge `ttl`; [`Error::Redis`] when Redis could not be asked (the lease
    /// then runs on unchanged).
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the lease is either extended or unchanged, and
    /// [`valid_until`](Guard::valid_until) keeps its old, safe value.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let lease = &self.lease;
        if !matches!(lease.state(), State::Held(_)) {
            return Err(lost(&lease.name));
        }
        let sent = Instant::now();
        let extended = lease
            .client
            .deployment()
            .extend(&lease.keys, lease.token.secret(), ttl_millis(ttl))
            .await?;
        if !extended {
            lease.lose("extend found another token");
            return Err(lost(&lease.name));
        }
        lease.ttl_ms.store(ttl_millis(ttl), Ordering::Relaxed);
        lease.renewed(sent, ttl);
        lease.reschedule(sent, ttl);
        Ok(())
    }

    /// Releases this hold. The last hold on a lease gives the lock back (and hands it to
    /// the oldest waiter, if any); a nested hold only returns whether the lease is held.
    ///
    /// # Errors
    /// [`Error::Lost`] when the lock did not hold our token any more: the lease expired or
    /// another owner took it, so the work done under it may have overlapped with another
    /// holder's. [`Error::Redis`] when Redis could not be reached: the lease then expires
    /// by itself.
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped before Redis confirmed the release, the lock is given back
    /// in the background at once (a task of the client's, which
    /// [`Client::shutdown`](crate::Client::shutdown) waits for).
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        if self.lease.exit() {
            self.lease.release().await
        } else if self.lease.is_held() {
            Ok(())
        } else {
            Err(lost(&self.lease.name))
        }
    }
}

pub(crate) fn lost(name: &str) -> Error {
    Error::Lost {
        name: name.to_owned(),
    }
}

/// Runs the release script for `token` (also withdraws it from the waiter queue).
/// Returns whether the lock held the token.
pub(crate) async fn release_token(
    client: &Client,
    keys: &LockKeys,
    token: &OwnerToken,
) -> Result<bool> {
    client.deployment().release(keys, token.secret()).await
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done || !self.lease.exit() {
            return;
        }
        let lease = Arc::clone(&self.lease);
        let span = tracing::debug_span!("release on drop", lock = %lease.name);
        let spawned = self.lease.client.background(
            async move {
                if let Err(e) = lease.release().await {
                    tracing::warn!(error = %e, "background release failed");
                }
            }
            .instrument(span),
        );
        if !spawned {
            // Stop renewing; the lease expires by itself.
            self.lease.state.send_replace(State::Released);
            self.lease.stop_renewal();
            tracing::debug!(lock = %self.lease.name, "guard dropped outside a runtime; the lease will expire");
        }
    }
}
