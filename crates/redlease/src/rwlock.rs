//! [`RwLock`]: many readers or one writer, with fair queueing and an atomic downgrade.

use std::fmt;
use std::sync::Arc;

use crate::builder::{Spec, option_setters};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::{Guard, derefs_to_guard};
use crate::keys::{LockKeys, Primitive};
use crate::lease::{State, lost};
use crate::scripts::Kind;

/// A read hold of a [`RwLock`]: a [`Guard`], with the same surface.
pub type ReadGuard = Guard;

/// A distributed read-write lock: many readers at once, or one writer.
///
/// Start from [`read`](RwLock::read) or [`write`](RwLock::write); both take the options
/// of a [`Lock`](crate::Lock) (set here they apply to both). Every hold, read or write, is
/// a lease of its own with a fencing token (larger than every earlier one of the name),
/// renewed while held and given back when released or dropped; a crashed holder's hold
/// runs out after its TTL, reclaimed inside the scripts.
///
/// **Fair.** Waiters queue FIFO: a queued writer stops every reader that comes after it (no
/// writer starvation). On a single Redis or Sentinel the readers queued together behind a
/// writer are handed the lock together when it leaves. Where no hand-off can reach a
/// waiter (a Cluster, where only a lock's waiters are sent grants;
/// [`Notifications::Polling`](crate::Notifications::Polling); a grant subscription that is
/// down) it keeps a *silent* place in the queue all the same: it is woken by the release
/// notice (Cluster) or its own re-check and takes the lock itself when its turn comes; a
/// place whose waiter stops coming back is dropped after about twice the retry bound plus
/// the response timeout. Over a quorum waiters do not queue (each node's queue could put
/// another waiter first, and waiters heading different nodes' queues would keep each
/// other from a majority): there a stream of overlapping readers can keep a writer out.
///
/// Fencing: readers hold at the same time, each with its own token; a resource fenced by
/// the highest token it has seen should check the writes (made under the write hold), and
/// readers' tokens order them after the writes before them.
///
/// **No upgrade, atomic downgrade.** An owner holding the read lock that asks for the write
/// lock gets [`Error::Upgrade`] at once, never a deadlock (two upgrading readers would wait
/// for each other forever). A write hold becomes a read hold with
/// [`WriteGuard::downgrade`], with no moment in between where another writer could come
/// in.
///
/// **Reentrancy** (within an [`Owner`](crate::Owner), as for a lock): a read re-entered by
/// its owner is free (it shares the outer hold); a read asked for by an owner holding the
/// write lock re-enters the write hold (writing covers reading; downgrade to let other
/// readers in); a write asked for by an owner holding the read lock is the refused upgrade.
///
/// **Over a quorum** a hold is granted by a majority of nodes, each applying the same
/// rule. That is sound here, unlike for a semaphore: a writer and a reader conflict on
/// every node where both are recorded, and any two majorities share a node, so a writer
/// and a reader (or two writers) can never both be granted by majorities.
///
/// A lock or semaphore of the same name fails with [`Error::WrongType`], and the reverse.
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// let config = client.rwlock("config");
/// let read = config.read().acquire().await?; // many readers may hold it
/// read.release().await?;
/// let write = config.write().acquire().await?; // alone
/// let read = write.downgrade().await?; // now a reader, without a gap
/// read.release().await?;
/// # Ok(()) }
/// ```
#[must_use]
#[derive(Clone)]
pub struct RwLock {
    spec: Spec,
}

/// The read side of a [`RwLock`], with its options; acquiring it yields a [`ReadGuard`].
#[must_use]
#[derive(Clone)]
pub struct ReadLock {
    spec: Spec,
}

/// The write side of a [`RwLock`], with its options; acquiring it yields a [`WriteGuard`].
#[must_use]
#[derive(Clone)]
pub struct WriteLock {
    spec: Spec,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RwLock").field(&self.spec).finish()
    }
}

impl fmt::Debug for ReadLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ReadLock").field(&self.spec).finish()
    }
}

impl fmt::Debug for WriteLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WriteLock").field(&self.spec).finish()
    }
}

option_setters!(RwLock);
option_setters!(ReadLock);
option_setters!(WriteLock);

impl RwLock {
    pub(crate) fn new(engine: Arc<Engine>, name: String) -> Self {
        Self {
            spec: Spec::new(engine, name),
        }
    }

    /// The read-write lock's name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Redis keys and channel of the read-write lock.
    ///
    /// # Errors
    /// [`Error::InvalidName`] when the name cannot be used.
    pub fn keys(&self) -> Result<LockKeys> {
        LockKeys::of(&self.spec.prefix, &self.spec.name, Primitive::RwLock)
    }

    /// The read side, with the options set so far.
    pub fn read(&self) -> ReadLock {
        ReadLock {
            spec: self.spec.clone(),
        }
    }

    /// The write side, with the options set so far.
    pub fn write(&self) -> WriteLock {
        WriteLock {
            spec: self.spec.clone(),
        }
    }
}

impl ReadLock {
    /// Makes one attempt: `Ok(None)` when a writer holds the lock or waiters queue for it.
    ///
    /// # Errors
    /// [`Error::InvalidName`], [`Error::InvalidOption`], [`Error::WrongType`] when the name
    /// is another primitive's, [`Error::Redis`] when Redis cannot be asked (a hold the
    /// attempt may have taken is then given back in the background).
    ///
    /// # Cancel safety
    /// Cancel safe: a hold taken by a dropped attempt is given back in the background.
    pub async fn try_acquire(&self) -> Result<Option<ReadGuard>> {
        self.spec.try_acquire(Kind::Read).await
    }

