//! The blocking guards, released before their `Drop` returns.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::guard::derefs_to_guard;
use crate::token::FencingToken;

use super::runtime::{Runtime, block_on, in_async_task, inside_runtime};

/// A blocking guard, made from its async twin.
pub(super) trait Hold: Sized {
    /// The async guard.
    type Async;

    /// What `run` hands to its work.
    type View;

    fn wrap(guard: Self::Async, runtime: &Arc<Runtime>) -> Self;

    /// What `run` hands to its work.
    fn view(&self) -> &Self::View;

    /// The name of a lease re-entered from one that nobody renews, which `run` refuses.
    fn unrenewed(&self) -> Option<&str>;

    fn release(self) -> Result<()>;
}

/// A permit of a blocking [`Semaphore`](super::Semaphore): a [`Guard`], released before its drop returns.
pub type Permit = Guard;

/// A read hold of a blocking [`RwLock`](super::RwLock): a [`Guard`], released before its drop returns.
pub type ReadGuard = Guard;

/// An async guard and the runtime that releases it: the core of every blocking guard,
/// released before its `Drop` returns.
struct Held<G: Release> {
    /// The name (the names of a multi-lock, joined), also once released.
    name: Arc<str>,
    /// `None` once released.
    inner: Option<G>,
    runtime: Arc<Runtime>,
}

/// An async guard that a blocking one gives back.
trait Release: Sized {
    fn release(self) -> impl Future<Output = Result<()>>;
}

impl Release for crate::Guard {
    fn release(self) -> impl Future<Output = Result<()>> {
        crate::Guard::release(self)
    }
}

impl Release for crate::MultiGuard {
    fn release(self) -> impl Future<Output = Result<()>> {
        crate::MultiGuard::release(self)
    }
}

impl<G: Release> Held<G> {
    fn new(name: Arc<str>, inner: G, runtime: &Arc<Runtime>) -> Self {
        Self {
            name,
            inner: Some(inner),
            runtime: Arc::clone(runtime),
        }
    }

    fn inner(&self) -> Result<&G> {
        self.inner.as_ref().ok_or_else(|| self.released())
    }

    fn released(&self) -> Error {
        Error::Released {
            name: self.name.to_string(),
        }
    }

    /// Runs `f` on the async guard, on the runtime.
    ///
    /// # Errors
    /// [`Error::Released`] once released, [`Error::Runtime`] inside an async task.
    fn block_on_mut<T>(&mut self, f: impl AsyncFnOnce(&mut G) -> T) -> Result<T> {
        let runtime = Arc::clone(&self.runtime);
        let Some(inner) = self.inner.as_mut() else {
            return Err(self.released());
        };
        block_on(&runtime, f(inner))
    }

    /// Releases now, on the runtime: `None` inside an async task, where the async
    /// guard's own `Drop` releases it in the background instead.
    fn give_back(&mut self) -> Option<Result<()>> {
        let inner = self.inner.take()?;
        if in_async_task() {
            // Inside an async task, which must not block, the async guard's Drop spawns its release there.
            let _entered = self.runtime.enter();
            drop(inner);
            return None;
        }
        Some(self.runtime.block_on_here(inner.release()).and_then(|r| r))
    }

    fn release(mut self) -> Result<()> {
        if self.inner.is_none() {
            return Err(self.released());
        }
        self.give_back().unwrap_or_else(|| Err(inside_runtime()))
    }
}

impl<G: Release> Drop for Held<G> {
    /// Releases before returning, bounded by the client's response timeout (the release is
    /// tried again across a reconnect within it), so that a program that ends right after
    /// the drop leaves no lock behind. Errors are only logged. Inside an async runtime,
    /// where it must not block, the release runs in the background instead.
    fn drop(&mut self) {
        if let Some(Err(e)) = self.give_back() {
            tracing::warn!(lock = %self.name, error = %e, "release on drop failed");
        }
    }
}

/// `lost`, `extend` and `release` of a blocking guard over the async guard `$async`,
/// each its async twin run on the client's runtime.
macro_rules! held_surface {
    ($name:ident($async:ident)) => {
        impl $name {
            /// Blocks until the lease (any of them, for a multi-lock) is lost; see
            #[doc = concat!("[`crate::", stringify!($async), "::lost`].")]
            /// Meant for a watchdog thread of its own.
            ///
            /// # Errors
            /// [`Error::Runtime`] inside an async task.
            pub fn lost(&self) -> Result<()> {
                block_on(&self.0.runtime, self.0.inner()?.lost())
            }

            /// The former name of [`lost`](Self::lost).
            ///
            /// # Errors
            /// As [`lost`](Self::lost).
            #[deprecated(note = "renamed `lost`, the name of the async API's")]
            pub fn wait_lost(&self) -> Result<()> {
                self.lost()
            }

            /// Asks Redis whether the lease (every one, for a multi-lock) still holds its
            /// owner token; see
            #[doc = concat!("[`crate::", stringify!($async), "::owned`].")]
            /// `false` once released.
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::owned`], and")]
            /// [`Error::Runtime`] inside an async task.
            pub fn owned(&self) -> Result<bool> {
                match self.0.inner.as_ref() {
                    Some(guard) => block_on(&self.0.runtime, guard.owned())?,
                    None => Ok(false),
                }
            }

            /// Resets the lease (every one, for a multi-lock) to `ttl` from now; see
            #[doc = concat!("[`crate::", stringify!($async), "::extend`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::extend`], and")]
            /// [`Error::Runtime`] inside an async task.
            pub fn extend(&mut self, ttl: Duration) -> Result<()> {
                self.0.block_on_mut(async |g| g.extend(ttl).await)?
            }

            /// Releases the lock (every one, for a multi-lock); see
            #[doc = concat!("[`crate::", stringify!($async), "::release`].")]
            ///
            /// # Errors
            #[doc = concat!("As [`crate::", stringify!($async), "::release`], and")]
            /// [`Error::Runtime`] inside an async task (the release then runs in the
            /// background).
            pub fn release(self) -> Result<()> {
                self.0.release()
            }
        }
    };
}

