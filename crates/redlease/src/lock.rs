//! [`Lock`]: a name and its options; acquiring it yields a [`Guard`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::Request;
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::owner::Owner;
use crate::renew::Renewal;
use crate::ttl::{MAX_TTL, validate_ttl};
use crate::wait::{Retry, Wait};

/// Lease length when none is set.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long [`Lock::acquire`] waits when no wait is set.
pub const DEFAULT_WAIT: Wait = Wait::For(Duration::from_secs(10));
/// Key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "redlease:";

/// A distributed lock: a name on a [`Client`](crate::Client)'s deployment plus options.
///
/// Building a `Lock` sends nothing; [`acquire`](Lock::acquire) and
/// [`try_acquire`](Lock::try_acquire) do. Options are checked when the lock is used, and a
/// bad one is reported as [`Error::InvalidName`] or [`Error::InvalidOption`].
#[must_use]
#[derive(Clone)]
pub struct Lock {
    engine: Arc<Engine>,
    name: Arc<str>,
    prefix: String,
    ttl: Duration,
    wait: Wait,
    retry: Retry,
    renewal: Renewal,
    max_hold: Option<Duration>,
    owner: Option<Owner>,
    min_replicas: Option<(usize, Duration)>,
    /// The keys, derived once per name and prefix.
    keys: Arc<std::sync::OnceLock<Arc<LockKeys>>>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.name)
            .field("prefix", &self.prefix)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .field("retry", &self.retry)
            .field("renewal", &self.renewal)
            .field("max_hold", &self.max_hold)
            .field("owner", &self.owner)
            .field("min_replicas", &self.min_replicas)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            engine,
            name: name.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            ttl: DEFAULT_TTL,
            wait: DEFAULT_WAIT,
            retry: Retry::default(),
            renewal: Renewal::default(),
            max_hold: None,
            owner: None,
            min_replicas: None,
            keys: Arc::default(),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis keys and channel of the lock.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::new(&self.prefix, &self.name)
    }

    /// Lease length (default [`DEFAULT_TTL`], between [`MIN_TTL`](crate::MIN_TTL) and
    /// [`MAX_TTL`]).
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How long [`acquire`](Lock::acquire) waits for a busy lock (default
    /// [`DEFAULT_WAIT`]).
    pub fn wait(mut self, wait: impl Into<Wait>) -> Self {
        self.wait = wait.into();
        self
    }

    /// Key prefix (default [`DEFAULT_PREFIX`]). An empty prefix makes the key the bare
    /// name, shared with any other library's `SET key token NX PX` lock of that name.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self.keys = Arc::default();
        self
    }

    /// Back-off bounds for polling (default [`Retry::default`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Whether the lease is renewed while held (default [`Renewal::Auto`]);
    /// [`Renewal::Fixed`] for a lease that simply expires after its TTL.
    /// [`run`](Lock::run) always renews (and refuses to re-enter a fixed lease).
    pub fn renewal(mut self, renewal: Renewal) -> Self {
        self.renewal = renewal;
        self
    }

    /// A budget for the whole hold: renewal stops once this much time has passed since the
    /// acquisition, and the lease then expires (default: no budget). Keeps a stuck holder
    /// from keeping a lock forever.
    pub fn max_hold(mut self, budget: Duration) -> Self {
        self.max_hold = Some(budget);
        self
    }

    /// Acquire for this owner, so that a nested acquisition of the same lock by the same
    /// owner re-enters (see [`Owner`]). Without it, the owner is that of the task-local
    /// scope the acquisition runs in ([`Owner::scope`]), if any; with neither, every
    /// acquisition is a fresh one.
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
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
        self.min_replicas = Some((replicas, timeout));
        self
    }

    fn plan(&self) -> Result<Arc<LockKeys>> {
        if let Some((replicas, timeout)) = self.min_replicas {
            if replicas == 0 || timeout.is_zero() {
                return Err(Error::InvalidOption {
                    option: "min_replicas",
                    reason: "needs at least one replica and a timeout above zero".into(),
                });
            }
            if let Some(reason) = self.engine.deployment().without_replicas() {
                return Err(Error::InvalidOption {
                    option: "min_replicas",
                    reason: reason.into(),
                });
            }
        }
        validate_ttl(self.ttl)?;
        self.retry.validate()?;
        if let Wait::For(d) = self.wait
            && d > MAX_TTL
        {
            return Err(Error::InvalidOption {
                option: "wait",
                reason: format!("{d:?} is longer than 30 days; use Wait::Forever"),
            });
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(Error::InvalidOption {
                option: "max_hold",
                reason: "must be greater than zero".into(),
            });
        }
        if let Some(keys) = self.keys.get() {
            return Ok(Arc::clone(keys));
        }
        let keys = Arc::new(LockKeys::new(&self.prefix, &self.name)?);
        Ok(Arc::clone(self.keys.get_or_init(|| keys)))
    }

    /// An acquisition of this lock at `keys`.
    fn request<'a>(&'a self, keys: &'a Arc<LockKeys>) -> Request<'a> {
        Request {
            engine: &self.engine,
            name: &self.name,
            keys,
            ttl: self.ttl,
            wait: self.wait,
            retry: self.retry,
            renewal: self.renewal,
            max_hold: self.max_hold,
            min_replicas: self.min_replicas,
        }
    }

    /// The owner acquisitions act for: the lock's own, else that of the current scope.
    pub(crate) fn effective_owner(&self) -> Option<Owner> {
        self.owner.clone().or_else(Owner::current)
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
        let keys = self.plan()?;
        let request = self.request(&keys);
        let holding = match self.effective_owner() {
            Some(owner) => {
                // Another task of this owner acquiring the same lock right now makes it
                // busy for this attempt: no waiting behind it.
                owner
                    .hold(
                        &self.engine,
                        &keys,
                        Some(Instant::now()),
                        request.try_once(),
                    )
                    .await?
            }
            None => request.try_once().await?,
        };
        Ok(holding.map(Guard::new))
    }

    /// Acquires the lock, waiting up to the lock's [`wait`](Lock::wait).
    ///
    /// A busy lock is waited for in a FIFO queue: the holder's release hands the lock to
    /// the oldest waiter directly (see [`crate::wait`]), so no waiter starves.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out; otherwise as
    /// [`try_acquire`](Lock::try_acquire).
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
    #[tracing::instrument(skip_all, fields(lock = %self.name))]
    pub async fn acquire(&self) -> Result<Guard> {
        let keys = self.plan()?;
        let request = self.request(&keys);
        let started = Instant::now();
        let deadline = request.deadline(started);
        let holding = match self.effective_owner() {
            // The owner's own bookkeeping (another of its tasks acquiring the same lock)
            // counts against the same wait.
            Some(owner) => owner
                .hold(&self.engine, &keys, deadline, async {
                    request.wait(started, deadline).await.map(Some)
                })
                .await?
                .ok_or_else(|| request.timeout(started, None))?,
            None => request.wait(started, deadline).await?,
        };
        Ok(Guard::new(holding))
    }

    /// Acquires the lock, runs `work` while the lease is kept renewed, and releases it.
    ///
    /// The moment the lease is lost (the token was found gone, or the lease ran out without
    /// a successful renewal), `work`'s future is **dropped** where it stands and `run`
    /// returns [`Error::Lost`]; code after an `.await` in `work` that would have run
    /// unprotected never runs. Renewal is always on here, whatever
    /// [`renewal`](Lock::renewal) says; [`max_hold`](Lock::max_hold) still applies.
    ///
    /// `work` runs in an [`Owner`] scope (the current one, or a new one), so a nested
    /// `run` or `acquire` of the same lock inside it re-enters without a round trip.
    ///
    /// # Re-entering a lease the owner already holds
    /// When the owner already holds the lock (an outer `run` or `acquire` of the same
    /// owner), `run` re-enters that lease as it is: its fencing token, TTL,
    /// [`max_hold`](Lock::max_hold) and [`min_replicas`](Lock::min_replicas) are the outer
    /// acquisition's, and this `Lock`'s own `ttl`, `max_hold` and `min_replicas` are not
    /// applied. One thing is refused: re-entering a lease acquired with
    /// [`Renewal::Fixed`], which nobody renews, fails with
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
        let owner = self.effective_owner().unwrap_or_default();
        let lock = self.clone().renewal(Renewal::Auto).owner(&owner);
        owner
            .scope(async move {
                let guard = Box::pin(lock.acquire()).await?;
                // `lock` renews every lease it acquires: one that is not renewed was
                // re-entered, acquired earlier by this owner with `Renewal::Fixed`.
                if !guard.holding().is_renewed() {
                    let name = guard.name().to_owned();
                    // A nested hold: giving it back only counts down, the outer holds on.
                    let _ = guard.release().await;
                    return Err(E::from(Error::FixedLeaseReentered { name }));
                }
                let outcome = {
                    let work = work(&guard);
                    tokio::select! {
                        biased;
                        () = guard.lost() => Err(guard.holding().lease.ended_error()),
                        out = work => Ok(out),
                    }
                };
                let released = guard.release().await;
                match (outcome, released) {
                    (Err(ended), _) => Err(E::from(ended)),
                    (Ok(Err(e)), _) => Err(e),
                    (Ok(Ok(_)), Err(e)) => Err(E::from(e)),
                    (Ok(Ok(value)), Ok(())) => Ok(value),
                }
            })
            .await
    }
}
