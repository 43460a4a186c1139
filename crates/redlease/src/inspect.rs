//! [`Client::inspect`] and [`Client::force_release`]: what operators ask of a name (who
//! holds it, for how long, who waits and since when, how far its fencing counter went),
//! and the way out when a holder cannot release. `redlease status`, `list` and `release
//! --force` are these calls.

use std::sync::Arc;

use crate::client::Client;
use crate::error::{INSPECTING, REMOVING_HOLDS, Result};
use crate::keys::{LockKeys, Primitive};
use crate::scripts::Kind;
use crate::snapshot::{self, Inspection, NodeSnapshot};
use crate::token::OwnerToken;

impl Client {
    /// Reads the state of the lock, semaphore or read-write lock named `name` (under the
    /// client's key prefix, [`ClientBuilder::prefix`](crate::ClientBuilder::prefix), by
    /// default [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX); see [`Client::inspect_keys`] for
    /// another):
    /// its holders with their details and time left, its queued waiters with how long
    /// they have waited, and its fencing counter. Nothing is taken or changed, and plain
    /// read commands suffice (`GET`, `PTTL`, `TYPE`, `TIME`, `LRANGE`, `HGET`, `HGETALL`,
    /// `ZRANGE`): an operator's read-only ACL user can inspect.
    ///
    /// Waiters are those queued for a hand-off: a quorum's waiters (which listen for
    /// release notices instead) and a Cluster semaphore's waiters (which retry) hold no
    /// place and are not listed.
    ///
    /// Tokens are shown by their first hex digits only. Over a quorum every node is read:
    /// [`Inspection::nodes`] has each node's answer, [`Inspection::snapshot`] what a
    /// majority of them agree on.
    ///
    /// # Errors
    /// [`Error::InvalidName`](crate::Error::InvalidName) for an empty or oversized name;
    /// [`Error::WrongType`](crate::Error::WrongType) when the key holds something that is
    /// no redlease primitive; [`Error::NoQuorum`](crate::Error::NoQuorum) when fewer than a
    /// majority of a quorum's nodes answer; [`Error::Redis`](crate::Error::Redis) when
    /// Redis cannot be reached or refuses a read (an ACL without it).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    ///
    /// # Examples
    /// ```no_run
    /// # async fn example() -> redlease::Result<()> {
    /// let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
    /// let state = client.inspect("nightly-report").await?.snapshot;
    /// for holder in &state.holders {
    ///     println!("held by {}… ({:?} left)", holder.token_prefix, holder.remaining);
    /// }
    /// println!("{} waiting", state.waiters.len());
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: impl AsRef<str>) -> Result<Inspection> {
        self.inspect_keys(&self.keys_of(name.as_ref())?).await
    }

    /// As [`Client::inspect`], for the name whose keys are `keys` (any prefix:
    /// `LockKeys::new(prefix, name)`).
    ///
    /// # Errors
    /// As [`Client::inspect`].
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn inspect_keys(&self, keys: &LockKeys) -> Result<Inspection> {
        self.read(keys, false).await
    }

    /// Removes every hold on the lock, semaphore or read-write lock named `name` (under
    /// the client's key prefix, as [`Client::inspect`]; see [`Client::force_release_keys`]
    /// for another), whoever holds it, and returns what it removed.
    ///
    /// # Errors
    /// As [`Client::force_release_keys`].
    ///
    /// # Cancel safety
    /// As [`Client::force_release_keys`].
    pub async fn force_release(&self, name: impl AsRef<str>) -> Result<Inspection> {
        self.force_release_keys(&self.keys_of(name.as_ref())?).await
    }

    /// Removes every hold on the name of `keys`, whoever holds it, and returns what it
    /// removed (read in the same round trip, just before). For operators, when a holder
    /// is stuck and cannot release: it breaks mutual exclusion if the holder is alive and
    /// working, so prefer waiting for its lease to run out.
    ///
    /// The fencing counter stays (the next holder still gets a larger token), and so do
    /// the queue and a semaphore's permit count: a lock's oldest queued waiter is handed
    /// it at once. The old
    /// holders are not told: each finds its lease lost at its next renewal. Over a quorum
    /// the holds are removed on every node that answers ([`Inspection::nodes`] says what
    /// each removed).
    ///
    /// # Errors
    /// As [`Client::inspect`]; over a quorum, [`Error::NoQuorum`](crate::Error::NoQuorum)
    /// only when no node answered.
    ///
    /// # Cancel safety
    /// Not cancel safe: cancelled after it was sent, the holds may be gone unreported.
    pub async fn force_release_keys(&self, keys: &LockKeys) -> Result<Inspection> {
        let inspection = self.read(keys, true).await?;
        for holder in &inspection.snapshot.holders {
            tracing::warn!(key = %keys.key(), token = %holder.token_prefix, "hold removed by force");
        }
        let snapshot = &inspection.snapshot;
        if snapshot.primitive == Some(Primitive::Lock) && !snapshot.waiters.is_empty() {
            self.serve_queue(keys).await;
        }
        Ok(inspection)
    }

    /// Hands the free lock of `keys` to its oldest queued waiter (which otherwise re-checks
    /// only when the removed holder's lease would have ended): the release script, for a
    /// token that holds nothing, serves the queue of a free lock.
    async fn serve_queue(&self, keys: &LockKeys) {
        let engine = &self.engine;
        let token = match OwnerToken::generate() {
            Ok(token) => token,
            Err(e) => {
                tracing::debug!(error = %e, "no token to serve the queue with; its waiters re-check by themselves");
                return;
            }
        };
        let keys = Arc::new(keys.clone());
        match engine
            .release_script(&keys, Kind::Mutex, token.secret())
            .await
        {
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "could not serve the queue; its waiters re-check by themselves");
            }
        }
    }

    /// The keys of `name` under the client's prefix (whichever primitive it is: the key
    /// `K` is the same, and the reads find out which).
    fn keys_of(&self, name: &str) -> Result<LockKeys> {
        LockKeys::new(&self.engine.defaults.prefix, name)
    }

    async fn read(&self, keys: &LockKeys, remove: bool) -> Result<Inspection> {
        let deployment = &self.engine.deployment;
        let mut answers = deployment.inspect(keys, remove).await;
        let key = keys.key().to_owned();
        let action = if remove { REMOVING_HOLDS } else { INSPECTING };
        let error = |e| deployment.error(action, &key, e);
        if !deployment.is_quorum() {
            let snapshot = match answers.pop() {
                Some((_, answer)) => answer.map_err(error)?.snapshot(),
                None => snapshot::Snapshot::default(),
            };
            return Ok(Inspection {
                key,
                snapshot,
                nodes: Vec::new(),
            });
        }
        let agreed = snapshot::agree(&answers, deployment.majority(), remove)?;
        let nodes = answers
            .into_iter()
            .map(|(node, answer)| NodeSnapshot {
                node,
                snapshot: answer.map(snapshot::Reading::snapshot).map_err(error),
            })
            .collect();
        Ok(Inspection {
            key,
            snapshot: agreed.snapshot(),
            nodes,
        })
    }
}
