//! The same locks for synchronous code, driven by the same engine.
//!
//! Like `reqwest::blocking`, every type here wraps its async twin and drives it on a
//! small tokio runtime that the [`Client`] owns (one worker thread, which also runs the
//! renewal scheduler and background releases). Locks taken here and with the async API
//! exclude each other like any two clients.
//!
//! Do not call these methods from inside an async runtime: they block the thread. They
//! return an error saying so instead of panicking.
//!
//! All three primitives are here: [`Client::lock`], [`Client::semaphore`] (a [`Permit`] is
//! a [`Guard`]) and [`Client::rwlock`] (a [`ReadGuard`] is a [`Guard`]; a [`WriteGuard`]
//! adds [`downgrade`](WriteGuard::downgrade)). Every guard is released before its `Drop`
//! returns. Reentrancy is per [`Owner`], as in the async API: a `run` opens an owner scope
//! for its work (so does [`Owner::sync_scope`]); within it a lock or a permit re-enters, a
//! read re-entered by its owner is free, a read asked for by the writer re-enters the write
//! hold, and a write asked for by a reader fails with [`Error::Upgrade`] (never a
//! deadlock).
//!
//! ```no_run
//! # fn main() -> redlease::Result<()> {
//! let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let total = client.lock("ledger").run(|guard| {
//!     // Exclusive and renewed; check guard.is_held() between long steps.
//!     Ok::<_, redlease::Error>(guard.fencing_token().get())
//! })?;
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::guard::derefs_to_guard;
use crate::keys::LockKeys;
use crate::owner::Owner;
use crate::renew::Renewal;
use crate::token::FencingToken;
use crate::wait::{Retry, Wait};

/// A blocking handle to one Redis deployment; see [`crate::Client`].
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("blocking::Client").finish_non_exhaustive()
    }
}

/// Runs `future` to completion on `runtime`, refusing to block inside an async context.
fn block_on<F: Future>(runtime: &Runtime, future: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(inside_runtime());
    }
    Ok(runtime.block_on(future))
}

fn inside_runtime() -> Error {
    Error::Runtime {
        reason: "the blocking API was called from inside an async runtime; use the async API there"
            .into(),
    }
}

impl Client {
    /// Connects with default options; see [`crate::Client::connect`].
    ///
    /// # Errors
    /// As [`crate::ClientBuilder::connect`], and [`Error::Runtime`] when the runtime cannot
    /// start or this is called from inside an async runtime.
    pub fn connect(url: &str) -> Result<Self> {
        Self::from_builder(crate::Client::builder(url))
    }

    /// Connects with the options of `builder`.
    ///
    /// # Errors
    /// As [`Client::connect`].
    pub fn from_builder(builder: crate::ClientBuilder) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redlease")
            .enable_all()
            .build()
            .map_err(|e| Error::Runtime {
                reason: format!("could not start the runtime that drives blocking locks: {e}"),
            })?;
        let inner = block_on(&runtime, builder.connect())??;
        Ok(Self {
            inner,
            runtime: Arc::new(runtime),
        })
    }

    /// Gives back every lease this client still holds and waits for background
    /// releases; see [`crate::Client::shutdown`].
    ///
    /// # Errors
    /// As [`crate::Client::shutdown`], and [`Error::Runtime`] inside an async runtime.
    pub fn shutdown(&self) -> Result<()> {
        block_on(&self.runtime, self.inner.shutdown())?
    }

    /// A lock named `name`; see [`crate::Client::lock`].
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock(self.drive(self.inner.lock(name)))
    }

    /// A semaphore named `name` admitting `permits` holders at once; see
    /// [`crate::Client::semaphore`].
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore(self.drive(self.inner.semaphore(name, permits)))
    }

    /// A read-write lock named `name`; see [`crate::Client::rwlock`].
    pub fn rwlock(&self, name: impl Into<String>) -> RwLock {
        RwLock(self.drive(self.inner.rwlock(name)))
    }

    /// The async client this one drives.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    fn drive<L>(&self, inner: L) -> Driven<L> {
        Driven {
            inner,
            runtime: Arc::clone(&self.runtime),
        }
    }
}

/// An async builder and the runtime that drives it: what every blocking builder is.
#[derive(Clone)]
struct Driven<L> {
    inner: L,
    runtime: Arc<Runtime>,
}

/// An async builder that a blocking one drives.
trait Drive: Clone {
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

/// A blocking guard, made from its async twin.
trait Hold: Sized {
    /// The async guard.
    type Async;

    fn wrap(guard: Self::Async, runtime: &Arc<Runtime>) -> Self;

    /// What `run` hands to its work.
    fn guard(&self) -> &Guard;

