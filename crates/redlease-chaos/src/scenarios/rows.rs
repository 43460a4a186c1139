//! The rows of the fault matrix, family by family (liveness, primitives, multi-locks,
//! hand-off, election, a lease's life; the partition family is in `partition.rs`), and the
//! matrix in the order RELIABILITY.md shows it.

use std::time::Duration;

use redlease_chaos::Primitive;

use crate::scenario::{Fault, Promise, Scenario, live, row};
use crate::worker::{Deployment, ShortenHow};

/// The liveness rows: cancellations, killed connections, Redis restarted with its data.
pub(super) fn liveness_rows() -> Vec<Scenario> {
    use Deployment::{Quorum, Single};
    let storm = live(row(
        "cancellation storm (acquire/run/release dropped at random)",
        Fault::CancelStorm,
        Single,
        Promise::Exclusive,
        "dropped futures give back what they took: no stall, no orphan",
    ));
    let quorum_storm = live(row(
        "quorum 5: cancellation storm",
        Fault::CancelStorm,
        Quorum,
        Promise::Exclusive,
        "dropped attempts give back their votes on every node",
    ));
    let short = live(row(
        "redis SIGKILL, down 200 ms, restarted with its data (AOF fsync always)",
        Fault::RestartKeptShort,
        Single,
        Promise::Exclusive,
        "outage ridden out within the wait; releases retried after the reconnect",
    ));
    let long = live(row(
        "redis SIGKILL, down 1 s, restarted with its data (AOF fsync always)",
        Fault::RestartKeptLong,
        Single,
        Promise::Exclusive,
        "outage ridden out within the wait; subscriptions restored",
    ));
    vec![
        storm,
        quorum_storm,
        live(row(
            "CLIENT KILL TYPE pubsub every 50-100 ms",
            Fault::KillPubsub,
            Single,
            Promise::Exclusive,
            "grant subscriptions restored; waiters still handed the lock",
        )),
        live(row(
            "CLIENT KILL TYPE normal every 50-100 ms",
            Fault::KillNormal,
            Single,
            Promise::Exclusive,
            "a release that met a dropped connection is retried",
        )),
        short,
        long,
    ]
}

/// The permits of the semaphore rows.
pub(super) const PERMITS: usize = 2;

/// The semaphore and read-write lock rows: the holder killed, the holder paused past its
/// lease, Redis restarted with its data. Each promises what the lock's row under the same
/// fault promises, with the primitive's own exclusion (at most [`PERMITS`] holders; no
/// writer with anyone).
pub(super) fn primitive_rows() -> Vec<Scenario> {
    use Deployment::Single;
    let of = |primitive, mut scenario: Scenario| {
        scenario.primitive = primitive;
        scenario
    };
    let sem = Primitive::Semaphore { permits: PERMITS };
    let rw = Primitive::RwLock;
    vec![
        of(
            sem,
            live(row(
                "semaphore 2: SIGKILL of a permit holder",
                Fault::KillHolder,
                Single,
                Promise::Exclusive,
                "never more than 2 holders; the dead holder's permit comes back within one TTL",
            )),
        ),
        of(
            sem,
            row(
                "semaphore 2: SIGSTOP of a permit holder > TTL, SIGCONT",
                Fault::PauseHolder,
                Single,
                Promise::Fenced,
                "the paused permit is reclaimed: a 3rd holder possible when it wakes; loss reported; tokens keep growing",
            ),
        ),
        of(
            sem,
            live(row(
                "semaphore 2: redis SIGKILL, down 1 s, restarted with data (AOF fsync always)",
                Fault::RestartKeptLong,
                Single,
                Promise::Exclusive,
                "permits survive the outage: never more than 2 holders; outage ridden out within the wait",
            )),
        ),
        of(
            rw,
            live(row(
                "rwlock (1 write in 3): SIGKILL of a reader or writer",
                Fault::KillHolder,
                Single,
                Promise::Exclusive,
                "no writer with anyone; readers share; the dead hold runs out within one TTL",
            )),
        ),
        of(
            rw,
            row(
                "rwlock (1 write in 3): SIGSTOP of a reader or writer > TTL, SIGCONT",
                Fault::PauseHolder,
                Single,
                Promise::Fenced,
                "a writer overlap possible when the paused holder wakes; stale reads and writes rejected; loss reported",
            ),
        ),
        of(
            rw,
            live(row(
                "rwlock (1 write in 3): redis SIGKILL, down 1 s, restarted with data (AOF fsync always)",
                Fault::RestartKeptLong,
                Single,
                Promise::Exclusive,
                "holds survive the outage: no writer with anyone; outage ridden out within the wait",
            )),
        ),
    ]
}

