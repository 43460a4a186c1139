//! The core behaviour of every primitive on the server binary under test: acquire, wait and
//! hand-off, renewal, loss, release and fencing, for the mutex, the semaphore, the
//! read-write lock, the multi-lock and the election; a quorum and a Redis Cluster (sharded
//! pub/sub, or classic where the server has none); and the error of a command the server
//! lacks.
//!
//! The binary is `redis-server` from the `PATH` (Debian's Redis 7.0), or the one named by
//! `REDLEASE_REDIS_SERVER` (read by `redlease-local`): `make test` runs this file again
//! against Redis 6.2.14, and `make compat SERVER=path/to/redis-server` against any server
//! (see the README's compatibility table).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{bounded, client, eventually, raw, server};
use redlease::{Client, Error, FencingToken};
#[cfg(feature = "cluster")]
use redlease_local::Cluster;
use redlease_local::{Nodes, RedisServer, ServerOptions};

/// Long enough for any wait here (a bound, not a pause).
const WAIT: Duration = Duration::from_secs(20);
/// Short enough that a lease outlives several of them only by being renewed.
const SHORT_TTL: Duration = Duration::from_millis(300);

/// The server's product and version as `HELLO` gives them (`redis`, `6.2.14`): what the
/// library reads at connect, and what its messages name.
async fn hello(server: &RedisServer) -> (String, String) {
    let mut conn = raw(server).await;
    let reply: HashMap<String, redis::Value> =
        redis::cmd("HELLO").query_async(&mut conn).await.unwrap();
    let text = |name: &str| match reply.get(name) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(redis::Value::SimpleString(s)) => s.clone(),
        other => panic!("HELLO gave {name} = {other:?}"),
    };
    (text("server"), text("version"))
}

/// A server and two clients on it (a holder and a waiter).
async fn two_clients() -> (RedisServer, Client, Client) {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    (server, a, b)
}

/// Deletes every key behind the library's back: every lease held on `server` is lost.
async fn wipe(server: &RedisServer) {
    let mut conn = raw(server).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
}

fn above(later: FencingToken, earlier: FencingToken, what: &str) {
    assert!(
        later.get() > earlier.get(),
        "{what}: fencing token {} is not above {}",
        later.get(),
        earlier.get()
    );
}

/// Renewal keeps a short lease for many ttls; another client cannot take it meanwhile.
async fn renewal_holds(is_held: impl Fn() -> bool, taken_by_other: impl AsyncFn() -> bool) {
    // Time passing (several ttls), not a stand-in for an event.
    tokio::time::sleep(SHORT_TTL * 4).await;
    assert!(is_held(), "the renewed lease was lost");
    assert!(
        !taken_by_other().await,
        "another client took a renewed lease"
    );
}

