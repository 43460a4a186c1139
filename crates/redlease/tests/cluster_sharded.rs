//! Waiting on a Redis Cluster that scales: hand-offs and release notices by sharded
//! pub/sub (`SSUBSCRIBE`/`SPUBLISH`), which stay in the shard that owns the lock's slot, in
//! FIFO order, across a slot migration and a failover.
#![cfg(feature = "cluster")]
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::cluster::{cluster, connect};
use common::{bounded, eventually, no_polling};
use redlease_local::{Cluster, RedisServer, Reply};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A counter of `INFO` section `section` (`field:value` or `cmdstat_x:calls=n,...`).
fn stat(node: &RedisServer, args: &[&str], prefix: &str) -> u64 {
    let reply = node.query(args).unwrap();
    let text = reply.text().unwrap_or_default().into_owned();
    text.lines()
        .find_map(|line| line.strip_prefix(prefix))
        .map_or(0, |rest| {
            rest.trim_start_matches("calls=")
                .split([',', '\r'])
                .next()
                .unwrap_or("0")
                .trim()
                .parse()
                .unwrap_or(0)
        })
}

/// What a node has seen of pub/sub: messages the cluster bus brought it (classic and
/// sharded), and `PUBLISH`/`SPUBLISH` calls it ran (scripts' inner calls included).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Heard {
    bus_publish: u64,
    bus_publishshard: u64,
    publish_calls: u64,
    spublish_calls: u64,
    evalsha_calls: u64,
}

impl Heard {
    /// Everything that reached the node: bus messages and publish calls.
    fn messages(&self) -> u64 {
        self.bus_publish + self.bus_publishshard + self.publish_calls + self.spublish_calls
    }
}

fn heard(node: &RedisServer) -> Heard {
    let cluster_info = ["CLUSTER", "INFO"];
    let commandstats = ["INFO", "commandstats"];
    Heard {
        bus_publish: stat(
            node,
            &cluster_info,
            "cluster_stats_messages_publish_received:",
        ),
        bus_publishshard: stat(
            node,
            &cluster_info,
            "cluster_stats_messages_publishshard_received:",
        ),
        publish_calls: stat(node, &commandstats, "cmdstat_publish:"),
        spublish_calls: stat(node, &commandstats, "cmdstat_spublish:"),
        evalsha_calls: stat(node, &commandstats, "cmdstat_evalsha:"),
    }
}

/// Shard channels subscribed on `node` that match `pattern` (`PUBSUB SHARDCHANNELS`).
fn shard_channels(node: &RedisServer, pattern: &str) -> Vec<String> {
    let reply = node.query(&["PUBSUB", "SHARDCHANNELS", pattern]).unwrap();
    reply
        .array()
        .unwrap_or_default()
        .iter()
        .filter_map(|c| c.text().map(std::borrow::Cow::into_owned))
        .collect()
}

/// Subscribers of the shard channel `channel` on `node` (`PUBSUB SHARDNUMSUB`).
fn shard_subscribers(node: &RedisServer, channel: &str) -> i64 {
    let reply = node.query(&["PUBSUB", "SHARDNUMSUB", channel]).unwrap();
    reply
        .array()
        .and_then(|a| a.get(1))
        .and_then(Reply::integer)
        .unwrap_or_else(|| panic!("unexpected PUBSUB SHARDNUMSUB reply {reply:?}"))
}

/// Every node outside the shard (primary `owner` and its replica) of a 3x1 cluster.
fn other_shards(cluster: &Cluster, owner: usize) -> Vec<&RedisServer> {
    let mut nodes: Vec<&RedisServer> = Vec::new();
    for (i, primary) in cluster.primaries().into_iter().enumerate() {
        if i != owner {
            nodes.push(primary);
            nodes.push(cluster.replicas()[i]);
        }
    }
    nodes
}

