//! A Redis Cluster of primaries and replicas, with slot migration and failover.

use std::time::{Duration, Instant};

use crate::{Error, RedisServer, Reply, ServerOptions, wait};

/// How long [`Cluster::start`], [`Cluster::migrate_slot`] and [`Cluster::failover`] wait
/// for the cluster to settle: generous, for a loaded 2-core machine.
pub const DEFAULT_CLUSTER_TIMEOUT: Duration = Duration::from_secs(60);

/// The number of hash slots of every Redis Cluster.
const SLOTS: usize = 16384;

/// `cluster-node-timeout`, in milliseconds: small, so that failures are noticed quickly.
const NODE_TIMEOUT_MS: &str = "2000";

/// How long a manual failover gets before `CLUSTER FAILOVER` is sent again (Redis gives up
/// on one after 5 s).
const FAILOVER_RETRY: Duration = Duration::from_secs(10);

/// How many keys one `MIGRATE` moves.
const MIGRATE_BATCH: &str = "100";

/// A primary and the replicas that follow it.
#[derive(Debug, Clone)]
struct Shard {
    /// Index into `Cluster::nodes`.
    primary: usize,
    /// Indexes into `Cluster::nodes`.
    replicas: Vec<usize>,
}

/// A Redis Cluster on free loopback ports: by default 3 primaries sharing the 16384 slots
/// in equal ranges, each with one replica. Every process is stopped by PID when this value
/// is dropped, including when a test panics.
///
/// The cluster is made by hand (`CLUSTER ADDSLOTS`, `MEET`, `REPLICATE`), not by
/// `redis-cli --cluster create`, so that the layout is known: replica `i` follows primary
/// `i` (with one replica per primary), until a [`failover`](Self::failover) swaps them.
///
/// ```no_run
/// # fn main() -> Result<(), redlease_local::Error> {
/// let mut cluster = redlease_local::Cluster::start()?;
/// let seeds: Vec<String> = cluster.urls(); // all six nodes
/// let slot = cluster.slot("lock:{order-7}")?;
/// let owner = cluster.primary_for_slot(slot)?;
/// cluster.migrate_slot(slot, (owner + 1) % 3)?; // keys move, MOVED from then on
/// cluster.failover(0)?; // replica 0 takes over its primary's slots
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisServer>,
    /// `CLUSTER MYID` of each node, in `nodes` order.
    ids: Vec<String>,
    shards: Vec<Shard>,
}

impl Cluster {
    /// Starts 3 primaries with one replica each and waits until the cluster is settled
    /// (see [`wait_settled`](Self::wait_settled)).
    ///
    /// # Errors
    /// When a server cannot be started or the cluster does not settle within
    /// [`DEFAULT_CLUSTER_TIMEOUT`]; everything started so far is stopped.
    pub fn start() -> Result<Self, Error> {
        Self::start_with(3, 1)
    }

