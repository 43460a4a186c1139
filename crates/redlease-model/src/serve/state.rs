//! The serve model's configuration and state: what a grant grants (a semaphore's permits,
//! a read-write lock's read or write side), the leases held (ZSET scores as ticks left),
//! the FIFO queue, and each client with its token and its re-check timer.

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

/// The primitive whose `serve` is modelled: what a grant may grant beside the holders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A semaphore of this many permits (`semaphore.lua`): grants fit while their weights
    /// sum to at most the permits.
    Semaphore(u8),
    /// A read-write lock (`rwlock.lua`): readers share, a writer holds alone.
    ReadWrite,
}

/// What one client asks for (the same at every attempt).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Want {
    /// This many permits of a semaphore, as one lease.
    Permits(u8),
    /// The read side of a read-write lock.
    Read,
    /// The write side of a read-write lock.
    Write,
}

impl Want {
    /// What it is called in a timeline ("a permit", "the read lock", ...).
    pub fn noun(self) -> String {
        match self {
            Want::Permits(1) => String::from("a permit"),
            Want::Permits(n) => format!("{n} permits"),
            Want::Read => String::from("the read lock"),
            Want::Write => String::from("the write lock"),
        }
    }
}

/// One configuration of the serve model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServeConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// The primitive.
    pub kind: Kind,
    /// What each client asks for, in client order (a client past the end asks for one
    /// permit, or to read).
    pub wants: Vec<Want>,
    /// Clients: the first `holders` hold at the start, the last `arrivals` have not asked
    /// yet, the others wait in the queue in order.
    pub clients: usize,
    /// How many clients hold at the start (what they ask for must fit together).
    pub holders: usize,
    /// How many clients (the last ones) make their first attempt at any moment.
    pub arrivals: usize,
    /// The lease of a grant, in ticks.
    pub ttl: u8,
    /// How many ticks a permit granted to a token nobody waits for may stay taken.
    pub bound: u8,
    /// How many waiters may crash (their client gone: a `PUBLISH` to them reaches no one,
    /// and `PUBSUB NUMSUB` counts no one on their channel).
    pub crashes: u8,
    /// How many waiters may give up with their give-back lost (cut off), their client
    /// still listening on its grant channel for other waits.
    pub abandons: u8,
    /// How many waiters may give up with their give-back run (`rw_release.lua` or
    /// `sem_release.lua` with their token: the place is withdrawn, the queue served).
    pub give_ups: u8,
    /// How many waiters may be cut off silently (packets dropped: Redis still counts their
    /// grant subscription, so `serve` grants them, and they never hear nor ask again).
    pub cuts: u8,
    /// How long a pushed grant lasts until its waiter confirms it, in ticks: `None` for the
    /// whole lease (before the one hand-off), `Some(w)` for the claim window of
    /// `scripts/lib/grants.lua`.
    pub window: Option<u8>,
    /// The claim window of the code for this ttl, in ticks: how long a re-check waits at
    /// most when the holders would let its waiter in and a queued place ahead keeps it out,
    /// and the part of [`ServeConfig::live_bound`] a grant to a silent waiter may cost.
    pub claim: u8,
    /// How many ticks a permit granted to a waiter cut off silently may stay taken.
    pub cut_bound: u8,
    /// How many of the queue's first places watch (re-check when the holds can end); the
    /// code's `FRONT` is 3. The others re-check only when nudged or granted.
    pub front: usize,
    /// Whether grants and withdrawals nudge the watchers (`next <ms>`: re-check then).
    pub nudges: bool,
    /// Whether a direct grant (to the caller of an attempt) nudges every waiter that moved
    /// up into the front in that serve (a variant), rather than only the one at the front's
    /// last place (`after_grant` in the code: right when one place was popped, short when
    /// the serve also dropped places of waiters that no longer listen).
    pub nudge_every_moved: bool,
    /// Whether `serve` drops a queued head that keeps others out and whose client does not
    /// listen (`listens`, `PUBSUB NUMSUB` 0): a writer while readers hold, a request for
    /// more permits than are free. `false`: such a place is kept (the rule before).
    pub drop_dead_head: bool,
    /// The rule.
    pub rule: Rule,
}

impl ServeConfig {
    /// Two permits, four clients (two holding one permit each, two waiting for one), a
    /// lease of 3 ticks, a bound of 0 ticks (the give-back before time passes), one
    /// abandoned waiter, pushed grants lasting the whole lease and no nudges (the
    /// semaphore before the one hand-off), under `rule`.
    pub fn code(rule: Rule) -> Self {
        ServeConfig {
            name: "serve",
            kind: Kind::Semaphore(2),
            wants: Vec::new(),
            clients: 4,
            holders: 2,
            arrivals: 0,
            ttl: 3,
            bound: 0,
            crashes: 0,
            abandons: 1,
            give_ups: 0,
            cuts: 0,
            window: None,
            claim: 1,
            cut_bound: 1,
            front: 3,
            nudges: false,
            nudge_every_moved: false,
            drop_dead_head: true,
            rule,
        }
    }

