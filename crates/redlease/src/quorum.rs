//! Redlock: one lock over N independent Redis primaries, held when a majority grants it.
//!
//! Every operation goes to all N nodes **concurrently**, each bounded by a per-node timeout
//! (the client's response timeout, at most a tenth of the lease), so one slow or dead node
//! costs at most that bound and latency stays close to one node's.
//!
//! - **Acquire** runs the single-node acquire script on every node. It succeeds when a
//!   majority (`N/2 + 1`) granted it *and* the lease is still valid when the last answer
//!   came: `sent + ttl - drift` is in the future, `drift = ttl/100 + 2 ms`. Otherwise it
//!   releases on every node (including those that did not answer: their outcome is
//!   unknown) and reports the lock busy, so the caller retries with jitter; with fewer
//!   than a majority of nodes answering at all it fails with
//!   [`Error::NoQuorum`] at once.
//! - **Release, extend and renewal** also go to every node; they count as done when a
//!   majority confirms, and as lost when so many nodes report another token (or none)
//!   that no majority can still hold ours.
//!
//! # Fencing tokens over a quorum
//! Each node keeps its own counter and increments it on every grant. The holder's token
//! is the **largest** counter among the granting majority, and before `acquire` returns
//! at least a majority of nodes hold a counter at or above it: granting nodes whose
//! counter is lower get it written back (`raise_fence.lua`: raise, never lower), a second
//! round trip that the steady state (all counters equal) skips. The write-back goes only
//! to nodes that granted this attempt and counts only where the lock key still holds our
//! owner token; the lease must still be valid once it is done. Any later majority shares
//! at least one node with ours, whose counter is then at least our token, and increments
//! it: the later token is strictly larger. Tokens therefore stay strictly monotonic even
//! when two successive majorities overlap in a single node.
//!
//! The model in `crates/redlease-model` (stateright) checks this under clock drift,
//! pauses, node crashes and lost messages. An earlier version wrote back to every node
//! behind and counted every confirmation; the model found runs in which two holders got
//! the same token (after a crash of a node that persists everything, or one lost
//! message), which the current rule excludes. It also shows what no token can prevent:
//! a holder paused past its lease still believes it holds the lock (the unfenced
//! overlap), so the protected resource must check tokens.
//!
//! Limits: the argument assumes a node keeps what it acknowledged. A node that restarts
//! **empty** (no persistence, or `appendfsync` other than `always`) forgets both the lock
//! and its counter. Redlock's rule for the lock itself is to keep such a node down for
//! at least the longest TTL before it rejoins (the *delayed restart*); the counter needs
//! persistence, or a restarted node's counter raised by hand above every token issued.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    AcquireArgs, Deployment, RenewItem, Reply, acquire_on, extend_on, fan_out, release_on, renew_on,
};
use crate::error::{Error, Result};
use crate::guard::drift;
use crate::keys::LockKeys;
use crate::scripts;

/// One attempt on every node.
pub(crate) async fn acquire(
    deployment: &Deployment,
    keys: &LockKeys,
    args: &AcquireArgs<'_>,
) -> Result<Reply> {
    let needed = deployment.majority();
    let sent = Instant::now();
    let ttl = Duration::from_millis(args.ttl_ms);
    let node_timeout = node_timeout(deployment, args.ttl_ms);
    // Queues are per node and could hand the lock to different waiters: quorum waiters
    // listen for release notices instead (see `crate::wake`).
    let args = AcquireArgs {
        queue: None,
        ..*args
    };
    let replies = fan_out(
        deployment
            .nodes
            .iter()
            .map(|node| acquire_on(node, keys, &args)),
        node_timeout,
    )
    .await;
    let mut granted = 0;
    let mut fence = 0;
    let mut fences = vec![None; replies.len()];
    let mut answered = 0;
    let mut holder_pttl = -1;
    // A node that already held our token (a retried attempt) keeps the expiry an earlier
    // attempt set: the lease must then be dated from that attempt, not this one.
    let mut leftover = false;
    for (i, reply) in replies.iter().enumerate() {
        match reply {
            Ok(Reply::Fresh(f) | Reply::Ours(f)) => {
                leftover |= matches!(reply, Ok(Reply::Ours(_)));
                granted += 1;
                answered += 1;
                fence = fence.max(*f);
                fences[i] = Some(*f);
            }
            Ok(Reply::Busy(pttl)) => {
                answered += 1;
                holder_pttl = holder_pttl.max(*pttl);
            }
            Err(e) => tracing::debug!(error = %e, "a quorum node did not grant the lock"),
        }
    }
    let valid = || Instant::now() < sent + ttl.saturating_sub(drift(ttl));
    if granted >= needed && valid() {
        // Nodes whose counter already reached the token need no write-back; in the steady
        // state (every node saw every grant) that is all of them, and acquire costs one
        // round trip. Otherwise the token is written back to the other nodes that granted
        // this attempt, and counts only where the key is still ours.
        let at_fence = fences.iter().filter(|f| **f == Some(fence)).count();
        let behind: Vec<usize> = (0..fences.len())
            .filter(|&i| fences[i].is_some_and(|f| f < fence))
            .collect();
        let recorded = at_fence >= needed
            || at_fence
                + raise_fence(deployment, keys, fence, args.token, &behind, node_timeout).await
                >= needed;
        // The write-back took time: the lease must still be valid after it.
        if recorded && valid() {
            return Ok(if leftover {
                Reply::Ours(fence)
            } else {
                Reply::Fresh(fence)
            });
        }
        tracing::debug!("could not record the fencing token on a majority in time; giving back");
    }
    if granted > 0 || answered < replies.len() {
        // Give back what this attempt took, and whatever an unanswered node may hold.
        let _ = release(deployment, keys, args.token).await;
    }
    if answered < needed {
        return Err(Error::NoQuorum {
            acquired: granted,
            needed,
        });
    }
    Ok(Reply::Busy(holder_pttl))
}

