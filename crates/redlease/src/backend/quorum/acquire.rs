//! One acquisition attempt on every node of a quorum: done once a majority granted or no
//! majority can, with the fencing token written back to the granting nodes behind.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use redis::RedisResult;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::deployment::Deployment;
use crate::backend::node::{Conn, Node, fan_out};
use crate::error::{Error, NodeError, Result};
use crate::keys::LockKeys;
use crate::replies::Reply;
use crate::scripts::{self, AcquireArgs, Join, Kind};
use crate::ttl::drift;

use super::give_back::{OwnedAttempt, give_back_attempt, give_back_on, late, may_have_run};
use super::held::node_timeout;
use super::turns::{Turn, TurnKey};

/// One attempt on every node.
///
/// Done as soon as the outcome is decided: a majority granted, or so many nodes said busy
/// that no majority can grant (with a majority having answered), so a slow or silent node
/// costs nothing while a majority answers fast, and at most the per-node bound otherwise.
/// Grants this attempt may hold where it failed are given back: awaited (within the
/// per-node bound) on the nodes that granted, in the background on the nodes that did not
/// answer, so that the release still reaches such a node when it comes back. The next
/// attempt with the same token waits (within its per-node bound) until the give-back to a
/// node has finished before it asks that node again: a late give-back must never undo a
/// later grant.
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
    // listen for release notices instead (see `crate::notify::releases`).
    let args = AcquireArgs {
        join: match args.join {
            listen @ Join::Listen { .. } => listen,
            Join::No | Join::Leave | Join::Grants { .. } | Join::Silent { .. } => Join::No,
        },
        ..*args
    };
    let nodes = deployment.nodes.len();
    let Asked {
        mut replies,
        granted,
        busy,
        holder_pttl,
        timed_out,
        resting,
        stragglers,
    } = ask(deployment, keys, &args, sent + node_timeout).await;
    // Whether the nodes still to answer must give back what they grant: yes unless this
    // attempt succeeds (also when this future is dropped before it decides).
    let give_back_stragglers = |give_back: bool| {
        if let Some(verdict) = stragglers {
            let _ = verdict.send(give_back);
        }
    };
    let answered = granted + busy;
    let mut fence = 0;
    let mut fences = vec![None; nodes];
    // A node that already held our token set its expiry again (acquire.lua): `Ours`.
    let mut leftover = false;
    for (i, reply) in replies.iter().enumerate() {
        if let Some(Ok(reply @ (Reply::Fresh(f) | Reply::Ours(f)))) = reply {
            leftover |= matches!(reply, Reply::Ours(_));
            fence = fence.max(*f);
            fences[i] = Some(*f);
        }
    }
    let valid = || Instant::now() < sent + ttl.saturating_sub(drift(ttl));
    if granted >= needed && valid() {
        // Nodes whose counter already reached the token need no write-back; in the steady
        // state (every node saw every grant) that is all of them, and acquire costs one
        // round trip. Otherwise the token is written back to the other nodes that granted
        // this attempt, and counts only where the key is still ours.
        //
        // An election records its term on every node that granted, always (a second round
        // trip per campaign): readers report a leader only once a majority of the nodes
        // holding it name its term (see `leader`), never the lower counter that a node
        // not yet written back still shows.
        let at_fence = fences.iter().filter(|f| **f == Some(fence)).count();
        let election = args.kind == Kind::Leader;
        let behind: Vec<usize> = (0..fences.len())
            .filter(|&i| fences[i].is_some_and(|f| f < fence || election))
            .collect();
        let already = if election { 0 } else { at_fence };
        let recorded = already >= needed
            || already
                + raise_fence(
                    deployment,
                    keys,
                    args.kind,
                    fence,
                    args.token,
                    &behind,
                    node_timeout,
                )
                .await
                >= needed;
        // The write-back took time: the lease must still be valid after it.
        if recorded && valid() {
            give_back_stragglers(false);
            return Ok(if leftover {
                Reply::Ours(fence)
            } else {
                Reply::Fresh(fence)
            });
        }
        tracing::debug!("could not record the fencing token on a majority in time; giving back");
    }
    // Give back what this attempt took, and whatever a node that failed to answer may
    // hold; the nodes still to answer give back when they do.
    give_back_stragglers(true);
    let took: Vec<usize> = (0..nodes).filter(|&i| fences[i].is_some()).collect();
    let unknown: Vec<usize> = (0..nodes)
        .filter(|&i| matches!(&replies[i], Some(Err(e)) if may_have_run(e)))
        .collect();
    give_back_attempt(
        deployment,
        keys,
        args.kind,
        args.token,
        &took,
        &unknown,
        node_timeout,
    )
    .await;
    // A refusal that no retry changes (the name is another primitive's, a permit count
    // that differs) is the answer, not a missing node: retrying it would never end.
    let refused = replies
        .iter()
        .position(|r| matches!(r, Some(Err(e)) if is_final(e)));
    if let Some(Some(Err(e))) = refused.and_then(|i| replies.get_mut(i)).map(Option::take) {
        return Err(deployment.error("acquiring a lock", &keys.key, e));
    }
    if answered < needed {
        return Err(Error::NoQuorum {
            what: "granted the lock",
            acquired: granted,
            needed,
            errors: node_errors(deployment, &replies, timed_out, &resting),
        });
    }
    Ok(Reply::busy_unseen(holder_pttl))
}

