//! [`MultiLock`]: several locks taken all or nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::{Spec, option_setters};
use crate::engine::{Engine, GiveBack, Holding};
use crate::error::{Error, Result};
use crate::guard::Guard;
use crate::keys::{LockKeys, Primitive};
use crate::lease::Lease;
use crate::observe::{Acquisition, Outcome};
use crate::renew::Renewal;
use crate::replies::AllReply;
use crate::scripts::Kind;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::ttl_millis;
use crate::wait::Wait;

/// Several locks held together, all or nothing: "move money between two accounts, locking
/// both".
///
/// Where every name lives on one node (a single Redis, a Sentinel primary, or one Cluster
/// slot: give the names a common `{hash tag}`), one script takes them **all at once,
/// atomically**, when they are all free. Otherwise (a name is busy, names in several
/// slots, a quorum, an [`Owner`](crate::Owner) scope whose names may re-enter) the names
/// are taken **one by one in one canonical order** (sorted, duplicates removed), each exactly as [`Lock::acquire`](crate::Lock::acquire) takes it (FIFO queue,
/// hand-off, renewal), all within the one [`wait`](MultiLock::wait) budget. So two
/// multi-locks over overlapping names can never deadlock (both go for the smallest shared
/// name first), and a multi-lock is not starved by a stream of single-name holders: it
/// queues for each name like anyone else. **While it waits it holds the names before the
/// one it waits for**: others needing those wait behind it. When the whole cannot be taken
/// (a name stays busy past the wait, an error), everything taken so far is released, every
/// name at once, before the error returns, but never past the wait: what is still being
/// released then goes on in the background; a dropped acquisition gives back what it took
/// in the background.
///
/// A multi-lock and a plain [`Lock`](crate::Lock) of any of its names exclude each other
/// (they are the same keys). Each name is its own lease with its own fencing token
/// ([`MultiGuard::fencing_token`]), renewed in the client's renewal batches; the guard
/// reports the loss of any. Works on every deployment; with names in several Cluster slots
/// or over a quorum, each name is taken where it lives.
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// client
///     .multi_lock(["account:7", "account:3"])
///     .run(async |guard| {
///         // Both accounts are ours; each write carries its account's fencing token.
///         let _ = guard.fencing_token("account:7");
///         Ok::<_, redlease::Error>(())
///     })
///     .await?;
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct MultiLock {
    spec: Spec,
    /// Sorted, without duplicates: the order every multi-lock takes them in.
    names: Arc<[Arc<str>]>,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .field("spec", &self.spec)
            .finish()
    }
}

option_setters!(MultiLock);

impl MultiLock {
    pub(crate) fn new(engine: Arc<Engine>, names: Vec<String>) -> Self {
        let mut names: Vec<Arc<str>> = names.into_iter().map(Arc::from).collect();
        names.sort_unstable();
        names.dedup();
        let joined = names.join(",");
        let mut spec = Spec::new(engine, joined);
        spec.in_multi_lock = true;
        Self {
            spec,
            names: names.into(),
        }
    }

    /// The options for one of the names: measured as part of the whole.
    fn member(&self, name: &Arc<str>) -> Spec {
        let mut spec = self.spec.for_name(Arc::clone(name));
        spec.measured = false;
        spec
    }