    fn release(self) -> Result<()>;
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

drive!(Lock => Guard, Semaphore => Guard, ReadLock => Guard, WriteLock => WriteGuard);

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
        F: FnOnce(&Guard) -> std::result::Result<T, E>,
        E: From<Error>,
    {
        // The builder's own owner (`owner`), else the current scope's, else a new one.
        let owner = self.inner.effective_owner().unwrap_or_default();
        let driven = self.clone().map(|l| l.for_run(&owner));
        owner.sync_scope(|| {
            let held = driven.acquire()?;
            // As the async `run`: never re-enter a lease that nobody renews.
            let guard = held.guard();
            if guard
                .inner
                .as_ref()
                .is_some_and(|g| !g.holding().is_renewed())
            {
                let name = guard.name().to_owned();
                let _ = held.release();
                return Err(E::from(Error::FixedLeaseReentered { name }));
            }
            let outcome = work(held.guard());
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
        pub struct $name(Driven<crate::$async>);

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
        }
    };
}

/// `acquire`, `try_acquire` and `run` of a public blocking builder.
macro_rules! acquisitions {
    ($name:ident($async:ident) -> $held:ident) => {
        impl $name {
            /// Acquires, waiting up to the builder's wait; see
            #[doc = concat!("[`crate::", stringify!($async), "::acquire`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::acquire`], and")]
            /// [`Error::Runtime`] inside an async runtime.
            pub fn acquire(&self) -> Result<$held> {
                self.0.acquire()
            }

            /// One attempt: `Ok(None)` when busy; see
            #[doc = concat!("[`crate::", stringify!($async), "::try_acquire`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::try_acquire`], and")]
            /// [`Error::Runtime`] inside an async runtime.
            pub fn try_acquire(&self) -> Result<Option<$held>> {
                self.0.try_acquire()
            }

            /// Acquires, runs `work` while the lease is kept renewed, and releases it.
            ///
            /// Synchronous code cannot be stopped from outside, so unlike
            #[doc = concat!("[`crate::", stringify!($async), "::run`]")]
            /// `work` runs to its end even if the lease is lost meanwhile; check
            /// [`Guard::is_held`] between steps. If the lease was lost, `run` returns
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
                F: FnOnce(&Guard) -> std::result::Result<T, E>,
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

/// A permit of a blocking [`Semaphore`]: a [`Guard`], released before its drop returns.
pub type Permit = Guard;

/// A read hold of a blocking [`RwLock`]: a [`Guard`], released before its drop returns.
pub type ReadGuard = Guard;

/// A held lock (blocking); see [`crate::Guard`]. Dropping it releases the lock before the
/// drop returns (bounded by the response timeout), so a program may simply end.
#[must_use = "dropping a Guard releases the lock at once"]
pub struct Guard {
    /// The lock's name, also once released.
    name: Arc<str>,
    inner: Option<crate::Guard>,
    runtime: Arc<Runtime>,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Guard").field(&self.inner).finish()
    }
}

impl Guard {
    fn inner(&self) -> Result<&crate::Guard> {
        self.inner.as_ref().ok_or_else(|| self.released())
    }

    fn released(&self) -> Error {
        Error::Released {
            name: self.name.to_string(),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// See [`crate::Guard::fencing_token`].
    pub fn fencing_token(&self) -> FencingToken {
        self.inner
            .as_ref()
            .map_or(FencingToken::new(0), crate::Guard::fencing_token)
    }

    /// See [`crate::Guard::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.inner
            .as_ref()
            .map_or_else(Instant::now, crate::Guard::valid_until)
    }

    /// See [`crate::Guard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.inner
            .as_ref()
            .map_or(Duration::ZERO, crate::Guard::remaining)
    }

    /// See [`crate::Guard::is_held`].
    pub fn is_held(&self) -> bool {
        self.inner.as_ref().is_some_and(crate::Guard::is_held)
    }

    /// Blocks until the lease is lost; see [`crate::Guard::lost`]. Meant for a watchdog
    /// thread of its own.
    ///
    /// # Errors
    /// [`Error::Runtime`] inside an async runtime.
    pub fn wait_lost(&self) -> Result<()> {
        block_on(&self.runtime, self.inner()?.lost())
    }

    /// See [`crate::Guard::extend`].
    ///
    /// # Errors
    /// As [`crate::Guard::extend`], and [`Error::Runtime`] inside an async runtime.
    pub fn extend(&mut self, ttl: Duration) -> Result<()> {
        let runtime = Arc::clone(&self.runtime);
        let Some(inner) = self.inner.as_mut() else {
            return Err(self.released());
        };
        block_on(&runtime, inner.extend(ttl))?
    }

    /// See [`crate::Guard::release`].
    ///
    /// # Errors
    /// As [`crate::Guard::release`], and [`Error::Runtime`] inside an async runtime (the
    /// lock is then released in the background).
    pub fn release(mut self) -> Result<()> {
        let Some(inner) = self.inner.take() else {
            return Err(self.released());
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let _entered = self.runtime.enter();
            drop(inner);
            return Err(inside_runtime());
        }
        self.runtime.block_on(inner.release())
    }
}

impl Drop for Guard {
    /// Releases the lock before returning, bounded by the client's response timeout (the
    /// release is tried again across a reconnect within it), so that a program that ends
    /// right after the drop leaves no lock behind. Errors are only logged. Inside an async
    /// runtime, where it must not block, the release runs in the background instead.
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Inside the runtime's context, the async guard's Drop spawns its release there.
            let _entered = self.runtime.enter();
            drop(inner);
            return;
        }
        if let Err(e) = self.runtime.block_on(inner.release()) {
            tracing::warn!(error = %e, "release on drop failed");
        }
    }
}

impl Hold for Guard {
    type Async = crate::Guard;

