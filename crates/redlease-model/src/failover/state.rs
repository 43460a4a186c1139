//! The failover model's state: two servers (one primary, the other its replica after the
//! failover), the lock's data (replicated: the same on both), the `PUBLISH`es on their way
//! to the replica, and each client with the server its pub/sub link is on.

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reply {
    /// The lock was free, or held by our token: it is ours.
    Ours,
    /// Someone else holds it; we are in the queue.
    Busy,
}

/// Where a client is in its `acquire` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not called yet.
    Idle,
    /// An attempt on its way to the primary (`None`), or its reply on the way back.
    Attempting(Option<Reply>),
    /// Busy: waiting for a grant or its re-check timer.
    Waiting,
    /// A grant read; `ROLE` asked on its link, the answer not read yet
    /// ([`Rule::TrustRoleAskedAfter`](super::Rule::TrustRoleAskedAfter)).
    Checking,
    /// `acquire` returned a guard: it believes it holds the lock.
    Holding,
    /// Released.
    Done,
}

/// One client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// The server its pub/sub link is on (`None`: no link yet).
    pub link: Option<u8>,
    /// That server was the primary when the link was made.
    pub link_checked: bool,
    /// Grants pushed to it over its link, not read yet.
    pub grants: u8,
}

/// A waiter confirmed a grant by an attempt (seen in [`State::seen`]).
pub const SEEN_CONFIRM: u8 = 1;
/// A release skipped a waiter with no receiver on the primary.
pub const SEEN_SKIP: u8 = 2;
/// A grant reached a waiter over the replica.
pub const SEEN_RELAYED: u8 = 4;

/// A state of the failover model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The server that is primary (0 at first; 1 after a failover, 0 again after a
    /// failback).
    pub primary: u8,
    /// How many times the primary moved.
    pub changes: u8,
    /// The client whose token the lock key holds.
    pub key: Option<u8>,
    /// The FIFO queue of waiting clients, oldest first.
    pub queue: Vec<u8>,
    /// Grants published on the primary, on their way to the replica by replication (the
    /// client each is for), oldest first.
    pub relayed: Vec<u8>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Things that happened on the way here ([`SEEN_CONFIRM`], [`SEEN_SKIP`],
    /// [`SEEN_RELAYED`]).
    pub seen: u8,
}
