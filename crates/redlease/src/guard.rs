//! [`Guard`]: proof of a held lock, with its fencing token, validity and loss signal.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::engine::Holding;
use crate::error::Result;
use crate::handle::LeaseHandle;
use crate::lease::{LeaseHealth, State, lost};
use crate::token::FencingToken;
use crate::ttl::{ttl_millis, validate_ttl};

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
    holding: Arc<Holding>,
    /// Set once released, so that `Drop` does nothing.
    done: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.holding.lease.name)
            .field("token", &self.holding.lease.token)
            .field("fencing_token", &self.holding.lease.fence)
            .field("state", &self.holding.lease.state())
            .finish_non_exhaustive()
    }
}

impl Guard {
    pub(crate) fn new(holding: Arc<Holding>) -> Self {
        Self {
            holding,
            done: false,
        }
    }

    pub(crate) fn holding(&self) -> &Arc<Holding> {
        &self.holding
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.holding.lease.name
    }

    /// The fencing token of this acquisition: greater than that of every earlier
    /// acquisition of the same name on this deployment. Nested guards share the outer one's.
    pub fn fencing_token(&self) -> FencingToken {
        self.holding.lease.fence
    }

    /// The instant until which the lease is certainly ours: measured from when the request
    /// that last set or renewed it was *sent*, minus [`drift`](crate::diagnostics::drift). Each renewal moves it on.
    /// Once the lease is lost or released, the instant it was lost is not tracked and this
    /// returns a time in the past.
    pub fn valid_until(&self) -> Instant {
        match self.holding.lease.state() {
            State::Held(until) => until,
            State::Lost | State::Released | State::Closed | State::Detached => {
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
        self.holding.lease.is_held()
    }

    /// Asks Redis whether the lease still holds this guard's owner token, now: one read
    /// round trip (over a quorum, whether a majority of nodes say so). Unlike
    /// [`is_held`](Guard::is_held), which answers from what the guard already knows, this
    /// notices a key deleted or taken behind the holder's back before the next renewal
    /// does, and marks the lease lost then. It never revives a lease the guard already
    /// counts as lost (that is `false` without asking). A `true` is a fact about the moment
    /// Redis answered, not a promise for later: protect the work itself with
    /// [`fencing_token`](Guard::fencing_token).
    ///
    /// # Errors
    /// [`Error::Redis`](crate::Error::Redis) when Redis cannot be asked,
    /// [`Error::NoQuorum`](crate::Error::NoQuorum) when too few quorum nodes answer.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(guard: redlease::Guard) -> redlease::Result<()> {
    /// // Before an expensive step: did an operator force the lock away meanwhile?
    /// if !guard.owned().await? {
    ///     return Ok(()); // no longer ours: skip the step
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn owned(&self) -> Result<bool> {
        let lease = &self.holding.lease;
        if !lease.is_held() {
            return Ok(false);
        }
        let holds = self
            .holding
            .engine
            .deployment()
            .holds(&lease.keys, lease.kind(), lease.token.secret())
            .await?;
        if !holds {
            lease.lose("Redis no longer holds the owner token");
        }
        Ok(holds && lease.is_held())
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
        self.holding.lease.ended().await;
    }

    /// Watches how the lease's renewal stands: [`LeaseHealth::Renewed`] after each
    /// successful renewal, [`LeaseHealth::Retrying`] (with the time left) while renewals
    /// fail and are retried, then [`LeaseHealth::Lost`] or [`LeaseHealth::Released`].
    /// Unlike [`lost`](Guard::lost), it warns while there is still time to act: stop
    /// starting new work, checkpoint, or step down before the lease runs out.
    ///
    /// The receiver sees every change the renewal scheduler makes; a lease that is not
    /// renewed ([`Renewal::Fixed`](crate::Renewal::Fixed)) reports `Lost` once its expiry
    /// is noticed ([`lost`](Guard::lost) or [`health_changes`](Guard::health_changes)
    /// notice it on time). Nested guards share the outer lease's health.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(guard: redlease::Guard) {
    /// use redlease::LeaseHealth;
    /// let mut health = guard.health();
    /// while health.changed().await.is_ok() {
    ///     match *health.borrow_and_update() {
    ///         LeaseHealth::Retrying { failures, .. } => eprintln!("renewal failing ({failures}x)"),
    ///         LeaseHealth::Renewed { .. } => {}
    ///         _ => break,
    ///     }
    /// }
    /// # }
    /// ```
    pub fn health(&self) -> tokio::sync::watch::Receiver<LeaseHealth> {
        self.holding.lease.health()
    }

    /// The lease's health as a [`Stream`](futures_util::Stream): the current
    /// [`LeaseHealth`] first, then each change, ending after `Lost` or `Released`. A lease
    /// that runs out unrenewed is reported `Lost` at its validity's end.
    ///
    /// The stream keeps the lease's bookkeeping alive, not the lock: dropping every guard
    /// still releases it (the stream then yields `Released` and ends).
    pub fn health_changes(
        &self,
    ) -> impl futures_util::Stream<Item = LeaseHealth> + Send + Unpin + 'static {
        let holding = Arc::clone(&self.holding);
        let rx = holding.lease.health();
        Box::pin(futures_util::stream::unfold(
            Some((holding, rx, true)),
            |state| async move {
                let (holding, mut rx, first) = state?;
                if !first {
                    // Until a change not yet yielded (or the lease running out unrenewed).
                    while !rx.has_changed().unwrap_or(true) {
                        let until = match *rx.borrow() {
                            LeaseHealth::Renewed { valid_until }
                            | LeaseHealth::Retrying { valid_until, .. } => valid_until,
                            LeaseHealth::Lost | LeaseHealth::Released => return None,
                        };
                        tokio::select! {
                            changed = rx.changed() => {
                                if changed.is_err() {
                                    return None;
                                }
                                break;
                            }
                            () = tokio::time::sleep_until(until) => {
                                if holding.lease.state() == State::Held(until) {
                                    holding.lease.lose("the lease ran out without a successful renewal");
                                }
                            }
                        }
                    }
                }
                let health = *rx.borrow_and_update();
                let next = health.is_held().then_some((holding, rx, false));
                Some((health, next))
            },
        ))
    }

    /// Resets the lease to `ttl` from now, if the lock still holds our token; renewals
    /// (when on) keep that length from then on.
    ///
    /// # Errors
    /// [`Error::Lost`](crate::Error::Lost) when the lock no longer holds our token; [`Error::InvalidOption`](crate::Error::InvalidOption)
    /// for a zero or huge `ttl`; [`Error::Redis`](crate::Error::Redis) when Redis could not be asked (the lease
    /// then runs on unchanged).
    ///
    /// An extend to a `ttl` shorter than the lease's current length lowers
    /// [`valid_until`](Guard::valid_until) to what the shorter lease allows *before* it is
    /// sent, and makes `ttl` the length renewals restore: if it is dropped or fails, it may
    /// still have run in Redis, so both stay. A longer `ttl` moves `valid_until` on only
    /// when Redis confirmed it. An extend waits for a renewal of this lease in flight, and
    /// renewals wait for it: their replies are applied in the order Redis ran them.
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the lease is either extended or unchanged in Redis, and
    /// [`valid_until`](Guard::valid_until) is never later than the lease's end in Redis
    /// (lowered already for a shorter `ttl`).
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let lease = &self.holding.lease;
        let _step = lease.step().await;
        if !matches!(lease.state(), State::Held(_)) {
            return Err(lost(&lease.name));
        }
        let sent = Instant::now();
        if ttl < lease.ttl() {
            lease.shorten(sent, ttl);
            self.holding.reschedule(sent, ttl);
        }
        let extended = self
            .holding
            .engine
            .deployment()
            .extend(
                &lease.keys,
                lease.kind(),
                lease.token.secret(),
                ttl_millis(ttl),
            )
            .await?;
        if !extended {
            lease.lose("extend found another token");
            return Err(lost(&lease.name));
        }
        lease.set_ttl(ttl);
        lease.renewed(sent, ttl);
        self.holding.reschedule(sent, ttl);
        Ok(())
    }

