//! [`Lock`]: a name and its options; acquiring it yields a [`Guard`].

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::{Engine, GiveBack, Holding};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::LockKeys;
use crate::lease::{Lease, lost};
use crate::notify::{Registration, Watch};
use crate::owner::Owner;
use crate::renew::Renewal;
use crate::replies::Reply;
use crate::scripts::AcquireArgs;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::{MAX_TTL, ttl_millis, validate_ttl};
use crate::wait::{Retry, Wait, jitter};

/// Lease length when none is set.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);
/// How long [`Lock::acquire`] waits when no wait is set.
pub const DEFAULT_WAIT: Wait = Wait::For(Duration::from_secs(10));
/// Key prefix when none is set.
pub const DEFAULT_PREFIX: &str = "redlease:";

/// The longest pause between attempts while Redis cannot be reached or refuses for now
/// (the lock's [`Retry`] may cap it lower).
const OUTAGE_POLL: Duration = Duration::from_millis(50);
/// How long the queue keys outlive their last waiter's arrival, beyond its wait.
const QUEUE_LINGER: Duration = Duration::from_secs(60);

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

/// What one attempt found.
enum Attempt {
    /// Acquired fresh by this very attempt.
    Fresh(FencingToken),
    /// Already held with our token: an earlier attempt of ours, or a hand-off.
    Ours(FencingToken),
    /// Held by another owner; the holder's remaining lease in ms (-1: none).
    Busy(i64),
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
        match self.effective_owner() {
            Some(owner) => {
                // Another task of this owner acquiring the same lock right now makes it
                // busy for this attempt: no waiting behind it.
                owner
                    .hold(
                        &self.engine,
                        &keys,
                        Some(Instant::now()),
                        self.try_acquire_fresh(&keys),
                    )
                    .await
            }
            None => self.try_acquire_fresh(&keys).await,
        }
    }

    async fn try_acquire_fresh(&self, keys: &Arc<LockKeys>) -> Result<Option<Guard>> {
        match self.try_acquire_unreplicated(keys).await? {
            Some(guard) if self.min_replicas.is_some() => {
                Box::pin(self.replicated(guard)).await.map(Some)
            }
            guard => Ok(guard),
        }
    }

    async fn try_acquire_unreplicated(&self, keys: &Arc<LockKeys>) -> Result<Option<Guard>> {
        let token = OwnerToken::generate()?;
        let mut give_back = GiveBack::new(&self.engine, keys, &token);
        let sent = Instant::now();
        match self.attempt(keys, &token, false).await? {
            Attempt::Fresh(fence) | Attempt::Ours(fence) => {
                give_back.disarm();
                Ok(Some(self.guard(
                    Arc::clone(keys),
                    token.clone(),
                    fence,
                    sent,
                )))
            }
            Attempt::Busy(_) => {
                give_back.disarm();
                Ok(None)
            }
        }
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
        let started = Instant::now();
        let deadline = match self.wait {
            Wait::No => Some(started),
            Wait::For(d) => Some(started + d),
            Wait::Forever => None,
        };
        match self.effective_owner() {
            // The owner's own bookkeeping (another of its tasks acquiring the same lock)
            // counts against the same wait.
            Some(owner) => owner
                .hold(&self.engine, &keys, deadline, async {
                    self.acquire_fresh(&keys, started, deadline).await.map(Some)
                })
                .await?
                .ok_or_else(|| self.timeout(started, None)),
            None => self.acquire_fresh(&keys, started, deadline).await,
        }
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

    async fn acquire_fresh(
        &self,
        keys: &Arc<LockKeys>,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<Guard> {
        let guard = self.acquire_unreplicated(keys, started, deadline).await?;
        if self.min_replicas.is_none() {
            return Ok(guard);
        }
        Box::pin(self.replicated(guard)).await
    }

    /// Applies [`min_replicas`](Lock::min_replicas) to a new guard.
    async fn replicated(&self, guard: Guard) -> Result<Guard> {
        let Some((replicas, timeout)) = self.min_replicas else {
            return Ok(guard);
        };
        let lease = &guard.holding().lease;
        let outcome = self
            .engine
            .deployment()
            .replicate(
                &lease.keys,
                lease.token.secret(),
                ttl_millis(self.ttl),
                replicas,
                timeout,
            )
            .await;
        match outcome {
            Ok((true, acked)) if acked >= replicas => Ok(guard),
            Ok((true, acked)) => {
                let _ = guard.release().await;
                Err(Error::Replication {
                    acked,
                    wanted: replicas,
                })
            }
            Ok((false, _)) => {
                let _ = guard.release().await;
                Err(lost(&self.name))
            }
            Err(e) => {
                let _ = guard.release().await;
                Err(e)
            }
        }
    }

    async fn acquire_unreplicated(
        &self,
        keys: &Arc<LockKeys>,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<Guard> {
        let token = OwnerToken::generate()?;
        let notifier = &self.engine.notifier;
        let mut epochs = notifier.epochs();
        // Armed before every attempt, disarmed only by a reply that proves nothing of ours
        // is left in Redis: a dropped or failed acquisition gives back whatever it took.
        let mut give_back = GiveBack::new(&self.engine, keys, &token);
        // With the client's notifications already up, queue up with the very first attempt
        // (one round trip fewer under contention; a free lock is simply taken).
        let mut registration: Option<Registration> =
            (self.wait != Wait::No && notifier.subscribed()).then(|| notifier.register(&token));
        // A lower bound on when the lease we may end up holding began: the send time of the
        // latest attempt that found the lock busy (a hand-off happens after it), or of the
        // first attempt when none did.
        let mut floor: Option<Instant> = None;
        let mut holder_ttl = None;
        let mut polls = 0u32;
        let mut failures = 0u32;
        let mut attempts = 0u32;
        // The error of the latest attempt, if it failed: what the caller gets, rather than
        // a timeout, when the wait runs out right after it. Boxed: it lives across the
        // waits below, in every acquire future.
        let mut failure: Option<Box<Error>> = None;
        // Cluster and quorum waiters listen for releases on the lock's channel instead.
        let wakeups = self.engine.wakeups.as_ref();
        let mut watch: Option<Watch> = None;
        loop {
            // Armed before the attempt is sent, so that a release landing between the
            // attempt's reply and the wait below still wakes us.
            let notify = watch.as_ref().map(Watch::notify);
            let mut released = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(n) = released.as_mut() {
                n.as_mut().enable();
            }
            let sent = Instant::now();
            let lease_floor = *floor.get_or_insert(sent);
            give_back.arm();
            let cut_at = deadline.filter(|_| attempts > 0);
            attempts += 1;
            // Queue only while hand-offs can reach us: a release skips (and drops) a
            // queued waiter whose client's grant subscription is down. The epoch changes
            // when it comes back, and the next attempt queues again.
            let queue = registration.is_some() && notifier.subscribed();
            let Some(outcome) = self.attempt_until(keys, &token, queue, cut_at).await else {
                return Err(failure.map_or_else(|| self.timeout(started, holder_ttl), |e| *e));
            };
            let delay = match outcome {
                Ok(Attempt::Fresh(fence)) => {
                    return Ok(self.taken(give_back, keys, token, fence, sent));
                }
                Ok(Attempt::Ours(fence)) => {
                    return Ok(self.taken(give_back, keys, token, fence, lease_floor));
                }
                Ok(Attempt::Busy(pttl)) => {
                    failure = None;
                    floor = Some(sent);
                    if registration.is_none() {
                        // Definitely not ours and not queued: nothing to clean up.
                        give_back.disarm();
                    }
                    holder_ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
                    if registration.is_none()
                        && deadline.is_none_or(|d| Instant::now() < d)
                        && notifier.ready(deadline).await
                    {
                        // Subscribed: register, then queue up at once.
                        registration = Some(notifier.register(&token));
                        continue;
                    }
                    if let Some(wakeups) = wakeups
                        && watch.is_none()
                        && deadline.is_none_or(|d| Instant::now() < d)
                    {
                        watch = wakeups.watch(&keys.channel, deadline).await;
                        if watch.is_some() {
                            // Listening now: try again at once, a release may have come
                            // while we subscribed.
                            continue;
                        }
                    }
                    self.busy_delay(
                        registration.is_some() || watch.is_some(),
                        holder_ttl,
                        &mut polls,
                    )
                }
                Err(e) => match self.retry_after(&e, &mut failures) {
                    Some(delay) => {
                        failure = Some(Box::new(e));
                        delay
                    }
                    None => return Err(e),
                },
            };
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(failure.map_or_else(|| self.timeout(started, holder_ttl), |e| *e));
            }
            let wake = deadline.map_or(now + delay, |d| d.min(now + delay));
            if let Some(fence) =
                wait_for_news(registration.as_mut(), released.as_mut(), wake, &mut epochs).await
            {
                if !self.engine.deployment().trusts_grants() {
                    // Confirm the grant with an attempt (it finds our token: `Ours`). The
                    // old registration goes first: its drop removes our token's entry.
                    drop(registration.take());
                    registration = Some(notifier.register(&token));
                    continue;
                }
                let fence = FencingToken::new(fence);
                return Ok(self.taken(give_back, keys, token, fence, sent));
            }
        }
    }

    /// How long to wait before retrying an attempt that failed with `e`, or `None` when
    /// the error is final. Connection errors (the outcome is unknown: the give-back guard
    /// settles it), a quorum that did not answer, and passing refusals (`BUSY`, `LOADING`:
    /// nothing ran) are retried with jittered back-off for as long as the wait lasts, so
    /// an outage shorter than the wait is ridden out; the caller stops at the deadline and
    /// returns the last error.
    fn retry_after(&self, e: &Error, failures: &mut u32) -> Option<Duration> {
        if e.is_transient() {
            tracing::debug!(error = %e, "attempt refused for now, retrying");
        } else if e.is_connection() || matches!(e, Error::NoQuorum { .. }) {
            tracing::debug!(error = %e, "attempt failed; outcome unknown, retrying");
        } else {
            return None;
        }
        *failures += 1;
        // Polled often enough to notice a recovered Redis within a few tens of ms: an
        // attempt against a refused connection costs the server nothing.
        Some(self.retry.delay_within(*failures, OUTAGE_POLL))
    }

    /// How long a waiter that found the lock busy sleeps at most before trying again.
    fn busy_delay(
        &self,
        listening: bool,
        holder_ttl: Option<Duration>,
        polls: &mut u32,
    ) -> Duration {
        match (listening, holder_ttl) {
            // Queued (or listening): the hand-off (or the release notice) wakes us; re-check
            // when the holder's lease should have run out (it may have crashed), at most
            // every `max`.
            (true, Some(left)) => left.min(self.retry.max()) + jitter(self.retry.min()),
            (true, None) => self.retry.max(),
            (false, _) => {
                *polls += 1;
                self.retry.delay(*polls)
            }
        }
    }

    fn timeout(&self, started: Instant, holder_ttl: Option<Duration>) -> Error {
        Error::Timeout {
            name: self.name.to_string(),
            waited: started.elapsed(),
            holder_ttl,
        }
    }

    /// The guard of a lock an acquisition took: nothing is left to give back.
    fn taken(
        &self,
        mut give_back: GiveBack,
        keys: &Arc<LockKeys>,
        token: OwnerToken,
        fence: FencingToken,
        lease_start: Instant,
    ) -> Guard {
        give_back.disarm();
        self.guard(Arc::clone(keys), token, fence, lease_start)
    }

    fn guard(
        &self,
        keys: Arc<LockKeys>,
        token: OwnerToken,
        fence: FencingToken,
        lease_start: Instant,
    ) -> Guard {
        let lease = Lease::new(
            Arc::clone(&self.name),
            keys,
            token,
            fence,
            self.ttl,
            lease_start,
        );
        tracing::debug!(lock = %lease.name, token = %lease.token, fence = %lease.fence, "acquired");
        let renew = (self.renewal == Renewal::Auto).then_some((lease_start, self.max_hold));
        Guard::new(Holding::new(&self.engine, lease, renew))
    }

    async fn attempt(&self, keys: &LockKeys, token: &OwnerToken, queue: bool) -> Result<Attempt> {
        let linger = ttl_millis(self.queue_linger());
        let args = AcquireArgs {
            token: token.secret(),
            ttl_ms: ttl_millis(self.ttl),
            holder: &self.engine.holder,
            queue: queue.then(|| (self.engine.notifier.channel(), linger)),
        };
        Ok(match self.engine.deployment().acquire(keys, &args).await? {
            Reply::Fresh(fence) => Attempt::Fresh(FencingToken::new(fence)),
            Reply::Ours(fence) => Attempt::Ours(FencingToken::new(fence)),
            Reply::Busy(pttl) => Attempt::Busy(pttl),
        })
    }

    /// An attempt that stops at `cut_at` (`None` when cut off: its outcome is unknown,
    /// and the caller's give-back settles it). The first attempt of an acquisition is
    /// never cut (it always gets its answer, as `try_acquire` does); later ones stop at
    /// the end of the wait.
    async fn attempt_until(
        &self,
        keys: &LockKeys,
        token: &OwnerToken,
        queue: bool,
        cut_at: Option<Instant>,
    ) -> Option<Result<Attempt>> {
        let attempt = self.attempt(keys, token, queue);
        match cut_at {
            Some(at) => tokio::time::timeout_at(at, attempt).await.ok(),
            None => Some(attempt.await),
        }
    }

    fn queue_linger(&self) -> Duration {
        match self.wait {
            Wait::For(d) => d + QUEUE_LINGER,
            Wait::No | Wait::Forever => QUEUE_LINGER,
        }
    }
}

/// Sleeps until `wake`, a hand-off to `registration`, a `released` notice or a dropped
/// pub/sub connection, whichever comes first; the fencing token when handed the lock.
async fn wait_for_news(
    registration: Option<&mut Registration>,
    released: Option<&mut Pin<Box<Notified<'_>>>>,
    wake: Instant,
    epochs: &mut watch::Receiver<u64>,
) -> Option<u64> {
    let granted = async {
        match registration {
            Some(r) => r.granted().await,
            None => std::future::pending().await,
        }
    };
    let released = async {
        match released {
            Some(n) => n.await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        fence = granted => Some(fence),
        () = released => None,
        () = tokio::time::sleep_until(wake) => None,
        _ = epochs.changed() => None,
    }
}
