//! The blocking builders: each wraps its async twin and the runtime that drives it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::owner::Owner;
use crate::renew::Renewal;
use crate::token::FencingToken;
use crate::wait::{Retry, Wait};

use super::guards::{Count, Guard, Hold, MultiGuard, Permit, ReadGuard, WriteGuard};
use super::runtime::{Runtime, block_on};

/// An async builder and the runtime that drives it: what every blocking builder is.
#[derive(Clone)]
pub(super) struct Driven<L> {
    pub(super) inner: L,
    pub(super) runtime: Arc<Runtime>,
}

/// An async builder that a blocking one drives.
pub(super) trait Drive: Clone {
    /// The blocking guard of an acquisition.
    type Held: Hold;

    /// The owner acquisitions act for: the builder's own, else the current scope's.
    fn effective_owner(&self) -> Option<Owner>;

    /// The builder as `run` acquires: renewed, for `owner`.
    #[must_use]
    fn for_run(self, owner: &Owner) -> Self;

    async fn acquire(&self) -> Result<<Self::Held as Hold>::Async>;

    async fn try_acquire(&self) -> Result<Option<<Self::Held as Hold>::Async>>;
}

/// `Drive` for async builders, each yielding the blocking guard named.
macro_rules! drive {
    ($($async:ident => $held:ident),* $(,)?) => {$(
        impl Drive for crate::$async {
            type Held = $held;

            fn effective_owner(&self) -> Option<Owner> {
                crate::$async::effective_owner(self)
            }

            fn for_run(self, owner: &Owner) -> Self {
                self.renewal(Renewal::Auto).owner(owner)
            }

            async fn acquire(&self) -> Result<<$held as Hold>::Async> {
                crate::$async::acquire(self).await
            }

            async fn try_acquire(&self) -> Result<Option<<$held as Hold>::Async>> {
                crate::$async::try_acquire(self).await
            }
        }
    )*};
}

drive!(
    Lock => Guard,
    Semaphore => Guard,
    ReadLock => Guard,
    WriteLock => WriteGuard,
    MultiLock => MultiGuard,
);

impl<L> Driven<L> {
    fn map<M>(self, f: impl FnOnce(L) -> M) -> Driven<M> {
        Driven {
            inner: f(self.inner),
            runtime: self.runtime,
        }
    }
}

impl<L: Drive> Driven<L> {
    fn acquire(&self) -> Result<L::Held> {
        let guard = block_on(&self.runtime, self.inner.acquire())??;
        Ok(L::Held::wrap(guard, &self.runtime))
    }

    fn try_acquire(&self) -> Result<Option<L::Held>> {
        let guard = block_on(&self.runtime, self.inner.try_acquire())??;
        Ok(guard.map(|g| L::Held::wrap(g, &self.runtime)))
    }

    fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
    where
        F: FnOnce(&<L::Held as Hold>::View) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        // The builder's own owner (`owner`), else the current scope's, else a new one.
        let owner = self.inner.effective_owner().unwrap_or_default();
        let driven = self.clone().map(|l| l.for_run(&owner));
        owner.sync_scope(|| {
            let held = driven.acquire()?;
            // As the async `run`: never re-enter a lease that nobody renews.
            if let Some(name) = held.unrenewed().map(str::to_owned) {
                let _ = held.release();
                return Err(E::from(Error::FixedLeaseReentered { name }));
            }
            let outcome = work(held.view());
            let released = held.release();
            match (outcome, released) {
                (Err(e), _) => Err(e),
                (Ok(_), Err(e)) => Err(E::from(e)),
                (Ok(value), Ok(())) => Ok(value),
            }
        })
    }
}

