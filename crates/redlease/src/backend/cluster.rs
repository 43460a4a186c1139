//! What a Redis Cluster needs beyond one node: renewals split by slot.

use redis::cluster_async::ClusterConnection;

use super::node::{Conn, ErasedConn, Node, renew_on};
use crate::scripts::RenewItem;

/// The cluster connection `conn` (a script missing on a node is loaded there only, by
/// the rule every script call follows: see `scripts::EvalOnNoscript`).
pub(crate) fn connection(conn: ClusterConnection) -> Conn {
    Conn::Cluster(ErasedConn::new(conn))
}

/// Cluster renewal: a script call may only touch one slot, so the batch is split by slot
/// and the calls are sent concurrently (the cluster connection pipelines those that go to
/// the same primary). Each group waits at most `bound` and is credited as soon as it is
/// answered.
pub(crate) async fn renew_by_slot(
    node: &Node,
    batch: &[RenewItem<'_>],
    bound: std::time::Duration,
    credit: &(dyn Fn(usize, Option<bool>) + Sync),
) {
    let mut by_slot = std::collections::BTreeMap::<u16, Vec<usize>>::new();
    for (i, item) in batch.iter().enumerate() {
        by_slot
            .entry(crate::keys::hash_slot(item.keys.key.as_bytes()))
            .or_default()
            .push(i);
    }
    let groups: Vec<Vec<usize>> = by_slot.into_values().collect();
    futures_util::future::join_all(groups.iter().map(|group| async move {
        let items: Vec<RenewItem<'_>> = group
            .iter()
            .map(|&i| RenewItem {
                keys: batch[i].keys,
                kind: batch[i].kind,
                token: batch[i].token,
                ttl_ms: batch[i].ttl_ms,
                details_ms: batch[i].details_ms,
            })
            .collect();
        match tokio::time::timeout(bound, renew_on(node, &items)).await {
            Ok(Ok(renewed)) if renewed.len() == group.len() => {
                for (&i, ok) in group.iter().zip(renewed) {
                    credit(i, Some(ok));
                }
            }
            Ok(Ok(renewed)) => {
                tracing::debug!(
                    leases = group.len(),
                    replies = renewed.len(),
                    "renewal reply of the wrong length"
                );
                for &i in group {
                    credit(i, None);
                }
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, leases = group.len(), "renewal failed");
                for &i in group {
                    credit(i, None);
                }
            }
            Err(_) => {
                tracing::debug!(leases = group.len(), ?bound, "renewal not answered in time");
                for &i in group {
                    credit(i, None);
                }
            }
        }
    }))
    .await;
}
