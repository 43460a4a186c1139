//! [`Lock`]: a name and its options; acquiring it yields a [`Guard`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::{Spec, option_setters};
use crate::engine::{Engine, Holding};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::handle::LeaseHandle;
use crate::keys::{LockKeys, Primitive};
use crate::lease::Lease;
use crate::renew::Renewal;
use crate::scripts::Kind;
use crate::ttl::ttl_millis;

/// A distributed lock: a name on a [`Client`](crate::Client)'s deployment plus options.
///
/// Building a `Lock` sends nothing; [`acquire`](Lock::acquire) and
/// [`try_acquire`](Lock::try_acquire) do. Options are checked when the lock is used, and a
/// bad one is reported as [`Error::InvalidName`] or [`Error::InvalidOption`]. With an
/// empty [`prefix`](Lock::prefix) the lock key is the bare name, shared with any other
/// library's `SET key token NX PX` lock of that name.
#[must_use]
#[derive(Clone)]
pub struct Lock {
    spec: Spec,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Lock").field(&self.spec).finish()
    }
}

option_setters!(Lock);

impl Lock {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            spec: Spec::new(engine, name),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Redis keys and channel of the lock.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::new(&self.spec.prefix, &self.spec.name)
    }

    /// After acquiring, wait until at least `replicas` replicas of the primary hold the
    /// lock, for up to `timeout`; otherwise give the lock back and fail with
    /// [`Error::Replication`] (default: don't wait). A `timeout` longer than the client's
    /// response timeout is waited in several `WAIT` rounds, so it may be as long as needed.
    ///
    /// Redis replicates asynchronously: a primary that fails right after granting a lock
    /// may take it to its grave, and the replica promoted in its place grants it again (the
    /// failover problem of Sentinel and Cluster deployments). With `min_replicas(1, ..)`
    /// and one replica, an acquisition returns only once the lock is on two servers, so a
    /// failover that promotes the acknowledging replica keeps it. `WAIT` makes that
    /// likely, not certain: a failover may still promote a replica that did not
    /// acknowledge. During a failover, the old primary keeps accepting writes from
    /// clients still connected to it until the sentinels demote it; the client turns to
    /// the new primary when the old one answers `READONLY` or drops the connection. Not
    /// available for quorum clients, whose nodes have no replicas.
    pub fn min_replicas(mut self, replicas: usize, timeout: Duration) -> Self {
        self.spec.min_replicas = Some((replicas, timeout));
        self
    }

    /// Makes one attempt: `Ok(None)` when another owner holds the lock.
    ///
    /// A release hands a busy lock straight to the oldest queued waiter, so a lock is free
    /// while others wait only after its holder crashed; an attempt then takes it.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidOption`], [`Error::WrongType`] when the key
    /// holds something else, [`Error::Redis`] when Redis cannot be asked (a lock the
    /// attempt may have taken is then given back in the background),
    /// [`Error::Randomness`] when the operating system could not supply an owner token.
    ///
    /// # Cancel safety
    /// Cancel safe: a lock taken by a dropped attempt is given back in the background.
    pub async fn try_acquire(&self) -> Result<Option<Guard>> {
        self.spec.try_acquire(Kind::Mutex).await
    }

    /// Acquires the lock, waiting up to the lock's [`wait`](Lock::wait).
    ///
    /// A busy lock is waited for in a FIFO queue: the holder's release hands the lock to
    /// the oldest waiter directly (see [`crate::wait`]), so no waiter starves.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out; [`Error::ShutDown`] when
    /// [`Client::shutdown`](crate::Client::shutdown) ended the wait (and withdrew it from
    /// the queue); otherwise as [`try_acquire`](Lock::try_acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws it from the queue, and gives back a lock
    /// that was handed to it meanwhile, in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// use std::time::Duration;
    /// let guard = client
    ///     .lock("nightly-report")
    ///     .ttl(Duration::from_secs(60))
    ///     .wait(Duration::from_secs(5))
    ///     .acquire()
    ///     .await?;
    /// // ... exclusive work, stamped with guard.fencing_token() ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(lock = %self.spec.name))]
    pub async fn acquire(&self) -> Result<Guard> {
        self.spec.acquire(Kind::Mutex).await
    }

    /// Acquires the lock, runs `work` while the lease is kept renewed, and releases it.
    ///
    /// The moment the lease is lost (the token was found gone, or the lease ran out without
    /// a successful renewal), `work`'s future is **dropped** where it stands and `run`
    /// returns [`Error::Lost`]; code after an `.await` in `work` that would have run
    /// unprotected never runs. Renewal is always on here, whatever
    /// [`renewal`](Lock::renewal) says; [`max_hold`](Lock::max_hold) still applies.
    ///
    /// `work` runs in an [`Owner`](crate::Owner) scope (the current one, or a new one), so a nested
    /// `run` or `acquire` of the same lock inside it re-enters without a round trip.
    ///
    /// # Re-entering a lease the owner already holds
    /// When the owner already holds the lock (an outer `run` or `acquire` of the same
    /// owner), `run` re-enters that lease as it is: its fencing token, TTL,
    /// [`max_hold`](Lock::max_hold) and [`min_replicas`](Lock::min_replicas) are the outer
    /// acquisition's, and this `Lock`'s own `ttl`, `max_hold` and `min_replicas` are not
    /// applied. One thing is refused: re-entering a lease acquired with
    /// [`Renewal::Fixed`](crate::Renewal::Fixed), which nobody renews, fails with
    /// [`Error::FixedLeaseReentered`] before `work` starts (it would be cut off when that
    /// lease runs out, however long its own `ttl`).
    ///
    /// # Errors
    /// `work`'s own error, unchanged. Otherwise, converted with `From<Error>`: anything
    /// [`acquire`](Lock::acquire) returns; [`Error::FixedLeaseReentered`] as above;
    /// [`Error::Lost`] when the lease was lost during
    /// `work` or found lost at the release after it; [`Error::Redis`] when the release
    /// could not reach Redis (the lease then expires by itself).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases the lock in the background.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// let report = client
    ///     .lock("nightly-report")
    ///     .run(async |guard| {
    ///         // Exclusive, renewed, and cancelled if the lock is lost.
    ///         Ok::<_, redlease::Error>(format!("built under fencing token {}", guard.fencing_token()))
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        self.spec.run(Kind::Mutex, work).await
    }

    /// "Skip if busy": runs `work` as [`run`](Lock::run) does if the lock can be taken at
    /// once (no wait, whatever [`wait`](Lock::wait) says), and returns `Ok(None)` without
    /// running it when another owner holds the lock.
    ///
    /// # Errors
    /// As [`run`](Lock::run), except that a busy lock is `Ok(None)`, not
    /// [`Error::Timeout`].
    ///
    /// # Cancel safety
    /// As [`run`](Lock::run).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// let swept = client
    ///     .lock("sweep")
    ///     .try_run(async |_guard| Ok::<_, redlease::Error>(42))
    ///     .await?;
    /// match swept {
    ///     Some(n) => println!("swept {n} rows"),
    ///     None => println!("another instance is sweeping; skipped"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_run<T, E, F>(&self, work: F) -> std::result::Result<Option<T>, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let mut spec = self.spec.clone();
        spec.wait = crate::Wait::No;
        spec.run_unless_busy(Kind::Mutex, work).await
    }

    /// Takes over a lease another holder handed on with
    /// [`Guard::detach`](crate::Guard::detach), in this process or another: the guard
    /// returned holds it with the handle's owner token and fencing token, and renews it as
    /// [`renewal`](Lock::renewal) says (by default: kept renewed), within
    /// [`max_hold`](Lock::max_hold) counted from now.
    ///
    /// One round trip: the extend script, which resets the lease to the handle's
    /// [`ttl`](LeaseHandle::ttl) only if the key still holds the handle's owner token (the
    /// compare every renewal makes; over a quorum, on a majority of nodes). So a lease
    /// that ran out, or that another owner took meanwhile, is never claimed; and the
    /// guard's [`valid_until`](Guard::valid_until) is dated from when that request was
    /// sent, as for any renewal. The lease keeps the handle's length; this `Lock`'s
    /// [`ttl`](Lock::ttl) and [`min_replicas`](Lock::min_replicas) are not applied
    /// ([`Guard::extend`] changes the length).
    ///
    /// The adopted guard belongs to no [`Owner`](crate::Owner): a nested acquisition of
    /// the same name does not re-enter it. Hand a handle to **one** process: two adopters
    /// of one handle both renew the same owner token and both believe they hold the lock
    /// (see [`LeaseHandle`]).
    ///
    /// # Errors
    /// [`Error::HandleGone`] when the lock no longer holds the handle's owner token (the
    /// lease was released, expired before it was adopted, or another owner holds it):
    /// nothing was changed.
    /// [`Error::InvalidHandle`] when the handle is of another name or key prefix than
    /// this `Lock`; [`Error::Unsupported`] for a handle of a semaphore permit, a
    /// read-write lock's hold or an election's lock (only a lock's lease can be adopted);
    /// [`Error::Redis`] (or [`Error::NoQuorum`]) when Redis could not be asked;
    /// [`Error::InvalidName`], [`Error::InvalidOption`] as for
    /// [`acquire`](Lock::acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the lease was either extended to the handle's ttl or left
    /// as it was; either way nobody renews it, and it expires by itself (adopt it again
    /// from a clone of the handle to keep it).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> Result<(), Box<dyn std::error::Error>> {
    /// // The handle a parent process passed down (`guard.detach().to_string()`).
    /// let handle: redlease::LeaseHandle = std::env::var("JOB_LOCK")?.parse()?;
    /// let guard = client.lock(handle.name()).adopt(handle).await?;
    /// // ... exclusive work, stamped with guard.fencing_token() ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(lock = %self.spec.name))]
    pub async fn adopt(&self, handle: LeaseHandle) -> Result<Guard> {
        let spec = &self.spec;
        if !handle.is_lock() {
            return Err(Error::Unsupported {
                what: "adopting a semaphore permit, a read-write lock's hold, a latch's count or an election's lock",
                reason: "only a lock's lease can be handed to another holder; detach and adopt a Lock's guard",
            });
        }
        if handle.name() != &*spec.name || handle.prefix() != spec.prefix {
            return Err(Error::InvalidHandle {
                reason: format!(
                    "it is a handle of lock `{}` under prefix `{}`, given to lock `{}` under prefix `{}`",
                    handle.name(),
                    handle.prefix(),
                    spec.name,
                    spec.prefix
                ),
            });
        }
        let keys = spec.plan(Primitive::Lock)?;
        let ttl = handle.ttl();
        let sent = Instant::now();
        let held = spec
            .engine
            .deployment()
            .extend(&keys, Kind::Mutex, handle.token.secret(), ttl_millis(ttl))
            .await?;
        if !held {
            tracing::debug!("the handle's lease is gone: expired, or another owner holds the lock");
            return Err(Error::HandleGone {
                name: spec.name.to_string(),
            });
        }
        let lease = Lease::new(
            Arc::clone(&spec.name),
            keys,
            Kind::Mutex,
            (handle.token, handle.fence),
            ttl,
            sent,
            spec.labels(Kind::Mutex),
        );
        tracing::debug!(parent: &lease.span, "adopted");
        let renew = (spec.renewal == Renewal::Auto).then_some((sent, spec.max_hold));
        Ok(Guard::new(Holding::new(&spec.engine, lease, renew)))
    }
}
