//! The serve transition system: which steps are possible, what each does, and the
//! properties checked (the scripts themselves are in `script.rs`).

use stateright::{Model, Property};

use super::state::{
    Client, Permit, Phase, Rule, SEEN_BEHIND, SEEN_CUT_GRANT, SEEN_DEAD_HEAD, SEEN_DROP,
    SEEN_GONE_GRANT, SEEN_HELD_BACK, SEEN_NUDGE, SEEN_SHARED, SEEN_STUCK, ServeConfig, State,
    client_id,
};

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time advances one tick; leases and re-check timers run down, a lease whose score
    /// passed is free. Not taken while a running client has a grant to read or a re-check
    /// due now.
    Tick,
    /// The holder releases (`sem_release.lua` / `rw_release.lua`, which serve the queue).
    Release(usize),
    /// The waiter reads the grant pushed to it and confirms it by an attempt: it holds.
    Take(usize),
    /// The client of an abandoned token handles the grant pushed for it, by the rule.
    Handle(usize),
    /// An attempt (`sem_acquire.lua` / `rw_acquire.lua`, which serve the queue), sent and
    /// answered as one step: a newcomer's first, or a waiter's re-check (due by its timer,
    /// or early, as a pub/sub reconnect makes it).
    Recheck(usize),
    /// The waiter's client crashes: its grant channel has no receiver any more.
    Crash(usize),
    /// The waiter gives up and its give-back is lost: its place stays, its client still
    /// listens, nobody waits for its token.
    Abandon(usize),
    /// The waiter gives up and its give-back runs: its place is withdrawn, the queue served.
    GiveUp(usize),
    /// The waiter is cut off silently: Redis still counts its subscription, it hears and
    /// sends nothing any more.
    Cut(usize),
}

/// The model of the `serve` hand-off for one [`ServeConfig`].
#[derive(Debug, Clone)]
pub struct ServeModel {
    /// What is explored.
    pub config: ServeConfig,
}

/// Property (safety): never more permits taken than the semaphore has, never a writer
/// beside anyone, among the leases and among the clients that believe they hold.
pub const WITHIN_PERMITS: &str = "never more holders than the grants allow";
/// Property (bounded liveness): a permit granted to a token nobody waits for is free
/// again within [`ServeConfig::bound`] ticks.
pub const GONE_GRANT_FREED: &str = "a grant to a gone waiter is free again within its bound";
/// Property: a script leaves the queue's head unserved only when it does not fit (every
/// place reaches the head and is granted or dropped by the first script that can serve it).
pub const SERVES_ALL: &str = "no script leaves a head that fits unserved";
/// Property (bounded liveness): when a live waiter could be served (the lock or permits
/// it asks for are free but for leases nobody waits for and places of crashed waiters),
/// it is granted within a claim window plus [`ServeConfig::bound`] ticks
/// ([`ServeConfig::live_bound`]).
pub const LIVE_SERVED: &str = "a lease freed reaches a live waiter within window + bound";
/// Example: a permit is granted to a token nobody waits for.
pub const GONE_GRANT: &str = "sometimes a permit is granted to a gone waiter";
/// Example: a serve drops the place of a waiter whose client crashed.
pub const DROPPED: &str = "sometimes a serve drops a crashed waiter's place";
/// Example: a waiter queued behind a gone one is served.
pub const SERVED_BEHIND: &str = "sometimes a waiter behind a gone one is served";
/// Property (bounded liveness): a permit granted to a waiter cut off silently is free again
/// within [`ServeConfig::cut_bound`] ticks (its claim window).
pub const CUT_GRANT_FREED: &str =
    "a grant to a silently cut waiter is free again within its window";
/// Example: a permit is granted to a waiter cut off silently.
pub const CUT_GRANT: &str = "sometimes a permit is granted to a silently cut waiter";
/// Example: a serve drops a dead head that kept others out.
pub const DEAD_HEAD_DROPPED: &str = "sometimes a dead head that keeps others out is dropped";
/// Example: a newcomer the holders would let in queues behind an older place.
pub const HELD_BACK: &str = "sometimes a newcomer queues behind an older place";
/// Example: readers hold together.
pub const SHARED: &str = "sometimes readers hold together";
/// Example: a waiter is nudged.
pub const NUDGED: &str = "sometimes a waiter is nudged";