/// A held lock (blocking); see [`crate::Guard`]. Dropping it releases the lock before the
/// drop returns (bounded by the response timeout), so a program may simply end.
#[must_use = "dropping a Guard releases the lock at once"]
pub struct Guard(Held<crate::Guard>, FencingToken);

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::Guard")
            .field(&self.0.inner)
            .finish()
    }
}

impl Guard {
    /// A leader's note replaced (see [`crate::Leadership::proclaim`]), on the runtime; the
    /// note now recorded.
    ///
    /// # Errors
    /// As [`crate::Leadership::proclaim`]; [`Error::Released`] once released,
    /// [`Error::Runtime`] inside an async task.
    pub(super) fn proclaim(&mut self, note: &str) -> Result<Arc<str>> {
        self.0
            .block_on_mut(async |g| crate::election::proclaim(g, note).await)?
    }

    /// The name of a lease re-entered from one that nobody renews.
    pub(super) fn unrenewed(&self) -> Option<&str> {
        let guard = self.0.inner.as_ref()?;
        (!guard.holding().is_renewed()).then(|| self.name())
    }

    fn inner(&self) -> Option<&crate::Guard> {
        self.0.inner.as_ref()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// See [`crate::Guard::fencing_token`]. The token of this hold, also once it is
    /// released (a late write it fences is refused all the same).
    pub fn fencing_token(&self) -> FencingToken {
        self.1
    }

    /// See [`crate::Guard::valid_until`], as a [`std::time::Instant`] (the clock of
    /// synchronous code). Once the lease is lost or released, a time in the past.
    pub fn valid_until(&self) -> std::time::Instant {
        self.inner().map_or_else(std::time::Instant::now, |guard| {
            guard.valid_until().into_std()
        })
    }

    /// See [`crate::Guard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.inner().map_or(Duration::ZERO, crate::Guard::remaining)
    }

    /// See [`crate::Guard::is_held`].
    pub fn is_held(&self) -> bool {
        self.inner().is_some_and(crate::Guard::is_held)
    }

    /// Hands the lease to another process without releasing it; see
    /// [`crate::Guard::detach`]. Adopt the handle with [`Lock::adopt`](super::Lock::adopt)
    /// (or the async [`crate::Lock::adopt`]) before the lease runs out.
    ///
    /// # Errors
    /// [`Error::Released`] when the guard no longer holds anything to hand on.
    pub fn detach(mut self) -> Result<crate::LeaseHandle> {
        let guard = self.0.inner.take().ok_or_else(|| self.0.released())?;
        Ok(guard.detach())
    }

    /// How the lease's renewal stands now (see [`crate::Guard::health`]): a synchronous
    /// holder checks it between steps of its work, and stops starting new ones while it is
    /// [`LeaseHealth::Retrying`](crate::LeaseHealth::Retrying).
    pub fn health(&self) -> crate::LeaseHealth {
        self.inner().map_or(crate::LeaseHealth::Released, |guard| {
            *guard.health().borrow()
        })
    }
}

held_surface!(Guard(Guard));

impl Hold for Guard {
    type Async = crate::Guard;
    type View = Self;

    fn wrap(guard: crate::Guard, runtime: &Arc<Runtime>) -> Self {
        let fence = guard.fencing_token();
        Self(Held::new(guard.name().into(), guard, runtime), fence)
    }

    fn view(&self) -> &Self {
        self
    }

    fn unrenewed(&self) -> Option<&str> {
        Guard::unrenewed(self)
    }

    fn release(self) -> Result<()> {
        Guard::release(self)
    }
}

/// The write hold of a blocking [`RwLock`](super::RwLock): a [`Guard`] (its whole surface, through
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
        let held = &self.guard.0;
        block_on(&held.runtime, crate::rwlock::downgrade(held.inner()?))??;
        Ok(self.guard)
    }
}

impl Hold for WriteGuard {
    type Async = crate::WriteGuard;
    type View = Guard;

