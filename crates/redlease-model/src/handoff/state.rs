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
    /// Set by a hand-off its waiter has not confirmed yet (kept only while waiters may be
    /// cut off: [`HandoffConfig::cut_offs`](super::HandoffConfig::cut_offs)).
    pub handed: Option<Handed>,
}

/// A key set by a hand-off and not confirmed yet by its waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handed {
    /// Made by a release, whose client follows it up once the window is over under
    /// [`Rule::ConfirmInWindow`](super::Rule::ConfirmInWindow) (else by an attempt that
    /// found the lock free and served the queue).
    pub by_release: bool,
    /// Ticks it has stood while its waiter was cut off.
    pub silent_for: u8,
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
    /// Busy: waiting for a grant or its re-check timer. The library's waiter
    /// (`Standing` in `crates/redlease/src/acquire/standing.rs`) is then queued for grants
    /// when its token is in [`State::queue`] and its client [`subscribed`](Client::subscribed),
    /// not queued when its token is not there; its wait ends granted ([`Action::Take`]),
    /// claimed (an attempt's [`Reply::Fresh`] or [`Reply::Ours`]) or given back
    /// ([`Action::GiveUp`]).
    ///
    /// [`Action::Take`]: super::Action::Take
    /// [`Action::GiveUp`]: super::Action::GiveUp
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
    /// Whether it takes steps.
    pub run: Run,
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
    /// Ticks until it checks the latest hand-off its release made (the script's claim
    /// window), when it follows hand-offs up.
    pub followup: Option<u8>,
}

/// Whether a client takes steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Run {
    /// It runs.
    Running,
    /// Stopped (`SIGSTOP`, a blocked runtime): it takes no step until it runs again, its
    /// clock runs on.
    Paused,
    /// Cut off silently (packets dropped, no RST): Redis still counts its subscription,
    /// it never reads nor sends again.
    CutOff,
}

impl Client {
    /// Whether it takes no step now (paused, or cut off).
    pub fn stopped(&self) -> bool {
        self.run != Run::Running
    }

    /// Whether it is cut off silently.
    pub fn cut_off(&self) -> bool {
        self.run == Run::CutOff
    }

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
    /// Waiters cut off silently.
    pub cut_offs: u8,
}

/// A waiter discarded a void grant (seen in [`State::seen`]).
pub const SEEN_VOID: u8 = 1;
/// A waiter confirmed with an attempt rather than return too little validity.
pub const SEEN_CONFIRM: u8 = 2;
/// A waiter's `acquire` returned a lease from a grant it read.
pub const SEEN_HANDOFF: u8 = 4;
/// An `acquire` returned a lease with less than the floor of validity left.
pub const SEEN_SHORT: u8 = 8;
/// An attempt took a free lock while an older waiter whose subscription is up was queued.
pub const SEEN_JUMP: u8 = 16;
/// A waiter holds while a grant to a waiter cut off silently lies unread.
pub const SEEN_PAST_SILENT: u8 = 32;

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
    /// [`SEEN_SHORT`], [`SEEN_JUMP`], [`SEEN_PAST_SILENT`]): for [`SHORT_LEASE`](super::SHORT_LEASE),
    /// [`IN_ORDER`](super::IN_ORDER) and for the examples that show runs are not vacuous.
    pub seen: u8,
    /// Ticks the lock has been free, with a waiter whose subscription is up queued, since
    /// a hand-off made by a release ran out unconfirmed (`None`: it is not).
    pub stranded: Option<u8>,
}

impl State {
    /// Whether a waiter whose subscription is up (as Redis counts it) is queued.
    pub fn listener_queued(&self) -> bool {
        (self.queue.iter()).any(|&q| self.clients[usize::from(q)].subscribed)
    }
}
