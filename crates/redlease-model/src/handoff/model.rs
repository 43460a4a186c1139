//! The hand-off transition system: which steps are possible, what each does, and the
//! properties checked.

use stateright::{Model, Property};

use super::config::{HandoffConfig, Rule};
use super::state::{
    Budget, Client, Fence, Handed, Key, Phase, Reply, Request, Run, SEEN_CONFIRM, SEEN_HANDOFF,
    SEEN_JUMP, SEEN_PAST_SILENT, SEEN_SHORT, SEEN_VOID, State,
};

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time advances one tick; keys and leases run out.
    Tick,
    /// The client calls `acquire`: it sends its first attempt.
    Begin(usize),
    /// Redis runs the client's attempt (`acquire.lua`).
    Run(usize),
    /// The client reads the reply to its attempt.
    Read(usize),
    /// The client's re-check timer fires: it sends another attempt.
    Recheck(usize),
    /// The client reads a grant from its mailbox: the `index`-th lowest of those there.
    Take {
        /// The client.
        client: usize,
        /// Which grant (by rank among the unread ones).
        index: usize,
    },
    /// The holder releases (`release.lua`).
    Release(usize),
    /// The waiter gives up; its give-back runs `release.lua` with its token.
    GiveUp(usize),
    /// The client stops.
    Pause(usize),
    /// The client runs again.
    Resume(usize),
    /// The client's data connection drops: the attempt in flight, or its reply, is lost.
    DropLink(usize),
    /// The client stops waiting for its attempt (a response timeout, the link dropped
    /// after sending) and retries later, while the attempt is still on its way to Redis.
    Abandon(usize),
    /// Redis runs an attempt its client no longer waits for; the reply goes nowhere.
    RunOrphan(usize),
    /// The client's grant subscription drops, and the grants on their way with it.
    DropSubscription(usize),
    /// The client's grant subscription is back.
    Resubscribe(usize),
    /// The waiter is cut off silently (packets dropped, no RST): Redis still counts its
    /// subscription; it never reads a grant or sends again; its attempt on the way is lost.
    CutOff(usize),
    /// The claim window of the client's latest hand-off is over: it runs the release
    /// script again with its old token (serving the queue if the lock is free).
    FollowUp(usize),
}

/// The model of the single-Redis FIFO hand-off for one [`HandoffConfig`].
#[derive(Debug, Clone)]
pub struct HandoffModel {
    /// What is explored.
    pub config: HandoffConfig,
}

/// Property: never two clients believing they hold the lock at one instant.
pub const MUTUAL_EXCLUSION: &str = "no two clients believe they hold the lock";
/// Property: a client believes it holds only while Redis' key holds its token, and its
/// guard's `valid_until` is never later than the key's expiry.
pub const WITHIN_LEASE: &str = "a client believes it holds only within its lease in Redis";
/// Property: `acquire` never returns a lease with less than the floor of validity left.
pub const SHORT_LEASE: &str = "acquire never returns less than the floor of validity";
/// Example: a waiter holds the lock by a hand-off it read from its mailbox.
pub const HANDED_OFF: &str = "sometimes a waiter holds by a hand-off";
/// Example: the lock is handed to a waiter while it is paused.
pub const PAUSED_HANDOFF: &str = "sometimes the lock is handed to a paused waiter";
/// Example: a waiter discards a void (stale) grant.
pub const VOID_DISCARDED: &str = "sometimes a stale grant is discarded";
/// Example: a waiter confirms with an attempt rather than return too little validity.
pub const CONFIRMED: &str = "sometimes a waiter confirms a short lease";
/// Property (bounded liveness): a key a hand-off gave to a waiter cut off silently is
/// gone (expired, or handed on) within [`HandoffConfig::window`] ticks. Checked while
/// waiters may be cut off ([`HandoffConfig::cut_offs`]).
pub const WINDOW_BOUND: &str = "a lock handed to a silent waiter is free within the window";
/// Property (bounded liveness): when a hand-off made by a release runs out unconfirmed
/// with a waiter (subscription up) queued, that waiter is handed the lock before time
/// passes. Checked while waiters may be cut off.
pub const SERVED_AFTER_WINDOW: &str =
    "a queued waiter is served as soon as an unconfirmed hand-off runs out";
