//! What the holder of a quorum lock asks of every node (release, extend, renew, proclaim,
//! downgrade), and how a majority's answers settle it.

use std::time::Duration;

use redis::RedisResult;
use tokio::time::Instant;

use crate::backend::deployment::Deployment;
use crate::backend::node::{downgrade_on, extend_on, fan_out, proclaim_on, renew_on};
use crate::error::Result;
use crate::keys::LockKeys;
use crate::scripts::{Kind, RenewItem};

use super::give_back::{give_back, late};

/// The shortest per-node bound, however short the lease.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(5);

/// How long an acquisition, extension or renewal with this lease waits for one node: a
/// tenth of the lease, at most the response timeout. A silent node (down, partitioned)
/// then costs a small part of the lease, while the majority's answers are already in;
/// waiting a whole response timeout for it could outlast the lease being renewed.
pub(super) fn node_timeout(deployment: &Deployment, ttl_ms: u64) -> Duration {
    deployment
        .response_timeout
        .min(Duration::from_millis(ttl_ms) / 10)
        .max(MIN_NODE_TIMEOUT)
}

/// Release on every node: `Ok(true)` when a majority still held our token.
///
/// Returns as soon as a majority settled it either way, or once the per-node bound (the
/// response timeout) passed; the release goes on in the background on the nodes that
/// did not answer yet, so that it reaches a slow node too.
pub(crate) async fn release(
    deployment: &Deployment,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
) -> Result<bool> {
    let nodes = deployment.nodes.len();
    let all: Vec<usize> = (0..nodes).collect();
    let mut results = give_back(deployment, keys, kind, token, &all);
    let needed = deployment.majority();
    let bound = Instant::now() + deployment.response_timeout;
    let mut replies: Vec<Option<RedisResult<bool>>> = (0..nodes).map(|_| None).collect();
    let (mut yes, mut no, mut answered) = (0, 0, 0);
    while answered < nodes && yes < needed && nodes - no >= needed {
        match tokio::time::timeout_at(bound, results.recv()).await {
            Ok(Some((i, result))) => {
                answered += 1;
                match result {
                    Ok(true) => yes += 1,
                    Ok(false) => no += 1,
                    Err(_) => {}
                }
                if let Some(slot) = replies.get_mut(i) {
                    *slot = Some(result);
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let replies = replies
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(late())))
        .collect();
    settle(deployment, keys, "releasing a lock", replies)
}

/// Extend on every node: `Ok(true)` when a majority still held our token.
pub(crate) async fn extend(
    deployment: &Deployment,
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    ttl_ms: u64,
) -> Result<bool> {
    let replies = fan_out(
        deployment
            .nodes
            .iter()
            .map(|node| node.health.call(extend_on(node, keys, kind, token, ttl_ms))),
        node_timeout(deployment, ttl_ms),
    )
    .await;
    settle(deployment, keys, "extending a lock", replies)
}

/// A leader's note replaced on every node (as `extend` reaches every node): `Ok(true)`
/// when a majority still held our token and took the note.
pub(crate) async fn proclaim(
    deployment: &Deployment,
    keys: &LockKeys,
    token: &str,
    note: &str,
    fence: u64,
) -> Result<bool> {
    let announce = deployment.announces();
    let replies = fan_out(
        deployment.nodes.iter().map(|node| {
            node.health
                .call(proclaim_on(node, keys, token, note, fence, announce))
        }),
        deployment.response_timeout,
    )
    .await;
    settle(deployment, keys, "proclaiming a leader's note", replies)
}

/// Downgrade on every node: `Ok(true)` when a majority still held our write hold (now a
/// read hold there). A node that missed it still counts our hold as a write, which only
/// keeps other readers out there: the read hold a majority records is what the next
/// writer must wait for.
pub(crate) async fn downgrade(
    deployment: &Deployment,
    keys: &LockKeys,
    token: &str,
) -> Result<bool> {
    let announce = deployment.announces();
    let replies = fan_out(
        deployment.nodes.iter().map(|node| {
            node.health.call(downgrade_on(
                node,
                keys,
                token,
                (announce, deployment.fence_keep()),
            ))
        }),
        deployment.response_timeout,
    )
    .await;
    settle(deployment, keys, "downgrading a write lock", replies)
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
        Some(e) => Err(deployment.error(action, &keys.key, e)),
        None => Ok(false),
    }
}

/// Renews `batch` on every node; per lease as [`Deployment::renew`].
pub(crate) async fn renew(deployment: &Deployment, batch: &[RenewItem<'_>]) -> Vec<Option<bool>> {
    let needed = deployment.majority();
    let replies = fan_out(
        deployment
            .nodes
            .iter()
            .map(|node| node.health.call(renew_on(node, batch))),
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
