//! What one model run explores: sizes, time bounds, fault budgets and protocol variants.

/// Which ways a drifting clock may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Drift {
    /// Either way, for any clock.
    Any,
    /// Only the ways that stretch a lease: a client's clock runs slow (its lease looks
    /// valid longer, its timeouts fire later) and a node's clock runs fast (keys expire
    /// early).
    Adversarial,
}

/// How a paused client's clock behaves while it is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseClock {
    /// A GC pause, `SIGSTOP`, a page-fault storm: the process does nothing, but its monotonic
    /// clock (tokio's `Instant`, `CLOCK_MONOTONIC`) keeps running, so its timers and
    /// `is_held()` see the time that passed.
    Runs,
    /// A suspended virtual machine (or a laptop lid): `CLOCK_MONOTONIC` stops with the
    /// process, so after the pause the client believes no time passed.
    Stops,
}

/// What a Redis node still has after it crashes and restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Persistence {
    /// `appendonly yes` + `appendfsync always`: the lock key (with its absolute expiry) and
    /// the fencing counter survive.
    Everything,
    /// The counter survives but the lock key does not: no persistence for the lock, and an
    /// operator (or a separate durable store) restores the counter at or above every token
    /// the node ever handed out. The lock key alone is what Redlock's delayed restart
    /// protects.
    CounterOnly,
    /// No persistence: the node comes back empty, counter at 0.
    Nothing,
}

/// How a node comes back after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Restart {
    /// What survives the crash.
    pub persistence: Persistence,
    /// Global ticks the node must stay down before it may rejoin (Redlock's *delayed
    /// restart* is at least the longest TTL).
    pub min_down: u8,
}

/// How the holder's fencing token is chosen from the granting nodes' counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenRule {
    /// As `quorum.rs`: the largest counter among the granting nodes.
    MajorityMax,
    /// A mutation: the counter of a single granting node instead of the largest one (the
    /// checker tries every granting node).
    OneGranter,
}

/// The second round trip of `quorum::acquire`: `raise_fence.lua` on the nodes behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WriteBack {
    /// As `quorum.rs` and `raise_fence.lua`: raise the counter of every node whose counter
    /// is not at the token, whether or not that node still holds our lock; succeed when
    /// the nodes at the token plus the nodes that confirmed reach a majority.
    Unconditional,
    /// A proposed fix: write back only to the nodes that granted this attempt (whose
    /// counters the token accounts for), and have a node raise its counter only while its
    /// lock key still holds our owner token (otherwise it answers "not ours", which does
    /// not count).
    WhileHeld,
    /// A mutation: no write-back at all; the token is returned at once.
    Off,
}

/// What a client does between getting the guard and writing to the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BeforeWrite {
    /// Checks `guard.is_held()` (its clock is before `valid_until`) and writes only if so;
    /// otherwise it gives the lock back without writing.
    CheckIsHeld,
    /// Writes with its fencing token without looking at its clock: the client that
    /// fencing exists for.
    JustWrite,
}

/// One model: the deployment, the bounds, the faults allowed, and the protocol variant.
///
/// Times are in *ticks* of a global clock. A tick is coarse: a lease is a handful of them,
/// so the drift allowance (the code's `ttl/100 + 2 ms`) becomes whole ticks here; see
/// [`drift_allowance`](Config::drift_allowance).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// A short label for reports.
    pub name: &'static str,
    /// Independent Redis primaries (the majority is `nodes / 2 + 1`).
    pub nodes: usize,
    /// Clients; each makes one `acquire` call, writes once under the lock, and releases.
    pub clients: usize,
    /// The lease (`PX`), in ticks of the node's own clock.
    pub ttl: u8,
    /// What the client subtracts for clock drift when it judges validity
    /// (`valid_until = sent + ttl - drift_allowance`, on its own clock).
    pub drift_allowance: u8,
    /// The per-node timeout of each fan-out, on the client's clock (`quorum.rs`:
    /// `min(response timeout, ttl/10)`, 2 s against a 302 ms drift allowance by default).
    pub node_timeout: u8,
    /// How many clocks (clients' or nodes') may drift; each of them gains or loses one
    /// tick, once, at any moment of the run.
    pub drifting_clocks: u8,
    /// Which ways they drift.
    pub drift: Drift,
    /// Client pauses allowed in one run (any length, until the client is resumed).
    pub pauses: u8,
    /// What a paused client's clock does.
    pub pause_clock: PauseClock,
    /// Node crashes allowed in one run.
    pub crashes: u8,
    /// How a crashed node comes back.
    pub restart: Restart,
    /// Messages the network may lose in one run: a request lost with its connection before
    /// it ran, a reply lost after the script ran, or the release that gives back a failed
    /// attempt, lost on one node.
    pub lost_messages: u8,
    /// Acquisition attempts per `acquire` call (the first one and retries).
    pub attempts: u8,
    /// Each node's fencing counter starts anywhere in `0..=counter_spread` (the history
    /// before the run: grants some node missed while it was down or unreachable). Nodes
    /// are interchangeable, so only one order of each set of counters is explored, and
    /// only sets whose lowest counter is 0 (adding the same number to every counter adds
    /// it to every token and changes nothing else).
    pub counter_spread: u8,
    /// How the token is chosen.
    pub token_rule: TokenRule,
    /// The write-back round trip.
    pub write_back: WriteBack,
    /// The client's behaviour before its write.
    pub before_write: BeforeWrite,
}

impl Config {
    /// The protocol as `quorum.rs` implements it, with no fault switched on: 3 nodes,
    /// 2 clients, a lease of 4 ticks with 1 tick of drift allowance, a per-node timeout of
    /// 2 ticks (longer than the allowance, as in the code: `min(2 s, ttl/10)` against
    /// `ttl/100 + 2 ms`, and shorter than the validity, so that a majority with one node
    /// timed out can still succeed), one attempt per client, counters starting at 0 or 1,
    /// nodes that persist everything, clients that check `is_held()` before writing.
    pub fn code() -> Self {
        Config {
            name: "quorum.rs as written",
            nodes: 3,
            clients: 2,
            ttl: 4,
            drift_allowance: 1,
            node_timeout: 2,
            drifting_clocks: 0,
            drift: Drift::Any,
            pauses: 0,
            pause_clock: PauseClock::Runs,
            crashes: 0,
            restart: Restart {
                persistence: Persistence::Everything,
                min_down: 0,
            },
            lost_messages: 0,
            attempts: 1,
            counter_spread: 1,
            token_rule: TokenRule::MajorityMax,
            write_back: WriteBack::Unconditional,
            before_write: BeforeWrite::CheckIsHeld,
        }
    }

    /// The majority: `nodes / 2 + 1`.
    pub fn majority(&self) -> usize {
        self.nodes / 2 + 1
    }
}