/// Property: an attempt never takes a free lock while an older waiter whose subscription
/// is up is queued (FIFO). Checked while waiters may be cut off.
pub const IN_ORDER: &str = "no attempt takes a free lock past an older queued waiter";
/// Example: a waiter holds while a grant to a waiter cut off silently lies unread.
pub const SERVED_PAST_SILENT: &str = "sometimes a waiter holds after a grant to a silent one";

impl HandoffModel {
    /// A model of `config`.
    pub fn new(config: HandoffConfig) -> Self {
        HandoffModel { config }
    }

    pub(super) fn rule(&self) -> Rule {
        self.config.rule
    }

    /// Whether the claim-window bookkeeping is kept (only while waiters may be cut off,
    /// so that the other scenarios' state spaces stay as they were).
    pub(super) fn tracks(&self) -> bool {
        self.config.cut_offs > 0
    }

    /// The state after `action`, before ages are capped and fences renumbered (the
    /// timeline replays paths with it to show times and fences as they are); `None`
    /// when the action turns out not to be possible.
    pub fn apply(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => Self::tick(&mut s),
            Action::Begin(i) => {
                s.clients[i].floor = Some(0);
                self.send(&mut s.clients[i]);
            }
            Action::Run(i) => self.run(&mut s, i),
            Action::Read(i) => self.read(&mut s, i),
            Action::Recheck(i) => self.send(&mut s.clients[i]),
            Action::Take { client, index } => self.take(&mut s, client, index)?,
            Action::Release(i) => {
                let handed = self.release(&mut s, i);
                finish(&mut s.clients[i]);
                self.follow(&mut s, i, handed);
            }
            Action::GiveUp(i) => {
                let handed = self.release(&mut s, i);
                finish(&mut s.clients[i]);
                self.follow(&mut s, i, handed);
                s.budget.give_ups -= 1;
            }
            Action::FollowUp(i) => {
                s.clients[i].followup = None;
                let handed = self.release(&mut s, i);
                self.follow(&mut s, i, handed);
            }
            Action::CutOff(i) => {
                let c = &mut s.clients[i];
                c.run = Run::CutOff;
                c.orphan = false;
                c.phase = Phase::Waiting;
                s.budget.cut_offs -= 1;
            }
            Action::Pause(i) => {
                s.clients[i].run = Run::Paused;
                s.budget.pauses -= 1;
            }
            Action::Resume(i) => s.clients[i].run = Run::Running,
            Action::DropLink(i) => {
                s.clients[i].phase = Phase::Waiting;
                s.budget.link_drops -= 1;
            }
            Action::Abandon(i) => {
                s.clients[i].phase = Phase::Waiting;
                s.clients[i].orphan = true;
                s.budget.link_drops -= 1;
            }
            Action::RunOrphan(i) => {
                s.clients[i].orphan = false;
                self.script(&mut s, i);
            }
            Action::DropSubscription(i) => {
                s.clients[i].subscribed = false;
                s.clients[i].grants.clear();
                s.budget.subscription_drops -= 1;
            }
            Action::Resubscribe(i) => s.clients[i].subscribed = true,
        }
        if self.tracks() {
            s.stranded = stranded(last, &s, action);
        }
        Some(s)
    }

    fn tick(s: &mut State) {
        let holder_silent = s
            .key
            .is_some_and(|k| s.clients[usize::from(k.holder)].cut_off());
        s.key = s.key.and_then(|k| {
            let handed = k.handed.map(|h| Handed {
                silent_for: h.silent_for.saturating_add(u8::from(holder_silent)),
                ..h
            });
            (k.left > 1).then_some(Key {
                left: k.left - 1,
                handed,
                ..k
            })
        });
        for c in &mut s.clients {
            let older = |age: &mut Option<u8>| {
                if let Some(a) = age {
                    *a = a.saturating_add(1);
                }
            };
            older(&mut c.floor);
            older(&mut c.last_sent);
            if let Some(due) = &mut c.followup {
                *due = due.saturating_sub(1);
            }
            match &mut c.phase {
                Phase::Holding { left, .. } => *left = left.saturating_sub(1),
                Phase::Attempting(request) => request.age = request.age.saturating_add(1),
                _ => {}
            }
        }
    }

    /// Redis runs the client's attempt; the reply is on its way back.
    fn run(&self, s: &mut State, i: usize) {
        let reply = self.script(s, i);
        if let Phase::Attempting(request) = &mut s.clients[i].phase {
            request.reply = Some(reply);
        }
    }

    /// The client acts on the reply to its attempt.
    fn read(&self, s: &mut State, i: usize) {
        let Phase::Attempting(Request {
            age,
            reply: Some(reply),
        }) = s.clients[i].phase
        else {
            return;
        };
        let ttl = self.config.ttl;
        let c = &mut s.clients[i];
        match reply {
            Reply::Busy(fence) => {
                c.floor = Some(age);
                if self.rule().voids_stale() {
                    c.busy_fence = Some(fence);
                }
                c.phase = Phase::Waiting;
            }
            Reply::Fresh(_) => self.returns(s, i, ttl.saturating_sub(age)),
            Reply::Ours(_) => {
                let from = if self.rule().ours_from_send() {
                    age
                } else {
                    c.floor.unwrap_or(age)
                };
                self.returns(s, i, ttl.saturating_sub(from));
            }
        }
    }

    /// The waiter reads a grant: void, too short (confirmed by an attempt), or its lease.
    fn take(&self, s: &mut State, i: usize, index: usize) -> Option<()> {
        let c = &mut s.clients[i];
        if index >= c.grants.len() {
            return None;
        }
        let fence = c.grants.remove(index);
        if self.rule().voids_stale() && c.busy_fence.is_some_and(|b| fence <= b) {
            s.seen |= SEEN_VOID;
            return Some(());
        }
        if self.config.confirms_grants || self.rule().confirms_every_grant() {
            self.send(c);
            return Some(());
        }
        let from = if self.rule().grant_from_floor() {
            c.floor
        } else {
            c.last_sent
        };
        let left = self.config.ttl.saturating_sub(from.unwrap_or(u8::MAX));
        self.returns(s, i, left);
        if s.clients[i].believes_held() {
            s.seen |= SEEN_HANDOFF;
        }
        Some(())
    }

    /// `acquire` returns a guard valid for `left` more ticks, unless the rule wants at
    /// least the floor of validity: then the waiter confirms with an attempt.
    fn returns(&self, s: &mut State, i: usize, left: u8) {
        let c = &mut s.clients[i];
        if self.rule().keeps_min_validity() && left < self.config.min_validity {
            s.seen |= SEEN_CONFIRM;
            self.send(c);
            return;
        }
        if left < self.config.min_validity {
            s.seen |= SEEN_SHORT;
        }
        let c = &mut s.clients[i];
        c.phase = Phase::Holding { left };
        c.grants.clear();
        c.floor = None;
        c.busy_fence = None;
        c.last_sent = None;
        c.subscribed = true;
        if self.tracks() && (s.clients.iter()).any(|c| c.cut_off() && !c.grants.is_empty()) {
            s.seen |= SEEN_PAST_SILENT;
        }
    }

    /// After client `i`'s release script: if it handed the lock on and the rule follows
    /// hand-offs up, the client checks again when the key it set runs out.
    fn follow(&self, s: &mut State, i: usize, handed: bool) {
        if handed && self.rule().follows_up() {
            s.clients[i].followup = s.key.map(|k| k.left);
        }
    }

    /// Ages capped at the lease (a lease dated from longer ago has nothing left), and
    /// fences renumbered by rank (only their order matters; the counter stays on top).
    fn canonical(&self, s: &mut State) {
        let ttl = self.config.ttl;
        if let Some(Key {
            handed: Some(h), ..
        }) = &mut s.key
        {
            h.silent_for = h.silent_for.min(self.config.window);
        }
        let mut fences: Vec<Fence> = vec![s.counter];
        for c in &mut s.clients {
            for age in [&mut c.floor, &mut c.last_sent].into_iter().flatten() {
                *age = (*age).min(ttl);
            }
            if let Phase::Attempting(request) = &mut c.phase {
                request.age = request.age.min(ttl);
            }
            fences.extend(c.grants.iter().copied().chain(c.busy_fence));
            if let Phase::Attempting(Request {
                reply: Some(Reply::Fresh(f) | Reply::Ours(f) | Reply::Busy(f)),
                ..
            }) = c.phase
            {
                fences.push(f);
            }
        }
        fences.sort_unstable();
        fences.dedup();
        let rank = |f: Fence| {
            let r = fences.partition_point(|&x| x < f);
            Fence::try_from(r).unwrap_or(Fence::MAX)
        };
        s.counter = rank(s.counter);
        for c in &mut s.clients {
            for g in &mut c.grants {
                *g = rank(*g);
            }
            c.busy_fence = c.busy_fence.map(rank);
            if let Phase::Attempting(Request {
                reply: Some(Reply::Fresh(f) | Reply::Ours(f) | Reply::Busy(f)),
                ..
            }) = &mut c.phase
            {
                *f = rank(*f);
            }
        }
    }

    /// The client sends an attempt.
    fn send(&self, c: &mut Client) {
        c.phase = Phase::Attempting(Request {
            age: 0,
            reply: None,
        });
        if self.rule().uses_latest_send() {
            c.last_sent = Some(0);
        }
    }

    fn client_actions(s: &State, i: usize, actions: &mut Vec<Action>) {
        let c = &s.clients[i];
        match c.run {
            Run::Running => {}
            Run::Paused => {
                actions.push(Action::Resume(i));
                return;
            }
            Run::CutOff => return,
        }
        match c.phase {
            // Clients are interchangeable: only runs in which A calls first, then B, ...
            // are explored; any other run is one of those with the names swapped.
            Phase::Idle if i == 0 || s.clients[i - 1].phase != Phase::Idle => {
                actions.push(Action::Begin(i));
            }
            Phase::Attempting(Request { reply, .. }) => {
                if reply.is_some() {
                    actions.push(Action::Read(i));
                }
                if s.budget.link_drops > 0 {
                    actions.push(Action::DropLink(i));
                    if reply.is_none() && !c.orphan {
                        actions.push(Action::Abandon(i));
                    }
                }
            }
            Phase::Waiting => {
                actions.push(Action::Recheck(i));
                actions.extend((0..c.grants.len()).map(|index| Action::Take { client: i, index }));
                if s.budget.give_ups > 0 {
                    actions.push(Action::GiveUp(i));
                }
            }
            Phase::Holding { .. } => actions.push(Action::Release(i)),
            Phase::Done if c.followup == Some(0) => actions.push(Action::FollowUp(i)),
            Phase::Idle | Phase::Done => {}
        }
        if c.waits() {
            if s.budget.pauses > 0 {
                actions.push(Action::Pause(i));
            }
            if s.budget.cut_offs > 0 {
                actions.push(Action::CutOff(i));
            }
            if c.subscribed && s.budget.subscription_drops > 0 {
                actions.push(Action::DropSubscription(i));
            }
            if !c.subscribed {
                actions.push(Action::Resubscribe(i));
            }
        }
    }
}

