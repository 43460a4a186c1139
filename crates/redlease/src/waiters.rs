//! The acquisitions of an engine that are waiting right now ([`Waiters`]), so that
//! [`Client::shutdown`](crate::Client::shutdown) can end them and withdraw their queue
//! places: a waiter's place outlives its process by the queue's linger (minutes), and a
//! hand-off skips a dead place only when it comes to it.

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;

use crate::keys::LockKeys;
use crate::scripts::Kind;
use crate::token::OwnerToken;

/// What a waiting acquisition may have left in Redis under its token, and how to end it.
struct Entry {
    keys: Arc<LockKeys>,
    kind: Kind,
    token: OwnerToken,
    ended: CancellationToken,
}

/// The waiting acquisitions of one engine.
#[derive(Default)]
pub(crate) struct Waiters {
    next: AtomicU64,
    live: Mutex<HashMap<u64, Entry>>,
}

/// A waiting acquisition's entry in its engine's [`Waiters`], removed on drop.
pub(crate) struct Waiting<'a> {
    waiters: &'a Waiters,
    id: u64,
    ended: CancellationToken,
}

/// What a waiting acquisition ended by [`Waiters::end_all`] may have left in Redis: the
/// token of its lease of `kind` at `keys`.
pub(crate) struct Ended {
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) kind: Kind,
    pub(crate) token: OwnerToken,
}

impl Waiters {
    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // Single inserts and removes: a panic cannot leave the map inconsistent.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an acquisition of a lease of `kind` at `keys` for `token`, waiting from now
    /// until the entry is dropped.
    pub(crate) fn enter(
        &self,
        keys: &Arc<LockKeys>,
        kind: Kind,
        token: &OwnerToken,
    ) -> Waiting<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let ended = CancellationToken::new();
        self.live().insert(
            id,
            Entry {
                keys: Arc::clone(keys),
                kind,
                token: token.clone(),
                ended: ended.clone(),
            },
        );
        Waiting {
            waiters: self,
            id,
            ended,
        }
    }

    /// Ends every acquisition waiting now (each one's [`Waiting::ended`] resolves) and
    /// returns what they may have left in Redis, for the caller to give back.
    pub(crate) fn end_all(&self) -> Vec<Ended> {
        let entries: Vec<Entry> = self.live().drain().map(|(_, entry)| entry).collect();
        entries
            .into_iter()
            .map(|entry| {
                entry.ended.cancel();
                Ended {
                    keys: entry.keys,
                    kind: entry.kind,
                    token: entry.token,
                }
            })
            .collect()
    }
}

impl Waiting<'_> {
    /// Resolves once [`Waiters::end_all`] ended this acquisition.
    pub(crate) async fn ended(&self) {
        self.ended.cancelled().await;
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.waiters.live().remove(&self.id);
    }
}