/// How many one-letter names the multi-lock rows draw their pairs from: 4, so that two
/// sections over disjoint pairs may run at once (any two pairs of 3 names share one).
pub(super) const MULTI_NAMES: usize = 4;

/// The multi-lock rows: workers hold two names drawn at random (in a random order) out of
/// [`MULTI_NAMES`]; each promises what the lock's row under the same fault promises, per
/// name.
pub(super) fn multilock_rows() -> Vec<Scenario> {
    let of = |mut scenario: Scenario| {
        scenario.primitive = Primitive::MultiLock { names: MULTI_NAMES };
        scenario
    };
    vec![
        of(live(row(
            "multi-lock (2 of 4 names): SIGKILL of a holder",
            Fault::KillHolder,
            Deployment::Single,
            Promise::Exclusive,
            "no name held twice; disjoint pairs run together; the dead holder's names come back within one TTL",
        ))),
        of(row(
            "multi-lock (2 of 4 names): quorum 5, one node SIGKILL, down 2 s, restarted empty",
            Fault::QuorumNodeDown,
            Deployment::Quorum,
            Promise::Exclusive,
            "4 nodes keep each name's majority: no name held twice, tokens keep growing per name",
        )),
    ]
}

/// The hand-off rows (issue 24, items 1 and 2): waiters paused while the lock is handed to
/// them, for the lock, the semaphore (1 and 2 permits) and the read-write lock's writers on
/// one Redis (where a grant message is trusted) and the lock over a quorum (where it is
/// confirmed); and Redis cut off for longer than the response timeout while waiters give
/// up, for the lock, the semaphore and the read-write lock.
pub(super) fn handoff_rows() -> Vec<Scenario> {
    use crate::handoff::{OUTAGE_RESPONSE_TIMEOUT, OUTAGE_TTL, OUTAGE_WAIT};
    let of = |primitive, mut scenario: Scenario| {
        scenario.primitive = primitive;
        scenario
    };
    let paused = |name, deployment| {
        row(
            name,
            Fault::PauseWaiter,
            deployment,
            Promise::Exclusive,
            "the waiter's grant runs out while it sleeps; awake, it never believes it holds: no overlapping claims",
        )
    };
    let outage = |name| {
        let mut scenario = live(row(
            name,
            Fault::OutageWaitersQuit,
            Deployment::Single,
            Promise::Exclusive,
            "places left by waiters that gave up are given back: the release's hand-off reaches a live waiter, no stall",
        ));
        scenario.wait = OUTAGE_WAIT;
        scenario.ttl = Some(OUTAGE_TTL);
        scenario.response_timeout = Some(OUTAGE_RESPONSE_TIMEOUT);
        scenario
    };
    let sem = |permits| Primitive::Semaphore { permits };
    vec![
        paused(
            "waiter SIGSTOP > TTL while handed the lock, SIGCONT",
            Deployment::Single,
        ),
        of(
            sem(1),
            paused(
                "semaphore 1: waiter SIGSTOP > TTL while handed a permit, SIGCONT",
                Deployment::Single,
            ),
        ),
        of(
            sem(PERMITS),
            paused(
                "semaphore 2: waiter SIGSTOP > TTL while handed a permit, SIGCONT",
                Deployment::Single,
            ),
        ),
        of(
            Primitive::RwLock,
            paused(
                "rwlock (1 write in 3): writer waiter SIGSTOP > TTL while handed the lock, SIGCONT",
                Deployment::Single,
            ),
        ),
        paused(
            "quorum 5: waiter SIGSTOP > TTL while handed the lock, SIGCONT",
            Deployment::Quorum,
        ),
        outage(
            "redis SIGKILL 800 ms (AOF) > response timeout 300 ms while 200 ms waits give up, 2 s lease",
        ),
        of(
            sem(PERMITS),
            outage(
                "semaphore 2: redis SIGKILL 800 ms (AOF) > response timeout 300 ms while waits give up, 2 s lease",
            ),
        ),
        of(
            Primitive::RwLock,
            outage(
                "rwlock (1 write in 3): redis SIGKILL 800 ms (AOF) > response timeout 300 ms while waits give up, 2 s lease",
            ),
        ),
    ]
}

