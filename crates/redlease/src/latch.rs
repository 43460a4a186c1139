//! [`Latch`]: a count-down latch whose counts are leases, so that a party that dies stops
//! holding the others up once its count's lease runs out.
//!
//! The waiter's loop follows an election observer's: subscribe to the latch's release
//! channel, arm the wake-up, check (`latch_check.lua`), and sleep until a notice, the
//! earliest live count's expiry (when a dead party's count can be reclaimed), a link
//! change, or the wait's end. Only where no subscription is possible (notifications off,
//! or no node confirmed it) does it look again every [`Retry::max`](crate::Retry::max).

use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::{Spec, option_setters};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::{LockKeys, Primitive};
use crate::notify::Watch;
use crate::scripts::Kind;
use crate::token::FencingToken;
use crate::wait::Wait;

/// Why a latch is refused over a quorum.
const NO_QUORUM: &str = "counts kept by a majority of independent nodes do not add up (a node that missed a count down still counts it, one that missed a count up opens early); use a latch on a single Redis, Sentinel or Cluster client";

/// A distributed count-down latch: parties register outstanding counts, waiters wake when
/// none is left.
///
/// - [`count_up`](Latch::count_up) registers one outstanding count and returns it as a
///   [`Count`]: a lease of its own, renewed by the client's renewal scheduler while the
///   `Count` lives (as a semaphore's permit is), with the latch's
///   [`ttl`](Latch::ttl).
/// - [`Count::count_down`] gives it back; dropping a `Count` counts it down in the
///   background. A party that dies (its process, its machine, its network) stops renewing:
///   its count **expires** one TTL later and stops counting, so the latch still reaches
///   zero. An expired count is recorded as such, never as counted down.
/// - [`wait_open`](Latch::wait_open) returns once no live count remains and says how the counts
///   ended ([`Opened`]): check [`Opened::expired`] (or [`Opened::is_broken`]) before
///   trusting that every party finished its work.
///
/// **Rounds.** A round opens with the first count up while none is outstanding and ends
/// when the last outstanding count is gone; the next count up opens the next round, so a
/// latch name can be used again and again. A waiter waits for the round that is open when
/// it first looks, and returns when that round has ended, even if another round opened
/// meanwhile; it reports the latest ended round. A waiter that finds no count outstanding
/// returns at once, reporting nothing ([`Opened::counted_down`] and
/// [`Opened::expired`] zero) unless its own look is what ended the round (its last count
/// had just expired). The rounds' record is kept 7 days after its last change.
///
/// **Preset counts and barriers.** [`expect`](Latch::expect) presets arrivals that the
/// round waits for before anyone counted up (a coordinator waiting for N workers that
/// have not started); each count up takes one back. [`barrier`](Latch::barrier) is a
/// reusable barrier of N parties on the same round: it opens when the last arrives.
///
/// **Waking.** Waiters do not poll: they listen on the latch's release channel (every
/// script that ends a round announces it there, by `SPUBLISH` on a Cluster with sharded
/// pub/sub), and look again only when the earliest live count's lease could have run out
/// (which the previous look told them) or when their subscription's link goes down or
/// comes back. With [`Notifications::Polling`](crate::Notifications::Polling), they look
/// every [`Retry::max`](crate::Retry::max) instead.
///
/// Counts are not re-entered by an [`Owner`](crate::Owner): every `count_up` is one more
/// count. A lock, semaphore or read-write lock of the same name fails with
/// [`Error::WrongType`], and the reverse. Not available over a quorum
/// ([`Client::quorum`](crate::Client::quorum)): [`Error::Unsupported`].
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// let latch = client.latch("nightly-import");
/// // Each worker, on its own machine:
/// let count = latch.count_up().await?;
/// // ... its part of the import ...
/// count.count_down().await?;
///
/// // The step that needs every part done:
/// let opened = latch
///     .wait(std::time::Duration::from_secs(600))
///     .wait_open()
///     .await?;
/// if opened.is_broken() {
///     // Some worker died: its part may be missing.
/// }
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct Latch {
    spec: Spec,
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch").field("spec", &self.spec).finish()
    }
}