    fn wrap(guard: crate::Guard, runtime: &Arc<Runtime>) -> Self {
        Self {
            name: guard.name().into(),
            inner: Some(guard),
            runtime: Arc::clone(runtime),
        }
    }

    fn guard(&self) -> &Guard {
        self
    }

    fn release(self) -> Result<()> {
        Guard::release(self)
    }
}

/// The write hold of a blocking [`RwLock`]: a [`Guard`] (its whole surface, through
/// `Deref`), plus [`downgrade`](WriteGuard::downgrade); see [`crate::WriteGuard`]. Dropping
/// it releases the lock before the drop returns, as a [`Guard`] does.
#[must_use = "dropping a WriteGuard releases the lock at once"]
#[derive(Debug)]
pub struct WriteGuard {
    guard: Guard,
}

impl WriteGuard {
    /// Gives the write hold back (and hands the lock to the queue's head); see
    /// [`Guard::release`].
    ///
    /// # Errors
    /// As [`Guard::release`].
    pub fn release(self) -> Result<()> {
        self.guard.release()
    }

    /// Turns the write hold into a read hold, atomically: no other writer can come in
    /// between, and the readers queued at the head are let in; see
    /// [`crate::WriteGuard::downgrade`].
    ///
    /// # Errors
    /// As [`crate::WriteGuard::downgrade`], and [`Error::Runtime`] inside an async
    /// runtime. On an error the write hold is given back, as when the guard is dropped.
    pub fn downgrade(self) -> Result<ReadGuard> {
        block_on(
            &self.guard.runtime,
            crate::rwlock::downgrade(self.guard.inner()?),
        )??;
        Ok(self.guard)
    }
}

impl Hold for WriteGuard {
    type Async = crate::WriteGuard;

    fn wrap(guard: crate::WriteGuard, runtime: &Arc<Runtime>) -> Self {
        Self {
            guard: Guard::wrap(guard.into_guard(), runtime),
        }
    }

    fn guard(&self) -> &Guard {
        &self.guard
    }

    fn release(self) -> Result<()> {
        self.guard.release()
    }
}

derefs_to_guard!(WriteGuard);

static DEFAULT: OnceLock<Client> = OnceLock::new();

/// Makes `client` the default of synchronous `#[locked]` functions without
/// `client = ...`.
///
/// # Errors
/// [`Error::DefaultClientSet`] when a default blocking client was already set (the
/// first one stays).
pub fn set_default_client(client: Client) -> Result<()> {
    DEFAULT.set(client).map_err(|_| Error::DefaultClientSet {
        setter: "redlease::blocking::set_default_client",
    })
}

/// The client set by [`set_default_client`].
///
/// # Errors
/// [`Error::NoDefaultClient`] when none was set.
pub fn default_client() -> Result<&'static Client> {
    DEFAULT.get().ok_or(Error::NoDefaultClient {
        setter: "redlease::blocking::set_default_client",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose hold is over (the state its `release` and `Drop` leave behind).
    fn released_guard() -> std::io::Result<Guard> {
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        Ok(Guard {
            name: "job".into(),
            inner: None,
            runtime: Arc::new(runtime),
        })
    }

    #[test]
    fn a_released_guard_says_so_with_its_own_error() -> std::io::Result<()> {
        let mut guard = released_guard()?;
        assert_eq!(guard.name(), "job");
        for result in [guard.wait_lost(), guard.extend(Duration::from_secs(1))] {
            assert!(
                matches!(&result, Err(Error::Released { name }) if name == "job"),
                "{result:?}"
            );
        }
        let result = guard.release();
        assert!(matches!(&result, Err(Error::Released { .. })), "{result:?}");
        let text = result.map_or_else(|e| e.to_string(), |()| String::new());
        assert_eq!(
            text,
            "the guard of lock `job` was already released; acquire the lock again for another hold"
        );
        Ok(())
    }
}