    /// The names, in the order they are taken.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(AsRef::as_ref)
    }

    fn check(&self) -> Result<()> {
        if self.names.is_empty() {
            return Err(Error::InvalidOption {
                option: "names",
                reason: "a multi-lock needs at least one name".into(),
            });
        }
        Ok(())
    }

    /// One script for every name, where they all live on one node and no owner scope is
    /// involved (an owner's names re-enter one by one instead).
    async fn at_once(&self) -> Result<AtOnce> {
        let engine = &self.spec.engine;
        if self.spec.effective_owner().is_some() {
            return Ok(AtOnce::NotHere);
        }
        let specs: Vec<Spec> = self.names.iter().map(|name| self.member(name)).collect();
        let keys = specs
            .iter()
            .map(|spec| spec.plan(Primitive::Lock))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&LockKeys> = keys.iter().map(AsRef::as_ref).collect();
        if !engine.deployment().takes_at_once(&refs) {
            return Ok(AtOnce::NotHere);
        }
        let token = OwnerToken::generate()?;
        // Armed until Redis answered: a dropped or failed call gives every name back.
        let mut give_backs: Vec<GiveBack> = keys
            .iter()
            .map(|k| GiveBack::new(engine, k, Kind::Mutex, &token))
            .collect();
        let ttl = self.spec.ttl;
        let holder = self.spec.holder.as_deref().unwrap_or(&engine.holder);
        let sent = Instant::now();
        let reply = engine
            .deployment()
            .acquire_all(&refs, token.secret(), ttl_millis(ttl), holder)
            .await?;
        give_backs.iter_mut().for_each(GiveBack::disarm);
        let AllReply::Taken(fences) = reply else {
            return Ok(AtOnce::Busy);
        };
        let renew = (self.spec.renewal == Renewal::Auto).then_some((sent, self.spec.max_hold));
        let guards = specs
            .iter()
            .zip(keys)
            .zip(fences)
            .map(|((spec, keys), fence)| {
                let lease = Lease::new(
                    Arc::clone(&spec.name),
                    keys,
                    Kind::Mutex,
                    (token.clone(), FencingToken::new(fence)),
                    ttl,
                    sent,
                    spec.labels(Kind::Mutex),
                );
                Guard::new(Holding::new(engine, lease, renew))
            })
            .collect();
        tracing::debug!(locks = %self.spec.name, "acquired at once");
        Ok(AtOnce::Taken(MultiGuard { guards }))
    }

    /// The one-script attempt, where it applies; a failed one (Redis could not be asked:
    /// whatever it may have taken is given back) leaves the names to be taken one by one.
    async fn try_at_once(&self) -> AtOnce {
        match self.at_once().await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::debug!(error = %e, "taking the locks at once failed; one by one");
                AtOnce::NotHere
            }
        }
    }

    /// Makes one attempt at every name in order: `Ok(None)` (and nothing held) as soon as
    /// one is busy.
    ///
    /// # Errors
    /// [`Error::InvalidOption`] for an empty list; otherwise as
    /// [`Lock::try_acquire`](crate::Lock::try_acquire) for the name that failed
    /// (everything taken before it is released first).
    ///
    /// # Cancel safety
    /// Cancel safe: whatever was taken is given back in the background.
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        self.check()?;
        let meter = Acquisition::start(self.spec.labels(Kind::Mutex), true);
        let taken = self.try_acquire_measured().await;
        meter.finish(match &taken {
            Ok(Some(_)) => Outcome::Acquired,
            Ok(None) => Outcome::Busy,
            Err(_) => Outcome::Failed,
        });
        taken
    }

    async fn try_acquire_measured(&self) -> Result<Option<MultiGuard>> {
        match self.try_at_once().await {
            AtOnce::Taken(guard) => return Ok(Some(guard)),
            AtOnce::Busy => return Ok(None),
            AtOnce::NotHere => {}
        }
        let mut guards = Vec::with_capacity(self.names.len());
        for name in self.names.iter() {
            match self.member(name).try_acquire(Kind::Mutex).await {
                Ok(Some(guard)) => guards.push(guard),
                Ok(None) => {
                    give_back(&self.spec.engine, guards, None).await;
                    return Ok(None);
                }
                Err(e) => {
                    give_back(&self.spec.engine, guards, None).await;
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiGuard { guards }))
    }

    /// Takes every name in order, waiting up to the multi-lock's
    /// [`wait`](MultiLock::wait) for all of them together.
    ///
    /// # Errors
    /// [`Error::Timeout`] (naming the name still busy) when the wait ran out; otherwise as
    /// [`try_acquire`](MultiLock::try_acquire). Everything taken is released first, within
    /// the wait; what the wait leaves no time for is released in the background.
    ///
    /// # Cancel safety
    /// Cancel safe: whatever was taken, or queued for, is given back in the background.
    #[tracing::instrument(skip_all, fields(locks = %self.spec.name))]
    pub async fn acquire(&self) -> Result<MultiGuard> {
        self.check()?;
        let meter = Acquisition::start(self.spec.labels(Kind::Mutex), true);
        let taken = self.acquire_measured(&meter).await;
        meter.finish(match &taken {
            Ok(_) => Outcome::Acquired,
            Err(Error::Timeout { .. }) => Outcome::Timeout,
            Err(_) => Outcome::Failed,
        });
        taken
    }

    async fn acquire_measured(&self, meter: &Acquisition) -> Result<MultiGuard> {
        let started = Instant::now();
        let deadline = match self.spec.wait {
            Wait::No => Some(started),
            Wait::For(d) => Some(started + d),
            Wait::Forever => None,
        };
        match self.try_at_once().await {
            AtOnce::Taken(guard) => return Ok(guard),
            AtOnce::Busy => meter.waiting(),
            AtOnce::NotHere => {}
        }
        let mut guards = Vec::with_capacity(self.names.len());
        for name in self.names.iter() {
            // The wait is for the whole: once it has run out, the names still to take are
            // not tried one after another (20,000 free names took seconds past a 500 ms
            // wait). Without a wait, each name gets its one attempt.
            if self.spec.wait != Wait::No
                && let Some(deadline) = deadline.filter(|d| Instant::now() >= *d)
            {
                give_back(&self.spec.engine, guards, Some(deadline)).await;
                return Err(Error::Timeout {
                    name: name.to_string(),
                    waited: started.elapsed(),
                    holder_ttl: None,
                });
            }
            let mut spec = self.member(name);
            spec.wait = match deadline {
                Some(d) => Wait::For(d.saturating_duration_since(Instant::now())),
                None => Wait::Forever,
            };
            match Box::pin(spec.acquire_metered(Kind::Mutex, meter)).await {
                Ok(guard) => guards.push(guard),
                Err(e) => {
                    give_back(&self.spec.engine, guards, deadline).await;
                    return Err(e);
                }
            }
        }
        Ok(MultiGuard { guards })
    }

    /// Takes every name, runs `work` while all leases are kept renewed, and releases them:
    /// `work` is dropped where it stands the moment any lease is lost, as with
    /// [`Lock::run`](crate::Lock::run); as there, re-entering a name the owner holds with
    /// [`Renewal::Fixed`] fails with [`Error::FixedLeaseReentered`].
    ///
    /// # Errors
    /// `work`'s own error, unchanged; otherwise, converted with `From<Error>`, what
    /// [`acquire`](MultiLock::acquire) returns, [`Error::Lost`] for a lease lost during
    /// `work` or found lost at the release, [`Error::Redis`] for a release that could not
    /// reach Redis.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and releases every lock in the background.
    pub async fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&MultiGuard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        let owner = self.spec.effective_owner().unwrap_or_default();
        let multi = self.clone().renewal(Renewal::Auto).owner(&owner);
        owner
            .scope(async move {
                let guard = Box::pin(multi.acquire()).await?;
                // As `Lock::run`: never re-enter a lease that nobody renews.
                if let Some(fixed) = guard.guards.iter().find(|g| !g.holding().is_renewed()) {
                    let name = fixed.name().to_owned();
                    let _ = guard.release().await;
                    return Err(E::from(Error::FixedLeaseReentered { name }));
                }
                let outcome = {
                    let work = work(&guard);
                    tokio::select! {
                        biased;
                        ended = guard.ended() => Err(ended),
                        out = work => Ok(out),
                    }
                };
                let released = guard.release().await;
                crate::builder::settle(outcome, released)
            })
            .await
    }
}