/// `LLEN` of the lock's queue on the primary that owns it now.
fn queue_len(cluster: &Cluster, queue: &str) -> i64 {
    cluster
        .primary_for_key(queue)
        .ok()
        .and_then(|node| node.query(&["LLEN", queue]).ok())
        .and_then(|r| r.integer())
        .unwrap_or(-1)
}

/// A burst of contended hand-offs of one lock, from three clients, reaches only the shard
/// that owns the lock's slot: the grant subscriptions are shard channels on its primary
/// alone, and no other node hears a message (cluster bus) or runs a publish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_reach_only_the_shard_of_the_lock() {
    let cluster = cluster();
    let clients = [
        connect(&cluster).await,
        connect(&cluster).await,
        connect(&cluster).await,
    ];
    let name = "burst";
    let keys = clients[0].lock(name).keys().unwrap();
    let owner = cluster
        .primary_for_slot(cluster.slot(keys.key()).unwrap())
        .unwrap();
    let others = other_shards(&cluster, owner);
    let before: Vec<Heard> = others.iter().map(|n| heard(n)).collect();
    let owner_before = heard(cluster.primaries()[owner]);

    let holder = bounded("acquire", clients[0].lock(name).acquire())
        .await
        .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let sections = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..3 {
            let lock = client.lock(name).wait(Duration::from_secs(20));
            let (inside, sections) = (Arc::clone(&inside), Arc::clone(&sections));
            tasks.push(tokio::spawn(async move {
                let mut fences = Vec::new();
                for _ in 0..5 {
                    let guard = lock.acquire().await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    fences.push(guard.fencing_token());
                    tokio::task::yield_now().await;
                    sections.fetch_add(1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
                fences
            }));
        }
    }
    eventually("every contender to wait", || async {
        clients.iter().map(|c| c.stats().waiting).sum::<usize>() == 9
    })
    .await;
    // Queued (asserted below, after the burst, so that the code before sharded pub/sub
    // fails on what its releases did to the other shards): each client subscribed to its
    // grant channel for this lock, a shard channel with the lock's hash tag, on the lock's
    // primary only.
    let queued_by = Instant::now() + Duration::from_secs(10);
    while queue_len(&cluster, keys.queue()) < 9 && Instant::now() < queued_by {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let queued = queue_len(&cluster, keys.queue());
    let pattern = format!("{}grant:*", keys.channel().trim_end_matches("released"));
    let on_owner = shard_channels(cluster.primaries()[owner], &pattern);
    bounded("release", holder.release()).await.unwrap();
    let mut fences = Vec::new();
    for t in tasks {
        fences.extend(bounded("contenders", t).await.unwrap());
    }
    assert_eq!(sections.load(Ordering::SeqCst), 45);
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 45, "a fencing token was granted twice");
    for (node, before) in others.iter().zip(&before) {
        assert_eq!(
            heard(node),
            *before,
            "node {} (another shard) heard of the lock's releases and hand-offs",
            node.port()
        );
    }
    assert_eq!(queued, 9, "the waiters did not queue for a hand-off");
    assert_eq!(
        on_owner.len(),
        3,
        "grant channels on the owner: {on_owner:?}"
    );
    for channel in &on_owner {
        for node in &others {
            assert_eq!(shard_subscribers(node, channel), 0);
        }
    }
    for node in &others {
        assert!(shard_channels(node, "*").is_empty());
    }
    let owner_after = heard(cluster.primaries()[owner]);
    eprintln!(
        "45 contended sections: on the lock's primary {} EVALSHA and {} SPUBLISH (scripts' \
         calls), on each other shard's node {:?} new bus messages and publish calls",
        owner_after.evalsha_calls - owner_before.evalsha_calls,
        owner_after.spublish_calls - owner_before.spublish_calls,
        others
            .iter()
            .zip(&before)
            .map(|(n, b)| heard(n).messages() - b.messages())
            .collect::<Vec<_>>(),
    );
    assert!(
        owner_after.spublish_calls >= owner_before.spublish_calls + 40,
        "the hand-offs were not grants by SPUBLISH: {owner_before:?} -> {owner_after:?}"
    );
}

