//! Taking a lease: one attempt, or waiting for a busy one (FIFO hand-off, release notices,
//! polling as the fallback), for every primitive of the engine. An acquisition gives its
//! caller an [`Arc<Holding>`]; the API wraps it in its own guard type.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::engine::{Engine, GiveBack, Holding};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lease::{Lease, lost};
use crate::notify::{Grant, Registration, Watch};
use crate::observe::{Acquisition, Labels};
use crate::renew::Renewal;
use crate::replies::Reply;
use crate::scripts::{AcquireArgs, Join, Kind};
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::ttl_millis;
use crate::wait::{Retry, Wait, jitter};

mod dating;
mod queue;
mod standing;

use dating::{Dating, lasts};
use queue::{News, Queue, wait_for_news};
use standing::{Standing, Waiter};

/// The longest pause between attempts while Redis cannot be reached or refuses for now
/// (the lease's [`Retry`] may cap it lower).
const OUTAGE_POLL: Duration = Duration::from_millis(50);
/// How long the queue keys outlive their last waiter's arrival (or re-check), beyond its
/// wait.
const QUEUE_LINGER: Duration = Duration::from_secs(90);
/// The longest a queued waiter that can be told of a hand-off sleeps between two
/// attempts: half the queue keys' linger, so that its place outlives its sleep (and its
/// jitter, a twentieth more).
const RECHECK_MAX: Duration = Duration::from_secs(45);

/// One acquisition: what to take and how (the options of the primitive's builder, already
/// checked).
pub(crate) struct Request<'a> {
    /// The acquisition's metrics.
    pub(crate) meter: &'a Acquisition,
    /// The metrics' labels of the lease it takes.
    pub(crate) labels: Labels,
    pub(crate) engine: &'a Arc<Engine>,
    pub(crate) name: &'a Arc<str>,
    pub(crate) keys: &'a Arc<LockKeys>,
    pub(crate) kind: Kind,
    pub(crate) ttl: Duration,
    pub(crate) wait: Wait,
    pub(crate) retry: Retry,
    pub(crate) renewal: Renewal,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_replicas: Option<(usize, Duration)>,
    /// Holder details recorded instead of the client's.
    pub(crate) holder: Option<&'a str>,
}

/// What one attempt found.
#[derive(Debug)]
enum Attempt {
    /// Acquired fresh by this very attempt.
    Fresh(FencingToken),
    /// Already held with our token: an earlier attempt of ours, or a hand-off.
    Ours(FencingToken),
    /// Held by another owner; the holder's remaining lease in ms (-1: none), the fencing
    /// counter when Redis answered, and whether our queue place is behind the first two.
    Busy { pttl: i64, seen: u64, behind: bool },
}

/// How many attempts [`Request::try_once`] makes at most when each one's reply comes too
/// late to leave [`min_validity`] of the lease (the process was paused while it waited).
const LATE_REPLIES: u32 = 3;