    /// What client `i` asks for.
    pub fn want(&self, i: usize) -> Want {
        match (self.wants.get(i), self.kind) {
            (Some(&w), _) => w,
            (None, Kind::Semaphore(_)) => Want::Permits(1),
            (None, Kind::ReadWrite) => Want::Read,
        }
    }

    /// What client `token` asks for.
    pub fn want_of(&self, token: u8) -> Want {
        self.want(usize::from(token))
    }

    /// Whether a grant of `want` fits beside holds of `held` (what each holder asked for).
    pub fn fits(&self, held: impl IntoIterator<Item = Want>, want: Want) -> bool {
        let mut count = 0u16;
        let mut weight = 0u16;
        let mut writer = false;
        for h in held {
            count += 1;
            weight += u16::from(permits_of(h));
            writer |= h == Want::Write;
        }
        match (self.kind, want) {
            (Kind::ReadWrite, Want::Write) => count == 0,
            (Kind::ReadWrite, _) => !writer,
            (Kind::Semaphore(n), w) => weight + u16::from(permits_of(w)) <= u16::from(n),
        }
    }

    /// Whether holds of `held` may be held together: never more permits than the
    /// semaphore has, never a writer beside anyone.
    pub fn allowed(&self, held: impl IntoIterator<Item = Want>) -> bool {
        let held: Vec<Want> = held.into_iter().collect();
        match self.kind {
            Kind::Semaphore(n) => {
                let weight: u16 = held.iter().map(|&w| u16::from(permits_of(w))).sum();
                weight <= u16::from(n)
            }
            Kind::ReadWrite => !held.contains(&Want::Write) || held.len() <= 1,
        }
    }

    /// The bound of [`LIVE_SERVED`](super::LIVE_SERVED): a claim window plus `bound`.
    pub fn live_bound(&self) -> u8 {
        self.claim.saturating_add(self.bound)
    }
}

/// The permits a grant of `want` takes (a read or write side counts as one).
fn permits_of(want: Want) -> u8 {
    match want {
        Want::Permits(n) => n,
        Want::Read | Want::Write => 1,
    }
}

impl crate::check::Named for ServeConfig {
    fn name(&self) -> &str {
        self.name
    }
}

/// A lease in the primitive's ZSET (a semaphore's permits, a read-write lock's owners).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Permit {
    /// The token (client) holding it.
    pub token: u8,
    /// Ticks until its score passes (at least 1: a lease whose score passed is free).
    pub left: u8,
    /// Ticks it has been taken while its token was not waited for.
    pub unclaimed: u8,
}

/// Where a client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Has not asked yet: its first attempt comes at any moment.
    Idle,
    /// Queued: waiting for a grant, a nudge or its re-check timer.
    Waiting,
    /// Holding (`acquire` returned).
    Holding,
    /// Gave up with its give-back lost: the token is waited for by nobody, the client
    /// still listens on its grant channel.
    Abandoned,
    /// Crashed: nothing listens on its grant channel.
    Crashed,
    /// Cut off silently: Redis still counts its grant subscription, but it hears nothing
    /// and sends nothing.
    Cut,
    /// Released, gave up, or its lease ran out.
    Done,
}

/// One client (one token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// Where it is.
    pub phase: Phase,
    /// A grant pushed to it and not handled yet.
    pub granted: bool,
    /// A waiter's re-check timer: ticks until it attempts again (`None`: no timer, it
    /// waits to be granted or nudged).
    pub due: Option<u8>,
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

    /// Whether it is a queued waiter that runs: it hears grants and nudges and keeps its
    /// re-check timer.
    pub fn running_waiter(&self) -> bool {
        self.phase == Phase::Waiting
    }
}

/// A serve dropped a place whose client no longer listens (seen in [`State::seen`]).
pub const SEEN_DROP: u16 = 1;
/// A permit was granted to a token nobody waits for.
pub const SEEN_GONE_GRANT: u16 = 2;
/// A waiter queued behind a gone one was served.
pub const SEEN_BEHIND: u16 = 4;
/// A script left the queue's head able to be served.
pub const SEEN_STUCK: u16 = 8;
/// A permit was granted to a waiter cut off silently.
pub const SEEN_CUT_GRANT: u16 = 16;
/// A serve dropped a queued head that kept others out (its client does not listen).
pub const SEEN_DEAD_HEAD: u16 = 32;
/// A newcomer that the holders would let in queued behind an older place.
pub const SEEN_HELD_BACK: u16 = 64;
/// Readers held together.
pub const SEEN_SHARED: u16 = 128;
/// A waiter was nudged.
pub const SEEN_NUDGE: u16 = 256;

/// A state of the serve model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The leases taken, sorted.
    pub permits: Vec<Permit>,
    /// The FIFO queue of tokens, oldest first.
    pub queue: Vec<u8>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Crashes left.
    pub crashes: u8,
    /// Abandons left.
    pub abandons: u8,
    /// Give-ups left.
    pub give_ups: u8,
    /// Silent cuts left.
    pub cuts: u8,
    /// Ticks passed in a row while a live waiter could have been served (see
    /// [`LIVE_SERVED`](super::LIVE_SERVED)), capped past the bound.
    pub overdue: u8,
    /// Things that happened on the way here.
    pub seen: u16,
}

/// The token of client `i`.
pub(super) fn client_id(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}
