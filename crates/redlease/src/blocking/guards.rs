//! The blocking guards, released before their `Drop` returns.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::guard::derefs_to_guard;
use crate::token::FencingToken;

use super::runtime::{block_on, inside_runtime};

/// A blocking guard, made from its async twin.
pub(super) trait Hold: Sized {
    /// The async guard.
    type Async;

    fn wrap(guard: Self::Async, runtime: &Arc<Runtime>) -> Self;

    /// What `run` hands to its work.
    fn guard(&self) -> &Guard;

    fn release(self) -> Result<()>;
}

/// A permit of a blocking [`Semaphore`](super::Semaphore): a [`Guard`], released before its drop returns.
pub type Permit = Guard;

/// A read hold of a blocking [`RwLock`](super::RwLock): a [`Guard`], released before its drop returns.
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
    /// Whether the lease was re-entered from one that nobody renews.
    pub(super) fn is_unrenewed(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|g| !g.holding().is_renewed())
    }

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