/// Whether a node's refusal is final: the same call would be refused again (another
/// primitive's key, another permit count, a command the node's server lacks).
fn is_final(e: &redis::RedisError) -> bool {
    crate::error::error_code(e)
        .is_some_and(|code| code == "WRONGTYPE" || code.starts_with("REDLEASE_"))
        || crate::lua::lacking(&e.to_string()).is_some()
}

/// The failed nodes of an attempt, each with its error (a timeout when it did not
/// answer before the outcome was decided).
fn node_errors(
    deployment: &Deployment,
    replies: &[Option<RedisResult<Reply>>],
    timed_out: bool,
    resting: &[bool],
) -> Vec<NodeError> {
    deployment
        .nodes
        .iter()
        .zip(replies)
        .enumerate()
        .filter_map(|(i, (node, reply))| {
            let error = match reply {
                Some(Ok(_)) => return None,
                Some(Err(e)) => e.clone(),
                None if resting.get(i).copied().unwrap_or(false) => {
                    redis::RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        "down after a connection error; not waited for",
                    ))
                }
                // Not waited for: the others had decided the outcome without it.
                None if !timed_out => return None,
                None => late(),
            };
            Some(NodeError {
                node: node.label.clone(),
                error,
            })
        })
        .collect()
}

/// What the nodes said to one attempt, as far as it listened.
struct Asked {
    /// Per node: `None` when it did not answer before the outcome was decided.
    replies: Vec<Option<RedisResult<Reply>>>,
    granted: usize,
    busy: usize,
    holder_pttl: i64,
    /// Whether the listening stopped at the deadline (the nodes still to answer were too
    /// slow) rather than because the outcome was decided without them.
    timed_out: bool,
    /// Per node: taken for down after a connection error, and not answered (yet).
    resting: Vec<bool>,
    /// Tells the task that waits for the nodes still to answer whether to give back what
    /// they grant (`None`: no node left to wait for).
    stragglers: Option<oneshot::Sender<bool>>,
}

impl Asked {
    /// Whether the outcome is decided with `waited_for` nodes still to answer: a majority
    /// granted, or so many said busy (or failed) that no majority can grant.
    fn decided(&self, needed: usize, waited_for: usize) -> bool {
        let answered = self.granted + self.busy;
        self.granted >= needed
            || (answered >= needed && self.granted + waited_for < needed)
            || answered + waited_for < needed
    }
}

/// One node's part of an attempt: its index, its reply (`None`: never sent, called off
/// before its turn came), and its turn, held until whatever follows it on that node is
/// done. Owns what it needs, so that it can finish in the background.
type NodeAttempt =
    std::pin::Pin<Box<dyn Future<Output = (usize, Option<RedisResult<Reply>>, Turn)> + Send>>;

/// A node's request: not sent yet, sent, or called off before it was sent.
const WAITING: u8 = 0;
const SENT: u8 = 1;
const CALLED_OFF: u8 = 2;