impl Request<'_> {
    /// When a wait that starts at `started` ends (`None`: never).
    pub(crate) fn deadline(&self, started: Instant) -> Option<Instant> {
        match self.wait {
            Wait::No => Some(started),
            Wait::For(d) => Some(started + d),
            Wait::Forever => None,
        }
    }

    /// One attempt: `Ok(None)` when another owner holds the lease.
    pub(crate) async fn try_once(&self) -> Result<Option<Arc<Holding>>> {
        let keys = self.keys;
        match self.try_acquire_unreplicated(keys).await? {
            Some(guard) if self.min_replicas.is_some() => {
                Box::pin(self.replicated(guard)).await.map(Some)
            }
            guard => Ok(guard),
        }
    }

    async fn try_acquire_unreplicated(&self, keys: &Arc<LockKeys>) -> Result<Option<Arc<Holding>>> {
        let token = OwnerToken::generate()?;
        let mut give_back = GiveBack::new(self.engine, keys, self.kind, &token);
        let started = Instant::now();
        for _ in 0..LATE_REPLIES {
            let sent = Instant::now();
            give_back.keep_trying_until(sent + self.ttl);
            match self.attempt(keys, &token, Queue::No, true).await? {
                Attempt::Fresh(fence) | Attempt::Ours(fence) if lasts(self.ttl, sent) => {
                    give_back.disarm();
                    return Ok(Some(self.guard(Arc::clone(keys), token, fence, sent)));
                }
                // The reply came too late to hand out what it took: again (the next
                // attempt finds our token and sets its expiry anew).
                Attempt::Fresh(_) | Attempt::Ours(_) => {
                    tracing::debug!("lease taken with too little validity left; confirming");
                }
                Attempt::Busy { .. } => {
                    give_back.disarm();
                    return Ok(None);
                }
            }
        }
        // The give-back (still armed) returns what the attempts took.
        Err(self.timeout(started, None))
    }

    /// Waits for the lease until `deadline` (`None`: as long as it takes).
    pub(crate) async fn wait(
        &self,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<Arc<Holding>> {
        let keys = self.keys;
        let token = OwnerToken::generate()?;
        // `Client::shutdown` ends the wait and withdraws whatever it left in Redis (its
        // queue place): biased, so that the attempts' future is never polled again once
        // ended, and dropped as a cancelled acquisition is (its give-back runs).
        let waiting = self.engine.waiters.enter(keys, self.kind, &token);
        let guard = tokio::select! {
            biased;
            () = waiting.ended() => return Err(Error::ShutDown { name: self.name.to_string() }),
            outcome = self.acquire_unreplicated(keys, token, started, deadline) => outcome?,
        };
        drop(waiting);
        if self.min_replicas.is_none() {
            return Ok(guard);
        }
        Box::pin(self.replicated(guard)).await
    }

    /// Applies [`min_replicas`](crate::Lock::min_replicas) to a new guard.
    async fn replicated(&self, guard: Arc<Holding>) -> Result<Arc<Holding>> {
        let Some((replicas, timeout)) = self.min_replicas else {
            return Ok(guard);
        };
        let lease = &guard.lease;
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
                Err(lost(self.name))
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
        token: OwnerToken,
        started: Instant,
        deadline: Option<Instant>,
    ) -> Result<Arc<Holding>> {
        let notifier = &self.engine.notifier;
        let mut epochs = notifier.epochs();
        // Its give-back armed from the start: a dropped or failed acquisition gives back
        // whatever it took.
        let give_back = GiveBack::new(self.engine, keys, self.kind, &token);
        let silent = self.keeps_silent_place();
        let mut waiter = Waiter::new(notifier, give_back, keys, &token, self.kind, silent);
        // Not over a quorum, nor for a Cluster's semaphores and read-write locks.
        let hands_off = self.engine.deployment().hands_off(self.kind);
        let mut dating = Dating::default();
        // Notifications up: queue with the first attempt (a free lock is simply taken).
        if self.wait != Wait::No && hands_off && notifier.subscribed(keys) {
            waiter.register();
        }
        let mut holder_ttl = None;
        let mut polls = 0u32;
        let mut failures = 0u32;
        let mut attempts = 0u32;
        // The error of the latest attempt, if it failed: what the caller gets, rather than
        // a timeout, when the wait runs out right after it. Boxed: it lives across the
        // waits below, in every acquire future.
        let mut failure: Option<Box<Error>> = None;
        // Quorum waiters (and a Cluster's that do not queue) listen for releases on the
        // lease's channel instead.
        let wakeups = self.engine.wakeups.as_ref();
        loop {
            // Armed before the attempt is sent, so that a release landing between the
            // attempt's reply and the wait below still wakes us.
            let notify = waiter.watch().map(Watch::notify);
            let mut released = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(n) = released.as_mut() {
                n.as_mut().enable();
            }
            let sent = dating.send();
            attempts += 1;
            // Queue for grants only while hand-offs can reach us: a release skips a queued
            // waiter whose client's grant subscription is down (the place is kept for a
            // while: see release.lua). The epoch changes when it comes back, and the next
            // attempt queues again, keeping that place if it is still there. A change
            // before this attempt is its own to see (it chooses its queue now): only a later
            // one calls for another attempt.
            epochs.borrow_and_update();
            let standing = waiter.standing();
            let queue = standing.queue().later(attempts > 1);
            waiter.attempting(sent + self.lingers(queue));
            let outcome = self.attempt_until(keys, &token, queue, attempts, deadline);
            let Some(outcome) = outcome.await else {
                return Err(failure.map_or_else(|| self.timeout(started, holder_ttl), |e| *e));
            };
            let delay = match outcome {
                // Taken by this attempt, or found ours (a hand-off, an earlier attempt of
                // ours): either way the script set the lease's expiry from when it ran,
                // after `sent`.
                Ok(Attempt::Fresh(fence) | Attempt::Ours(fence)) => {
                    if lasts(self.ttl, sent) {
                        waiter.claimed();
                        return Ok(self.guard(Arc::clone(keys), token, fence, sent));
                    }
                    // Too late (paused): the next attempt finds it ours and sets it anew.
                    tracing::debug!("lease taken with too little validity left; confirming");
                    continue;
                }
                Ok(Attempt::Busy { pttl, seen, behind }) => {
                    self.meter.waiting();
                    failure = None;
                    dating.busy(sent, seen);
                    waiter.busy();
                    holder_ttl = u64::try_from(pttl).ok().map(Duration::from_millis);
                    if !waiter.registered()
                        && hands_off
                        && deadline.is_none_or(|d| Instant::now() < d)
                        && notifier.ready(keys, deadline).await
                    {
                        // Subscribed: register, then queue up at once.
                        waiter.register();
                        continue;
                    }
                    // Queued for a hand-off (a Cluster's lock), a waiter needs no notice.
                    if let Some(wakeups) = wakeups
                        && !waiter.listening()
                        && standing != Standing::QueuedForGrants
                        && deadline.is_none_or(|d| Instant::now() < d)
                    {
                        let until = self.subscribe_until(deadline, silent);
                        if waiter.listen(wakeups.watch(&keys.channel, until).await) {
                            // Listening now: try again at once, a release may have come
                            // while we subscribed.
                            continue;
                        }
                    }
                    // A hand-off (or a release notice) reaches us only while queued for
                    // grants with the link up (or listening); a waiter of a client that
                    // is normally told of releases is told nothing while its link is down.
                    let reachable = standing == Standing::QueuedForGrants || waiter.listening();
                    let told = (hands_off && notifier.enabled()) || wakeups.is_some();
                    let link_down = told && !reachable;
                    self.busy_delay(reachable, link_down, holder_ttl, behind, &mut polls)
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
            let told = waiter.registration_mut();
            let news = self.wait_turn(told, released.as_mut(), &mut epochs, wake, deadline);
            let Some(grant) = news.await else {
                continue;
            };
            waiter.reregister();
            if let Some(start) = self.usable_grant(&dating, grant) {
                waiter.granted();
                let fence = FencingToken::new(grant.fence);
                return Ok(self.guard(Arc::clone(keys), token, fence, start));
            }
        }
    }

    /// When the lease handed over with `grant` began at the earliest, if the grant can be
    /// used as it is; `None` when the next attempt must confirm it (it finds our token:
    /// `Ours`) or find it gone and queue again.
    ///
    /// One rule for every primitive (`scripts/lib/grants.lua`): a grant pushed on the
    /// subscription is never used as it is, whatever link carried it (it set a claim window
    /// only, and the confirming attempt, on the server that decides, sets the whole ttl);
    /// a direct grant, from the reply of this client's own release, is: it began after
    /// that release was sent and after this waiter's latest busy attempt was.
    fn usable_grant(&self, dating: &Dating, grant: Grant) -> Option<Instant> {
        let released = grant.direct?;
        let fence = grant.fence;
        match dating.grant(fence) {
            Some(floor) if lasts(self.ttl, floor.max(released)) => Some(floor.max(released)),
            Some(_) => {
                // Read too late to date it usefully (this process was paused).
                tracing::debug!(fence, "grant read too late to use as it is; confirming");
                None
            }
            None => {
                // Handed to us before an attempt of ours found the lease held by someone
                // else: that lease is over.
                tracing::debug!(fence, "stale grant ignored");
                None
            }
        }
    }

    /// How long to wait before retrying an attempt that failed with `e`, or `None` when
    /// the error is final. Connection errors (the outcome is unknown: the give-back guard
    /// settles it), a quorum that did not answer, and passing refusals (`BUSY`, `LOADING`,
    /// a replica's `READONLY` still met after the deployment's own retries: nothing ran)
    /// are retried with jittered back-off for as long as the wait lasts, so
    /// an outage shorter than the wait is ridden out; the caller stops at the deadline and
    /// returns the last error.
    fn retry_after(&self, e: &Error, failures: &mut u32) -> Option<Duration> {
        if !e.is_worth_retrying() {
            return None;
        }
        if e.is_transient() || e.is_on_replica() {
            tracing::debug!(error = %e, "attempt refused for now, retrying");
        } else {
            tracing::debug!(error = %e, "attempt failed; outcome unknown, retrying");
        }
        *failures += 1;
        // Polled often enough to notice a recovered Redis within a few tens of ms: an
        // attempt against a refused connection costs the server nothing.
        Some(self.retry.delay_within(*failures, OUTAGE_POLL))
    }

    /// Waits as [`wait_for_news`] does until `wake` (or `deadline`), and on: a nudge (next
    /// in line) moves the wake-up to when the new holder's lease can end. The grant when
    /// handed the lease, `None` when it is time to attempt again.
    async fn wait_turn(
        &self,
        mut registration: Option<&mut Registration>,
        mut released: Option<&mut Pin<Box<Notified<'_>>>>,
        epochs: &mut watch::Receiver<u64>,
        mut wake: Instant,
        deadline: Option<Instant>,
    ) -> Option<Grant> {
        loop {
            let news = wait_for_news(
                registration.as_deref_mut(),
                released.as_deref_mut(),
                wake,
                epochs,
            );
            match news.await {
                News::Granted(grant) => return Some(grant),
                News::Check => return None,
                News::Next(ttl) => {
                    let delay = self.busy_delay(true, false, Some(ttl), false, &mut 0);
                    let now = Instant::now();
                    wake = deadline.map_or(now + delay, |d| d.min(now + delay));
                }
            }
        }
    }

    /// How long a waiter that found the lease busy sleeps at most before trying again.
    fn busy_delay(
        &self,
        reachable: bool,
        link_down: bool,
        holder_ttl: Option<Duration>,
        behind: bool,
        polls: &mut u32,
    ) -> Duration {
        match (reachable, holder_ttl) {
            // Queued behind the first two: the hand-off reaches us when it is our turn, and
            // the waiters ahead re-check for a holder that crashed (the one next in line
            // is nudged by every hand-off). Re-check only to keep the place alive.
            (true, Some(_)) if behind => RECHECK_MAX + jitter(RECHECK_MAX / 20),
            // Queued (or listening): the hand-off (or the release notice) wakes us, and a
            // link in trouble does (the subscription's epoch). Nothing is sent meanwhile:
            // re-check only when the holder's lease can have run out (it may have
            // crashed; a renewed lease is found busy again, with its new end), and at
            // least every `RECHECK_MAX`, which keeps the queue keys alive (they linger
            // `QUEUE_LINGER` after the latest join).
            // Spread over a twentieth of it, so that waiters that queued together do not
            // all come back at the same instant.
            (true, Some(left)) => {
                let left = left.min(RECHECK_MAX);
                left + jitter(self.retry.min().max(left / 20))
            }
            (true, None) => self.retry.max(),
            // Normally told of releases, but the pub/sub link is down (Redis restarted, the
            // connection was killed): nothing can tell us of a release until it is back,
            // which its own back-off may delay by up to a second. Poll at the outage
            // cadence meanwhile, so that a lock released in between is not left free while
            // we back off towards the retry ceiling.
            (false, _) if link_down => {
                *polls += 1;
                self.retry.delay_within(*polls, OUTAGE_POLL)
            }
            (false, _) => {
                *polls += 1;
                self.retry.delay(*polls)
            }
        }
    }

    pub(crate) fn timeout(&self, started: Instant, holder_ttl: Option<Duration>) -> Error {
        Error::Timeout {
            name: self.name.to_string(),
            waited: started.elapsed(),
            holder_ttl,
        }
    }

    fn guard(
        &self,
        keys: Arc<LockKeys>,
        token: OwnerToken,
        fence: FencingToken,
        lease_start: Instant,
    ) -> Arc<Holding> {
        let lease = Lease::new(
            Arc::clone(self.name),
            keys,
            self.kind,
            (token, fence),
            self.ttl,
            lease_start,
            self.labels.clone(),
        );
        let renew = (self.renewal == Renewal::Auto).then_some((lease_start, self.max_hold));
        Holding::new(self.engine, lease, renew)
    }

    async fn attempt(
        &self,
        keys: &LockKeys,
        token: &OwnerToken,
        queue: Queue,
        first: bool,
    ) -> Result<Attempt> {
        let linger_ms = ttl_millis(self.queue_linger());
        let channel = self.engine.notifier.channel(keys);
        let join = match queue {
            Queue::No => Join::No,
            Queue::Leave => Join::Leave,
            Queue::Grants => Join::Grants {
                channel: &channel,
                linger_ms,
                first,
            },
            Queue::Silent => Join::Silent {
                linger_ms,
                stale_ms: ttl_millis(self.silent_place_kept()),
                first,
            },
            // Kept at least until this waiter's next re-check.
            Queue::Listen => Join::Listen {
                linger_ms: linger_ms.max(ttl_millis(self.silent_place_kept())),
            },
        };
        let args = AcquireArgs {
            kind: self.kind,
            token: token.secret(),
            ttl_ms: ttl_millis(self.ttl),
            holder: self.holder.unwrap_or(&self.engine.holder),
            join,
            fence_step: 1,
            notices: self.engine.deployment().announces(),
            fence_keep: self.engine.deployment().fence_keep(),
        };
        let sent = Instant::now();
        Ok(match self.engine.deployment().acquire(keys, &args).await? {
            Reply::Fresh(fence) => {
                if let Some(clock) = &self.engine.clock {
                    clock.observe(fence, sent, Instant::now());
                }
                Attempt::Fresh(FencingToken::new(fence))
            }
            Reply::Ours(fence) => Attempt::Ours(FencingToken::new(fence)),
            Reply::Busy { pttl, seen, behind } => Attempt::Busy { pttl, seen, behind },
        })
    }

    /// Attempt `number` of an acquisition, stopped at `deadline` (`None` when cut off: its
    /// outcome is unknown, and the caller's give-back settles it). Only the first attempt
    /// of an acquisition that does not wait ([`Wait::No`], a zero wait) is never cut: it
    /// always gets its answer, as `try_acquire` does.
    async fn attempt_until(
        &self,
        keys: &LockKeys,
        token: &OwnerToken,
        queue: Queue,
        number: u32,
        deadline: Option<Instant>,
    ) -> Option<Result<Attempt>> {
        let first = number == 1;
        let sent = Instant::now();
        let attempt = self.attempt(keys, token, queue, first);
        let waits = matches!(self.wait, Wait::For(d) if !d.is_zero());
        let outcome = match deadline.filter(|_| !first || waits) {
            Some(at) => tokio::time::timeout_at(at, attempt).await.ok(),
            None => Some(attempt.await),
        };
        tracing::trace!(%token, number, ?queue, took = ?sent.elapsed(), ?outcome, "attempt");
        outcome
    }

    /// How long a waiter may wait for its release-notice subscription: its whole wait,
    /// but no longer than its re-check bound while it keeps a silent place (which is
    /// dropped if it does not come back), so that it never loses its place waiting for a
    /// slow pub/sub link.
    fn subscribe_until(&self, deadline: Option<Instant>, silent: bool) -> Option<Instant> {
        if silent {
            let bound = Instant::now() + self.retry.max();
            Some(deadline.map_or(bound, |d| d.min(bound)))
        } else {
            deadline
        }
    }

    /// How long a silent queue place is kept without its waiter coming back: a waiter
    /// that listens for release notices tries again at least every `retry.max()` (plus
    /// jitter) and each attempt may take a response timeout; twice that, so that a slow
    /// attempt never loses a live waiter its place.
    fn silent_place_kept(&self) -> Duration {
        (self.retry.max() + self.retry.min()) * 2 + self.engine.deployment().response_timeout
    }

    /// Read-write lock waiters keep a place in the queue even where no hand-off can reach
    /// them (a Cluster, polling, a grant subscription that is down), so that a waiting
    /// writer stops the readers that come after it there too.
    fn keeps_silent_place(&self) -> bool {
        self.wait != Wait::No
            && matches!(self.kind, Kind::Read | Kind::Write)
            && self.engine.deployment().keeps_silent_places()
    }

    /// How long what an attempt that joins the queue as `queue` may leave in Redis (a
    /// lock taken, a queue place) can still be granted: a give-back keeps trying through
    /// an outage until then.
    fn lingers(&self, queue: Queue) -> Duration {
        if matches!(queue, Queue::No | Queue::Leave) {
            self.ttl
        } else {
            self.ttl.max(self.queue_linger())
        }
    }

    fn queue_linger(&self) -> Duration {
        match self.wait {
            Wait::For(d) => d + QUEUE_LINGER,
            Wait::No | Wait::Forever => QUEUE_LINGER,
        }
    }
}