/// Starts `acquire` (on `waiter`, another client), lets it queue, then runs `release`:
/// what `acquire` got is handed on by the release.
async fn handed_off<T: Send + 'static>(
    waiter: &Client,
    acquire: impl Future<Output = redlease::Result<T>> + Send + 'static,
    release: impl Future<Output = redlease::Result<()>>,
) -> T {
    let task = tokio::spawn(acquire);
    eventually("the waiter waiting", || async {
        waiter.stats().waiting > 0
    })
    .await;
    release.await.unwrap();
    bounded("the hand-off", task).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_acquires_hands_off_renews_reports_loss_and_fences() {
    let (server, a, b) = two_clients().await;
    let first = a
        .lock("compat-mutex")
        .ttl(SHORT_TTL)
        .acquire()
        .await
        .unwrap();
    renewal_holds(
        || first.is_held(),
        async || {
            let other = b.lock("compat-mutex").try_acquire().await.unwrap();
            other.is_some()
        },
    )
    .await;
    // A waiter is handed the lock when its holder releases it.
    let first_token = first.fencing_token();
    let waiter = b.lock("compat-mutex").ttl(SHORT_TTL).wait(WAIT);
    let second = handed_off(&b, async move { waiter.acquire().await }, first.release()).await;
    above(second.fencing_token(), first_token, "the hand-off");
    // Loss: the key is gone behind its back; the guard learns it and a release says so.
    wipe(&server).await;
    bounded("the loss", second.lost()).await;
    assert!(!second.is_held());
    assert!(matches!(second.release().await, Err(Error::Lost { .. })));
    let third = a.lock("compat-mutex").acquire().await.unwrap();
    above(third.fencing_token(), first_token, "after the loss");
    third.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_admits_n_hands_off_renews_reports_loss_and_fences() {
    let (server, a, b) = two_clients().await;
    let sem = |c: &Client| c.semaphore("compat-sem", 2).ttl(SHORT_TTL).wait(WAIT);
    let one = sem(&a).acquire().await.unwrap();
    let two = sem(&a).acquire().await.unwrap();
    above(
        two.fencing_token(),
        one.fencing_token(),
        "the second permit",
    );
    renewal_holds(
        || one.is_held() && two.is_held(),
        async || sem(&b).try_acquire().await.unwrap().is_some(),
    )
    .await;
    let released = one.fencing_token();
    let waiter = sem(&b);
    let three = handed_off(&b, async move { waiter.acquire().await }, one.release()).await;
    above(three.fencing_token(), released, "the handed-off permit");
    wipe(&server).await;
    bounded("the loss", three.lost()).await;
    bounded("the loss", two.lost()).await;
    assert!(matches!(two.release().await, Err(Error::Lost { .. })));
    assert!(matches!(three.release().await, Err(Error::Lost { .. })));
    let again = sem(&a).acquire().await.unwrap();
    above(again.fencing_token(), released, "after the loss");
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_shares_excludes_hands_off_renews_reports_loss_and_fences() {
    let (server, a, b) = two_clients().await;
    let rw = |c: &Client| c.rwlock("compat-rw").ttl(SHORT_TTL).wait(WAIT);
    let reader = rw(&a).read().acquire().await.unwrap();
    let other_reader = rw(&b).read().try_acquire().await.unwrap();
    let other_reader = other_reader.unwrap_or_else(|| panic!("readers must share"));
    renewal_holds(
        || reader.is_held() && other_reader.is_held(),
        async || rw(&b).write().try_acquire().await.unwrap().is_some(),
    )
    .await;
    let read_token = reader.fencing_token();
    other_reader.release().await.unwrap();
    let waiter = rw(&b).write();
    let writer = handed_off(&b, async move { waiter.acquire().await }, reader.release()).await;
    above(writer.fencing_token(), read_token, "the writer");
    assert!(rw(&a).read().try_acquire().await.unwrap().is_none());
    // Downgrade: the writer becomes a reader, and other readers come in.
    let downgraded = writer.downgrade().await.unwrap();
    let joined = rw(&a).read().try_acquire().await.unwrap();
    let joined = joined.unwrap_or_else(|| panic!("a reader must join a downgraded lock"));
    wipe(&server).await;
    bounded("the loss", downgraded.lost()).await;
    assert!(matches!(
        downgraded.release().await,
        Err(Error::Lost { .. })
    ));
    assert!(matches!(joined.release().await, Err(Error::Lost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_takes_all_hands_off_renews_reports_loss_and_fences() {
    let (server, a, b) = two_clients().await;
    let all = a
        .multi_lock(["compat-a", "compat-b"])
        .ttl(SHORT_TTL)
        .acquire()
        .await
        .unwrap();
    renewal_holds(
        || all.is_held(),
        async || b.lock("compat-b").try_acquire().await.unwrap().is_some(),
    )
    .await;
    let held_b = all.fencing_token("compat-b").unwrap();
    let waiter = b
        .multi_lock(["compat-b", "compat-c"])
        .ttl(SHORT_TTL)
        .wait(WAIT);
    let next = handed_off(&b, async move { waiter.acquire().await }, all.release()).await;
    above(next.fencing_token("compat-b").unwrap(), held_b, "compat-b");
    wipe(&server).await;
    bounded("the loss", next.lost()).await;
    assert!(next.release().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_leads_hands_over_renews_reports_loss_and_raises_terms() {
    let (server, a, b) = two_clients().await;
    let leading = a
        .election("compat-election")
        .ttl(SHORT_TTL)
        .campaign("node-a")
        .await
        .unwrap();
    renewal_holds(
        || leading.is_leading(),
        async || {
            let leader = b.election("compat-election").leader().await.unwrap();
            leader.is_none_or(|l| l.note != "node-a")
        },
    )
    .await;
    let first_term = leading.term();
    let candidate = b.election("compat-election").ttl(SHORT_TTL).wait(WAIT);
    let campaign = async move { candidate.campaign("node-b").await };
    let next = handed_off(&b, campaign, leading.resign()).await;
    above(next.term(), first_term, "the new term");
    let leader = a.election("compat-election").leader().await.unwrap();
    assert_eq!(leader.map(|l| l.note).as_deref(), Some("node-b"));
    wipe(&server).await;
    bounded("the loss", next.lost()).await;
    assert!(!next.is_leading());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_mutex_acquires_waits_renews_and_fences() {
    let nodes = Nodes::start(3).unwrap();
    let a = Client::quorum(nodes.urls()).await.unwrap();
    let b = Client::quorum(nodes.urls()).await.unwrap();
    let first = a.lock("compat-q").ttl(SHORT_TTL).acquire().await.unwrap();
    renewal_holds(
        || first.is_held(),
        async || b.lock("compat-q").try_acquire().await.unwrap().is_some(),
    )
    .await;
    let token = first.fencing_token();
    let waiter = b.lock("compat-q").ttl(SHORT_TTL).wait(WAIT);
    let second = handed_off(&b, async move { waiter.acquire().await }, first.release()).await;
    above(second.fencing_token(), token, "the quorum's next holder");
    second.release().await.unwrap();
}

/// A Redis Cluster: waiters are handed a lock over sharded pub/sub where the server has it,
/// and woken by release notices over classic pub/sub where it does not (Redis 6.2); either
/// way a lock and a semaphore are taken, waited for, handed on and released.
#[cfg(feature = "cluster")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_hands_locks_and_permits_on() {
    let cluster = Cluster::start_with(3, 0).unwrap();
    let a = Client::cluster(cluster.urls()).await.unwrap();
    let b = Client::cluster(cluster.urls()).await.unwrap();
    let first = a.lock("compat-cluster").acquire().await.unwrap();
    let token = first.fencing_token();
    let waiter = b.lock("compat-cluster").wait(WAIT);
    let second = handed_off(&b, async move { waiter.acquire().await }, first.release()).await;
    above(second.fencing_token(), token, "the cluster's next holder");
    second.release().await.unwrap();
    let permit = a
        .semaphore("compat-cluster-sem", 1)
        .acquire()
        .await
        .unwrap();
    let token = permit.fencing_token();
    let waiter = b.semaphore("compat-cluster-sem", 1).wait(WAIT);
    let next = handed_off(&b, async move { waiter.acquire().await }, permit.release()).await;
    above(next.fencing_token(), token, "the cluster's next permit");
    next.release().await.unwrap();
}

/// A command a script calls that the server lacks (renamed away here, as an older server
/// lacks a newer command) is named with the server's version and the script, never taken
/// for an unreachable server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_server_lacks_is_named_with_its_version() {
    let server = RedisServer::start_with(
        ServerOptions::default()
            .arg("--rename-command")
            .arg("ZRANGEBYSCORE")
            .arg(""),
    )
    .unwrap();
    let c = client(&server).await;
    let refused = c.semaphore("compat-lacking", 2).try_acquire().await;
    let Err(e @ Error::ServerLacks { .. }) = refused else {
        panic!("expected ServerLacks, got {refused:?}");
    };
    let text = e.to_string();
    let (_, version) = hello(&server).await;
    assert!(text.contains(&format!(" {version} lacks")), "{text}");
    // Valkey 9's error names no script (its Lua moved into a module that leaves the
    // script's name empty): the command and the script are then unknown to the library.
    let named = std::error::Error::source(&e)
        .is_some_and(|cause| !cause.to_string().contains("script script: on"));
    if named {
        assert!(text.contains("`ZRANGEBYSCORE`"), "{text}");
        assert!(text.contains("sem_acquire.lua"), "{text}");
    } else {
        assert!(
            text.contains("a command that a redlease script calls"),
            "{text}"
        );
    }
    assert!(!text.contains("reachable"), "{text}");
    // The mutex, which does not call it, still works on that server.
    let guard = c.lock("compat-lacking-mutex").acquire().await.unwrap();
    guard.release().await.unwrap();
}