/// Cluster lock waiters queue and are handed the lock in arrival order, as on one node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waiters_are_served_in_arrival_order() {
    let cluster = cluster();
    let c = connect(&cluster).await;
    let other = connect(&cluster).await;
    let keys = c.lock("fifo").keys().unwrap();
    let holder = bounded("acquire", c.lock("fifo").acquire()).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..6_i64 {
        // Waiters of two clients, alternately.
        let client = if i % 2 == 0 { &c } else { &other };
        let lock = client
            .lock("fifo")
            .wait(Duration::from_secs(20))
            .retry(no_polling());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock.acquire().await.unwrap();
            tx.send(i).unwrap();
            guard.release().await.unwrap();
        }));
        eventually("the waiter to queue up", || async {
            queue_len(&cluster, keys.queue()) == i + 1
        })
        .await;
    }
    bounded("release", holder.release()).await.unwrap();
    for t in tasks {
        bounded("waiters", t).await.unwrap();
    }
    drop(tx);
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
}

/// Contenders that hand one lock on and on while `disturb` runs on the cluster (a slot
/// migration, a failover): every acquisition succeeds within its bound, no two sections
/// overlap, and the counter of sections is exact.
async fn hand_offs_survive(
    cluster: &mut Cluster,
    name: &str,
    disturb: impl FnOnce(&mut Cluster, &str),
) {
    let clients = [connect(cluster).await, connect(cluster).await];
    let wait = Duration::from_secs(20);
    let keys = clients[0].lock(name).keys().unwrap();
    let holder = bounded("acquire", clients[0].lock(name).acquire())
        .await
        .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for client in &clients {
        for _ in 0..3 {
            // No polling: only grants and release notices (which must follow the slot)
            // get a waiter in before its wait runs out.
            let lock = client.lock(name).wait(wait).retry(no_polling());
            let (inside, counter, stop) =
                (Arc::clone(&inside), Arc::clone(&counter), Arc::clone(&stop));
            tasks.push(tokio::spawn(async move {
                let mut mine = 0u64;
                let mut longest = Duration::ZERO;
                // At least a few sections each, and on until the disturbance is over.
                while mine < 5 || !stop.load(Ordering::SeqCst) {
                    let asked = Instant::now();
                    let guard = lock
                        .acquire()
                        .await
                        .unwrap_or_else(|e| panic!("a waiter did not get the lock: {e}"));
                    longest = longest.max(asked.elapsed());
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    // A read-modify-write that a second holder would break.
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    inside.store(false, Ordering::SeqCst);
                    mine += 1;
                    guard.release().await.unwrap();
                }
                (mine, longest)
            }));
        }
    }
    eventually("every waiter to queue up", || async {
        queue_len(cluster, keys.queue()) == 6
    })
    .await;
    bounded("release", holder.release()).await.unwrap();
    // Let the hand-offs run, then disturb the cluster under them.
    let running = counter.load(Ordering::SeqCst);
    eventually("hand-offs to run", || async {
        counter.load(Ordering::SeqCst) >= running + 10
    })
    .await;
    let at_disturbance = counter.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| disturb(cluster, keys.key()));
    eventually("hand-offs to go on after the disturbance", || async {
        counter.load(Ordering::SeqCst) >= at_disturbance + 30
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut total = 0;
    for t in tasks {
        let (mine, longest) = bounded("contenders", t).await.unwrap();
        assert!(mine >= 5);
        assert!(
            longest <= wait,
            "a waiter waited {longest:?}, past its bound of {wait:?}"
        );
        total += mine;
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        total,
        "a section was lost or doubled"
    );
    // The waiters queue on the lock's new primary: its grant channels are there now.
    let pattern = format!("{}grant:*", keys.channel().trim_end_matches("released"));
    let owner = cluster.primary_for_key(keys.key()).unwrap();
    let probe = bounded("acquire", clients[1].lock(name).acquire())
        .await
        .unwrap();
    // No polling: only the grant on the new primary can get the waiter in.
    let waiter = {
        let lock = clients[0].lock(name).wait(wait).retry(no_polling());
        tokio::spawn(async move { lock.acquire().await })
    };
    eventually("the waiter to queue on the new primary", || async {
        queue_len(cluster, keys.queue()) == 1
    })
    .await;
    let channels = shard_channels(owner, &pattern);
    assert!(
        channels.iter().any(|c| shard_subscribers(owner, c) > 0),
        "no grant subscription on the lock's new primary: {channels:?}"
    );
    bounded("release", probe.release()).await.unwrap();
    let guard = bounded("hand-off on the new primary", waiter)
        .await
        .unwrap()
        .unwrap();
    bounded("release", guard.release()).await.unwrap();
}

/// The lock's slot moves to another primary (keys migrated) while waiters queue and the
/// lock is handed on: the waiters' grant subscriptions follow the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_survive_a_slot_migration() {
    let mut cluster = cluster();
    hand_offs_survive(&mut cluster, "migrating", |cluster, key| {
        let slot = cluster.slot(key).unwrap();
        let owner = cluster.primary_for_slot(slot).unwrap();
        let to = (owner + 1) % 3;
        cluster.migrate_slot(slot, to).unwrap();
        assert_eq!(cluster.primary_for_slot(slot).unwrap(), to);
    })
    .await;
}