option_setters!(Latch);

impl Latch {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            spec: Spec::new(engine, name),
        }
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Redis keys and channel of the latch.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::of(&self.spec.prefix, &self.spec.name, Primitive::Latch)
    }

    /// The keys, with the options checked; refused over a quorum.
    fn plan(&self) -> Result<Arc<LockKeys>> {
        if self.spec.engine.deployment().is_quorum() {
            return Err(Error::Unsupported {
                what: "a latch over a quorum",
                reason: NO_QUORUM,
            });
        }
        self.spec.plan(Primitive::Latch)
    }

    /// Registers one more outstanding count, held as a lease until counted down (or
    /// dropped), or until it expires because it could not be renewed.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for a bad option, [`Error::InvalidName`],
    /// [`Error::WrongType`] when the name is another primitive's, [`Error::Unsupported`]
    /// over a quorum, [`Error::Redis`] when Redis cannot be asked (a count the attempt may
    /// have registered is then counted down in the background).
    ///
    /// # Cancel safety
    /// Cancel safe: a count registered by a dropped call is counted down in the
    /// background.
    #[tracing::instrument(skip_all, fields(latch = %self.spec.name))]
    pub async fn count_up(&self) -> Result<Count> {
        self.plan()?;
        match self.spec.take_fresh(Kind::Count).await? {
            Some(guard) => Ok(Count { guard }),
            // A latch is never busy; a reply that says so would have been refused.
            None => Err(Error::Timeout {
                name: self.spec.name.to_string(),
                waited: Duration::ZERO,
                holder_ttl: None,
            }),
        }
    }

    /// The outstanding counts now, for operators: the live counts, and the arrivals the
    /// round still [expects](Latch::expect). Like every look at the latch it
    /// reclaims the counts whose lease ran out first (and ends the round when none is
    /// left).
    ///
    /// # Errors
    /// As [`count_up`](Latch::count_up).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn count(&self) -> Result<u64> {
        let keys = self.plan()?;
        Ok(self.look(&keys).await?.outstanding)
    }

    /// One first look at the latch (it reclaims expired counts, as every look does).
    async fn look(&self, keys: &LockKeys) -> Result<crate::replies::LatchState> {
        self.spec.engine.deployment().latch_check(keys, None).await
    }

    /// Waits, up to the latch's [`wait`](Latch::wait), until no live count of the round
    /// open now remains, and says how its counts ended; returns at once when none is
    /// outstanding. See [`Latch`] for rounds and how waiters are woken.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out first (its `holder_ttl` is the earliest
    /// live count's remaining lease); otherwise as [`count_up`](Latch::count_up).
    ///
    /// # Cancel safety
    /// Cancel safe: a waiter changes nothing in Redis but reclaiming expired counts.
    #[tracing::instrument(skip_all, fields(latch = %self.spec.name))]
    pub async fn wait_open(&self) -> Result<Opened> {
        let keys = self.plan()?;
        self.wait_round(&keys, None).await
    }

    /// Presets `arrivals` counts that the round open now waits for (opening one if none
    /// is), before anyone counted up: each later [`count_up`](Latch::count_up) takes one
    /// of them back (counted as that count), and the round cannot end while any is still
    /// expected. So a coordinator can wait for N workers that have not started yet
    /// (Redisson's `trySetCount`); [`wait_open`](Latch::wait_open) then returns only
    /// after N counts came up and went (or expired). Returns the arrivals now expected.
    ///
    /// An expected arrival is not a lease: a worker that never starts holds the round
    /// open until the waiters' [`wait`](Latch::wait) runs out ([`Error::Timeout`]).
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for zero arrivals; [`Error::Redis`] when Redis could not
    /// be asked (not retried: the arrivals may or may not have been added); otherwise
    /// as [`count_up`](Latch::count_up).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropped after it was sent, the arrivals may have been added.
    #[tracing::instrument(skip_all, fields(latch = %self.spec.name, arrivals))]
    pub async fn expect(&self, arrivals: u32) -> Result<u64> {
        let keys = self.plan()?;
        let (_, expected) = self.preset(&keys, arrivals, false).await?;
        Ok(expected)
    }

    /// As [`expect`](Latch::expect), only when no round is open (no count outstanding,
    /// no arrival expected): whether the arrivals were preset. Of several parties that
    /// all try, one presets the round and the others join it.
    ///
    /// # Errors
    /// As [`expect`](Latch::expect); retried across a reconnection (it is idempotent).
    ///
    /// # Cancel safety
    /// Cancel safe in effect: a repeated call finds the round open and adds nothing.
    pub async fn try_expect(&self, arrivals: u32) -> Result<bool> {
        let keys = self.plan()?;
        let (set, _) = self.preset(&keys, arrivals, true).await?;
        Ok(set)
    }

    /// A barrier of `parties`: returns once `parties` callers (this one included) have
    /// arrived, and says how their counts ended. The first to arrive presets the round
    /// ([`try_expect`](Latch::try_expect)); each then counts up and down at once and
    /// waits for the round to end, so the barrier opens when the last party arrives, for
    /// every party at the same notice. A party that dies between its arrival and its
    /// count down is reclaimed as expired one ttl later ([`Opened::is_broken`]); a party
    /// that never arrives keeps the others waiting until their [`wait`](Latch::wait)
    /// runs out. Reusable: the next arrivals after the barrier opened form the next
    /// round, so a double barrier (enter, work, leave: Curator's
    /// `DistributedDoubleBarrier`, with leases) is two calls on the same latch.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for zero parties; [`Error::Timeout`] when the wait ran
    /// out before every party arrived; [`Error::Lost`] when this party's own count
    /// expired before it counted down; otherwise as [`count_up`](Latch::count_up).
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call counts its count down in the background (it still
    /// counts as arrived).
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example(client: redlease::Client) -> redlease::Result<()> {
    /// // On each of 4 machines: nobody starts the next phase before all 4 are ready.
    /// let opened = client
    ///     .latch("phase-2")
    ///     .wait(std::time::Duration::from_secs(60))
    ///     .barrier(4)
    ///     .await?;
    /// assert!(!opened.is_broken());
    /// # Ok(()) }
    /// ```
    #[tracing::instrument(skip_all, fields(latch = %self.spec.name, parties))]
    pub async fn barrier(&self, parties: u32) -> Result<Opened> {
        let keys = self.plan()?;
        self.preset(&keys, parties, true).await?;
        let count = self.count_up().await?;
        // The round this count belongs to, read while it still counts: once counted
        // down, the round may end (and another open) before this party looks.
        let state = self.look(&keys).await?;
        count.count_down().await?;
        self.wait_round(&keys, Some(state.round)).await
    }

    async fn preset(&self, keys: &LockKeys, arrivals: u32, only_idle: bool) -> Result<(bool, u64)> {
        if arrivals == 0 {
            return Err(Error::InvalidOption {
                option: "arrivals",
                reason: "a latch expects at least one arrival".into(),
            });
        }
        self.spec
            .engine
            .deployment()
            .latch_expect(keys, u64::from(arrivals), only_idle)
            .await
    }

    /// Waits for the round seen open as `seen` (`None`: the round open at the first look)
    /// to end; see [`wait_open`](Latch::wait_open).
    async fn wait_round(&self, keys: &LockKeys, mut seen: Option<u64>) -> Result<Opened> {
        let engine = &self.spec.engine;
        let retry = self.spec.retry;
        let started = Instant::now();
        let deadline = match self.spec.wait {
            Wait::No => Some(started),
            Wait::For(d) => Some(started + d),
            Wait::Forever => None,
        };
        let mut watch: Option<Watch> = None;
        loop {
            let now = Instant::now();
            if watch.is_none()
                && deadline.is_none_or(|d| now < d)
                && let Some(notices) = engine.notices()
            {
                let until = deadline.map_or(now + retry.max(), |d| d.min(now + retry.max()));
                watch = notices.watch(&keys.channel, Some(until)).await;
            }
            // Armed before the look: a round that ends between the look and the wait
            // still wakes us.
            let notify = watch.as_ref().map(Watch::notify);
            let mut notified = notify.as_deref().map(|n| Box::pin(n.notified()));
            if let Some(n) = notified.as_mut() {
                n.as_mut().enable();
            }
            let state = engine.deployment().latch_check(keys, seen).await?;
            if state.done {
                if seen.is_none() && !state.ended_now {
                    return Ok(Opened::default());
                }
                return Ok(Opened {
                    counted_down: state.last_down,
                    expired: state.last_expired,
                });
            }
            seen = Some(state.round);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Timeout {
                    name: self.spec.name.to_string(),
                    waited: started.elapsed(),
                    holder_ttl: state.earliest,
                });
            }
            // The earliest count's lease may run out unrenewed (its party died): look
            // again just after it could have, to reclaim it. Renewed, it is later again.
            let expiry = state
                .earliest
                .map_or(retry.max(), |e| e + Duration::from_millis(1));
            let wake = if notified.is_some() {
                expiry
            } else {
                expiry.min(retry.max())
            };
            let mut wake_at = Instant::now() + wake;
            if let Some(d) = deadline {
                wake_at = wake_at.min(d);
            }
            match notified {
                Some(n) => {
                    let mut n = pin!(n);
                    tokio::select! {
                        () = &mut n => {}
                        () = tokio::time::sleep_until(wake_at) => {}
                    }
                }
                None => tokio::time::sleep_until(wake_at).await,
            }
        }
    }
}

