//! What a Redis Cluster needs beyond one node: scripts loaded only where they are
//! missing, and renewals split by slot.

use redis::aio::ConnectionLike;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::node::{Conn, ErasedConn, Node, renew_on};
use crate::scripts::RenewItem;

/// The cluster connection `conn`, loading scripts where needed.
pub(crate) fn connection(conn: ClusterConnection) -> Conn {
    Conn::Cluster(ErasedConn::new(ScriptsWhereNeeded(conn)))
}

/// A cluster connection that loads a missing script on the one node that needs it.
///
/// redis-rs answers `NOSCRIPT` with a `SCRIPT LOAD` that has no key, so the cluster
/// connection sends it to every primary and waits for all of them: one silent primary
/// then stalls every call on the healthy ones until the response timeout (a fresh
/// cluster, a promoted replica, a restarted node: whenever a script is not cached).
/// Here an `EVALSHA` refused with `NOSCRIPT` is sent again as `EVAL` with the script's
/// text and the same keys: routed by the key's slot like the `EVALSHA`, it runs the
/// script and caches it on that node only. The caller never sees the `NOSCRIPT`, so
/// redis-rs never loads anything itself.
#[derive(Clone)]
struct ScriptsWhereNeeded<C>(C);

impl<C: ConnectionLike + Send> ConnectionLike for ScriptsWhereNeeded<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.0.req_packed_command(cmd).await;
            if !noscript(&reply) {
                return reply;
            }
            match as_eval(cmd) {
                Some(eval) => self.0.req_packed_command(&eval).await,
                None => reply,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let values = self.0.req_packed_commands(pipe, offset, count).await;
            let noscript = match &values {
                Err(e) => e.code() == Some("NOSCRIPT"),
                Ok(values) => values.iter().any(is_noscript),
            };
            if !noscript {
                return values;
            }
            // Every script call of ours is idempotent: the calls that ran run again.
            let mut evals = redis::pipe();
            for cmd in pipe.cmd_iter() {
                match as_eval(cmd) {
                    Some(eval) => evals.add_command(eval),
                    None => return values,
                };
            }
            self.0.req_packed_commands(&evals, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// Whether a reply (or the error for it) is `NOSCRIPT`: the connection hands error
/// replies over as values, and the caller's conversion turns them into errors.
fn noscript(reply: &RedisResult<Value>) -> bool {
    match reply {
        Err(e) => e.code() == Some("NOSCRIPT"),
        Ok(value) => is_noscript(value),
    }
}

fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// `EVALSHA <sha> <numkeys> ...` of one of our scripts as `EVAL <text> <numkeys> ...`.
fn as_eval(cmd: &Cmd) -> Option<Cmd> {
    let mut args = cmd.args_iter();
    let redis::Arg::Simple(name) = args.next()? else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let redis::Arg::Simple(sha) = args.next()? else {
        return None;
    };
    let source = crate::lua::source(std::str::from_utf8(sha).ok()?)?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(source);
    for arg in args {
        let redis::Arg::Simple(arg) = arg else {
            return None;
        };
        eval.arg(arg);
    }
    Some(eval)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_missing_script_is_sent_again_with_its_text_and_the_same_keys() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(crate::lua::LOCK_EXTEND.get_hash())
            .arg(2)
            .arg("{k}")
            .arg("{k}:holder")
            .arg("token")
            .arg(1000);
        let eval = as_eval(&evalsha).unwrap_or_else(|| redis::cmd("NONE"));
        let eval = words(&eval);
        assert_eq!(eval[0], b"EVAL");
        assert_eq!(
            eval[1],
            concat!(
                include_str!("../../scripts/lib/expiry.lua"),
                include_str!("../../scripts/lock_extend.lua")
            )
            .as_bytes()
            .to_vec()
        );
        assert_eq!(words(&evalsha)[2..], eval[2..]);
        // Not ours, or not a script call: left alone.
        assert!(as_eval(redis::cmd("EVALSHA").arg("0".repeat(40)).arg(0)).is_none());
        assert!(as_eval(redis::cmd("GET").arg("k")).is_none());
    }
}