/// The lock's primary fails over to its replica while waiters queue and the lock is handed
/// on: the waiters' grant subscriptions follow to the new primary. (This and the slot
/// migration above once failed under load: a waiter listening for release notices while
/// its subscription moved took the free lock and left its queue place behind, so a later
/// release handed the lock to that finished acquisition and every waiter waited out its
/// 20 s; see `a_waiter_taking_the_lock_by_a_later_attempt_leaves_no_place`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_offs_survive_a_failover() {
    let mut cluster = cluster();
    hand_offs_survive(&mut cluster, "failing-over", |cluster, key| {
        let owner = cluster
            .primary_for_slot(cluster.slot(key).unwrap())
            .unwrap();
        let old = cluster.primaries()[owner].port();
        assert_eq!(cluster.failover(owner).unwrap(), owner);
        assert_ne!(cluster.primaries()[owner].port(), old);
    })
    .await;
}

/// The lock's primary dies (SIGKILL) while waiters queue there, and its replica takes over
/// (`CLUSTER FAILOVER FORCE`): the waiters' grant subscriptions, whose connection now goes
/// nowhere, move to the new primary once the slot map names it, and every waiter is handed
/// the lock there. The waiters do not poll, and the holder's lease outlasts their wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_follow_a_dead_primary_to_its_replica() {
    let mut cluster = cluster();
    let holders = connect(&cluster).await;
    let waiters = connect(&cluster).await;
    // A tagged name, so that a probe lock shares its slot.
    let name = "{dead-primary}";
    let keys = holders.lock(name).keys().unwrap();
    let holder = bounded(
        "acquire",
        holders.lock(name).ttl(Duration::from_secs(60)).acquire(),
    )
    .await
    .unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..3_i64 {
        let lock = waiters
            .lock(name)
            .wait(Duration::from_secs(25))
            .retry(no_polling());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let guard = lock
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            tx.send(i).unwrap();
            guard.release().await.unwrap();
        }));
        eventually("the waiter to queue up", || async {
            queue_len(&cluster, keys.queue()) == i + 1
        })
        .await;
    }
    drop(tx);
    let owner = cluster.primary_for_key(keys.key()).unwrap();
    // Everything written so far is on the replica before the primary dies.
    assert_eq!(
        owner.query(&["WAIT", "1", "10000"]).unwrap(),
        Reply::Integer(1)
    );
    let shard = cluster
        .primary_for_slot(cluster.slot(keys.key()).unwrap())
        .unwrap();
    let dead_port = owner.port();
    let dead = cluster
        .nodes()
        .iter()
        .position(|n| n.port() == dead_port)
        .unwrap();
    tokio::task::block_in_place(|| {
        cluster.nodes_mut()[dead].kill();
        assert_eq!(cluster.failover_forced(shard).unwrap(), shard);
    });
    let new_primary = cluster.primaries()[shard];
    let pattern = format!("{}grant:*", keys.channel().trim_end_matches("released"));
    eventually("the grant subscription on the new primary", || async {
        shard_channels(new_primary, &pattern).len() == 1
    })
    .await;
    // The holders' client finds the new primary (its slot map refreshed) before it
    // releases: a release sent meanwhile could run out of its response timeout.
    eventually("the holders' client to reach the new primary", || async {
        match holders.lock("{dead-primary}:probe").try_acquire().await {
            Ok(Some(probe)) => probe.release().await.is_ok(),
            _ => false,
        }
    })
    .await;
    bounded("release", holder.release()).await.unwrap();
    for t in tasks {
        bounded("the waiters", t).await.unwrap();
    }
    let mut served = Vec::new();
    while let Some(i) = rx.recv().await {
        served.push(i);
    }
    served.sort_unstable();
    assert_eq!(served, vec![0, 1, 2]);
    tokio::task::block_in_place(|| {
        cluster.nodes_mut()[dead].restart().unwrap();
        cluster
            .wait_settled(redlease_local::DEFAULT_CLUSTER_TIMEOUT)
            .unwrap();
    });
}