impl ServeModel {
    /// A model of `config`.
    pub fn new(config: ServeConfig) -> Self {
        ServeModel { config }
    }

    /// The state after `action`.
    pub fn apply(&self, last: &State, action: Action) -> State {
        let mut s = last.clone();
        match action {
            Action::Tick => Self::tick(&mut s),
            Action::Release(i) => {
                self.release(&mut s, i);
                s.clients[i].phase = Phase::Done;
            }
            Action::Take(i) | Action::Recheck(i) => self.attempt(&mut s, i),
            Action::Handle(i) => {
                s.clients[i].granted = false;
                if self.config.rule == Rule::GiveBack {
                    self.release(&mut s, i);
                }
            }
            Action::Crash(i) => {
                s.crashes -= 1;
                s.clients[i] = gone(Phase::Crashed);
            }
            Action::Abandon(i) => {
                s.abandons -= 1;
                s.clients[i].phase = Phase::Abandoned;
                s.clients[i].due = None;
            }
            Action::GiveUp(i) => {
                s.give_ups -= 1;
                s.clients[i] = gone(Phase::Done);
                self.release(&mut s, i);
            }
            Action::Cut(i) => {
                s.cuts -= 1;
                s.clients[i].phase = Phase::Cut;
                s.clients[i].due = None;
            }
        }
        s.permits.sort_unstable();
        self.count_overdue(last, action, &mut s);
        s
    }

    /// Keeps [`State::overdue`]: a tick taken while a live waiter could be served counts,
    /// any other tick resets it, and so does any step after which no live waiter could be
    /// served. Counters are capped just past their bounds.
    fn count_overdue(&self, last: &State, action: Action, s: &mut State) {
        let cfg = &self.config;
        if action == Action::Tick {
            s.overdue = if self.could_serve_live(last) {
                last.overdue.saturating_add(1)
            } else {
                0
            };
        } else if !self.could_serve_live(s) {
            s.overdue = 0;
        }
        s.overdue = s.overdue.min(cfg.live_bound().saturating_add(1));
        let cap = cfg.bound.max(cfg.cut_bound).saturating_add(1);
        for p in &mut s.permits {
            p.unclaimed = p.unclaimed.min(cap);
        }
    }

    fn tick(s: &mut State) {
        for p in &mut s.permits {
            p.left -= 1;
            if !s.clients[usize::from(p.token)].wanted() {
                p.unclaimed = p.unclaimed.saturating_add(1);
            }
        }
        let (kept, ran_out): (Vec<Permit>, Vec<Permit>) =
            s.permits.iter().partition(|p| p.left > 0);
        s.permits = kept;
        for p in ran_out {
            let c = &mut s.clients[usize::from(p.token)];
            if c.phase == Phase::Holding {
                c.phase = Phase::Done;
            }
        }
        for c in &mut s.clients {
            c.due = c.due.map(|d| d.saturating_sub(1));
        }
    }
}

/// A client that is gone (crashed, or done waiting).
fn gone(phase: Phase) -> Client {
    Client {
        phase,
        granted: false,
        due: None,
    }
}

/// The first permit taken longer than `bound` ticks by a token nobody waits for, its
/// waiter cut off silently (`cut`) or not.
pub fn unclaimed_too_long(s: &State, bound: u8, cut: bool) -> Option<Permit> {
    s.permits.iter().copied().find(|p| {
        p.unclaimed > bound && (s.clients[usize::from(p.token)].phase == Phase::Cut) == cut
    })
}