    /// Starts `primaries` primaries (at least 1) with `replicas_per_primary` replicas each.
    ///
    /// # Errors
    /// As for [`start`](Self::start), and [`Error::Io`] when `primaries` is 0.
    pub fn start_with(primaries: usize, replicas_per_primary: usize) -> Result<Self, Error> {
        if primaries == 0 {
            return Err(invalid_input("a cluster needs at least one primary".into()));
        }
        let options = ServerOptions::default()
            .cluster_enabled()
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT_MS);
        let total = primaries * (1 + replicas_per_primary);
        let nodes = (0..total)
            .map(|_| RedisServer::start_with(options.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let ids = nodes
            .iter()
            .map(|node| {
                let reply = node.call(&["CLUSTER", "MYID"])?;
                reply
                    .text()
                    .map(std::borrow::Cow::into_owned)
                    .ok_or_else(|| node.unexpected(&["CLUSTER", "MYID"], &format!("{reply:?}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let shards = (0..primaries)
            .map(|p| Shard {
                primary: p,
                replicas: (0..replicas_per_primary)
                    .map(|r| primaries + p * replicas_per_primary + r)
                    .collect(),
            })
            .collect();
        let cluster = Self { nodes, ids, shards };
        cluster.form()?;
        Ok(cluster)
    }

    /// Assigns slots, introduces the nodes to each other and attaches the replicas.
    fn form(&self) -> Result<(), Error> {
        for (i, node) in self.nodes.iter().enumerate() {
            // Distinct epochs up front spare the nodes resolving epoch collisions.
            node.call_ok(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        let count = self.shards.len();
        for (k, shard) in self.shards.iter().enumerate() {
            // ADDSLOTS with every slot of the range: Redis 6.2 has no ADDSLOTSRANGE.
            let slots = (k * SLOTS / count..(k + 1) * SLOTS / count).map(|s| s.to_string());
            let args: Vec<String> = ["CLUSTER", "ADDSLOTS"]
                .into_iter()
                .map(str::to_owned)
                .chain(slots)
                .collect();
            self.nodes[shard.primary].call_ok(&args)?;
        }
        let first = &self.nodes[0];
        for node in &self.nodes[1..] {
            first.call_ok(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string()])?;
        }
        wait::until(
            "every cluster node knowing every other",
            DEFAULT_CLUSTER_TIMEOUT,
            || {
                for node in &self.nodes {
                    let view = view_of(node).map_err(|e| e.to_string())?;
                    if view.len() != self.nodes.len() {
                        return Err(format!("node {} knows {view:?}", node.port()));
                    }
                }
                Ok(())
            },
        )?;
        for shard in &self.shards {
            for &replica in &shard.replicas {
                self.nodes[replica].call_ok(&["CLUSTER", "REPLICATE", &self.ids[shard.primary]])?;
            }
        }
        self.wait_settled(DEFAULT_CLUSTER_TIMEOUT)
    }

    /// Every node's `redis://127.0.0.1:PORT` (primaries first, in start order), the seeds
    /// for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// All nodes, in start order (the first primaries, then their replicas).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// All nodes, in start order, to kill or pause some.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// The current primaries; "primary index" elsewhere means an index into this list. A
    /// [`failover`](Self::failover) puts the promoted replica where its old primary was.
    pub fn primaries(&self) -> Vec<&RedisServer> {
        self.shards.iter().map(|s| &self.nodes[s.primary]).collect()
    }

    /// The current replicas, shard by shard: those of primary 0 first. A
    /// [`failover`](Self::failover) puts the demoted primary where its replica was.
    pub fn replicas(&self) -> Vec<&RedisServer> {
        self.shards
            .iter()
            .flat_map(|s| s.replicas.iter().map(|&r| &self.nodes[r]))
            .collect()
    }

    /// The hash slot of `key`, from `CLUSTER KEYSLOT` (hash tags `{...}` honoured).
    ///
    /// # Errors
    /// When no node answers.
    pub fn slot(&self, key: &str) -> Result<u16, Error> {
        let args = ["CLUSTER", "KEYSLOT", key];
        self.ask_any(|node| {
            let reply = node.call(&args)?;
            reply
                .integer()
                .and_then(|slot| u16::try_from(slot).ok())
                .ok_or_else(|| node.unexpected(&args, &format!("{reply:?}")))
        })
    }

    /// The index (into [`primaries`](Self::primaries)) of the primary serving `slot`,
    /// according to `CLUSTER SLOTS` on the first node that answers.
    ///
    /// # Errors
    /// When no node answers, or the answer names no primary of ours for `slot` (e.g. while
    /// a failover is under way).
    pub fn primary_for_slot(&self, slot: u16) -> Result<usize, Error> {
        let args = ["CLUSTER", "SLOTS"];
        self.ask_any(|node| {
            let reply = node.call(&args)?;
            let port = reply
                .array()
                .unwrap_or_default()
                .iter()
                .filter_map(Reply::array)
                .find(|range| {
                    let bound = |i: usize| range.get(i).and_then(Reply::integer);
                    matches!((bound(0), bound(1)), (Some(lo), Some(hi)) if (lo..=hi).contains(&i64::from(slot)))
                })
                .and_then(|range| range.get(2)?.array()?.get(1)?.integer());
            self.shards
                .iter()
                .position(|s| port == Some(i64::from(self.nodes[s.primary].port())))
                .ok_or_else(|| node.unexpected(&args, &format!("no primary of ours for slot {slot}: {reply:?}")))
        })
    }

    /// The primary serving `key`'s slot.
    ///
    /// # Errors
    /// As for [`slot`](Self::slot) and [`primary_for_slot`](Self::primary_for_slot).
    pub fn primary_for_key(&self, key: &str) -> Result<&RedisServer, Error> {
        let index = self.primary_for_slot(self.slot(key)?)?;
        Ok(&self.nodes[self.shards[index].primary])
    }

    /// Moves `slot`, with its keys, to the primary at `to_primary` (an index into
    /// [`primaries`](Self::primaries)), the way `redis-cli --cluster reshard` does:
    /// `CLUSTER SETSLOT IMPORTING` on the target, `MIGRATING` on the source, `MIGRATE` of
    /// every key `CLUSTER GETKEYSINSLOT` lists, then `SETSLOT NODE` on the target, the source
    /// and the other primaries; then waits until every node agrees. Clients see `ASK` while
    /// keys move and `MOVED` afterwards. Nothing happens when the slot is there already.
    ///
    /// # Errors
    /// [`Error::Io`] when `to_primary` is not an index into [`primaries`](Self::primaries);
    /// [`Error::Reply`] when a step is refused, [`Error::Timeout`] when the nodes do not
    /// agree within [`DEFAULT_CLUSTER_TIMEOUT`]; the slot may then be left half-migrated.
    pub fn migrate_slot(&mut self, slot: u16, to_primary: usize) -> Result<(), Error> {
        if to_primary >= self.shards.len() {
            return Err(invalid_input(format!("there is no primary {to_primary}")));
        }
        let from = self.primary_for_slot(slot)?;
        if from == to_primary {
            return Ok(());
        }
        let (source, target) = (self.shards[from].primary, self.shards[to_primary].primary);
        let slot_arg = slot.to_string();
        let (src, dst) = (&self.nodes[source], &self.nodes[target]);
        let (src_id, dst_id) = (self.ids[source].as_str(), self.ids[target].as_str());
        dst.call_ok(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", src_id])?;
        src.call_ok(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", dst_id])?;
        let dst_port = dst.port().to_string();
        loop {
            let args = ["CLUSTER", "GETKEYSINSLOT", &slot_arg, MIGRATE_BATCH];
            let keys = src.call(&args)?;
            let Some(keys) = keys.array().filter(|k| !k.is_empty()) else {
                break;
            };
            let mut migrate: Vec<Vec<u8>> =
                ["MIGRATE", "127.0.0.1", &dst_port, "", "0", "5000", "KEYS"]
                    .iter()
                    .map(|a| a.as_bytes().to_vec())
                    .collect();
            for key in keys {
                match key {
                    Reply::Bulk(key) => migrate.push(key.clone()),
                    other => return Err(src.unexpected(&args, &format!("{other:?}"))),
                }
            }
            src.call(&migrate)?;
        }
        let others = self
            .shards
            .iter()
            .map(|s| s.primary)
            .filter(|&p| p != source && p != target);
        for node in [target, source].into_iter().chain(others) {
            self.nodes[node].call_ok(&["CLUSTER", "SETSLOT", &slot_arg, "NODE", dst_id])?;
        }
        self.wait_settled(DEFAULT_CLUSTER_TIMEOUT)
    }

    /// Promotes the replica at `replica` (an index into [`replicas`](Self::replicas)) with
    /// `CLUSTER FAILOVER`, waits until it reports `role:master` and the cluster has settled,
    /// and returns its index in [`primaries`](Self::primaries) (where its old primary was;
    /// the old primary takes its place among the replicas).
    ///
    /// # Errors
    /// [`Error::Io`] when `replica` is not an index into [`replicas`](Self::replicas),
    /// [`Error::Reply`] when the replica refuses (e.g. its primary is down: Redis then
    /// wants `CLUSTER FAILOVER FORCE`), [`Error::Timeout`] when it is not
    /// promoted, or the cluster does not settle, within [`DEFAULT_CLUSTER_TIMEOUT`].
    pub fn failover(&mut self, replica: usize) -> Result<usize, Error> {
        let shard = self.promote(replica, &["CLUSTER", "FAILOVER"])?;
        self.wait_settled(DEFAULT_CLUSTER_TIMEOUT)?;
        Ok(shard)
    }

    /// Promotes the replica at `replica` (an index into [`replicas`](Self::replicas)) with
    /// `CLUSTER FAILOVER FORCE`, for when its primary is down or paused: the replica does
    /// not wait for its primary to hand over (writes it has not replicated are lost), but
    /// still needs the votes of a majority of primaries. Waits until it reports
    /// `role:master` and returns its index in [`primaries`](Self::primaries), as
    /// [`failover`](Self::failover) does, but does not wait for the cluster to settle: a
    /// dead old primary never would. Restart it (it keeps its identity, learns of the
    /// newer configuration and rejoins as a replica), then call
    /// [`wait_settled`](Self::wait_settled).
    ///
    /// # Errors
    /// [`Error::Io`] when `replica` is not an index into [`replicas`](Self::replicas),
    /// [`Error::Reply`] when the replica refuses, [`Error::Timeout`] when it is not
    /// promoted within [`DEFAULT_CLUSTER_TIMEOUT`].
    pub fn failover_forced(&mut self, replica: usize) -> Result<usize, Error> {
        self.promote(replica, &["CLUSTER", "FAILOVER", "FORCE"])
    }

    /// Sends `command` (a form of `CLUSTER FAILOVER`) to the replica at `replica` until it
    /// reports `role:master`, then swaps it with its primary in the layout; returns its
    /// shard.
    fn promote(&mut self, replica: usize, command: &[&str]) -> Result<usize, Error> {
        let (shard, position) = self
            .shards
            .iter()
            .enumerate()
            .flat_map(|(k, s)| (0..s.replicas.len()).map(move |j| (k, j)))
            .nth(replica)
            .ok_or_else(|| invalid_input(format!("there is no replica {replica}")))?;
        let node = &self.nodes[self.shards[shard].replicas[position]];
        let mut sent = None::<Instant>;
        let mut refused = None;
        let what = format!(
            "the replica reporting role:master after {}",
            command.join(" ")
        );
        wait::until(&what, DEFAULT_CLUSTER_TIMEOUT, || {
            // A manual failover that stalls is abandoned by Redis after 5 s: ask again.
            if sent.is_none_or(|at| at.elapsed() > FAILOVER_RETRY) {
                match node.call_ok(command) {
                    Ok(()) => sent = Some(Instant::now()),
                    Err(e @ Error::Reply { .. }) => {
                        refused = Some(e);
                        return Ok(());
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
            match node.text_field(&["INFO", "replication"], "role") {
                Ok(role) if role == "master" => Ok(()),
                Ok(role) => Err(format!("role:{role}")),
                Err(e) => Err(e.to_string()),
            }
        })?;
        if let Some(error) = refused {
            return Err(error);
        }
        let shard_ref = &mut self.shards[shard];
        std::mem::swap(&mut shard_ref.primary, &mut shard_ref.replicas[position]);
        Ok(shard)
    }

    /// Waits until the cluster is settled: every node reports `cluster_state:ok`; every
    /// node's `CLUSTER NODES` lists the same nodes, roles, primaries and slots, matching
    /// this value's layout, with no node failing or in handshake; and every replica reports
    /// `master_link_status:up`.
    ///
    /// # Errors
    /// [`Error::Timeout`] naming what was still missing after `timeout`.
    pub fn wait_settled(&self, timeout: Duration) -> Result<(), Error> {
        wait::until("the cluster settled", timeout, || {
            self.settled().map_err(|e| e.to_string())?
        })
    }

    /// `Ok(Ok(()))` when settled, `Ok(Err(what is missing))` when not yet.
    fn settled(&self) -> Result<Result<(), String>, Error> {
        // (node id, the primary it follows) as this value's layout says.
        let mut expected: Vec<(&str, Option<&str>)> = Vec::new();
        for shard in &self.shards {
            let primary = self.ids[shard.primary].as_str();
            expected.push((primary, None));
            expected.extend(
                shard
                    .replicas
                    .iter()
                    .map(|&r| (self.ids[r].as_str(), Some(primary))),
            );
        }
        expected.sort_unstable();
        let mut agreed: Option<Vec<NodeView>> = None;
        for node in &self.nodes {
            let state = node.text_field(&["CLUSTER", "INFO"], "cluster_state")?;
            if state != "ok" {
                return Ok(Err(format!("node {}: cluster_state:{state}", node.port())));
            }
            let view = view_of(node)?;
            let layout: Vec<_> = view
                .iter()
                .map(|v| (v.id.as_str(), v.primary.as_deref()))
                .collect();
            if layout != expected {
                return Ok(Err(format!(
                    "node {} sees {layout:?}, the layout says {expected:?}",
                    node.port()
                )));
            }
            match &agreed {
                Some(first) if *first != view => {
                    return Ok(Err(format!(
                        "node {} sees {view:?}, another {first:?}",
                        node.port()
                    )));
                }
                Some(_) => {}
                None => agreed = Some(view),
            }
        }
        for node in self.replicas() {
            let link = node.text_field(&["INFO", "replication"], "master_link_status")?;
            if link != "up" {
                return Ok(Err(format!(
                    "replica {}: master_link_status:{link}",
                    node.port()
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Runs `ask` on each node in turn until one succeeds.
    fn ask_any<T>(
        &self,
        mut ask: impl FnMut(&RedisServer) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let mut last = None;
        for node in &self.nodes {
            match ask(node) {
                Ok(value) => return Ok(value),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Io(std::io::Error::other("no cluster node"))))
    }
}

/// What `node` believes about every node it knows (`CLUSTER NODES`), sorted by id.
/// A node failing, in handshake or disconnected is reported as an error.
fn view_of(node: &RedisServer) -> Result<Vec<NodeView>, Error> {
    let reply = node.call(&["CLUSTER", "NODES"])?;
    let text = reply.text().unwrap_or_default();
    let mut views = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        let unsettled = |flags: &str| {
            flags
                .split(',')
                .any(|f| matches!(f, "fail" | "fail?" | "handshake" | "noaddr"))
        };
        match fields.as_slice() {
            [
                id,
                _addr,
                flags,
                master,
                _ping,
                _pong,
                _epoch,
                link,
                slots @ ..,
            ] if !unsettled(flags) && *link == "connected" => {
                views.push(NodeView {
                    id: (*id).to_owned(),
                    primary: (*master != "-").then(|| (*master).to_owned()),
                    // `[slot->-id]` entries are migrations in flight, not ownership.
                    slots: slots
                        .iter()
                        .filter(|s| !s.starts_with('['))
                        .copied()
                        .collect::<Vec<_>>()
                        .join(" "),
                });
            }
            _ => return Err(node.unexpected(&["CLUSTER", "NODES"], line)),
        }
    }
    views.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(views)
}

/// An [`Error::Io`] for a bad argument.
fn invalid_input(message: String) -> Error {
    Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        message,
    ))
}

/// One line of `CLUSTER NODES`, reduced to what all nodes must agree on.
#[derive(Debug, PartialEq, Eq)]
struct NodeView {
    id: String,
    /// The primary it replicates, for a replica.
    primary: Option<String>,
    /// The slot ranges it serves, as listed.
    slots: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// `redis-cli -c -p PORT args...`: follows MOVED/ASK like a cluster client.
    fn cli(port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-c", "-p", &port.to_string()])
            .args(args)
            .output();
        match out {
            Ok(out) => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            Err(e) => format!("redis-cli failed: {e}"),
        }
    }

    #[test]
    fn forms_serves_migrates_and_fails_over() -> Result<(), Error> {
        let mut cluster = Cluster::start()?;
        assert_eq!(cluster.urls().len(), 6);
        assert_eq!(cluster.primaries().len(), 3);
        assert_eq!(cluster.replicas().len(), 3);
        for node in cluster.nodes() {
            assert_eq!(
                node.text_field(&["CLUSTER", "INFO"], "cluster_state")?,
                "ok"
            );
        }

        // Written through one node, readable through any, redirected as needed.
        let key = "lock:{order-7}";
        assert_eq!(cli(cluster.nodes()[0].port(), &["SET", key, "v"]), "OK");
        for node in cluster.nodes() {
            assert_eq!(cli(node.port(), &["GET", key]), "v", "via {}", node.port());
        }
        let slot = cluster.slot(key)?;
        let owner = cluster.primary_for_slot(slot)?;
        assert_eq!(
            cluster.primary_for_key(key)?.call(&["GET", key])?,
            Reply::Bulk(b"v".to_vec())
        );

        let target = (owner + 1) % 3;
        cluster.migrate_slot(slot, target)?;
        assert_eq!(cluster.primary_for_slot(slot)?, target);
        assert_eq!(
            cluster.primaries()[target].call(&["GET", key])?,
            Reply::Bulk(b"v".to_vec())
        );
        let moved = cluster.primaries()[owner].query(&["GET", key])?;
        assert!(
            matches!(&moved, Reply::Error(e) if e.starts_with("MOVED")),
            "the old owner answers {moved:?}"
        );

        // Promote the replica of the slot's new owner (one replica per primary).
        let promoted_port = cluster.replicas()[target].port();
        let old_primary_port = cluster.primaries()[target].port();
        assert_eq!(cluster.failover(target)?, target);
        assert_eq!(cluster.primaries()[target].port(), promoted_port);
        assert_eq!(cluster.replicas()[target].port(), old_primary_port);
        assert_eq!(cluster.primary_for_key(key)?.port(), promoted_port);
        assert_eq!(cli(old_primary_port, &["GET", key]), "v");
        Ok(())
    }

    #[test]
    fn a_killed_primary_is_replaced_by_force_and_rejoins_as_a_replica() -> Result<(), Error> {
        let mut cluster = Cluster::start()?;
        let key = "lock:{order-8}";
        let owner = cluster.primary_for_slot(cluster.slot(key)?)?;
        assert_eq!(cli(cluster.nodes()[0].port(), &["SET", key, "v"]), "OK");
        // Replicated before the kill: the promoted replica must have it.
        assert_eq!(
            cluster.primaries()[owner].call(&["WAIT", "1", "10000"])?,
            Reply::Integer(1)
        );
        let old_port = cluster.primaries()[owner].port();
        let promoted_port = cluster.replicas()[owner].port();
        let dead = cluster
            .nodes()
            .iter()
            .position(|n| n.port() == old_port)
            .ok_or_else(|| invalid_input("no such node".into()))?;
        cluster.nodes_mut()[dead].kill();
        assert_eq!(cluster.failover_forced(owner)?, owner);
        assert_eq!(cluster.primaries()[owner].port(), promoted_port);
        cluster.nodes_mut()[dead].restart()?;
        cluster.wait_settled(DEFAULT_CLUSTER_TIMEOUT)?;
        assert_eq!(cluster.replicas()[owner].port(), old_port);
        assert_eq!(cluster.primary_for_key(key)?.port(), promoted_port);
        assert_eq!(cli(old_port, &["GET", key]), "v");
        Ok(())
    }
}