/// The client's `acquire` is over (released, or gave up): nothing of it is left but an
/// abandoned attempt still on its way.
fn finish(c: &mut Client) {
    *c = Client {
        phase: Phase::Done,
        run: Run::Running,
        subscribed: false,
        grants: Vec::new(),
        floor: None,
        busy_fence: None,
        last_sent: None,
        orphan: c.orphan,
        followup: None,
    };
}

/// [`State::stranded`] after `action` led from `last` to `next`: it starts when time
/// makes the key of a hand-off made by a release run out with a listener queued, grows
/// with each tick after that, and ends when the lock is taken or nobody listening is
/// queued.
fn stranded(last: &State, next: &State, action: Action) -> Option<u8> {
    if next.key.is_some() || !next.listener_queued() {
        return None;
    }
    if action != Action::Tick {
        return last.stranded;
    }
    match (last.stranded, last.key) {
        (Some(ticks), _) => Some(ticks.saturating_add(1).min(1)),
        (None, Some(k)) if k.handed.is_some_and(|h| h.by_release) => Some(0),
        _ => None,
    }
}

/// The clients that believe they hold the lock in `s`.
pub fn believers(s: &State) -> Vec<usize> {
    (s.clients.iter().enumerate())
        .filter(|(_, c)| c.believes_held())
        .map(|(i, _)| i)
        .collect()
}