/// What the one-script attempt found.
enum AtOnce {
    /// Every name is ours.
    Taken(MultiGuard),
    /// A name is held by another owner; nothing was taken.
    Busy,
    /// The names do not live on one node (or an owner takes them one by one).
    NotHere,
}

/// Releases `guards` (the names taken so far of a multi-lock that failed), all at once,
/// logging what could not be given back (it expires by itself). Waits for them until
/// `deadline` (the multi-lock's wait) at the latest, then leaves them to finish in the
/// background, so that the caller gets its error by its deadline: with Redis unreachable,
/// each release may retry for a whole response timeout, and one after another they took
/// that many times longer (9 names, the last one busy, Redis gone during a 3 s wait: 19.2 s).
async fn give_back(engine: &Engine, guards: Vec<Guard>, deadline: Option<Instant>) {
    if guards.is_empty() {
        return;
    }
    let all = futures_util::future::join_all(guards.into_iter().map(|guard| async move {
        let name = guard.name().to_owned();
        if let Err(e) = guard.release().await {
            tracing::debug!(lock = %name, error = %e, "a multi-lock could not give back a name it took");
        }
    }));
    let Some(deadline) = deadline.filter(|_| tokio::runtime::Handle::try_current().is_ok()) else {
        all.await;
        return;
    };
    // Spawned, so that it goes on once nobody waits for it (also when the acquisition is
    // dropped meanwhile), as the client's background work, which `Client::shutdown` waits
    // for (`redlease run` exits after it: a name given back late stayed taken for its ttl).
    let Some(handle) = engine.deployment().track(all) else {
        return;
    };
    if tokio::time::timeout_at(deadline, handle).await.is_err() {
        tracing::debug!("the wait ran out; a multi-lock gives back its names in the background");
    }
}

