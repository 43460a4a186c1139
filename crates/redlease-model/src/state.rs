//! The state of one model run: nodes, clients and the fenced resource.

use crate::slots::Slots;

/// The most nodes a model may have.
pub const MAX_NODES: usize = 5;
/// The most clients a model may have.
pub const MAX_CLIENTS: usize = 3;

/// A fencing token or counter value.
///
/// Under [`Fencing::Counter`](crate::Fencing::Counter) it is the counter itself. Under
/// [`Fencing::HybridClock`](crate::Fencing::HybridClock) it is kept *relative to global
/// time* (the value minus the global clock, in fence units), so that states hold no
/// absolute time: every value drops by `per_tick` on each tick, and values that every
/// clock has left behind for good are renumbered by rank (see
/// `QuorumModel::canonical`), since only their order still matters.
pub type Fence = i8;

/// No counter (and, for the resource, no token accepted yet): below every value.
pub const ABSENT: Fence = Fence::MIN;

/// A node's lock key: whose owner token it holds and how long it has left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LockKey {
    /// The client whose owner token is stored.
    pub owner: u8,
    /// Ticks of the node's clock until the key expires (`PX` counted from `SET`); the key
    /// is gone when this reaches 0.
    pub ttl_left: u8,
}

/// One independent Redis primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Node {
    /// Up and serving; a down node fails every request at once.
    pub up: bool,
    /// Global ticks spent down, counted up to the restart delay.
    pub down_for: u8,
    /// The lock key, when present and not expired.
    pub lock: Option<LockKey>,
    /// The fencing counter (the last grant, raised by `raise_fence.lua`), or [`ABSENT`].
    pub counter: Fence,
    /// Under [`Persistence::LastWriteLost`](crate::Persistence::LastWriteLost), the
    /// counter before its last change, which a crash brings back; [`ABSENT`] otherwise.
    pub previous: Fence,
    /// Under the hybrid clock, the node's clock (`TIME`) minus the global clock, in fence
    /// units: changed by drift and by a step back, never by a crash. Always 0 under a
    /// plain counter.
    pub clock: Fence,
    /// Whether this node's clock has used its one drift step.
    pub drifted: bool,
    /// Whether this node's clock has stepped back (once at most).
    pub stepped_back: bool,
}

/// The reply a client holds for one node during a fan-out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Reply {
    /// Not part of this fan-out.
    #[default]
    Unsent,
    /// Sent, no reply yet.
    Pending,
    /// Not granted: `acquire.lua` found another owner's key, or the node did not answer
    /// in time, was down, or the reply was lost (the client acts the same on all of them).
    Failed,
    /// `acquire.lua` granted (fresh, or already ours) with this counter value.
    Granted(Fence),
    /// Write-back: done.
    Yes,
    /// Write-back (only while held): the key is not ours.
    No,
}

/// A request a client sent to a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Request {
    /// `acquire.lua`.
    Acquire,
    /// `raise_fence.lua` with this token.
    Raise(Fence),
}

/// Requests a client stopped waiting for (its timeout fired) that are still on their way:
/// the connection to a node is one TCP stream, so they run, in order, before anything the
/// client sends to that node later, unless the connection breaks (a crash, a lost message).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Backlog {
    /// Nothing left behind.
    #[default]
    Empty,
    /// A timed-out acquire.
    Acquire,
    /// A timed-out write-back.
    Raise(Fence),
    /// A timed-out acquire, then a timed-out write-back to the same node.
    AcquireRaise(Fence),
}

impl Backlog {
    /// The oldest request left behind.
    pub fn head(self) -> Option<Request> {
        match self {
            Backlog::Empty => None,
            Backlog::Acquire | Backlog::AcquireRaise(_) => Some(Request::Acquire),
            Backlog::Raise(t) => Some(Request::Raise(t)),
        }
    }

    /// The backlog once its oldest request has run (or was lost).
    #[must_use]
    pub fn pop(self) -> Backlog {
        match self {
            Backlog::AcquireRaise(t) => Backlog::Raise(t),
            _ => Backlog::Empty,
        }
    }

    /// The backlog with `request` queued behind it.
    #[must_use]
    pub fn push(self, request: Request) -> Backlog {
        match (self, request) {
            (Backlog::Empty, Request::Acquire) => Backlog::Acquire,
            (Backlog::Empty, Request::Raise(t)) => Backlog::Raise(t),
            (Backlog::Acquire, Request::Raise(t)) => Backlog::AcquireRaise(t),
            // A client sends at most one acquire, then one write-back, per attempt.
            (other, _) => other,
        }
    }
}

/// When an acquisition happened, for the stale-write check: the clients whose acquisition
/// had already returned when this one's winning attempt was sent (a bit per client).
pub type Before = u8;

