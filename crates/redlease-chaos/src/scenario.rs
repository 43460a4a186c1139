//! A row of the fault matrix: the fault it injects, the deployment it needs, the guarantee
//! redlease claims under it ([`Promise`]), and the builders of a row. The rows themselves
//! are in `scenarios/` (`rows.rs`; and the partition family's in `partition.rs`).

use std::time::Duration;

use redlease_chaos::Primitive;
use serde::Serialize;

use crate::worker::{Deployment, ShortenHow};

/// What redlease claims under a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Promise {
    /// Fenced safety and unfenced exclusion: no stale write, no overlap.
    Exclusive,
    /// Fenced safety only: overlaps are expected (a paused holder outlives its lease).
    Fenced,
    /// Fenced safety only, under data loss (a restart without persistence, an
    /// asynchronous failover): the lock can be forgotten, so overlaps are admitted; the
    /// hybrid-clock tokens keep growing.
    DataLoss,
    /// Fenced safety only, with Redis' clock running faster than the client's beyond what
    /// a claim allows for: a guard's claim may outlive its lease in Redis (overlapping
    /// claims admitted); tokens keep growing.
    ClockBroken,
}

/// The faults of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Fault {
    None,
    KillHolder,
    PauseHolder,
    RestartNow,
    RestartDelayed,
    PauseRedis,
    ScriptFlush,
    Busy,
    QuorumMinorityDelayed,
    QuorumMajorityNow,
    ProxyDelay,
    ProxyLoseReply,
    /// The holder alone cut off from 3 of 5 quorum nodes (its own proxies) > TTL.
    PartitionHolderMajority,
    /// The holder alone cut off from 2 of 5 quorum nodes > TTL: it keeps a majority.
    PartitionHolderMinority,
    SentinelFailover,
    ClusterFailover,
    ClusterPrimaryCrash,
    SentinelPrimaryCrash,
    /// No fault from the runner: the workers drop their own futures (`worker --storm`).
    CancelStorm,
    /// `CLIENT KILL TYPE pubsub` every 50-100 ms for 2 s.
    KillPubsub,
    /// The lock's fencing counter deleted every 20-50 ms for 2 s, as if it had expired
    /// between two holders (it expires the client's fence keep, an hour by default, after
    /// the server's clock passed it).
    CounterExpired,
    /// `CLIENT KILL TYPE normal` every 50-100 ms for 2 s.
    KillNormal,
    /// Redis (with an fsync-always AOF) killed with SIGKILL, down 200 ms, restarted with its data.
    RestartKeptShort,
    /// The same, down 1 s.
    RestartKeptLong,
    /// One quorum node killed (SIGKILL) while a worker is inside its section, down 2 s (at least
    /// max TTL), restarted empty.
    QuorumNodeDown,
    /// A waiter stopped (SIGSTOP) > TTL while the lock is handed to it, SIGCONT while the next
    /// holder is inside (see [`crate::handoff::pause_waiter`]).
    PauseWaiter,
    /// Redis (AOF fsync always) killed (SIGKILL) for longer than the response timeout while a
    /// holder stays in and the waiters' short waits end (see
    /// [`crate::handoff::outage_while_waiters_quit`]).
    OutageWaitersQuit,
    /// The holder alone cut off silently from Redis (its own proxy holds every byte, no
    /// reset) for `heal_ms` (0: 1.5 TTL), then healed.
    CutHolder {
        heal_ms: u64,
    },
    /// A waiter cut off silently from Redis (its own proxy drops every byte, no reset)
    /// while the lock is handed to it, healed two leases after the cut (see
    /// [`crate::handoff::cut_waiter`]).
    CutWaiter,
    /// As [`Fault::CutWaiter`], and the holder's process ends right after its release
    /// (issue 42).
    CutWaiterReleaserExits,
    /// A holder's link silenced (a crash) while the first two waiters of the queue give up
    /// their waits (see [`crate::heads::quit_behind_crashed_holder`]).
    QuitBehindCrashedHolder,
    /// A queued head that keeps others out killed with SIGKILL (see
    /// [`crate::heads::kill_queued_head`]).
    KillQueuedHead,
    /// The lock's fencing counter deleted while a leader holds (as if it had expired
    /// mid-hold); `leader()` asked for the term right after and a ttl later.
    CounterDeletedWhileHeld,
}

/// One row of the matrix.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scenario {
    pub(crate) name: &'static str,
    pub(crate) fault: Fault,
    pub(crate) deployment: Deployment,
    pub(crate) proxied: bool,
    pub(crate) min_replicas: usize,
    pub(crate) promise: Promise,
    pub(crate) expected: &'static str,
    /// The liveness target is promised under this fault (see [`redlease_chaos::liveness`]).
    pub(crate) live: bool,
    /// The lock's wait in every worker.
    pub(crate) wait: Duration,
    /// What the workers hold.
    pub(crate) primitive: Primitive,
    /// The lease of this row, instead of the run's (`--ttl`).
    pub(crate) ttl: Option<Duration>,
    /// The workers' response timeout, instead of the library's default.
    pub(crate) response_timeout: Option<Duration>,
    /// Every section extends its lease to a tenth of the ttl, going wrong this way.
    pub(crate) shorten: Option<ShortenHow>,
    /// A single Redis reached by every worker through a proxy of its own (to cut one
    /// worker off alone).
    pub(crate) own_links: bool,
    /// Redis' wall clock runs this many times as fast (`FAST_CLOCK_RATE` of an
    /// `LD_PRELOAD` shim, `crates/redlease/tests/clock/fast_clock.c`).
    pub(crate) clock_rate: Option<&'static str>,
    /// Worker processes of this row, instead of the run's (`--workers`).
    pub(crate) workers: Option<usize>,
}

impl Scenario {
    /// Workers run the cancellation storm.
    pub(crate) fn storm(&self) -> bool {
        self.fault == Fault::CancelStorm
    }

    /// A single Redis with `appendonly yes`, `appendfsync always`: a restart keeps its data.
    pub(crate) fn persistent(&self) -> bool {
        matches!(
            self.fault,
            Fault::RestartKeptShort | Fault::RestartKeptLong | Fault::OutageWaitersQuit
        )
    }
}

/// The workers' wait in the rows written before the liveness rows.
const WAIT: Duration = Duration::from_secs(5);
/// The workers' wait in the liveness rows: long enough to ride out a 1 s outage, short
/// enough that a wait held up by a stall of one ttl or by a reconnect ignoring it shows.
const LIVE_WAIT: Duration = Duration::from_secs(2);

pub(crate) const fn row(
    name: &'static str,
    fault: Fault,
    deployment: Deployment,
    promise: Promise,
    expected: &'static str,
) -> Scenario {
    Scenario {
        name,
        fault,
        deployment,
        proxied: false,
        min_replicas: 0,
        promise,
        expected,
        live: false,
        wait: WAIT,
        primitive: Primitive::Mutex,
        ttl: None,
        response_timeout: None,
        shorten: None,
        own_links: false,
        clock_rate: None,
        workers: None,
    }
}

/// A row under the liveness target, with workers waiting [`LIVE_WAIT`].
pub(crate) const fn live(mut scenario: Scenario) -> Scenario {
    scenario.live = true;
    scenario.wait = LIVE_WAIT;
    scenario
}
