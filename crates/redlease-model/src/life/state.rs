//! The lease-life model's state: the lock key in Redis, the requests on their way to it
//! (one connection, first in first out), the replies on their way back, and the holder's
//! claim. No absolute time is kept: the key holds what is left of it on Redis' clock, the
//! holder what is left of its claim and the ages of its sends on its own clock, so runs of
//! any length are explored.

/// The lock key in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// Expired (or never set again).
    Free,
    /// It holds the holder's token.
    Ours {
        /// Ticks of Redis' clock until it expires (at least 1).
        left: u8,
    },
    /// Another client took it once it was free.
    Theirs,
}

/// A step of the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Step {
    /// A renewal (`lock_renew.lua`) with the lease's ttl when it was sent.
    Renewal,
    /// An extend (`lock_extend.lua`) to a ttl the caller chose.
    Extend,
}

/// A request on its way to Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    /// What it is.
    pub step: Step,
    /// The ttl it sets.
    pub ttl: u8,
    /// Ticks (on the holder's clock) since it was first sent.
    pub age: u8,
    /// Its place in the order of sends (renumbered by rank: only the order matters).
    pub order: u8,
    /// The client still waits for it (else it was cancelled or timed out: its reply goes
    /// nowhere, and nobody re-sends it).
    pub waited: bool,
    /// It was re-sent (after NOSCRIPT, or across a reconnect).
    pub resent: bool,
}

/// A reply on its way back to a client that waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reply {
    /// The step it answers.
    pub step: Step,
    /// The ttl its request set.
    pub ttl: u8,
    /// Ticks since its request was first sent.
    pub age: u8,
    /// Its request's place in the order of sends.
    pub order: u8,
    /// The key held our token (the script reset its expiry), else the lease is lost.
    pub ok: bool,
}

/// The holder of the lease.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Holder {
    /// Ticks of its clock until its `valid_until` (0: `is_held()` is false, the lease is
    /// over).
    pub claim: u8,
    /// The ttl its renewals ask for.
    pub ttl: u8,
    /// The place in the order of sends of the request that last set the validity (the
    /// acquisition's at first).
    pub set_by: Option<u8>,
}

/// Faults and calls left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Budget {
    /// Extend calls.
    pub extends: u8,
    /// Requests the client may stop waiting for.
    pub cancels: u8,
    /// NOSCRIPT answers.
    pub reloads: u8,
    /// Replies lost to a reconnect, the request re-sent.
    pub retries: u8,
    /// Requests nobody waits for that may arrive late.
    pub late_orphans: u8,
}

/// An extend ran that set the key shorter than it had left (seen in [`State::seen`]).
pub const SEEN_SHORTENED: u8 = 1;
/// A re-sent request ran.
pub const SEEN_RESENT: u8 = 2;
/// A request ran after its client stopped waiting for it.
pub const SEEN_ORPHAN: u8 = 4;
/// The other client took the key.
pub const SEEN_TAKEN: u8 = 8;
/// A lengthening extend's reply raised the claim.
pub const SEEN_RAISED: u8 = 16;

/// A state of the lease-life model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The lock key.
    pub key: Key,
    /// Requests on their way to Redis, in the order Redis will run them.
    pub queue: Vec<Request>,
    /// Replies on their way back, sorted (read in any order, each at any later moment).
    pub replies: Vec<Reply>,
    /// The holder.
    pub holder: Holder,
    /// Ticks since Redis' clock last gained one on the holder's (capped at the window).
    pub since_skew: u8,
    /// Calls and faults left.
    pub budget: Budget,
    /// Things that happened on the way here ([`SEEN_SHORTENED`], [`SEEN_RESENT`],
    /// [`SEEN_ORPHAN`], [`SEEN_TAKEN`], [`SEEN_RAISED`]): for the examples that show runs
    /// are not vacuous.
    pub seen: u8,
}

impl State {
    /// Whether the client waits for a `step` (its request on its way, or its reply).
    pub fn waits_for(&self, step: Step) -> bool {
        self.queue.iter().any(|r| r.waited && r.step == step)
            || self.replies.iter().any(|r| r.step == step)
    }

    /// Whether the holder's claim says held while Redis' key does not hold its token.
    pub fn belief_beyond_truth(&self) -> bool {
        self.holder.claim > 0 && !matches!(self.key, Key::Ours { .. })
    }
}
