//! Reading a name's keys for [`Client::inspect`](crate::Client::inspect) (and removing its
//! holds for [`Client::force_release`](crate::Client::force_release)), node by node.
//!
//! The type of the name's key `K` tells the primitive (a string: a lock, a ZSET: a
//! semaphore, a hash: a read-write lock; none: nothing holds it); one pipeline then reads
//! every key of that primitive. Plain reads, no script and no `MULTI`: an operator's
//! read-only ACL user (docs/SECURITY.md) suffices, and redis-rs miscounts the replies of a
//! `MULTI` that an ACL refuses. Scripts run atomically, so the state changed between the
//! pipeline's commands only if the holds changed: they are read again last, and the whole
//! read is repeated (a few times) when they did, or when `K` changed type in between.

use redis::RedisResult;

use super::node::{Node, fan_out};
use super::{Deployment, Topology};
use crate::keys::{LockKeys, Primitive};
use crate::snapshot::{self, Reading};

/// How many times a read is repeated when the name changed hands during it.
const READ_TRIES: u32 = 5;

impl Deployment {
    /// Reads the name of `keys` on each node: one answer for a single Redis, Sentinel or
    /// Cluster, one per node (with its label) over a quorum. With `remove`, the holds are
    /// deleted in the same pipeline, just after they are read (not the queue, the
    /// fencing counter or a semaphore's permit count).
    pub(crate) async fn inspect(
        &self,
        keys: &LockKeys,
        remove: bool,
    ) -> Vec<(String, RedisResult<Reading>)> {
        if self.topology != Topology::Quorum {
            let node = self.primary();
            let reading = self.across_reconnects(|| read_on(node, keys, remove)).await;
            return vec![(node.label.clone(), reading)];
        }
        let answers = fan_out(
            self.nodes
                .iter()
                .map(|node| node.health.call(read_on(node, keys, remove))),
            self.response_timeout,
        )
        .await;
        self.nodes
            .iter()
            .zip(answers)
            .map(|(node, answer)| (node.label.clone(), answer))
            .collect()
    }
}

/// Reads (and with `remove`, deletes the holds of) the name of `keys` on `node`.
async fn read_on(node: &Node, keys: &LockKeys, remove: bool) -> RedisResult<Reading> {
    let mut tries = 0;
    loop {
        tries += 1;
        let kind: String = node.query(redis::cmd("TYPE").arg(&keys.key)).await?;
        let read = match kind.as_str() {
            "none" | "string" => read_lock(node, keys, remove).await,
            "zset" => read_leases(node, Primitive::Semaphore, keys, remove).await,
            "hash" => read_leases(node, Primitive::RwLock, keys, remove).await,
            "set" => read_leases(node, Primitive::Latch, keys, remove).await,
            other => {
                // Neither ours nor a free name: `Error::redis` makes it `WrongType`.
                return Err(redis::make_extension_error(
                    "WRONGTYPE".into(),
                    Some(format!("key {} is a Redis {other}", keys.key)),
                ));
            }
        };
        match read {
            // A removal is never repeated: what it read is what it removed.
            Ok((reading, settled)) if settled || remove || tries >= READ_TRIES => {
                return Ok(reading);
            }
            Ok(_) => {}
            Err(e) if crate::error::error_code(&e) == Some("WRONGTYPE") && tries < READ_TRIES => {}
            Err(e) => return Err(e),
        }
    }
}

/// A lock's reading (see [`snapshot::LockReply`]).
async fn read_lock(node: &Node, keys: &LockKeys, remove: bool) -> RedisResult<(Reading, bool)> {
    let mut pipe = redis::pipe();
    pipe.get(&keys.key)
        .pttl(&keys.key)
        .get(&keys.fence)
        .get(&keys.holder)
        .lrange(&keys.queue, 0, -1)
        .hgetall(&keys.waiters)
        .cmd("TIME")
        .get(&keys.key);
    if remove {
        pipe.del(&[&keys.key, &keys.holder]).ignore();
    }
    let reply: snapshot::LockReply = node.pipeline(&pipe).await?;
    Ok(snapshot::lock(reply))
}

/// A semaphore's, read-write lock's or latch's reading (see [`snapshot::LeaseReply`]).
async fn read_leases(
    node: &Node,
    primitive: Primitive,
    keys: &LockKeys,
    remove: bool,
) -> RedisResult<(Reading, bool)> {
    let keys = LockKeys::from_key_of(keys.key.clone(), primitive).map_err(|e| {
        redis::RedisError::from((
            redis::ErrorKind::Client,
            "cannot derive the keys",
            e.to_string(),
        ))
    })?;
    // A semaphore's holds are `K` itself; a read-write lock's, its owners ZSET; a latch's,
    // its counts ZSET.
    let expiries = match primitive {
        Primitive::Semaphore => keys.key.as_str(),
        _ => keys.extra.as_str(),
    };
    let mut pipe = redis::pipe();
    pipe.zrange_withscores(expiries, 0, -1)
        .hgetall(&keys.holder);
    // What says the key is ours: a semaphore's permit count, a read-write lock's mode, a
    // latch's outstanding counts (its SET's size).
    match primitive {
        Primitive::Semaphore => pipe.get(&keys.extra),
        Primitive::RwLock => pipe.hget(&keys.key, "mode"),
        _ => pipe.scard(&keys.key),
    };
    pipe.get(&keys.fence)
        .lrange(&keys.queue, 0, -1)
        .hgetall(&keys.waiters)
        .cmd("TIME")
        .zrange(expiries, 0, -1);
    if remove {
        let mut holds = vec![keys.key.as_str(), keys.holder.as_str()];
        if expiries != keys.key {
            holds.push(expiries);
        }
        pipe.del(holds).ignore();
    }
    let reply: snapshot::LeaseReply = node.pipeline(&pipe).await?;
    Ok(snapshot::leases(primitive, reply))
}
