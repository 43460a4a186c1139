//! The hand-off model's state: Redis (lock key, fencing counter, FIFO queue) and each
//! client. No absolute time is kept: a key holds what is left of its lease, a client the
//! age of the sends it dates leases from and what is left of the lease it believes in, so
//! runs of any length are explored.

/// A fencing value. Only their order matters, so the model keeps them renumbered by rank
/// (the counter on top).
pub type Fence = u8;

/// The lock key in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    /// The client whose token it holds.
    pub holder: u8,
    /// Ticks until it expires (at least 1: an expired key is gone).
    pub left: u8,
}

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The lock was free and is now ours, with this fence.
    Fresh(Fence),
    /// The lock already holds our token (a hand-off we have not read); the counter.
    Ours(Fence),
    /// Someone else holds it; the counter when the script ran (`busy_fence`).
    Busy(Fence),
}

/// An attempt on the data connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// Ticks since it was sent.
    pub age: u8,
    /// `None` while on its way to Redis; the reply once the script ran.
    pub reply: Option<Reply>,
}

/// Where a client is in its `acquire` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not called yet.
    Idle,
    /// Waiting for the reply to an attempt.
    Attempting(Request),
    /// Busy: waiting for a grant or its re-check timer.
    Waiting,
    /// `acquire` returned a guard.
    Holding {
        /// Ticks until the guard's `valid_until` (0: `is_held()` is false).
        left: u8,
    },
    /// Released, or gave up.
    Done,
}

/// One client (one `acquire` call, one token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// Stopped (`SIGSTOP`, a blocked runtime): it takes no step, its clock runs on.
    pub paused: bool,
    /// Its grant subscription is up (a release skips it otherwise).
    pub subscribed: bool,
    /// Grants published to it and not read yet, sorted (pub/sub delivers them at any
    /// later moment, in any order against replies).
    pub grants: Vec<Fence>,
    /// Ticks since the send of its latest busy attempt (of its first attempt while none
    /// was busy).
    pub floor: Option<u8>,
    /// The fence carried by its latest busy reply ([`Rule::Fixed`](super::Rule::Fixed)).
    pub busy_fence: Option<Fence>,
    /// An attempt it stopped waiting for is still on its way to Redis.
    pub orphan: bool,
    /// Ticks since the send of its latest attempt (kept only under the rules that date
    /// grants from it).
    pub last_sent: Option<u8>,
}

impl Client {
    /// Whether `is_held()` would say true now.
    pub fn believes_held(&self) -> bool {
        matches!(self.phase, Phase::Holding { left, .. } if left > 0)
    }

    /// Whether it is inside `acquire`, after its first attempt.
    pub fn waits(&self) -> bool {
        matches!(self.phase, Phase::Attempting(_) | Phase::Waiting)
    }
}

/// Faults left to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Pauses.
    pub pauses: u8,
    /// Data connection drops.
    pub link_drops: u8,
    /// Grant subscription drops.
    pub subscription_drops: u8,
    /// Waiters giving up.
    pub give_ups: u8,
}

/// A waiter discarded a void grant (seen in [`State::seen`]).
pub const SEEN_VOID: u8 = 1;
/// A waiter confirmed with an attempt rather than return too little validity.
pub const SEEN_CONFIRM: u8 = 2;
/// A waiter's `acquire` returned a lease from a grant it read.
pub const SEEN_HANDOFF: u8 = 4;
/// An `acquire` returned a lease with less than the floor of validity left.
pub const SEEN_SHORT: u8 = 8;

/// A state of the hand-off model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The lock key (`None`: free or expired).
    pub key: Option<Key>,
    /// The fencing counter (the last fence granted).
    pub counter: Fence,
    /// The FIFO queue of waiting tokens (clients), oldest first.
    pub queue: Vec<u8>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Faults left.
    pub budget: Budget,
    /// Things that happened on the way here ([`SEEN_VOID`], [`SEEN_CONFIRM`], [`SEEN_HANDOFF`],
    /// [`SEEN_SHORT`]): for [`SHORT_LEASE`](super::SHORT_LEASE) and for the examples that
    /// show runs are not vacuous.
    pub seen: u8,
}