/// A public blocking builder over the async builder `$async`, with its option setters.
macro_rules! builder {
    ($(#[$attr:meta])* $name:ident($async:ident)) => {
        $(#[$attr])*
        #[must_use]
        #[derive(Clone)]
        pub struct $name(pub(super) Driven<crate::$async>);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(concat!("blocking::", stringify!($name)))
                    .field(&self.0.inner)
                    .finish()
            }
        }

        impl $name {
            fn map(self, f: impl FnOnce(crate::$async) -> crate::$async) -> Self {
                Self(self.0.map(f))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::ttl`].")]
            pub fn ttl(self, ttl: Duration) -> Self {
                self.map(|l| l.ttl(ttl))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::wait`].")]
            pub fn wait(self, wait: impl Into<Wait>) -> Self {
                self.map(|l| l.wait(wait))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::prefix`].")]
            pub fn prefix(self, prefix: impl Into<String>) -> Self {
                self.map(|l| l.prefix(prefix))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::retry`].")]
            pub fn retry(self, retry: Retry) -> Self {
                self.map(|l| l.retry(retry))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::renewal`].")]
            pub fn renewal(self, renewal: Renewal) -> Self {
                self.map(|l| l.renewal(renewal))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::max_hold`].")]
            pub fn max_hold(self, budget: Duration) -> Self {
                self.map(|l| l.max_hold(budget))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::owner`]. A thread is not an")]
            /// owner; [`Owner::sync_scope`] makes one for the blocking calls inside it.
            pub fn owner(self, owner: &Owner) -> Self {
                self.map(|l| l.owner(owner))
            }

            #[doc = concat!("See [`crate::", stringify!($async), "::name_in_metrics`].")]
            #[cfg(feature = "metrics")]
            #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
            pub fn name_in_metrics(self) -> Self {
                self.map(crate::$async::name_in_metrics)
            }
        }
    };
}

/// `acquire`, `try_acquire` and `run` of a public blocking builder.
macro_rules! acquisitions {
    ($name:ident($async:ident) -> $held:ident) => {
        acquisitions!($name($async) -> $held as Guard);
    };
    ($name:ident($async:ident) -> $held:ident as $view:ident) => {
        impl $name {
            /// Acquires, waiting up to the builder's wait; see
            #[doc = concat!("[`crate::", stringify!($async), "::acquire`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::acquire`], and")]
            /// [`Error::Runtime`] inside an async task.
            pub fn acquire(&self) -> Result<$held> {
                self.0.acquire()
            }

            /// One attempt: `Ok(None)` when busy; see
            #[doc = concat!("[`crate::", stringify!($async), "::try_acquire`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::try_acquire`], and")]
            /// [`Error::Runtime`] inside an async task.
            pub fn try_acquire(&self) -> Result<Option<$held>> {
                self.0.try_acquire()
            }

            /// Acquires, runs `work` while the hold is kept renewed, and releases it.
            ///
            /// Synchronous code cannot be stopped from outside, so unlike
            #[doc = concat!("[`crate::", stringify!($async), "::run`]")]
            /// `work` runs to its end even if the lease is lost meanwhile; check
            #[doc = concat!("[`", stringify!($view), "::is_held`]")]
            /// between steps. If the lease was lost, `run` returns
            /// [`Error::Lost`] even when `work` succeeded. `work` runs in an [`Owner`]
            /// scope, so nested blocking acquisitions of the same name in it re-enter.
            ///
            /// Re-entering a lease the owner already holds works as for
            /// [`crate::Lock::run`], which see: the outer lease's options apply, and a
            /// fixed one is refused.
            ///
            /// # Errors
            /// `work`'s own error, unchanged; otherwise as
            #[doc = concat!("[`crate::", stringify!($async), "::run`].")]
            pub fn run<T, E, F>(&self, work: F) -> std::result::Result<T, E>
            where
                F: FnOnce(&$view) -> std::result::Result<T, E>,
                E: From<Error>,
            {
                self.0.run(work)
            }
        }
    };
}

/// The name and keys of a public blocking builder.
macro_rules! named {
    ($name:ident) => {
        impl $name {
            /// The name.
            pub fn name(&self) -> &str {
                self.0.inner.name()
            }

            /// The Redis keys and channel.
            ///
            /// # Errors
            /// [`Error::InvalidName`] when the name cannot be used.
            pub fn keys(&self) -> Result<LockKeys> {
                self.0.inner.keys()
            }
        }
    };
}

