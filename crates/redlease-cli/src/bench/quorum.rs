//! Scenario 7: a quorum (Redlock) of 5 independent redis-servers, one task looping
//! acquire + release, against a bare parallel Redlock loop in redis-rs.
//!
//! The 5 servers are private ones started for this scenario on free loopback ports (also
//! with `--redis`, which names one server only) and stopped at its end. The bare loop has
//! a `ConnectionManager` per node; per pair it sends `SET key token NX PX 30000` to all 5
//! at once (joined futures), counts the lock taken when a majority (3) said OK, then sends
//! the `EVALSHA` compare-and-delete to all 5 at once. Both sides run in interleaved slice
//! pairs (see [`super::pairs`]). Every acquire must succeed and every release release:
//! for the bare loop, each node that granted the `SET` must have deleted the key again.
//! Command counts are `INFO commandstats` deltas summed over the 5 nodes, given per node
//! (divided by 5).

use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use redis::Value;
use redis::aio::ConnectionManager;
use serde::Serialize;

use super::bare::{BARE_TTL_MS, COMPARE_AND_DELETE};
use super::env::Env;
use super::looped::{self, Bare, LoopResult, Runner, Subject};
use super::pairs::Comparison;
use super::stats::{CommandCost, LoopChecks, Summary};

/// Independent Redis servers of the quorum.
pub(super) const NODES: usize = 5;
/// A majority of them.
const MAJORITY: usize = NODES / 2 + 1;

/// The result of one side of the quorum comparison.
#[derive(Debug, Serialize)]
pub(super) struct Quorum {
    pub(super) scenario: &'static str,
    pub(super) nodes: usize,
    /// Acquire + release pairs.
    pub(super) ops: u64,
    #[serde(rename = "elapsed_us", serialize_with = "super::stats::micros")]
    pub(super) elapsed: Duration,
    pub(super) ops_per_sec: f64,
    /// One acquire + release pair.
    pub(super) latency: Summary,
    /// Per pair and per node (summed over the nodes, divided by their number); absent when
    /// `INFO commandstats` is not allowed.
    pub(super) commands_per_node: Option<CommandCost>,
    /// Every acquire succeeded, every release released.
    pub(super) checks: LoopChecks,
}

impl From<LoopResult> for Quorum {
    fn from(r: LoopResult) -> Self {
        Self {
            scenario: r.scenario,
            nodes: NODES,
            ops: r.ops,
            elapsed: r.elapsed,
            ops_per_sec: r.ops_per_sec,
            latency: r.latency,
            commands_per_node: r.commands,
            checks: r.checks,
        }
    }
}

/// The bare Redlock: one connection per node.
pub(super) struct BareRedlock {
    conns: Vec<ConnectionManager>,
    key: String,
    seq: u64,
}

impl BareRedlock {
    /// The bare Redlock of `key` over `conns`, one per node.
    pub(super) fn new(conns: Vec<ConnectionManager>, key: String) -> Self {
        Self { conns, key, seq: 0 }
    }

    /// `SET NX PX` on every node at once: the nodes that granted it.
    async fn acquire(&mut self, token: &str) -> Vec<bool> {
        let key = &self.key;
        join_all(self.conns.iter_mut().map(|conn| async move {
            let reply: redis::RedisResult<Value> = redis::cmd("SET")
                .arg(key)
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(BARE_TTL_MS)
                .query_async(conn)
                .await;
            matches!(reply, Ok(v) if !matches!(v, Value::Nil))
        }))
        .await
    }

    /// Compare-and-delete on every node at once: the nodes where it deleted our key.
    async fn release(&mut self, token: &str) -> Vec<bool> {
        let key = &self.key;
        join_all(self.conns.iter_mut().map(|conn| async move {
            let deleted: redis::RedisResult<i64> = COMPARE_AND_DELETE
                .key(key)
                .arg(token)
                .invoke_async(conn)
                .await;
            matches!(deleted, Ok(1))
        }))
        .await
    }
}

impl Bare for BareRedlock {
    async fn pair(&mut self, checks: &mut LoopChecks) {
        self.seq += 1;
        let token = super::bare::bare_token(0, self.seq);
        let granted = self.acquire(&token).await;
        let grants = granted.iter().filter(|g| **g).count();
        let released = self.release(&token).await;
        if grants < MAJORITY {
            checks.acquire_failed(format!(
                "bare Redlock: {grants} of {NODES} nodes granted SET NX, fewer than \
                 a majority"
            ));
        } else if granted != released {
            checks.release_failed(format!(
                "bare Redlock: granted by nodes {granted:?}, deleted on {released:?}"
            ));
        }
    }
}

/// A connection to every node at `urls`.
pub(super) async fn connect(urls: &[String]) -> anyhow::Result<Vec<ConnectionManager>> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        let client = redis::Client::open(url.as_str()).context("opening a node's URL")?;
        conns.push(
            ConnectionManager::new(client)
                .await
                .context("connecting to a quorum node")?,
        );
    }
    Ok(conns)
}

/// Starts 5 private redis-servers and runs the redlease quorum client against the bare
/// parallel Redlock loop in `pairs` interleaved slice pairs, `duration` in all per side;
/// with the `peers` feature, against rslock's quorum too, in pairs of their own.
pub(super) async fn run(
    env: &Env,
    duration: Duration,
    pairs: u32,
) -> anyhow::Result<(Vec<Quorum>, Vec<Comparison>)> {
    env.progress(&format!("quorum: starting {NODES} private redis-servers"));
    // Dropped last, after every connection to them.
    let nodes = tokio::task::spawn_blocking(|| redlease_local::Nodes::start(NODES))
        .await?
        .context("starting the quorum's private redis-servers")?;
    // Both sides reach the nodes through the same delay lines, if any (dropped after every
    // connection through them); `INFO commandstats` goes straight to the nodes.
    let mut lines = Vec::new();
    let urls = nodes
        .servers()
        .iter()
        .map(|server| super::link::url(server, env.link_delay, &mut lines))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let conns = connect(&urls).await?;
    let admins = connect(&nodes.urls()).await?;
    let client = redlease::Client::quorum(&urls)
        .await
        .context("connecting a redlease quorum client")?;
    let lock = client.lock(env.name("quorum"));
    let mut ours = Runner::new(
        "redlease quorum acquire + release",
        Subject::Redlease(lock.clone()),
        admins.clone(),
    );
    let mut floor = Runner::new(
        "bare parallel Redlock",
        Subject::Bare(BareRedlock::new(conns, env.key("bare-quorum"))),
        admins.clone(),
    );
    let comparison =
        looped::compare(env, "quorum of 5", duration, pairs, &mut ours, &mut floor).await?;
    let results: Vec<Quorum> = vec![ours.finish().into(), floor.finish().into()];
    let comparisons = vec![comparison];
    #[cfg(feature = "peers")]
    let (results, comparisons) = {
        let (mut results, mut comparisons) = (results, comparisons);
        let names = super::peers::Names {
            comparison: "quorum of 5 vs rslock",
            redlease: "redlease quorum (pairs with rslock)",
            rslock: "rslock quorum lock + unlock",
        };
        let on = (urls.as_slice(), env.key("rslock-quorum"));
        let (sides, compared) =
            super::peers::compare(env, names, (duration, pairs), lock, on, admins).await?;
        results.extend(sides.map(Quorum::from));
        comparisons.push(compared);
        (results, comparisons)
    };
    drop(client);
    drop(lines);
    drop(nodes);
    Ok((results, comparisons))
}
