//! Giving back what a quorum attempt may hold: on the nodes that granted, and in the
//! background on those whose outcome is unknown, each in its turn.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::RedisResult;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::deployment::Deployment;
use crate::backend::node::Conn;
use crate::keys::LockKeys;
use crate::replies::{self, Reply};
use crate::scripts::{self, AcquireArgs, Join, Kind};

use super::turns::{Turn, TurnKey};

/// The release script on one node in the background, bounded by `timeout`.
pub(super) async fn give_back_on(
    shared: &OwnedAttempt,
    conn: Conn,
    node: usize,
    timeout: Duration,
) {
    let released = tokio::time::timeout(timeout, shared.release.on(conn)).await;
    if !matches!(released, Ok(Ok(_))) {
        tracing::debug!(node, "a late quorum node did not confirm a give-back");
    }
}

/// Whether a request that failed with `e` may still have run on its node: not when the
/// node refused the connection (nothing was sent) or answered with an error (the script
/// ran and took nothing). Only then does it need a give-back, which the next attempt to
/// that node must wait for.
pub(super) fn may_have_run(e: &redis::RedisError) -> bool {
    crate::error::is_connection_error(e) && !e.is_connection_refusal()
}

/// An attempt's calls, owned, for the requests it leaves to the background: built once,
/// the same on every node (building them per node was 8% of a quorum pair's client
/// instructions).
pub(super) struct OwnedAttempt {
    /// The acquire script (without queueing).
    call: scripts::Call,
    release: Release,
}

impl OwnedAttempt {
    pub(super) fn of(deployment: &Deployment, keys: &LockKeys, args: &AcquireArgs<'_>) -> Self {
        let join = match args.join {
            Join::Listen { linger_ms } => Join::Listen { linger_ms },
            Join::No | Join::Leave | Join::Grants { .. } | Join::Silent { .. } => Join::No,
        };
        let call = scripts::acquire(
            keys,
            &AcquireArgs {
                join,
                fence_step: scripts::QUORUM_FENCE_STEP,
                notices: deployment.announces(),
                fence_keep: deployment.fence_keep.as_deref(),
                ..*args
            },
        );
        Self {
            call,
            release: Release::new(deployment, keys, args.kind, args.token),
        }
    }

    /// The acquire script over one node's connection.
    pub(super) async fn acquire(&self, mut conn: Conn) -> RedisResult<Reply> {
        replies::acquire(&self.call.invoke_async(&mut conn).await?)
    }
}

/// The release script of one token, the same call on every node.
pub(super) struct Release {
    call: scripts::Call,
    kind: Kind,
}

impl Release {
    fn new(deployment: &Deployment, keys: &LockKeys, kind: Kind, token: &str) -> Self {
        let call = scripts::release(
            keys,
            kind,
            token,
            deployment.announces(),
            None,
            deployment.fence_keep.as_deref(),
        );
        Self { call, kind }
    }

    /// The release script over one node's connection.
    async fn on(&self, mut conn: Conn) -> RedisResult<bool> {
        // A quorum queues nobody, so nothing is handed on.
        replies::released(
            scripts::release_name(self.kind),
            &self.call.invoke_async(&mut conn).await?,
        )
        .map(|released| released.was_held())
    }
}

/// Gives back a failed attempt's grants: awaited on the nodes that granted (`took`),
/// within `bound`; in the background on the nodes whose outcome is `unknown`.
pub(super) async fn give_back_attempt(
    deployment: &Deployment,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    took: &[usize],
    unknown: &[usize],
    bound: Duration,
) {
    if took.is_empty() && unknown.is_empty() {
        return;
    }
    let all: Vec<usize> = took.iter().chain(unknown).copied().collect();
    let mut results = give_back(deployment, keys, kind, token, &all);
    let mut left = took.len();
    let bound = Instant::now() + bound;
    while left > 0 {
        match tokio::time::timeout_at(bound, results.recv()).await {
            Ok(Some((i, _))) if took.contains(&i) => left -= 1,
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => break,
        }
    }
}

/// A node's reply that did not come within the per-node bound.
pub(super) fn late() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "node did not answer in time",
    ))
}

/// Runs the release script on the nodes at `indexes`, each in its turn (see [`Turn`]),
/// in a task of its own (each node bounded by the response timeout), so that it
/// completes even when the caller stops waiting; the results arrive on the returned
/// channel as they come.
pub(super) fn give_back(
    deployment: &Deployment,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    indexes: &[usize],
) -> mpsc::UnboundedReceiver<(usize, RedisResult<bool>)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let timeout = deployment.response_timeout;
    let shared = Arc::new(Release::new(deployment, keys, kind, token));
    let mut releases: FuturesUnordered<_> = indexes
        .iter()
        .filter_map(|&i| Some((i, deployment.nodes.get(i)?)))
        .map(|(i, node)| {
            let mut turn = Turn::take(TurnKey::new(deployment, i, token));
            let conn = node.conn();
            let shared = Arc::clone(&shared);
            async move {
                turn.wait().await;
                let result = tokio::time::timeout(timeout, shared.on(conn))
                    .await
                    .unwrap_or_else(|_| Err(late()));
                drop(turn);
                (i, result)
            }
        })
        .collect();
    let run = async move {
        while let Some((i, result)) = releases.next().await {
            if let Err(e) = &result {
                tracing::debug!(node = i, error = %e, "a quorum node did not confirm a give-back");
            }
            let _ = tx.send((i, result));
        }
    };
    // Tracked, so that `Client::shutdown` waits for the nodes that had not answered.
    if !deployment.background(run) {
        tracing::debug!("no runtime to give back on; the leases expire by themselves");
    }
    rx
}