/// The election row: workers campaign (`client.election`), lead for one section and
/// resign; the leader is paused past its lease. It promises what the lock's row under
/// the same fault promises: leadership is a lease on the election's lock.
pub(super) fn election_row() -> Scenario {
    let mut scenario = row(
        "election: SIGSTOP of the leader > TTL, SIGCONT",
        Fault::PauseHolder,
        Deployment::Single,
        Promise::Fenced,
        "a second leader possible while the paused one sleeps; its stale term rejected; loss reported",
    );
    scenario.primitive = Primitive::Election;
    scenario
}

/// The rows of a lease's whole life: shortening extends that are dropped, or fail after
/// they ran, a leadership that outlives its fencing counter, a Redis clock running fast,
/// a holder cut off silently, a waiter cut off silently when the lock is handed to it.
pub(super) fn lease_life_rows() -> Vec<Scenario> {
    use Deployment::Single;
    let mut dropped = row(
        "shortening extend (to ttl/10) dropped at 0-60 ms, proxy delays replies 50-400 ms",
        Fault::ProxyDelay,
        Single,
        Promise::Exclusive,
        "the claim is lowered before the extend is sent: a holder never believes past its shortened lease",
    );
    dropped.proxied = true;
    dropped.shorten = Some(ShortenHow::Dropped);
    let mut slow = row(
        "shortening extend (to ttl/10) answered after a ttl/20 response timeout; script cache flushed every 20 ms",
        Fault::ScriptFlush,
        Single,
        Promise::Exclusive,
        "an extend that ran but failed keeps the lowered claim; reloaded scripts change nothing",
    );
    slow.shorten = Some(ShortenHow::Slow);
    // The response timeout is a twentieth of the ttl (see `run`): half the short lease, so
    // that a holder is not kept inside by its extend past the lease it shortened.
    let mut counter = row(
        "leadership held while its fencing counter is deleted",
        Fault::CounterDeletedWhileHeld,
        Single,
        Promise::Exclusive,
        "the leader keeps its term (leader() reports it, see the note); the next terms keep growing",
    );
    counter.primitive = Primitive::Election;
    let own_links = |mut scenario: Scenario| {
        scenario.own_links = true;
        scenario
    };
    let cut = |name, heal_ms, promise, expected| {
        own_links(row(
            name,
            Fault::CutHolder { heal_ms },
            Single,
            promise,
            expected,
        ))
    };
    let mut within = cut(
        "redis clock x1.005 (inside the drift allowance): holder cut off silently 1.5 TTL",
        0,
        Promise::Exclusive,
        "claims end before Redis' fast clock expires the lease: no overlapping claims",
    );
    within.clock_rate = Some("1.005");
    let mut beyond = cut(
        "redis clock x1.05 (outside the drift allowance): holder cut off silently 1.5 TTL",
        0,
        Promise::ClockBroken,
        "clock assumption broken: a claim may outlive its key (overlapping claims possible); the clients' rate estimate in the note",
    );
    beyond.clock_rate = Some("1.05");
    let mut long = cut(
        "holder cut off silently (no reset) 8 s = 40 leases of 200 ms, healed",
        8000,
        Promise::Exclusive,
        "the 40 s heal of a 1 s lease at a fifth of the scale (2 rounds): loss reported before the lease ends; works again after the heal",
    );
    long.ttl = Some(Duration::from_millis(200));
    vec![
        dropped,
        slow,
        counter,
        within,
        beyond,
        cut(
            "holder cut off silently (no reset) > TTL, healed after 1 s",
            1000,
            Promise::Exclusive,
            "loss reported before the lease ends in Redis; others take over; the holder works again after the heal",
        ),
        cut(
            "holder cut off silently (no reset) > TTL, healed after 5 s",
            5000,
            Promise::Exclusive,
            "loss reported before the lease ends in Redis; others take over; the holder works again after the heal",
        ),
        long,
        own_links(row(
            "waiter cut off silently (no reset) when handed the lock, healed after 2 TTL",
            Fault::CutWaiter,
            Single,
            Promise::Exclusive,
            "the hand-off lasts its claim window (ttl/10), then the next waiter is served: a stall of about the window, not a ttl (see the note); no overlapping claims; the waiter works again after the heal",
        )),
        cut_waiter_of(
            Primitive::Semaphore { permits: 1 },
            "semaphore 1: waiter cut off silently (no reset) when handed a permit, healed after 2 TTL",
        ),
        cut_waiter_of(
            Primitive::RwLock,
            "rwlock (1 write in 3): waiter cut off silently (no reset) when handed the lock, healed after 2 TTL",
        ),
    ]
}

