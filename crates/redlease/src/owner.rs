//! Owners: who holds a lock, for reentrancy.
//!
//! A thread is not an owner in async Rust (a task moves between threads at every
//! `.await`), and neither is a task by itself. An owner is explicit:
//!
//! - an [`Owner`] handle, passed to [`Lock::owner`](crate::Lock::owner), or
//! - the task-local scope [`Owner::scope`] sets up: every acquisition inside the scope's
//!   future, across all its `.await` points, acts for that owner.
//!
//! [`Lock::run`](crate::Lock::run) opens a scope for its closure (or joins the one it runs
//! in), so a nested `run` or `acquire` of the same lock inside it re-enters.
//! A task started with `tokio::spawn` inside a scope is **not** the same owner: task-locals
//! do not cross `spawn`. Hand it the handle (`Owner::current()`) to make it one.
//!
//! A nested acquisition by the same owner succeeds at once, without a round trip; it
//! shares the outer lease (its fencing token, TTL, renewal, `max_hold` and `min_replicas`:
//! the nested `Lock`'s own options are not applied), and the lock is given back when the
//! last guard of that lease is released or dropped. A nested
//! [`Lock::run`](crate::Lock::run) refuses to re-enter a lease that is not renewed.

use hashbrown::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::engine::{Engine, Holding};
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts::Kind;

tokio::task_local! {
    static CURRENT: Owner;
}

/// A lock owner for reentrancy: acquisitions made for the same owner re-enter locks it
/// already holds. Cheap to clone; clones are the same owner.
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> redlease::Result<()> {
/// use redlease::Owner;
/// Owner::new()
///     .scope(async {
///         let outer = client.lock("account:7").acquire().await?;
///         // Same owner (the scope): no round trip, same fencing token.
///         let inner = client.lock("account:7").acquire().await?;
///         assert_eq!(inner.fencing_token(), outer.fencing_token());
///         inner.release().await?; // the lock is still held
///         outer.release().await // now it is given back
///     })
///     .await
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Owner {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// One slot per (deployment, lock key). The async mutex serialises fresh acquisitions
    /// of one lock by this owner, so two of its tasks never race for it with two tokens.
    slots: Mutex<HashMap<SlotKey, Arc<tokio::sync::Mutex<Weak<Holding>>>>>,
}

/// (the client's identity, the lock key).
type SlotKey = (usize, String);

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner")
            .field("id", &Arc::as_ptr(&self.inner))
            .finish_non_exhaustive()
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Owner {}

impl Owner {
    /// A new owner, distinct from every other.
    pub fn new() -> Self {
        Self::default()
    }

    /// The owner of the scope the current task runs in, if any.
    pub fn current() -> Option<Self> {
        CURRENT.try_with(Clone::clone).ok()
    }

    /// Runs `future` with this owner as the task-local owner of every acquisition in it.
    ///
    /// # Cancel safety
    /// As cancel safe as `future`.
    pub async fn scope<F: Future>(self, future: F) -> F::Output {
        CURRENT.scope(self, future).await
    }

    /// Runs `f` with this owner as the owner of every acquisition in it (for synchronous
    /// code, e.g. the [`blocking`](crate::blocking) API).
    pub fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CURRENT.sync_scope(self, f)
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<SlotKey, Arc<tokio::sync::Mutex<Weak<Holding>>>>> {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn slot(&self, key: &SlotKey) -> Arc<tokio::sync::Mutex<Weak<Holding>>> {
        let mut slots = self.slots();
        if slots.len() >= 64 {
            // Forget locks no longer held and not being acquired.
            slots.retain(|_, slot| {
                Arc::strong_count(slot) > 1
                    || slot.try_lock().map_or(true, |w| w.strong_count() > 0)
            });
        }
        Arc::clone(slots.entry(key.clone()).or_default())
    }

    /// Re-enters the lock if this owner holds it, else acquires it with `fresh` and
    /// remembers the lease. `fresh` returning `Ok(None)` (busy) is passed through.
    ///
    /// Another task of this owner acquiring the same lock makes this one wait for it (so
    /// that one owner never races itself with two tokens), but no later than `deadline`:
    /// then the lock counts as busy (`Ok(None)`). `None` waits as long as it takes.
    pub(crate) async fn hold<F>(
        &self,
        engine: &Engine,
        keys: &LockKeys,
        kind: Kind,
        deadline: Option<tokio::time::Instant>,
        fresh: F,
    ) -> Result<Option<Arc<Holding>>>
    where
        F: Future<Output = Result<Option<Arc<Holding>>>>,
    {
        let key = (engine.id(), keys.key.clone());
        let slot = self.slot(&key);
        let mut held = match deadline {
            Some(deadline) => {
                let Ok(held) = tokio::time::timeout_at(deadline, slot.lock()).await else {
                    tracing::debug!(lock = %keys.key, "another task of this owner is acquiring the lock; the wait ran out behind it");
                    return Ok(None);
                };
                held
            }
            None => slot.lock().await,
        };
        if let Some(holding) = held.upgrade() {
            let holds = holding.lease.kind();
            if holds == Kind::Read && kind == Kind::Write && holding.lease.is_held() {
                return Err(Error::Upgrade {
                    name: holding.lease.name.to_string(),
                });
            }
            // The same kind re-enters; so does a read inside the owner's write hold (the
            // write covers reading), and fewer permits of a semaphore inside the owner's
            // hold of more (see `Kind::covers`). Another primitive of the same name does not: its own
            // acquisition reports the conflict.
            if holds.covers(kind) && holding.enter() {
                tracing::trace!(lock = %holding.lease.name, "re-entered");
                return Ok(Some(holding));
            }
        }
        let holding = fresh.await?;
        if let Some(holding) = &holding {
            *held = Arc::downgrade(holding);
        }
        Ok(holding)
    }
}