builder!(
    /// A blocking lock; see [`crate::Lock`] for the options.
    Lock(Lock)
);
named!(Lock);
acquisitions!(Lock(Lock) -> Guard);

impl Lock {
    /// Takes over a lease another holder handed on with [`Guard::detach`] (or the async
    /// [`crate::Guard::detach`]), in this process or another; see [`crate::Lock::adopt`].
    ///
    /// # Errors
    /// As [`crate::Lock::adopt`], and [`Error::Runtime`] inside an async task.
    pub fn adopt(&self, handle: crate::LeaseHandle) -> Result<Guard> {
        let guard = block_on(&self.0.runtime, self.0.inner.adopt(handle))??;
        Ok(Guard::wrap(guard, &self.0.runtime))
    }
}

builder!(
    /// A blocking semaphore: at most `permits` holders at once; see [`crate::Semaphore`].
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// // At most 3 backups at once, across every machine.
    /// client.semaphore("backups", 3).run(|permit| {
    ///     // ... the backup, stamped with permit.fencing_token() ...
    ///     Ok::<_, redlease::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    Semaphore(Semaphore)
);
named!(Semaphore);
acquisitions!(Semaphore(Semaphore) -> Permit);

impl Semaphore {
    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.0.inner.permits()
    }

    /// Sets the semaphore's permit count to this builder's while it may be held or waited
    /// for, and returns the count in force before (`None`: none was stored); see
    /// [`crate::Semaphore::resize`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::resize`], and [`Error::Runtime`] inside an async task.
    pub fn resize(&self) -> Result<Option<u32>> {
        block_on(&self.0.runtime, self.0.inner.resize())?
    }

    /// Takes `n` permits at once as one [`Permit`], waiting up to the builder's wait; see
    /// [`crate::Semaphore::acquire_many`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::acquire_many`], and [`Error::Runtime`] inside an async task.
    pub fn acquire_many(&self, n: u32) -> Result<Permit> {
        let permit = block_on(&self.0.runtime, self.0.inner.acquire_many(n))??;
        Ok(Permit::wrap(permit, &self.0.runtime))
    }

    /// One attempt at `n` permits at once: `Ok(None)` when fewer are free or others
    /// queue; see [`crate::Semaphore::try_acquire_many`].
    ///
    /// # Errors
    /// As [`crate::Semaphore::try_acquire_many`], and [`Error::Runtime`] inside an async
    /// task.
    pub fn try_acquire_many(&self, n: u32) -> Result<Option<Permit>> {
        let permit = block_on(&self.0.runtime, self.0.inner.try_acquire_many(n))??;
        Ok(permit.map(|p| Permit::wrap(p, &self.0.runtime)))
    }
}

builder!(
    /// A blocking read-write lock: many readers at once, or one writer; see
    /// [`crate::RwLock`] for its fairness and guarantees. Options set here apply to both
    /// sides.
    ///
    /// Reentrancy, within an [`Owner`] (a `run`'s, or [`Owner::sync_scope`]'s): a read
    /// re-entered by its owner is free (it shares the outer hold); a read asked for by the
    /// owner of the write hold re-enters the write hold (use [`WriteGuard::downgrade`] to
    /// let other readers in); a write asked for by the owner of a read hold fails at once
    /// with [`Error::Upgrade`], never a deadlock.
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// let config = client.rwlock("config");
    /// let write = config.write().acquire()?; // alone
    /// let read = write.downgrade()?; // now a reader, without a gap
    /// read.release()?;
    /// let version = config.read().run(|guard| Ok::<_, redlease::Error>(guard.fencing_token()))?;
    /// # Ok(()) }
    /// ```
    RwLock(RwLock)
);
named!(RwLock);

impl RwLock {
    /// The read side, with the options set so far.
    pub fn read(&self) -> ReadLock {
        ReadLock(self.0.clone().map(|l| l.read()))
    }

    /// The write side, with the options set so far.
    pub fn write(&self) -> WriteLock {
        WriteLock(self.0.clone().map(|l| l.write()))
    }
}

