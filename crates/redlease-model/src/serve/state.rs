//! The serve model's configuration and state: a semaphore's permits (ZSET scores as ticks
//! left), its FIFO queue, and each client with its token.

/// What a client does with a grant pushed for a token it no longer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The code before the fix (`notify/grants.rs`, `deliver`): only traced, unless the
    /// token's give-back is still under way; the permit sits with nobody until its lease
    /// runs out.
    TraceOnly,
    /// The fix: the client gives the permit back at once (`sem_release.lua` with the
    /// token the grant names), which serves the next waiter.
    GiveBack,
}

/// One configuration of the serve model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServeConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// Permits of the semaphore.
    pub permits: u8,
    /// Clients: the first `permits` hold a permit, the others wait in the queue in order.
    pub clients: usize,
    /// The lease of a permit, in ticks.
    pub ttl: u8,
    /// How many ticks a permit granted to a token nobody waits for may stay taken.
    pub bound: u8,
    /// How many waiters may crash (their client gone: a `PUBLISH` to them reaches no one).
    pub crashes: u8,
    /// How many waiters may give up with their give-back lost (cut off), their client
    /// still listening on its grant channel for other waits.
    pub abandons: u8,
    /// How many waiters may be cut off silently (packets dropped: Redis still counts their
    /// grant subscription, so `serve` grants them, and they never hear nor ask again).
    pub cuts: u8,
    /// How long a pushed grant lasts until its waiter confirms it, in ticks: `None` for the
    /// whole lease (the semaphore before the one hand-off), `Some(w)` for the claim window
    /// of `scripts/lib/grants.lua`.
    pub window: Option<u8>,
    /// How many ticks a permit granted to a waiter cut off silently may stay taken.
    pub cut_bound: u8,
    /// The rule.
    pub rule: Rule,
}

impl ServeConfig {
    /// Two permits, four clients (two holding, two waiting), a lease of 3 ticks, a bound
    /// of 0 ticks (the give-back before time passes), one abandoned waiter, under `rule`.
    pub fn code(rule: Rule) -> Self {
        ServeConfig {
            name: "serve",
            permits: 2,
            clients: 4,
            ttl: 3,
            bound: 0,
            crashes: 0,
            abandons: 1,
            cuts: 0,
            window: None,
            cut_bound: 1,
            rule,
        }
    }
}

impl crate::check::Named for ServeConfig {
    fn name(&self) -> &str {
        self.name
    }
}

/// A permit in the semaphore's ZSET.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permit {
    /// The token (client) holding it.
    pub token: u8,
    /// Ticks until its score passes (at least 1: a permit whose score passed is free).
    pub left: u8,
    /// Ticks it has been taken while its token was not waited for.
    pub unclaimed: u8,
}

/// Where a client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Queued: waiting for a grant or its re-check.
    Waiting,
    /// Holding a permit (`acquire` returned).
    Holding,
    /// Gave up with its give-back lost: the token is waited for by nobody, the client
    /// still listens on its grant channel.
    Abandoned,
    /// Crashed: nothing listens on its grant channel.
    Crashed,
    /// Cut off silently: Redis still counts its grant subscription, but it hears nothing
    /// and sends nothing.
    Cut,
    /// Released, or its permit ran out.
    Done,
}

/// One client (one token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// A grant pushed to it and not handled yet.
    pub granted: bool,
}

impl Client {
    /// Whether something listens on its grant channel.
    pub fn listens(&self) -> bool {
        self.phase != Phase::Crashed
    }

    /// Whether a task of its client waits for, or holds, its token.
    pub fn wanted(&self) -> bool {
        matches!(self.phase, Phase::Waiting | Phase::Holding)
    }
}

/// A serve dropped a place whose client no longer listens (seen in [`State::seen`]).
pub const SEEN_DROP: u8 = 1;
/// A permit was granted to a token nobody waits for.
pub const SEEN_GONE_GRANT: u8 = 2;
/// A waiter queued behind a gone one was served.
pub const SEEN_BEHIND: u8 = 4;
/// A script left a permit free while a place was still queued.
pub const SEEN_STUCK: u8 = 8;
/// A permit was granted to a waiter cut off silently.
pub const SEEN_CUT_GRANT: u8 = 16;

/// A state of the serve model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The permits taken, sorted.
    pub permits: Vec<Permit>,
    /// The FIFO queue of tokens, oldest first.
    pub queue: Vec<u8>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Crashes left.
    pub crashes: u8,
    /// Abandons left.
    pub abandons: u8,
    /// Silent cuts left.
    pub cuts: u8,
    /// Things that happened on the way here.
    pub seen: u8,
}