    /// Releases this hold. The last hold on a lease gives the lock back (and hands it to
    /// the oldest waiter, if any); a nested hold only returns whether the lease is held.
    ///
    /// # Errors
    /// [`Error::Lost`](crate::Error::Lost) when the lock did not hold our token any more: the lease expired or
    /// another owner took it, so the work done under it may have overlapped with another
    /// holder's. [`Error::Redis`](crate::Error::Redis) when Redis could not be reached: the lease then expires
    /// by itself.
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped before Redis confirmed the release, the lock is given back
    /// in the background at once (a task of the client's, which
    /// [`Client::shutdown`](crate::Client::shutdown) waits for).
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        if self.holding.exit() {
            self.holding.release().await
        } else if self.holding.lease.is_held() {
            Ok(())
        } else {
            Err(lost(&self.holding.lease.name))
        }
    }
}

impl Guard {
    /// Hands the lease to another process: stops renewing it here and returns the
    /// [`LeaseHandle`] that [`Lock::adopt`](crate::Lock::adopt) takes over, in this
    /// process or another (pass its string form through an environment variable or a
    /// file). The lock is **not** released: it stays held in Redis, with the expiry its
    /// last renewal set, until the adopter renews it or it runs out. Adopt it within the
    /// [`ttl`](LeaseHandle::ttl) (less what passed since the last renewal), or it expires.
    ///
    /// Nothing is sent, so it cannot fail; this guard's [`is_held`](Guard::is_held) is
    /// false from then on, and [`health`](Guard::health) reports `Released`. A lease
    /// shared with nested guards of the same owner is handed on whole: they no longer hold
    /// it, and their `release` returns [`Error::Lost`](crate::Error::Lost) without
    /// touching Redis. [`Client::shutdown`](crate::Client::shutdown) leaves a detached
    /// lease alone.
    ///
    /// Only a lock's handle can be adopted: detaching a semaphore permit or a read hold
    /// ends its renewal here, and it then expires in Redis.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// let guard = client.lock("nightly-report").acquire().await?;
    /// let handle = guard.detach().to_string(); // a secret: give it to one process
    /// // ... in that process:
    /// let handle: redlease::LeaseHandle = handle.parse()?;
    /// let guard = client.lock(handle.name()).adopt(handle).await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn detach(mut self) -> LeaseHandle {
        self.done = true;
        let lease = &self.holding.lease;
        // The key is the prefix followed by the name.
        let prefix = lease
            .keys
            .key
            .strip_suffix(&*lease.name)
            .unwrap_or_default();
        let handle = LeaseHandle::new(
            lease.kind(),
            (prefix, &lease.name),
            &lease.token,
            lease.fence,
            lease.ttl(),
        );
        self.holding.exit();
        self.holding.detach();
        handle
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done || !self.holding.exit() {
            return;
        }
        let holding = Arc::clone(&self.holding);
        let span = tracing::debug_span!("release on drop", lock = %holding.lease.name);
        let spawned = self.holding.engine.background(
            async move {
                match holding.release().await {
                    Ok(()) => {}
                    // Warned of already, once: when the loss was found.
                    Err(e @ crate::Error::Lost { .. }) => {
                        tracing::debug!(error = %e, "background release: the lease was lost");
                    }
                    Err(e) => tracing::warn!(error = %e, "background release failed"),
                }
            }
            .instrument(span),
        );
        if !spawned {
            // Stop renewing; the lease expires by itself.
            self.holding.lease.abandon();
            self.holding.stop_renewal();
            tracing::debug!(lock = %self.holding.lease.name, "guard dropped outside a runtime; the lease will expire");
        }
    }
}

/// `Deref` and `DerefMut` to `Guard` (whichever is in scope) for a guard type with a
/// `guard: Guard` field: a write guard has the whole surface of a guard.
macro_rules! derefs_to_guard {
    ($type:ident) => {
        impl std::ops::Deref for $type {
            type Target = Guard;

            fn deref(&self) -> &Guard {
                &self.guard
            }
        }

        impl std::ops::DerefMut for $type {
            fn deref_mut(&mut self) -> &mut Guard {
                &mut self.guard
            }
        }
    };
}
pub(crate) use derefs_to_guard;