builder!(
    /// The read side of a blocking [`RwLock`]; acquiring it yields a [`ReadGuard`].
    ReadLock(ReadLock)
);
acquisitions!(ReadLock(ReadLock) -> ReadGuard);

builder!(
    /// The write side of a blocking [`RwLock`]; acquiring it yields a [`WriteGuard`].
    WriteLock(WriteLock)
);
acquisitions!(WriteLock(WriteLock) -> WriteGuard);

builder!(
    /// Several blocking locks held together, all or nothing; see [`crate::MultiLock`] for
    /// the order they are taken in, what it holds while it waits, and the options.
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// client.multi_lock(["account:7", "account:3"]).run(|guard| {
    ///     // Both accounts are ours; each write carries its account's fencing token.
    ///     let _ = guard.fencing_token("account:7");
    ///     Ok::<_, redlease::Error>(())
    /// })?;
    /// # Ok(()) }
    /// ```
    MultiLock(MultiLock)
);
acquisitions!(MultiLock(MultiLock) -> MultiGuard as MultiGuard);

impl MultiLock {
    /// The names, in the order they are taken (sorted, without duplicates).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.inner.names()
    }
}

builder!(
    /// A blocking leader election; see [`crate::Election`] for what it promises.
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// let leadership = client.election("scheduler").campaign("host-a")?;
    /// // ... lead, stamping writes with leadership.term() ...
    /// leadership.resign()?;
    /// # Ok(()) }
    /// ```
    Election(Election)
);
named!(Election);

impl Election {
    /// Waits to lead; see [`crate::Election::campaign`].
    ///
    /// # Errors
    /// As [`crate::Election::campaign`], and [`Error::Runtime`] inside an async task.
    pub fn campaign(&self, note: impl Into<String>) -> Result<Leadership> {
        let leadership = block_on(&self.0.runtime, self.0.inner.campaign(note))??;
        let (guard, note) = leadership.into_parts();
        Ok(Leadership {
            guard: Guard::wrap(guard, &self.0.runtime),
            note,
        })
    }

    /// Who leads now, or `None`; see [`crate::Election::leader`].
    ///
    /// # Errors
    /// As [`crate::Election::leader`], and [`Error::Runtime`] inside an async task.
    pub fn leader(&self) -> Result<Option<crate::Leader>> {
        block_on(&self.0.runtime, self.0.inner.leader())?
    }

    /// Every change of leader, starting with the current one, as an iterator that blocks
    /// for the next change; see [`crate::Election::observe`]. Called inside an async
    /// runtime, each item is [`Error::Runtime`].
    pub fn observe(&self) -> Observe {
        Observe {
            changes: self.0.inner.observe(),
            runtime: Arc::clone(&self.0.runtime),
        }
    }
}

/// The changes of leader of a blocking [`Election`]; see [`Election::observe`].
pub struct Observe {
    changes: crate::LeaderChanges,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Observe").finish_non_exhaustive()
    }
}

impl Iterator for Observe {
    type Item = Result<Option<crate::Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        let next = futures_util::StreamExt::next(&mut self.changes);
        match block_on(&self.runtime, next) {
            Ok(item) => item,
            Err(e) => Some(Err(e)),
        }
    }
}

/// Leadership of a blocking [`Election`]: a [`Guard`] on its lease, given back before its
/// drop returns; see [`crate::Leadership`].
#[must_use = "dropping a Leadership resigns at once"]
#[derive(Debug)]
pub struct Leadership {
    guard: Guard,
    note: Arc<str>,
}

