//! What one run of the hand-off model explores: the clients, the lease, the faults, and
//! the rule a waiter follows when it dates a lease.

/// How a waiter decides what a reply or a pushed grant lets it claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// Stale grants accepted, as the code before the fix did (issue 24, item 1): a grant
    /// read from the mailbox is accepted whenever it is read and dated from the send time
    /// of the waiter's latest attempt; `Ours` is dated from the latest busy attempt's send (the first attempt's
    /// when none was busy); the script does not touch the expiry on `Ours`; `acquire`
    /// returns whatever validity is left.
    AcceptStale,
    /// The fix: a busy reply carries the fencing counter (`busy_fence`); a grant whose
    /// fence is not above the latest `busy_fence` is void; a grant is dated from the send
    /// of the latest busy attempt (the *floor*); `Ours` refreshes the expiry in Redis and
    /// is dated from its own send, as `Fresh` is; with less than
    /// [`HandoffConfig::min_validity`] left, the waiter confirms with an attempt of its
    /// own instead of returning.
    Fixed,
    /// Mutation of [`Rule::Fixed`]: no grant is void (stale grants are dated from the
    /// floor).
    NoVoid,
    /// Mutation of [`Rule::Fixed`]: a grant is dated from the latest attempt's send, as
    /// [`Rule::AcceptStale`] does, rather than from the floor (differs after an attempt
    /// that failed).
    LatestSend,
    /// Mutation of [`Rule::Fixed`]: `Ours` is dated from its own send, but the script
    /// does not refresh the expiry.
    NoRefresh,
    /// The mutex's rule with claim windows (`scripts/lib/handoff.lua`, `usable_grant`,
    /// `Followups`): a hand-off sets the lock for [`HandoffConfig::window`] ticks only;
    /// a grant only wakes its waiter, which confirms it with an attempt (`Ours` sets the
    /// expiry to now + ttl and is dated from its own send); a skipped waiter whose
    /// subscription is down keeps its place at the head; an attempt that finds the lock
    /// free serves the oldest queued waiter first (itself only if it is that waiter);
    /// the client that made a hand-off by a release runs the release script again, with
    /// its old token, once the window is over, serving the queue if the lock is free.
    ConfirmInWindow,
    /// Mutation of [`Rule::ConfirmInWindow`]: a hand-off sets the whole ttl (the waiter
    /// still confirms it, and the follow-up comes a ttl later).
    HandOffWholeTtl,
    /// Mutation of [`Rule::ConfirmInWindow`]: nobody follows a hand-off up; a window that
    /// runs out leaves the lock free until some waiter's re-check.
    NoFollowUp,
    /// Mutation of [`Rule::ConfirmInWindow`]: an attempt that finds the lock free takes it
    /// (`SET NX`) without serving the queue first.
    TakesFreeLock,
}

impl Rule {
    /// Whether a grant not above the latest busy reply's fence is discarded (under the
    /// rules that confirm every grant, a grant only wakes the waiter and is never void).
    pub fn voids_stale(self) -> bool {
        !matches!(self, Rule::AcceptStale | Rule::NoVoid) && !self.confirms_every_grant()
    }

    /// Whether a hand-off lasts a claim window until its waiter confirms it, a waiter
    /// treating every grant as a wake-up only.
    pub fn confirms_every_grant(self) -> bool {
        matches!(
            self,
            Rule::ConfirmInWindow | Rule::HandOffWholeTtl | Rule::NoFollowUp | Rule::TakesFreeLock
        )
    }

    /// Whether a hand-off sets the lock for the claim window (else the whole ttl).
    pub fn hands_off_for_window(self) -> bool {
        self.confirms_every_grant() && self != Rule::HandOffWholeTtl
    }

    /// Whether the client that made a hand-off by a release checks it once its window
    /// (the lock's expiry the hand-off set) is over.
    pub fn follows_up(self) -> bool {
        self.confirms_every_grant() && self != Rule::NoFollowUp
    }

