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
    /// Its last write is lost: an asynchronous failover to a replica that had not received
    /// it yet, or a restart from an RDB snapshot or an `appendfsync everysec` file. The
    /// node comes back without the lock key and with the counter as it was before its last
    /// change (a grant, a write-back or an expiry).
    LastWriteLost,
}

impl Persistence {
    /// What a crash does, for timelines.
    pub fn crash(self) -> &'static str {
        match self {
            Persistence::Everything => "its lock key and counter are on disk",
            Persistence::CounterOnly => "it loses the lock key; the counter is kept",
            Persistence::Nothing => "no persistence: it loses the lock key and the counter",
            Persistence::LastWriteLost => {
                "its last write is lost (asynchronous replication or persistence): it loses \
                 the lock key, and its counter is back to before its last change"
            }
        }
    }
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

/// How a node grants a fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fencing {
    /// The earlier scripts: `INCR` of the node's counter (`stored + 1`). A counter that
    /// is lost (a restart without persistence, an expiry) starts again at 1.
    Counter,
    /// `fence.lua`: `max(stored + 1, the node's clock)` (Redis `TIME` in µs), stored back.
    /// A node's clock is modelled in *fence units*, `per_tick` of them to a tick of the
    /// global clock: it never stops (not even while the node is down), advances with
    /// model time, drifts with the node's clock and may step back
    /// ([`Config::clock_step_back`]). `per_tick` stands for the µs resolution: it must be
    /// larger than the grants one node can make within one tick (so that a clock that
    /// moved on by a tick is past every token that node handed out), as a real clock moves
    /// on by more than a µs between two scripts.
    HybridClock {
        /// Fence units per tick.
        per_tick: u8,
    },
    /// `fence.lua` for one node (`step` <= 1): `stored + 1` while the node has a counter,
    /// the node's clock only when it has none (never used, expired, lost in a restart
    /// without persistence). One `INCR` on the common path instead of `TIME` and a `SET`.
    /// The clock is modelled as under [`HybridClock`](Fencing::HybridClock). Unlike the
    /// hybrid rule, a counter falls behind the clock as time passes (one unit a grant
    /// against `per_tick` a tick), so the values below every clock's floor still grow by
    /// one a grant and their distances matter (see `QuorumModel::canonical`).
    CounterThenClock {
        /// Fence units per tick.
        per_tick: u8,
    },
}

impl Fencing {
    /// The hybrid clock with 4 fence units per tick: more than the 2 grants (one per
    /// client and attempt) a node can make within a tick in one-attempt scenarios, and
    /// enough for two-attempt ones, whose extra grants need a give-back in between.
    pub const HYBRID: Fencing = Fencing::HybridClock { per_tick: 4 };

    /// The counter, then the clock, with the hybrid clock's 4 fence units per tick.
    pub const COUNTER_THEN_CLOCK: Fencing = Fencing::CounterThenClock { per_tick: 4 };

    /// Fence units per tick of a node's clock (0 for a plain counter: no clock).
    pub fn per_tick(self) -> i8 {
        match self {
            Fencing::Counter => 0,
            Fencing::HybridClock { per_tick } | Fencing::CounterThenClock { per_tick } => {
                i8::try_from(per_tick).unwrap_or(i8::MAX)
            }
        }
    }

    /// The grant as a node's script computes it, for timelines.
    pub fn rule(self) -> &'static str {
        match self {
            Fencing::Counter => "INCR",
            Fencing::HybridClock { .. } => "max(counter + 1, TIME)",
            Fencing::CounterThenClock { .. } => "counter + 1, or TIME when none",
        }
    }

    /// Whether a node's clock takes part in its grants.
    pub fn uses_clock(self) -> bool {
        self != Fencing::Counter
    }
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
    /// it to every token and changes nothing else). Under [`Fencing::HybridClock`], a
    /// spread of 0 starts every node without a counter (never used, expired, or one its
    /// clock has passed: all three grant alike), and 1 or more lets each node start
    /// either so or with a grant at this very instant (counter = its clock). Under
    /// [`Fencing::CounterThenClock`] (whose counters fall behind the clock, and where a
    /// counter behind the clock does not grant like a missing one), 0 and 1 mean the
    /// same, and 2 or more also lets each counter start behind the clock, by up to two
    /// ticks and a unit, in every order and distance across the nodes.
    pub counter_spread: u8,
    /// How the token is chosen.
    pub token_rule: TokenRule,
    /// The write-back round trip.
    pub write_back: WriteBack,
    /// The client's behaviour before its write.
    pub before_write: BeforeWrite,
    /// How a node grants a fencing token.
    pub fencing: Fencing,
    /// How far (in ticks) a node's clock steps back when it does (an NTP correction, a VM
    /// restored on a host whose clock is behind). Redis keys expire on the wall clock, so
    /// a key present on that node lives that much longer.
    pub clock_step_back: u8,
    /// How many node clocks may step back in one run, each once, at any moment (0: clocks
    /// never step back).
    pub clocks_stepping_back: u8,
    /// Fencing counters that may expire in one run (`fence.lua` keeps a counter its keep,
    /// an hour by default, past the later of its value and the clock). Under a rule with
    /// a clock a counter expires once the node's clock is past it, held or not: a
    /// stronger fault than the keep; a plain counter only on a node holding no lock key.
    pub counter_expiries: u8,
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
            fencing: Fencing::Counter,
            clock_step_back: 0,
            clocks_stepping_back: 0,
            counter_expiries: 0,
        }
    }

    /// The majority: `nodes / 2 + 1`.
    pub fn majority(&self) -> usize {
        self.nodes / 2 + 1
    }
}