/// The first client in `s` that believes it holds the lock beyond its lease in Redis
/// (the key holds another token, none, or expires before the guard's `valid_until`).
pub fn beyond_lease(s: &State) -> Option<usize> {
    (s.clients.iter().enumerate()).find_map(|(i, c)| match c.phase {
        Phase::Holding { left, .. } if left > 0 => {
            let within = s
                .key
                .is_some_and(|k| usize::from(k.holder) == i && k.left >= left);
            (!within).then_some(i)
        }
        _ => None,
    })
}

/// The key in `s`, when a hand-off gave it to a waiter cut off silently at least
/// `window` ticks ago and it is still there.
pub fn silent_too_long(s: &State, window: u8) -> Option<Key> {
    s.key
        .filter(|k| k.handed.is_some_and(|h| h.silent_for >= window))
}

impl Model for HandoffModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let cfg = &self.config;
        let idle = Client {
            phase: Phase::Idle,
            run: Run::Running,
            subscribed: true,
            grants: Vec::new(),
            floor: None,
            busy_fence: None,
            last_sent: None,
            orphan: false,
            followup: None,
        };
        vec![State {
            key: None,
            counter: 0,
            queue: Vec::new(),
            clients: vec![idle; cfg.clients],
            budget: Budget {
                pauses: cfg.pauses,
                link_drops: cfg.link_drops,
                subscription_drops: cfg.subscription_drops,
                give_ups: cfg.give_ups,
                cut_offs: cfg.cut_offs,
            },
            seen: 0,
            stranded: None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // Reading a reply is a local step and takes no time (the network's delay is the
        // time an attempt spends on its way); a pushed grant is read by a running waiter
        // before time passes too, unless pub/sub may hold it back any time.
        let urgent = s.clients.iter().any(|c| {
            !c.stopped()
                && match c.phase {
                    Phase::Attempting(Request { reply, .. }) => reply.is_some(),
                    Phase::Waiting => self.config.prompt_grants && !c.grants.is_empty(),
                    // A follow-up whose time has come runs before time passes.
                    Phase::Done => c.followup == Some(0),
                    _ => false,
                }
        });
        if !urgent {
            actions.push(Action::Tick);
        }
        for (i, c) in s.clients.iter().enumerate() {
            if matches!(c.phase, Phase::Attempting(Request { reply: None, .. })) {
                actions.push(Action::Run(i));
            }
            if c.orphan {
                actions.push(Action::RunOrphan(i));
            }
            Self::client_actions(s, i, actions);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = self.apply(last, action)?;
        self.canonical(&mut s);
        // A step that changes nothing (time passing over an idle system) is no new state.
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MUTUAL_EXCLUSION, |_, s: &State| believers(s).len() <= 1),
            Property::always(WITHIN_LEASE, |_, s: &State| beyond_lease(s).is_none()),
            Property::always(SHORT_LEASE, |_, s: &State| s.seen & SEEN_SHORT == 0),
            Property::sometimes(HANDED_OFF, |_, s: &State| s.seen & SEEN_HANDOFF != 0),
            Property::sometimes(PAUSED_HANDOFF, |_, s: &State| {
                s.key
                    .is_some_and(|k| s.clients[usize::from(k.holder)].stopped())
            }),
            Property::sometimes(VOID_DISCARDED, |_, s: &State| s.seen & SEEN_VOID != 0),
            Property::sometimes(CONFIRMED, |_, s: &State| s.seen & SEEN_CONFIRM != 0),
            Property::always(WINDOW_BOUND, |m: &HandoffModel, s: &State| {
                silent_too_long(s, m.config.window).is_none()
            }),
            Property::always(SERVED_AFTER_WINDOW, |_, s: &State| {
                s.stranded.is_none_or(|ticks| ticks == 0)
            }),
            Property::always(IN_ORDER, |_, s: &State| s.seen & SEEN_JUMP == 0),
            Property::sometimes(SERVED_PAST_SILENT, |_, s: &State| {
                s.seen & SEEN_PAST_SILENT != 0
            }),
        ]
    }
}