/// A client's place in its program.
///
/// Times are kept relative to the client's own clock (ticks elapsed, ticks left), which is
/// all the protocol ever compares, so two moments that differ only by when they happen are
/// one state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not holding; may start an attempt while it has attempts left.
    #[default]
    Idle,
    /// `SET NX PX` + `INCR` sent to every node.
    Acquiring {
        /// Client-clock ticks since it was sent (counted up to the node timeout).
        elapsed: u8,
        /// Client-clock ticks left before `sent + ttl - drift` (0: past it).
        valid_left: u8,
        /// Acquisitions that had returned before this attempt was sent.
        after: Before,
    },
    /// Granted by a majority in time; `raise_fence` sent to the nodes behind the token.
    Raising {
        /// Client-clock ticks since the write-back was sent (up to the node timeout).
        elapsed: u8,
        /// Client-clock ticks left of the lease's validity.
        valid_left: u8,
        /// The chosen token.
        token: Fence,
        /// Granting nodes whose counter already equals the token.
        at_fence: u8,
        /// Acquisitions that had returned before this attempt was sent.
        after: Before,
    },
    /// `acquire` returned a guard.
    Holding {
        /// The fencing token.
        token: Fence,
        /// Client-clock ticks left before `valid_until` (0: `is_held()` is false).
        valid_left: u8,
        /// Acquisitions that had returned before this attempt was sent.
        after: Before,
    },
    /// Decided to write (checked `is_held()`, or does not check); the write is next.
    Writing {
        /// The fencing token.
        token: Fence,
        /// Acquisitions that had returned before this attempt was sent.
        after: Before,
    },
    /// Finished: wrote (or found its lease over) and released, or ran out of attempts.
    Done,
}

/// One client process.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// Whether this client's clock has used its one drift step.
    pub drifted: bool,
    /// Paused: takes no step until resumed.
    pub paused: bool,
    /// Attempts still allowed.
    pub attempts_left: u8,
    /// Whether its `acquire` returned a guard.
    pub acquired: bool,
    /// The replies of the fan-out in progress, one per node.
    pub replies: Slots<Reply, MAX_NODES>,
    /// Per node, timed-out requests still on their way.
    pub backlog: Slots<Backlog, MAX_NODES>,
}

/// A write the resource accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Accepted {
    /// The writer.
    pub client: u8,
    /// Its fencing token.
    pub token: Fence,
    /// The acquisitions that had returned before the writer's own acquisition began.
    pub after: Before,
}

/// The protected resource ("the judge"): accepts a write only with a token at least the
/// highest it has accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resource {
    /// The highest token accepted so far (0 under a plain counter, [`ABSENT`] under the
    /// hybrid clock: none).
    pub highest: Fence,
    /// The writes accepted, in order.
    pub accepted: Slots<Accepted, MAX_CLIENTS>,
    /// Writes rejected for carrying an older token.
    pub rejected: u8,
}

/// Fault budgets left in this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Clocks that may still drift.
    pub drifts: u8,
    /// Pauses left.
    pub pauses: u8,
    /// Crashes left.
    pub crashes: u8,
    /// Messages the network may still lose.
    pub losses: u8,
    /// Clock steps back left.
    pub steps_back: u8,
    /// Counter expiries left.
    pub expiries: u8,
}

/// The whole system at one instant. There is no absolute time in it: every deadline is
/// kept relative to the clock that measures it, so the checker explores runs of any length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct State {
    /// The Redis nodes.
    pub nodes: Slots<Node, MAX_NODES>,
    /// The clients.
    pub clients: Slots<Client, MAX_CLIENTS>,
    /// The fenced resource.
    pub resource: Resource,
    /// Faults left.
    pub budget: Budget,
}

impl Client {
    /// The request of the fan-out in progress.
    pub fn request(&self) -> Option<Request> {
        match self.phase {
            Phase::Acquiring { .. } => Some(Request::Acquire),
            Phase::Raising { token, .. } => Some(Request::Raise(token)),
            _ => None,
        }
    }

    /// Whether the client's clock is timing something: a fan-out or a lease.
    pub fn measures(&self) -> bool {
        matches!(
            self.phase,
            Phase::Acquiring { .. } | Phase::Raising { .. } | Phase::Holding { .. }
        )
    }

    /// Whether the client believes it holds the lock now: it has a guard whose validity its
    /// own clock has not seen run out, or it has decided to write and not written yet.
    pub fn believes_held(&self) -> bool {
        match self.phase {
            Phase::Holding { valid_left, .. } => valid_left > 0,
            Phase::Writing { .. } => true,
            _ => false,
        }
    }
}

impl State {
    /// Calls `f` on every fencing value in the state that is not [`ABSENT`]: the nodes'
    /// counters, the tokens the clients hold, send or received, and the resource's.
    pub fn for_each_fence(&mut self, mut f: impl FnMut(&mut Fence)) {
        let mut visit = |v: &mut Fence| {
            if *v != ABSENT {
                f(v);
            }
        };
        for n in &mut self.nodes {
            visit(&mut n.counter);
            visit(&mut n.previous);
        }
        for c in &mut self.clients {
            match &mut c.phase {
                Phase::Raising { token, .. }
                | Phase::Holding { token, .. }
                | Phase::Writing { token, .. } => visit(token),
                Phase::Idle | Phase::Acquiring { .. } | Phase::Done => {}
            }
            for r in &mut c.replies {
                if let Reply::Granted(f) = r {
                    visit(f);
                }
            }
            for b in &mut c.backlog {
                if let Backlog::Raise(t) | Backlog::AcquireRaise(t) = b {
                    visit(t);
                }
            }
        }
        visit(&mut self.resource.highest);
        for a in &mut self.resource.accepted {
            visit(&mut a.token);
        }
    }
}

/// `A`, `B`, ... for client 0, 1, ...
pub fn client_name(i: impl Into<usize>) -> String {
    let i: usize = i.into();
    u8::try_from(i)
        .ok()
        .and_then(|i| i.checked_add(b'A'))
        .filter(u8::is_ascii_uppercase)
        .map_or_else(|| format!("client{i}"), |c| char::from(c).to_string())
}

/// `n1`, `n2`, ... for node 0, 1, ...
pub fn node_name(i: usize) -> String {
    format!("n{}", i + 1)
}