    /// Takes a read hold, waiting up to the [`wait`](ReadLock::wait).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out; [`Error::ShutDown`] when
    /// [`Client::shutdown`](crate::Client::shutdown) ended the wait; otherwise as
    /// [`try_acquire`](ReadLock::try_acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws it from the queue, and gives back a hold
    /// granted to it meanwhile, in the background.
    #[tracing::instrument(skip_all, fields(rwlock = %self.spec.name, mode = "read"))]
    pub async fn acquire(&self) -> Result<ReadGuard> {
        self.spec.acquire(Kind::Read).await
    }

    /// Takes a read hold, runs `work` while it is kept renewed (dropped where it stands
    /// the moment the hold is lost), and gives it back, as [`Lock::run`](crate::Lock::run).
    ///
    /// # Errors
    /// As [`Lock::run`](crate::Lock::run).
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and gives the hold back in the background.
    pub async fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&ReadGuard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        self.spec.run(Kind::Read, work).await
    }
}

impl WriteLock {
    /// Makes one attempt: `Ok(None)` when anyone holds the lock or waiters queue for it.
    ///
    /// # Errors
    /// [`Error::Upgrade`] when this owner holds the read lock; otherwise as
    /// [`ReadLock::try_acquire`].
    ///
    /// # Cancel safety
    /// Cancel safe: a hold taken by a dropped attempt is given back in the background.
    pub async fn try_acquire(&self) -> Result<Option<WriteGuard>> {
        Ok(self
            .spec
            .try_acquire(Kind::Write)
            .await?
            .map(WriteGuard::new))
    }

    /// Takes the write hold, waiting up to the [`wait`](WriteLock::wait).
    ///
    /// # Errors
    /// [`Error::Timeout`] when the wait ran out; [`Error::ShutDown`] when
    /// [`Client::shutdown`](crate::Client::shutdown) ended the wait; otherwise as
    /// [`try_acquire`](WriteLock::try_acquire).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws it from the queue, and gives back a hold
    /// granted to it meanwhile, in the background.
    #[tracing::instrument(skip_all, fields(rwlock = %self.spec.name, mode = "write"))]
    pub async fn acquire(&self) -> Result<WriteGuard> {
        self.spec.acquire(Kind::Write).await.map(WriteGuard::new)
    }

    /// Takes the write hold, runs `work` while it is kept renewed (dropped where it stands
    /// the moment the hold is lost), and gives it back, as [`Lock::run`](crate::Lock::run).
    ///
    /// # Errors
    /// As [`Lock::run`](crate::Lock::run), and [`Error::Upgrade`] when this owner holds the
    /// read lock.
    ///
    /// # Cancel safety
    /// Dropping the future drops `work` and gives the hold back in the background.
    pub async fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: AsyncFnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        self.spec.run(Kind::Write, work).await
    }
}

/// The write hold of a [`RwLock`]: a [`Guard`] (its whole surface, through `Deref`), plus
/// [`downgrade`](WriteGuard::downgrade).
#[must_use = "dropping a WriteGuard releases the lock at once"]
#[derive(Debug)]
pub struct WriteGuard {
    guard: Guard,
}

impl WriteGuard {
    fn new(guard: Guard) -> Self {
        Self { guard }
    }

    /// Gives the write hold back (and hands the lock to the queue's head); see
    /// [`Guard::release`].
    ///
    /// # Errors
    /// As [`Guard::release`].
    ///
    /// # Cancel safety
    /// As [`Guard::release`].
    pub async fn release(self) -> Result<()> {
        self.guard.release().await
    }

    /// Turns the write hold into a read hold, atomically: no other writer can come in
    /// between, and the readers queued at the head are let in. The hold keeps its fencing
    /// token, lease and renewal.
    ///
    /// # Errors
    /// [`Error::NestedDowngrade`] when other guards of the same owner share this write
    /// hold (a nested acquisition): they still write, so no reader may come in; this guard
    /// is given back (which only counts the nesting down). [`Error::Lost`] when the hold
    /// was lost before the downgrade; [`Error::Redis`] when Redis could not be asked (the
    /// write hold is then given back in the background, downgraded or not).
    ///
    /// # Cancel safety
    /// Dropping the future drops the write guard, which gives the hold back in the
    /// background, downgraded or not.
    pub async fn downgrade(self) -> Result<ReadGuard> {
        downgrade(&self.guard).await?;
        Ok(self.guard)
    }

    /// The guard of the hold, as [`WriteLock::run`] hands it to its work.
    #[cfg(feature = "blocking")]
    pub(crate) fn into_guard(self) -> Guard {
        self.guard
    }
}

/// Turns the write hold of `guard` into a read hold; see [`WriteGuard::downgrade`]. On an
/// error the caller still has the guard, and gives it back as it does.
pub(crate) async fn downgrade(guard: &Guard) -> Result<()> {
    let holding = guard.holding();
    let lease = &holding.lease;
    if !matches!(lease.state(), State::Held(_)) {
        return Err(lost(&lease.name));
    }
    if holding.is_nested() {
        return Err(Error::NestedDowngrade {
            name: lease.name.to_string(),
        });
    }
    let held = holding
        .engine
        .deployment()
        .downgrade(&lease.keys, lease.token.secret())
        .await?;
    if !held {
        lease.lose("a downgrade found the hold gone");
        return Err(lost(&lease.name));
    }
    lease.downgrade();
    Ok(())
}

derefs_to_guard!(WriteGuard);