impl Leadership {
    /// The term (the lease's fencing token); see [`crate::Leadership::term`].
    pub fn term(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// The note this leader campaigned with, or the last it
    /// [proclaimed](Self::proclaim).
    pub fn note(&self) -> &str {
        &self.note
    }

    /// Replaces the note observers see, keeping the term and the lease; see
    /// [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    /// As [`crate::Leadership::proclaim`], and [`Error::Runtime`] inside an async task.
    pub fn proclaim(&mut self, note: impl Into<String>) -> Result<()> {
        self.note = self.guard.proclaim(&note.into())?;
        Ok(())
    }

    /// Whether the lease is still ours, without asking Redis.
    pub fn is_leading(&self) -> bool {
        self.guard.is_held()
    }

    /// Asks Redis whether this leader still holds the election's lease; see
    /// [`crate::Leadership::owned`].
    ///
    /// # Errors
    /// As [`Guard::owned`].
    pub fn owned(&self) -> Result<bool> {
        self.guard.owned()
    }

    /// Blocks until leadership is lost; see [`crate::Leadership::lost`].
    ///
    /// # Errors
    /// As [`Guard::lost`].
    pub fn lost(&self) -> Result<()> {
        self.guard.lost()
    }

    /// The former name of [`lost`](Self::lost).
    ///
    /// # Errors
    /// As [`lost`](Self::lost).
    #[deprecated(note = "renamed `lost`, the name of the async API's")]
    pub fn wait_lost(&self) -> Result<()> {
        self.lost()
    }

    /// Steps down; see [`crate::Leadership::resign`].
    ///
    /// # Errors
    /// As [`Guard::release`].
    pub fn resign(self) -> Result<()> {
        self.guard.release()
    }
}

builder!(
    /// A blocking count-down latch whose counts are leases; see [`crate::Latch`].
    ///
    /// ```no_run
    /// # fn main() -> redlease::Result<()> {
    /// let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
    /// let latch = client.latch("nightly-import");
    /// // Each worker:
    /// let count = latch.count_up()?;
    /// // ... its part ...
    /// count.count_down()?;
    /// // The step that needs every part done:
    /// let opened = latch.wait(std::time::Duration::from_secs(600)).wait_open()?;
    /// assert!(!opened.is_broken(), "a worker died before counting down");
    /// # Ok(()) }
    /// ```
    Latch(Latch)
);
named!(Latch);

impl Latch {
    /// Registers one more outstanding count, held as a renewed lease until counted down
    /// or dropped; see [`crate::Latch::count_up`].
    ///
    /// # Errors
    /// As [`crate::Latch::count_up`], and [`Error::Runtime`] inside an async task.
    pub fn count_up(&self) -> Result<Count> {
        let count = block_on(&self.0.runtime, self.0.inner.count_up())??;
        Ok(Count::wrap(count, &self.0.runtime))
    }

    /// The outstanding counts now; see [`crate::Latch::count`].
    ///
    /// # Errors
    /// As [`crate::Latch::count`], and [`Error::Runtime`] inside an async task.
    pub fn count(&self) -> Result<u64> {
        block_on(&self.0.runtime, self.0.inner.count())?
    }

    /// Blocks until no count is outstanding, up to the builder's wait; see
    /// [`crate::Latch::wait_open`].
    ///
    /// # Errors
    /// As [`crate::Latch::wait_open`], and [`Error::Runtime`] inside an async task.
    pub fn wait_open(&self) -> Result<crate::Opened> {
        block_on(&self.0.runtime, self.0.inner.wait_open())?
    }

    /// Presets arrivals the open round waits for; see [`crate::Latch::expect`].
    ///
    /// # Errors
    /// As [`crate::Latch::expect`], and [`Error::Runtime`] inside an async task.
    pub fn expect(&self, arrivals: u32) -> Result<u64> {
        block_on(&self.0.runtime, self.0.inner.expect(arrivals))?
    }

    /// Presets arrivals only when no round is open; see [`crate::Latch::try_expect`].
    ///
    /// # Errors
    /// As [`crate::Latch::try_expect`], and [`Error::Runtime`] inside an async task.
    pub fn try_expect(&self, arrivals: u32) -> Result<bool> {
        block_on(&self.0.runtime, self.0.inner.try_expect(arrivals))?
    }

    /// Blocks at a barrier of `parties` until the last arrives; see
    /// [`crate::Latch::barrier`].
    ///
    /// # Errors
    /// As [`crate::Latch::barrier`], and [`Error::Runtime`] inside an async task.
    pub fn barrier(&self, parties: u32) -> Result<crate::Opened> {
        block_on(&self.0.runtime, self.0.inner.barrier(parties))?
    }
}