/// The shortest per-node bound, however short the lease.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(5);

/// How long an acquisition, extension or renewal with this lease waits for one node: a
/// tenth of the lease, at most the response timeout. A silent node (down, partitioned)
/// then costs a small part of the lease, while the majority's answers are already in;
/// waiting a whole response timeout for it could outlast the lease being renewed.
fn node_timeout(deployment: &Deployment, ttl_ms: u64) -> Duration {
    deployment
        .response_timeout
        .min(Duration::from_millis(ttl_ms) / 10)
        .max(MIN_NODE_TIMEOUT)
}

/// Writes `fence` back to the counters of the nodes at `indexes` (nodes that granted this
/// attempt); how many confirmed while their lock key still held `token`.
async fn raise_fence(
    deployment: &Deployment,
    keys: &LockKeys,
    fence: u64,
    token: &str,
    indexes: &[usize],
    timeout: Duration,
) -> usize {
    let replies = fan_out(
        indexes
            .iter()
            .map(|&i| &deployment.nodes[i])
            .map(|node| async move {
                let mut invocation = scripts::RAISE_FENCE.key(&keys.fence);
                invocation.key(&keys.key).arg(fence).arg(token);
                node.invoke::<u64>(&invocation).await
            }),
        timeout,
    )
    .await;
    replies.iter().filter(|r| matches!(r, Ok(1))).count()
}

/// Release on every node: `Ok(true)` when a majority still held our token.
pub(crate) async fn release(deployment: &Deployment, keys: &LockKeys, token: &str) -> Result<bool> {
    let replies = fan_out(
        deployment
            .nodes
            .iter()
            .map(|node| release_on(node, keys, token, deployment.announces())),
        deployment.response_timeout,
    )
    .await;
    settle(deployment, keys, "releasing a lock", replies)
}

/// Extend on every node: `Ok(true)` when a majority still held our token.
pub(crate) async fn extend(
    deployment: &Deployment,
    keys: &LockKeys,
    token: &str,
    ttl_ms: u64,
) -> Result<bool> {
    let replies = fan_out(
        deployment
            .nodes
            .iter()
            .map(|node| extend_on(node, keys, token, ttl_ms)),
        node_timeout(deployment, ttl_ms),
    )
    .await;
    settle(deployment, keys, "extending a lock", replies)
}

/// A majority confirmed: true; so many said "not yours" that no majority can: false;
/// otherwise the outcome is unknown: the first node error.
fn settle(
    deployment: &Deployment,
    keys: &LockKeys,
    action: &'static str,
    replies: Vec<redis::RedisResult<bool>>,
) -> Result<bool> {
    let needed = deployment.majority();
    let yes = replies.iter().filter(|r| matches!(r, Ok(true))).count();
    let no = replies.iter().filter(|r| matches!(r, Ok(false))).count();
    if yes >= needed {
        return Ok(true);
    }
    if replies.len() - no < needed {
        return Ok(false);
    }
    match replies.into_iter().find_map(std::result::Result::err) {
        Some(e) => Err(Error::redis(action, &keys.key, e)),
        None => Ok(false),
    }
}

/// Renews `batch` on every node; per lease as [`Deployment::renew`].
pub(crate) async fn renew(deployment: &Deployment, batch: &[RenewItem<'_>]) -> Vec<Option<bool>> {
    let needed = deployment.majority();
    let replies = fan_out(
        deployment.nodes.iter().map(|node| renew_on(node, batch)),
        node_timeout(
            deployment,
            batch
                .iter()
                .map(|item| item.ttl_ms)
                .min()
                .unwrap_or(u64::MAX),
        ),
    )
    .await;
    (0..batch.len())
        .map(|i| {
            let yes = replies
                .iter()
                .filter(|r| matches!(r, Ok(v) if v.get(i) == Some(&true)))
                .count();
            let no = replies
                .iter()
                .filter(|r| matches!(r, Ok(v) if v.get(i) == Some(&false)))
                .count();
            if yes >= needed {
                Some(true)
            } else if replies.len() - no < needed {
                Some(false)
            } else {
                None
            }
        })
        .collect()
}