/// The cut-waiter row of another primitive than the lock: the same hand-off
/// (`scripts/lib/grants.lua`), the same claim window.
fn cut_waiter_of(primitive: Primitive, name: &'static str) -> Scenario {
    let mut scenario = row(
        name,
        Fault::CutWaiter,
        Deployment::Single,
        Promise::Exclusive,
        "the grant lasts its claim window (ttl/10), then the next waiter is served: a stall of about the window, not a ttl (see the note); no overlapping claims; the waiter works again after the heal",
    );
    scenario.own_links = true;
    scenario.primitive = primitive;
    scenario
}

/// The rows of issue 42 (one hand-off for every primitive), on one Redis whose every
/// worker has a link of its own, each bounded by a claim window + 0.5 s from its event to
/// the next holder (`crate::heads`): waiters giving up behind a crashed holder and a
/// releaser exiting after a hand-off to a cut waiter, for the lock, a semaphore of 1 and a
/// read-write lock; a queued head that keeps others out killed, for a read-write lock's
/// writer and a semaphore's request for 2 permits.
pub(super) fn issue42_rows() -> Vec<Scenario> {
    let of = |primitive, workers, name, fault, expected| {
        let mut scenario = row(
            name,
            fault,
            Deployment::Single,
            Promise::Exclusive,
            expected,
        );
        scenario.own_links = true;
        scenario.primitive = primitive;
        scenario.workers = Some(workers);
        scenario
    };
    let quit = "the 3rd waiter gets the lease within a claim window + 0.5 s of the crashed lease's end (see the note); no overlapping claims";
    let exits = "the next waiter gets the lease within a claim window + 0.5 s of the release, with nothing of the releaser left to serve it (see the note); no overlapping claims";
    let killed = "the first waiter behind the head gets in within a claim window + 0.5 s of the kill (see the note); no overlapping claims";
    let sem1 = Primitive::Semaphore { permits: 1 };
    vec![
        of(
            Primitive::Mutex,
            5,
            "issue 42: holder's link silenced, first 2 waiters give up",
            Fault::QuitBehindCrashedHolder,
            quit,
        ),
        of(
            sem1,
            5,
            "issue 42: semaphore 1: holder's link silenced, first 2 waiters give up",
            Fault::QuitBehindCrashedHolder,
            quit,
        ),
        of(
            Primitive::RwLock,
            5,
            "issue 42: rwlock (1 write in 3): writer's link silenced, first 2 waiters give up",
            Fault::QuitBehindCrashedHolder,
            quit,
        ),
        of(
            Primitive::Mutex,
            4,
            "issue 42: releaser exits right after a hand-off to a waiter cut off silently",
            Fault::CutWaiterReleaserExits,
            exits,
        ),
        of(
            sem1,
            4,
            "issue 42: semaphore 1: releaser exits right after a hand-off to a waiter cut off silently",
            Fault::CutWaiterReleaserExits,
            exits,
        ),
        of(
            Primitive::RwLock,
            4,
            "issue 42: rwlock (1 write in 3): releaser exits right after a hand-off to a waiter cut off silently",
            Fault::CutWaiterReleaserExits,
            exits,
        ),
        of(
            Primitive::RwLock,
            4,
            "issue 42: rwlock: queued writer SIGKILLed while a reader holds, readers behind it",
            Fault::KillQueuedHead,
            killed,
        ),
        of(
            Primitive::Semaphore { permits: PERMITS },
            4,
            "issue 42: semaphore 2: queued request for 2 permits SIGKILLed while 1 is held",
            Fault::KillQueuedHead,
            killed,
        ),
    ]
}