    /// Whether an attempt that finds the lock free serves the oldest queued waiter
    /// first, and a waiter skipped by a hand-off (subscription down) keeps its place.
    pub fn serves_queue_first(self) -> bool {
        self.confirms_every_grant() && self != Rule::TakesFreeLock
    }

    /// Whether a grant is dated from the floor (else from the latest attempt's send).
    pub fn grant_from_floor(self) -> bool {
        self != Rule::AcceptStale && self != Rule::LatestSend
    }

    /// Whether `Ours` is dated from its own attempt's send (else from the floor).
    pub fn ours_from_send(self) -> bool {
        self != Rule::AcceptStale
    }

    /// Whether an attempt that finds the lock held by its own token sets the expiry to
    /// now + ttl.
    pub fn refreshes(self) -> bool {
        !matches!(self, Rule::AcceptStale | Rule::NoRefresh)
    }

    /// Whether a grant is dated from the latest attempt's send (so the model keeps it).
    pub fn uses_latest_send(self) -> bool {
        !self.grant_from_floor()
    }

    /// Whether `acquire` confirms rather than return a lease with less than the floor of
    /// validity left.
    pub fn keeps_min_validity(self) -> bool {
        self != Rule::AcceptStale
    }
}

/// One configuration of the hand-off model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HandoffConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// Clients; each makes one `acquire` call (one token), holds, and releases, unless it
    /// gives up.
    pub clients: usize,
    /// The lease, in ticks.
    pub ttl: u8,
    /// The floor of validity below which [`Rule::Fixed`] confirms instead of returning
    /// (`ttl / 5` in the code), in ticks.
    pub min_validity: u8,
    /// How a waiter dates what it is told.
    pub rule: Rule,
    /// Whether a waiter confirms every grant with an attempt of its own instead of dating
    /// it (`trusts_grants()` false: Cluster, Sentinel, a quorum).
    pub confirms_grants: bool,
    /// How many times a waiter may be paused (each pause of any length).
    pub pauses: u8,
    /// How many times a data connection may drop, losing the attempt in flight or its
    /// reply, or leaving the attempt to run later while the waiter no longer waits for
    /// it (the waiter retries later).
    pub link_drops: u8,
    /// How many times a grant subscription may drop, losing the grants on their way; it
    /// comes back later (a release skips a waiter whose subscription is down).
    pub subscription_drops: u8,
    /// Whether a waiter that is running reads a grant in its mailbox before time passes
    /// (`false`: pub/sub may deliver it any time later).
    pub prompt_grants: bool,
    /// How many waiters may give up (their give-back runs `release.lua`).
    pub give_ups: u8,
    /// How long a hand-off sets the lock for under [`Rule::ConfirmInWindow`], in ticks
    /// (less than `ttl`: a tenth of it in the code).
    pub window: u8,
    /// How many waiters may be cut off silently: Redis still counts their subscription,
    /// they never read a grant or send again, and what they had on its way is lost.
    /// Also turns on the bookkeeping of the claim-window properties.
    pub cut_offs: u8,
}

impl HandoffConfig {
    /// Three clients, a lease of 3 ticks, a floor of validity of 1 tick, a claim window
    /// of 1 tick, grants read as soon as they arrive by a running waiter, one pause and
    /// no other fault, under `rule`.
    pub fn code(rule: Rule) -> Self {
        HandoffConfig {
            name: "hand-off",
            clients: 3,
            ttl: 3,
            min_validity: 1,
            rule,
            prompt_grants: true,
            confirms_grants: false,
            pauses: 1,
            link_drops: 0,
            subscription_drops: 0,
            give_ups: 0,
            window: 1,
            cut_offs: 0,
        }
    }
}

impl crate::check::Named for HandoffConfig {
    fn name(&self) -> &str {
        self.name
    }
}