/// A client whose slot map is stale (the lock's slot moved while the client had no channel
/// in it, so no node told it) subscribes the lock's grant channel on the old primary,
/// which refuses it (`MOVED`): the channel is placed on the slot's new primary, and the
/// waiter, not polling, is handed the lock there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_channel_refused_by_a_stale_primary_is_placed_on_the_new_one() {
    let mut cluster = cluster();
    let holders = connect(&cluster).await;
    let waiters = connect(&cluster).await;
    let slot_of = |cluster: &Cluster, name: &str| {
        let key = holders.lock(name).keys().unwrap().key().to_owned();
        cluster.slot(&key).unwrap()
    };
    // Two locks on different primaries: the first teaches the waiters' client the slot
    // map, the second's slot moves afterwards.
    let first = "warm-up";
    let warm = cluster.primary_for_slot(slot_of(&cluster, first)).unwrap();
    let second = (0..1000)
        .map(|i| format!("stale-{i}"))
        .find(|n| cluster.primary_for_slot(slot_of(&cluster, n)).unwrap() != warm)
        .unwrap();
    let second_slot = slot_of(&cluster, &second);
    for name in [first, second.as_str()] {
        let holder = bounded("acquire", holders.lock(name).acquire())
            .await
            .unwrap();
        let waiter = {
            let lock = waiters
                .lock(name)
                .wait(Duration::from_secs(20))
                .retry(no_polling());
            tokio::spawn(async move { lock.acquire().await })
        };
        let queue = holders.lock(name).keys().unwrap().queue().to_owned();
        eventually("the waiter to queue up", || async {
            queue_len(&cluster, &queue) == 1
        })
        .await;
        bounded("release", holder.release()).await.unwrap();
        let guard = bounded("the hand-off", waiter).await.unwrap().unwrap();
        bounded("release", guard.release()).await.unwrap();
        if name == first {
            // Move the second lock's slot to the primary that serves neither lock.
            let from = cluster.primary_for_slot(second_slot).unwrap();
            let to = (0..3).find(|&p| p != from && p != warm).unwrap();
            tokio::task::block_in_place(|| cluster.migrate_slot(second_slot, to).unwrap());
        }
    }
    let keys = waiters.lock(&second).keys().unwrap();
    let pattern = format!("{}grant:*", keys.channel().trim_end_matches("released"));
    let owner = cluster.primary_for_key(keys.key()).unwrap();
    let channels = shard_channels(owner, &pattern);
    assert_eq!(
        channels.len(),
        1,
        "grant channels on the new primary: {channels:?}"
    );
}