    fn wrap(guard: crate::WriteGuard, runtime: &Arc<Runtime>) -> Self {
        Self {
            guard: Guard::wrap(guard.into_guard(), runtime),
        }
    }

    fn view(&self) -> &Guard {
        &self.guard
    }

    fn unrenewed(&self) -> Option<&str> {
        self.guard.unrenewed()
    }

    fn release(self) -> Result<()> {
        self.guard.release()
    }
}

derefs_to_guard!(WriteGuard);

/// The locks of a blocking [`MultiLock`](super::MultiLock), held together: one lease per
/// name; see [`crate::MultiGuard`]. Dropping it releases every lock before the drop
/// returns (bounded by the response timeout), as a [`Guard`] does.
#[must_use = "dropping a MultiGuard releases its locks at once"]
pub struct MultiGuard(Held<crate::MultiGuard>, Vec<(String, FencingToken)>);

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("blocking::MultiGuard")
            .field(&self.0.inner)
            .finish()
    }
}

impl MultiGuard {
    fn inner(&self) -> Option<&crate::MultiGuard> {
        self.0.inner.as_ref()
    }

    /// One guard per name, in the order they were taken (the names sorted); see
    /// [`crate::MultiGuard::guards`]. These are the async guards: from synchronous code use
    /// their accessors (`name`, `fencing_token`, `is_held`, `remaining`), and this guard
    /// for the rest.
    pub fn guards(&self) -> &[crate::Guard] {
        self.inner().map_or(&[], crate::MultiGuard::guards)
    }

    /// The fencing token of `name`'s lease, or `None` for a name this guard does not hold;
    /// see [`crate::MultiGuard::fencing_token`]. Also once released.
    pub fn fencing_token(&self, name: &str) -> Option<FencingToken> {
        self.1
            .iter()
            .find(|(held, _)| held == name)
            .map(|&(_, token)| token)
    }

    /// Whether every lease is still held, without asking Redis; see
    /// [`crate::MultiGuard::is_held`].
    pub fn is_held(&self) -> bool {
        self.inner().is_some_and(crate::MultiGuard::is_held)
    }

    /// Time left until the first of the leases runs out; see
    /// [`crate::MultiGuard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.inner()
            .map_or(Duration::ZERO, crate::MultiGuard::remaining)
    }
}

held_surface!(MultiGuard(MultiGuard));

impl Hold for MultiGuard {
    type Async = crate::MultiGuard;
    type View = Self;

    fn wrap(guard: crate::MultiGuard, runtime: &Arc<Runtime>) -> Self {
        let names: Vec<&str> = guard.guards().iter().map(crate::Guard::name).collect();
        let tokens = guard
            .guards()
            .iter()
            .map(|g| (g.name().to_owned(), g.fencing_token()))
            .collect();
        Self(Held::new(names.join(",").into(), guard, runtime), tokens)
    }

    fn view(&self) -> &Self {
        self
    }

    fn unrenewed(&self) -> Option<&str> {
        let guard = self.guards().iter().find(|g| !g.holding().is_renewed())?;
        Some(guard.name())
    }

    fn release(self) -> Result<()> {
        self.0.release()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guard whose hold is over (the state its `release` and `Drop` leave behind).
    fn released_guard() -> std::io::Result<Guard> {
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        Ok(Guard(
            Held {
                name: "job".into(),
                inner: None,
                runtime: Arc::new(Runtime::new(runtime)),
            },
            FencingToken::new(7),
        ))
    }

    #[test]
    fn a_released_guard_says_so_with_its_own_error() -> std::io::Result<()> {
        let mut guard = released_guard()?;
        assert_eq!(guard.name(), "job");
        assert_eq!(guard.fencing_token(), FencingToken::new(7));
        assert!(guard.valid_until() <= std::time::Instant::now());
        for result in [guard.lost(), guard.extend(Duration::from_secs(1))] {
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

/// One outstanding count of a blocking [`Latch`](super::Latch): a renewed lease, counted
/// down by [`count_down`](Count::count_down) or by its drop, before the drop returns.
#[must_use = "dropping a count counts it down at once"]
#[derive(Debug)]
pub struct Count(Guard);

impl Count {
    pub(super) fn wrap(count: crate::Count, runtime: &Arc<Runtime>) -> Self {
        Self(Guard::wrap(count.into_guard(), runtime))
    }

    /// The count's fencing token.
    pub fn fencing_token(&self) -> FencingToken {
        self.0.fencing_token()
    }

    /// Time left on the count's lease as far as this client can tell.
    pub fn remaining(&self) -> Duration {
        self.0.remaining()
    }

    /// Whether the count's lease is still live as far as this client can tell.
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// The lease behind the count (health, loss).
    pub fn guard(&self) -> &Guard {
        &self.0
    }

    /// Counts down; see [`crate::Count::count_down`].
    ///
    /// # Errors
    /// As [`crate::Count::count_down`], and [`Error::Runtime`] inside an async task.
    pub fn count_down(self) -> Result<()> {
        self.0.release()
    }
}
