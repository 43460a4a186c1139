//! [`Guard`]: proof of a held lock, with its fencing token and validity.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::lock::{ttl_millis, validate_ttl};
use crate::scripts;
use crate::token::{FencingToken, OwnerToken};

/// The safety margin subtracted from every lease: `ttl / 100 + 2 ms`, the Redlock rule for
/// clock drift between this process and Redis.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// A held lock.
///
/// Release it with [`release`](Guard::release) to learn whether mutual exclusion held.
/// Dropping a guard instead releases the lock in the background when a tokio runtime is
/// running (else the lease simply expires after its TTL); any error is then only logged.
#[must_use = "dropping a Guard releases the lock at once"]
pub struct Guard {
    held: Held,
    /// Set once released, so that `Drop` does nothing.
    done: bool,
}

#[derive(Clone)]
pub(crate) struct Held {
    pub(crate) client: Client,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: OwnerToken,
    pub(crate) fence: FencingToken,
    pub(crate) valid_until: Instant,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.held.name)
            .field("token", &self.held.token)
            .field("fencing_token", &self.held.fence)
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}

impl Guard {
    pub(crate) fn new(held: Held) -> Self {
        tracing::debug!(lock = %held.name, token = %held.token, fence = %held.fence, "acquired");
        Self { held, done: false }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.held.name
    }

    /// The fencing token of this acquisition: greater than that of every earlier
    /// acquisition of the same name on this deployment.
    pub fn fencing_token(&self) -> FencingToken {
        self.held.fence
    }

    /// The instant until which the lease is certainly ours: measured from when the request
    /// that set it was *sent*, minus [`drift`]. Work that must be exclusive must finish
    /// before it, or [`extend`](Guard::extend) the lease first.
    pub fn valid_until(&self) -> Instant {
        self.held.valid_until
    }

    /// Time left until [`valid_until`](Guard::valid_until), zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.held
            .valid_until
            .saturating_duration_since(Instant::now())
    }

    /// Resets the lease to `ttl` from now, if the lock still holds our token.
    ///
    /// # Errors
    /// [`Error::Lost`] when the lock no longer holds our token; [`Error::InvalidOption`]
    /// for a zero or huge `ttl`; [`Error::Redis`] when Redis could not be asked (the lease
    /// then runs on unchanged).
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the lease is either extended or unchanged, and
    /// [`valid_until`](Guard::valid_until) keeps its old, safe value.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let held = &self.held;
        let sent = Instant::now();
        let extended: i64 = scripts::EXTEND
            .key(&held.keys.key)
            .key(&held.keys.holder)
            .arg(held.token.secret())
            .arg(ttl_millis(ttl))
            .invoke_async(&mut held.client.conn())
            .await
            .map_err(|e| Error::redis("extending a lock", &held.keys.key, e))?;
        if extended != 1 {
            return Err(lost(&held.name));
        }
        self.held.valid_until = sent + ttl - drift(ttl);
        Ok(())
    }

    /// Releases the lock (and hands it to the oldest waiter, if any).
    ///
    /// # Errors
    /// [`Error::Lost`] when the lock did not hold our token any more: the lease expired or
    /// another owner took it, so the work done under it may have overlapped with another
    /// holder's. [`Error::Redis`] when Redis could not be reached: the lease then expires
    /// by itself.
    ///
    /// # Cancel safety
    /// If dropped before it completes, the release may or may not have happened; the lease
    /// expires by itself in the latter case.
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        release_held(&self.held).await
    }
}

pub(crate) fn lost(name: &str) -> Error {
    tracing::warn!(lock = %name, "lock lost");
    Error::Lost {
        name: name.to_owned(),
    }
}

/// Runs the release script for `token` (also withdraws it from the waiter queue).
/// Returns whether the lock held the token.
pub(crate) async fn release_token(
    client: &Client,
    keys: &LockKeys,
    token: &OwnerToken,
) -> Result<bool> {
    let released: i64 = scripts::RELEASE
        .key(&keys.script_keys()[..])
        .arg(token.secret())
        .arg(&keys.channel)
        .invoke_async(&mut client.conn())
        .await
        .map_err(|e| Error::redis("releasing a lock", &keys.key, e))?;
    Ok(released == 1)
}

async fn release_held(held: &Held) -> Result<()> {
    if release_token(&held.client, &held.keys, &held.token).await? {
        tracing::debug!(lock = %held.name, "released");
        Ok(())
    } else {
        Err(lost(&held.name))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let held = self.held.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let span = tracing::debug_span!("release on drop", lock = %held.name);
                runtime.spawn(
                    async move {
                        if let Err(e) = release_held(&held).await {
                            tracing::warn!(error = %e, "background release failed");
                        }
                    }
                    .instrument(span),
                );
            }
            Err(_) => {
                tracing::debug!(lock = %held.name, "guard dropped outside a runtime; the lease will expire");
            }
        }
    }
}