/// The locks of a [`MultiLock`], held together: one lease per name.
///
/// Dropping it releases every lock in the background, as dropping each [`Guard`] would.
#[must_use = "dropping a MultiGuard releases its locks at once"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In the order they were taken (the names sorted).
    guards: Vec<Guard>,
}

impl MultiGuard {
    /// One guard per name, in the order they were taken (the names sorted).
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// The fencing token of `name`'s lease, or `None` for a name this guard does not hold.
    pub fn fencing_token(&self, name: &str) -> Option<FencingToken> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(Guard::fencing_token)
    }

    /// Asks Redis whether every lease still holds its owner token; see [`Guard::owned`]
    /// (the names are asked one after the other, and a lease found gone is marked lost).
    ///
    /// # Errors
    /// As [`Guard::owned`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn owned(&self) -> Result<bool> {
        for guard in &self.guards {
            if !guard.owned().await? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Whether every lease is still held, without asking Redis.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(Guard::is_held)
    }

    /// Time left until the first of the leases runs out (zero once one has).
    pub fn remaining(&self) -> Duration {
        self.guards
            .iter()
            .map(Guard::remaining)
            .min()
            .unwrap_or_default()
    }

    /// Resolves when any of the leases is lost.
    ///
    /// # Cancel safety
    /// Cancel safe; it only watches.
    pub async fn lost(&self) {
        let _ = self.ended().await;
    }

    /// The error for work whose lease ended: the first lease to end.
    async fn ended(&self) -> Error {
        let ((), i, _) =
            futures_util::future::select_all(self.guards.iter().map(|g| Box::pin(g.lost()))).await;
        self.guards.get(i).map_or_else(
            || Error::Lost {
                name: String::new(),
            },
            |g| g.holding().lease.ended_error(),
        )
    }

    /// Resets every lease to `ttl` from now.
    ///
    /// # Errors
    /// The first error of [`Guard::extend`] (the others are still extended).
    ///
    /// # Cancel safety
    /// As [`Guard::extend`], for each lease.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        let mut first = Ok(());
        for guard in &mut self.guards {
            let extended = guard.extend(ttl).await;
            if first.is_ok() {
                first = extended;
            }
        }
        first
    }

    /// Releases every lock (each handed to its oldest waiter, if any).
    ///
    /// # Errors
    /// The first error of [`Guard::release`]: [`Error::Lost`] when a lease was lost (the
    /// work under it may have overlapped with another holder's); every other lock is still
    /// released.
    ///
    /// # Cancel safety
    /// As [`Guard::release`], for each lock.
    pub async fn release(self) -> Result<()> {
        let released =
            futures_util::future::join_all(self.guards.into_iter().map(Guard::release)).await;
        released
            .into_iter()
            .find_map(std::result::Result::err)
            .map_or(Ok(()), Err)
    }
}