/// Every scenario, in report order.
#[expect(
    clippy::too_many_lines,
    reason = "one table of rows, read top to bottom"
)]
pub(crate) fn matrix() -> Vec<Scenario> {
    use Deployment::{Quorum, Sentinel as Sent, Single};
    use Promise::{DataLoss, Exclusive, Fenced};
    let mut rows = vec![
        live(row(
            "baseline (no fault)",
            Fault::None,
            Single,
            Exclusive,
            "exclusion, increasing tokens",
        )),
        live(row(
            "holder SIGKILL",
            Fault::KillHolder,
            Single,
            Exclusive,
            "lock freed within one TTL",
        )),
        row(
            "holder SIGSTOP > TTL, SIGCONT",
            Fault::PauseHolder,
            Single,
            Fenced,
            "overlap possible; stale write rejected; loss reported",
        ),
        row(
            "redis SIGKILL + immediate restart, no persistence",
            Fault::RestartNow,
            Single,
            DataLoss,
            "the lock is forgotten: overlaps possible (Redlock admits it); tokens keep growing",
        ),
        row(
            "redis SIGKILL + restart after max TTL, no persistence",
            Fault::RestartDelayed,
            Single,
            DataLoss,
            "exclusion kept; the counter is lost, tokens keep growing",
        ),
        row(
            "redis SIGSTOP > TTL, SIGCONT",
            Fault::PauseRedis,
            Single,
            Exclusive,
            "leases lost, no overlap",
        ),
        live(row(
            "SCRIPT FLUSH every 20 ms",
            Fault::ScriptFlush,
            Single,
            Exclusive,
            "scripts reloaded, nothing else",
        )),
        live(row(
            "fencing counter expired (deleted) every 20-50 ms",
            Fault::CounterExpired,
            Single,
            Exclusive,
            "tokens keep growing: the next grant takes Redis' clock in µs",
        )),
        row(
            "BUSY script > TTL, SCRIPT KILL",
            Fault::Busy,
            Single,
            Exclusive,
            "leases lost, no overlap",
        ),
        row(
            "quorum 5: 2 nodes SIGKILL, restart after max TTL",
            Fault::QuorumMinorityDelayed,
            Quorum,
            Exclusive,
            "majority keeps the lock; exclusion kept",
        ),
        row(
            "quorum 5: 3 nodes SIGKILL + immediate restart",
            Fault::QuorumMajorityNow,
            Quorum,
            DataLoss,
            "a majority forgot the lock: overlaps possible; tokens keep growing",
        ),
    ];
    let mut delay = row(
        "proxy delays replies 50-400 ms",
        Fault::ProxyDelay,
        Single,
        Exclusive,
        "validity shrinks, no overlap",
    );
    delay.proxied = true;
    let mut lose = row(
        "proxy drops a reply every 100 ms",
        Fault::ProxyLoseReply,
        Single,
        Exclusive,
        "retries settle unknown outcomes",
    );
    lose.proxied = true;
    rows.extend([delay, lose]);
    rows.extend(crate::partition::rows());
    rows.push(row(
        "sentinel planned failover (SENTINEL FAILOVER)",
        Fault::SentinelFailover,
        Sent,
        Exclusive,
        "clients leave the old primary when the sentinels start the failover: no overlap, tokens keep growing",
    ));
    let mut with = row(
        "sentinel failover, min_replicas 1",
        Fault::SentinelFailover,
        Sent,
        DataLoss,
        "narrows the loss window; a replica not asked may be promoted; tokens keep growing",
    );
    with.min_replicas = 1;
    rows.push(with);
    rows.push(row(
        "cluster failover (async replication)",
        Fault::ClusterFailover,
        Deployment::Cluster,
        DataLoss,
        "graceful CLUSTER FAILOVER: the replica catches up first, so no loss is expected",
    ));
    let mut cluster_with = row(
        "cluster failover, min_replicas 1",
        Fault::ClusterFailover,
        Deployment::Cluster,
        DataLoss,
        "graceful, as above; WAIT adds nothing a graceful failover needs",
    );
    cluster_with.min_replicas = 1;
    rows.push(cluster_with);
    rows.push(row(
        "cluster primary SIGKILL, CLUSTER FAILOVER FORCE",
        Fault::ClusterPrimaryCrash,
        Deployment::Cluster,
        DataLoss,
        "writes not yet replicated are lost: a lock can be lost; tokens keep growing",
    ));
    rows.push(row(
        "sentinel primary SIGKILL, promoted by the sentinels",
        Fault::SentinelPrimaryCrash,
        Sent,
        DataLoss,
        "unreplicated writes lost; the old primary restarts empty as a primary until the sentinels demote it, and clients must not go back to it",
    ));
    rows.extend(liveness_rows());
    rows.extend(primitive_rows());
    rows.extend(multilock_rows());
    rows.push(election_row());
    rows.extend(handoff_rows());
    rows.extend(lease_life_rows());
    rows.extend(issue42_rows());
    rows
}