/// Sends the attempt to every node (each in its turn: after the earlier commands of this
/// token to that node, see [`Turn`]), and listens until `deadline` or until the outcome is
/// decided. Requests not sent by then are called off; those sent are left to a background
/// task, which lets them complete (every node sees the attempt, as if it had been waited
/// for) and then gives back on them if told to, before the next command of this token
/// to that node.
async fn ask(
    deployment: &Deployment,
    keys: &LockKeys,
    args: &AcquireArgs<'_>,
    deadline: Instant,
) -> Asked {
    let needed = deployment.majority();
    let nodes = deployment.nodes.len();
    let mut asked = Asked {
        replies: (0..nodes).map(|_| None).collect(),
        granted: 0,
        busy: 0,
        holder_pttl: -1,
        timed_out: false,
        resting: Vec::new(),
        stragglers: None,
    };
    let shared = Arc::new(OwnedAttempt::of(deployment, keys, args));
    let timeout = deployment.response_timeout;
    // How long the catch-up of a node whose request was called off may take (`finish`):
    // up to the lease, each of its requests within the response timeout as well (the
    // node's connection bounds every request).
    let background = timeout.max(Duration::from_millis(args.ttl_ms));
    let states: Arc<Vec<AtomicU8>> = Arc::new((0..nodes).map(|_| AtomicU8::new(WAITING)).collect());
    let mut pending: FuturesUnordered<NodeAttempt> = deployment
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut turn = Turn::take(TurnKey::new(deployment, i, args.token));
            let conn = node.conn();
            let health = Arc::clone(&node.health);
            let attempt = Arc::clone(&shared);
            let states = Arc::clone(&states);
            let future: NodeAttempt = Box::pin(async move {
                turn.wait().await;
                if states[i]
                    .compare_exchange(WAITING, SENT, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    return (i, None, turn);
                }
                // Bounded by the node's connection: each request (an `EVALSHA`, and an
                // `EVAL` after a `NOSCRIPT`) within the response timeout, or the connection
                // is taken for silent and replaced. No timer of its own: five per attempt,
                // with one per reply awaited, were 7% of a quorum pair's client
                // instructions.
                let reply = health.call(attempt.acquire(conn.clone())).await;
                (i, Some(reply), turn)
            });
            future
        })
        .collect();
    // Nodes taken for down after a connection error are asked, but not waited for: the
    // outcome is decided as if they had failed, unless they answer first. Otherwise an
    // attempt whose live nodes split their votes would wait for a dead node's
    // reconnection attempts, and contended hand-overs would stall.
    asked.resting = deployment
        .nodes
        .iter()
        .map(|n| n.health.resting())
        .collect();
    // One timer for the whole attempt, not one per reply awaited.
    let deadline = tokio::time::sleep_until(deadline);
    tokio::pin!(deadline);
    loop {
        let waited_for = pending.len() - asked.resting.iter().filter(|r| **r).count();
        if asked.decided(needed, waited_for) {
            break;
        }
        let next = tokio::select! {
            biased;
            next = pending.next() => next,
            () = &mut deadline => {
                asked.timed_out = true;
                break;
            }
        };
        let Some((i, reply, _turn)) = next else {
            break;
        };
        if let Some(r) = asked.resting.get_mut(i) {
            *r = false;
        }
        let reply = reply.unwrap_or_else(|| Err(late()));
        match &reply {
            Ok(Reply::Fresh(_) | Reply::Ours(_)) => asked.granted += 1,
            Ok(Reply::Busy { pttl, .. }) => {
                asked.busy += 1;
                asked.holder_pttl = asked.holder_pttl.max(*pttl);
            }
            Err(e) => tracing::debug!(error = %e, "a quorum node did not grant the lock"),
        }
        asked.replies[i] = Some(reply);
    }
    if pending.is_empty() {
        return asked;
    }
    for state in states.iter() {
        let _ = state.compare_exchange(WAITING, CALLED_OFF, Ordering::AcqRel, Ordering::Acquire);
    }
    let (verdict, told) = oneshot::channel();
    asked.stragglers = Some(verdict);
    let conns: Vec<Conn> = deployment.nodes.iter().map(Node::conn).collect();
    // Tracked, so that `Client::shutdown` waits for the nodes that had not answered.
    deployment.background(finish(pending, told, conns, shared, (timeout, background)));
    asked
}

/// Lets the requests still out complete, then, each before its turn ends: gives back on
/// those nodes when `told` so (or when the attempt was dropped before it decided); when
/// the attempt succeeded, sends the requests that were called off before their turn
/// came, so that every node the attempt did not wait for still gets the lock.
async fn finish(
    mut pending: FuturesUnordered<NodeAttempt>,
    told: oneshot::Receiver<bool>,
    conns: Vec<Conn>,
    shared: Arc<OwnedAttempt>,
    (timeout, background): (Duration, Duration),
) {
    let mut late = Vec::new();
    while let Some(answer) = pending.next().await {
        late.push(answer);
    }
    // Dropped without a word: the attempt was abandoned; give back.
    let give_back = told.await.unwrap_or(true);
    let follow_ups = late.into_iter().map(|(i, reply, turn)| {
        let shared = Arc::clone(&shared);
        let conn = conns.get(i).cloned();
        async move {
            let Some(conn) = conn else {
                return;
            };
            match reply {
                Some(Ok(Reply::Fresh(_) | Reply::Ours(_))) if give_back => {
                    give_back_on(&shared, conn, i, timeout).await;
                }
                Some(Err(e)) if give_back && may_have_run(&e) => {
                    give_back_on(&shared, conn, i, timeout).await;
                }
                None if !give_back => {
                    let caught_up = tokio::time::timeout(background, shared.acquire(conn)).await;
                    if !matches!(caught_up, Ok(Ok(_))) {
                        tracing::debug!(node = i, "a late quorum node did not take the lock");
                    }
                }
                _ => {}
            }
            drop(turn);
        }
    });
    futures_util::future::join_all(follow_ups).await;
}

/// Writes `fence` back to the counters of the nodes at `indexes` (nodes that granted this
/// attempt); how many confirmed while their lock key still held `token`.
async fn raise_fence(
    deployment: &Deployment,
    keys: &LockKeys,
    kind: Kind,
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
                node.health
                    .call(node.invoke::<u64>(&scripts::raise_fence(
                        keys,
                        kind,
                        fence,
                        token,
                        deployment.fence_keep(),
                    )))
                    .await
            }),
        timeout,
    )
    .await;
    replies.iter().filter(|r| matches!(r, Ok(1))).count()
}