/// How the counts of a [`Latch`]'s round ended, as [`Latch::wait_open`] saw it.
#[must_use = "check `expired` (or `is_broken`): a count that expired was never counted down"]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Opened {
    counted_down: u64,
    expired: u64,
}

impl Opened {
    /// Counts that were counted down (or dropped) by their party.
    pub fn counted_down(&self) -> u64 {
        self.counted_down
    }

    /// Counts whose lease expired instead: their party stopped renewing (it died, or lost
    /// Redis for longer than the TTL), so its work may be unfinished.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// Whether any count expired rather than being counted down.
    pub fn is_broken(&self) -> bool {
        self.expired > 0
    }
}

/// One outstanding count of a [`Latch`]: a lease, renewed by the client while this lives.
///
/// Dropping it counts it down in the background (as dropping a [`Guard`] releases a lock);
/// [`count_down`](Count::count_down) does so and says whether the count was still live.
#[must_use = "dropping a count counts it down at once (in the background)"]
#[derive(Debug)]
pub struct Count {
    guard: Guard,
}

impl Count {
    /// The count's fencing token (larger than every earlier grant of the name).
    pub fn fencing_token(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// Time left on the count's lease as far as this client can tell (see
    /// [`Guard::remaining`]).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// Whether the count's lease is still live as far as this client can tell.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when the count's lease is lost (it expired unrenewed: it then counts as
    /// expired, not counted down).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// The lease behind the count (health, extension).
    pub fn guard(&self) -> &Guard {
        &self.guard
    }

    /// The lease behind the count, for the blocking API's count (which releases it as a
    /// count down).
    #[cfg(feature = "blocking")]
    pub(crate) fn into_guard(self) -> Guard {
        self.guard
    }

    /// Counts down: the count is gone, and a round left without counts ends and wakes
    /// its waiters.
    ///
    /// # Errors
    /// [`Error::Lost`] when the count's lease had expired (the latch recorded it as
    /// expired); [`Error::Redis`] when Redis could not be reached (the lease then expires
    /// by itself, and is recorded as expired).
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped before Redis confirmed, the count is counted down in the
    /// background.
    pub async fn count_down(self) -> Result<()> {
        self.guard.release().await
    }
}