impl Model for ServeModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let cfg = &self.config;
        let holders = cfg.holders.min(cfg.clients);
        let queued = cfg.clients.saturating_sub(cfg.arrivals).max(holders);
        let clients = (0..cfg.clients)
            .map(|i| Client {
                phase: if i < holders {
                    Phase::Holding
                } else if i < queued {
                    Phase::Waiting
                } else {
                    Phase::Idle
                },
                granted: false,
                due: None,
            })
            .collect();
        let mut s = State {
            permits: (0..holders)
                .map(|i| Permit {
                    token: client_id(i),
                    left: cfg.ttl,
                    unclaimed: 0,
                })
                .collect(),
            queue: (holders..queued).map(client_id).collect(),
            clients,
            crashes: cfg.crashes,
            abandons: cfg.abandons,
            give_ups: cfg.give_ups,
            cuts: cfg.cuts,
            overdue: 0,
            seen: 0,
        };
        // Each waiter's timer as its latest attempt's reply set it.
        for i in holders..queued {
            s.clients[i].due = self.reply_timer(&s, client_id(i));
        }
        vec![s]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // A running client handles a pushed grant, and re-checks when its timer is due,
        // before time passes (one cut off never does).
        let waits = |c: &Client| {
            (c.granted && c.phase != Phase::Cut)
                || (c.running_waiter() && !c.granted && c.due == Some(0))
        };
        if !s.clients.iter().any(waits) {
            actions.push(Action::Tick);
        }
        for (i, c) in s.clients.iter().enumerate() {
            match c.phase {
                Phase::Holding => actions.push(Action::Release(i)),
                Phase::Waiting if c.granted => actions.push(Action::Take(i)),
                Phase::Waiting => {
                    actions.push(Action::Recheck(i));
                    if s.crashes > 0 {
                        actions.push(Action::Crash(i));
                    }
                    if s.abandons > 0 {
                        actions.push(Action::Abandon(i));
                    }
                    if s.give_ups > 0 {
                        actions.push(Action::GiveUp(i));
                    }
                    if s.cuts > 0 {
                        actions.push(Action::Cut(i));
                    }
                }
                Phase::Idle => actions.push(Action::Recheck(i)),
                Phase::Abandoned if c.granted => actions.push(Action::Handle(i)),
                Phase::Abandoned | Phase::Crashed | Phase::Cut | Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let s = self.apply(last, action);
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(WITHIN_PERMITS, |m: &ServeModel, s: &State| {
                let holding = (s.clients.iter().enumerate())
                    .filter(|(_, c)| c.phase == Phase::Holding)
                    .map(|(i, _)| m.config.want(i));
                m.config.allowed(m.held(s)) && m.config.allowed(holding)
            }),
            Property::always(GONE_GRANT_FREED, |m: &ServeModel, s: &State| {
                unclaimed_too_long(s, m.config.bound, false).is_none()
            }),
            Property::always(CUT_GRANT_FREED, |m: &ServeModel, s: &State| {
                unclaimed_too_long(s, m.config.cut_bound, true).is_none()
            }),
            Property::always(LIVE_SERVED, |m: &ServeModel, s: &State| {
                s.overdue <= m.config.live_bound()
            }),
            Property::always(SERVES_ALL, |_, s: &State| s.seen & SEEN_STUCK == 0),
            Property::sometimes(GONE_GRANT, |_, s: &State| s.seen & SEEN_GONE_GRANT != 0),
            Property::sometimes(DROPPED, |_, s: &State| s.seen & SEEN_DROP != 0),
            Property::sometimes(SERVED_BEHIND, |_, s: &State| s.seen & SEEN_BEHIND != 0),
            Property::sometimes(CUT_GRANT, |_, s: &State| s.seen & SEEN_CUT_GRANT != 0),
            Property::sometimes(DEAD_HEAD_DROPPED, |_, s: &State| {
                s.seen & SEEN_DEAD_HEAD != 0
            }),
            Property::sometimes(HELD_BACK, |_, s: &State| s.seen & SEEN_HELD_BACK != 0),
            Property::sometimes(SHARED, |_, s: &State| s.seen & SEEN_SHARED != 0),
            Property::sometimes(NUDGED, |_, s: &State| s.seen & SEEN_NUDGE != 0),
        ]
    }
}
