//! The serve transition system: which steps are possible, what each does, and the
//! properties checked.

use stateright::{Model, Property};

use super::state::{
    Client, Permit, Phase, Rule, SEEN_BEHIND, SEEN_CUT_GRANT, SEEN_DROP, SEEN_GONE_GRANT,
    SEEN_STUCK, ServeConfig, State,
};

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time advances one tick; permits run down, a permit whose score passed is free.
    Tick,
    /// The holder releases (`sem_release.lua`, which serves the queue).
    Release(usize),
    /// The waiter reads the grant pushed to it: it holds.
    Take(usize),
    /// The client of an abandoned token handles the grant pushed for it, by the rule.
    Handle(usize),
    /// The waiter's re-check: an attempt (`sem_acquire.lua`, which serves the queue),
    /// sent and answered as one step.
    Recheck(usize),
    /// The waiter's client crashes: its grant channel has no receiver any more.
    Crash(usize),
    /// The waiter gives up and its give-back is lost: its place stays, its client still
    /// listens, nobody waits for its token.
    Abandon(usize),
    /// The waiter is cut off silently: Redis still counts its subscription, it hears and
    /// sends nothing any more.
    Cut(usize),
}

/// The model of a semaphore's `serve` hand-off for one [`ServeConfig`].
#[derive(Debug, Clone)]
pub struct ServeModel {
    /// What is explored.
    pub config: ServeConfig,
}

/// Property: never more permits taken than the semaphore has, nor more clients holding.
pub const WITHIN_PERMITS: &str = "never more holders than permits";
/// Property (bounded liveness): a permit granted to a token nobody waits for is free
/// again within [`ServeConfig::bound`] ticks.
pub const GONE_GRANT_FREED: &str = "a grant to a gone waiter is free again within its bound";
/// Property: a script leaves no permit free while a place is queued (every place reaches
/// the head and is granted or dropped by the first script that can serve it).
pub const SERVES_ALL: &str = "no script leaves a permit free while a place is queued";
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

impl ServeModel {
    /// A model of `config`.
    pub fn new(config: ServeConfig) -> Self {
        ServeModel { config }
    }

    /// The state after `action`.
    pub fn apply(&self, last: &State, action: Action) -> State {
        let mut s = last.clone();
        match action {
            Action::Tick => {
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
            }
            Action::Release(i) => {
                self.release(&mut s, i);
                s.clients[i].phase = Phase::Done;
            }
            Action::Take(i) => {
                // The waiter confirms its grant with an attempt: the whole lease from now.
                let me = client_id(i);
                if let Some(p) = s.permits.iter_mut().find(|p| p.token == me) {
                    p.left = self.config.ttl;
                }
                s.clients[i] = Client {
                    phase: Phase::Holding,
                    granted: false,
                };
            }
            Action::Handle(i) => {
                s.clients[i].granted = false;
                if self.config.rule == Rule::GiveBack {
                    self.release(&mut s, i);
                }
            }
            Action::Recheck(i) => self.attempt(&mut s, i),
            Action::Crash(i) => {
                s.crashes -= 1;
                s.clients[i] = Client {
                    phase: Phase::Crashed,
                    granted: false,
                };
            }
            Action::Abandon(i) => {
                s.abandons -= 1;
                s.clients[i].phase = Phase::Abandoned;
            }
            Action::Cut(i) => {
                s.cuts -= 1;
                s.clients[i].phase = Phase::Cut;
            }
        }
        s.permits.sort_unstable();
        s
    }

    /// `sem_release.lua` with client `i`'s token: give its permit back, or withdraw its
    /// place, then serve the queue.
    fn release(&self, s: &mut State, i: usize) {
        let me = client_id(i);
        let held = s.permits.len();
        s.permits.retain(|p| p.token != me);
        if s.permits.len() == held {
            s.queue.retain(|&q| q != me);
        }
        self.serve(s, None);
    }

    /// `sem_acquire.lua` with client `i`'s token: a permit it holds already (a grant not
    /// read yet) is its own; else the queue is served (it may be the head); a caller not
    /// queued takes a free permit only when the queue is empty, and joins it otherwise.
    fn attempt(&self, s: &mut State, i: usize) {
        let me = client_id(i);
        if let Some(p) = s.permits.iter_mut().find(|p| p.token == me) {
            // A grant confirmed by the waiter's attempt: the whole lease from now.
            p.left = self.config.ttl;
        }
        if s.permits.iter().any(|p| p.token == me) || self.serve(s, Some(me)) {
            s.clients[i] = Client {
                phase: Phase::Holding,
                granted: false,
            };
            return;
        }
        if s.queue.contains(&me) {
            return;
        }
        if s.queue.is_empty() && s.permits.len() < usize::from(self.config.permits) {
            Self::grant(s, me, self.config.ttl);
            s.clients[i].phase = Phase::Holding;
        } else {
            s.queue.push(me);
        }
    }

    /// `serve` (semaphore.lua): while a permit is free, pop the queue's head; the caller
    /// takes its permit silently; any other head is granted one and told by a `PUBLISH`,
    /// unless that reaches no one: then its place is dropped. Whether the caller was
    /// served.
    fn serve(&self, s: &mut State, caller: Option<u8>) -> bool {
        while s.permits.len() < usize::from(self.config.permits) && !s.queue.is_empty() {
            let head = s.queue.remove(0);
            if Some(head) == caller {
                Self::grant(s, head, self.config.ttl);
                return true;
            }
            let h = usize::from(head);
            if !s.clients[h].listens() {
                s.seen |= SEEN_DROP;
                continue;
            }
            // Pushed: the claim window until the waiter confirms (see `ServeConfig::window`).
            Self::grant(s, head, self.config.window.unwrap_or(self.config.ttl));
            s.clients[h].granted = true;
            if s.clients[h].phase == Phase::Cut {
                s.seen |= SEEN_CUT_GRANT;
            } else if !s.clients[h].wanted() {
                s.seen |= SEEN_GONE_GRANT;
            } else if s.clients[..h]
                .iter()
                .any(|c| !c.wanted() && c.phase != Phase::Done)
            {
                s.seen |= SEEN_BEHIND;
            }
        }
        if s.permits.len() < usize::from(self.config.permits) && !s.queue.is_empty() {
            s.seen |= SEEN_STUCK;
        }
        false
    }

    fn grant(s: &mut State, token: u8, left: u8) {
        s.permits.push(Permit {
            token,
            left,
            unclaimed: 0,
        });
    }
}

fn client_id(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
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
        let holders = usize::from(cfg.permits).min(cfg.clients);
        let clients = (0..cfg.clients)
            .map(|i| Client {
                phase: if i < holders {
                    Phase::Holding
                } else {
                    Phase::Waiting
                },
                granted: false,
            })
            .collect();
        vec![State {
            permits: (0..holders)
                .map(|i| Permit {
                    token: client_id(i),
                    left: cfg.ttl,
                    unclaimed: 0,
                })
                .collect(),
            queue: (holders..cfg.clients).map(client_id).collect(),
            clients,
            crashes: cfg.crashes,
            abandons: cfg.abandons,
            cuts: cfg.cuts,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        // A running client handles a pushed grant before time passes (one cut off never
        // does).
        if !s.clients.iter().any(|c| c.granted && c.phase != Phase::Cut) {
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
                    if s.cuts > 0 {
                        actions.push(Action::Cut(i));
                    }
                }
                Phase::Abandoned if c.granted => actions.push(Action::Handle(i)),
                Phase::Abandoned | Phase::Crashed | Phase::Cut | Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = self.apply(last, action);
        let cap = self
            .config
            .bound
            .max(self.config.cut_bound)
            .saturating_add(1);
        for p in &mut s.permits {
            p.unclaimed = p.unclaimed.min(cap);
        }
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(WITHIN_PERMITS, |m: &ServeModel, s: &State| {
                let n = usize::from(m.config.permits);
                let holding = s.clients.iter().filter(|c| c.phase == Phase::Holding);
                s.permits.len() <= n && holding.count() <= n
            }),
            Property::always(GONE_GRANT_FREED, |m: &ServeModel, s: &State| {
                unclaimed_too_long(s, m.config.bound, false).is_none()
            }),
            Property::always(CUT_GRANT_FREED, |m: &ServeModel, s: &State| {
                unclaimed_too_long(s, m.config.cut_bound, true).is_none()
            }),
            Property::always(SERVES_ALL, |_, s: &State| s.seen & SEEN_STUCK == 0),
            Property::sometimes(GONE_GRANT, |_, s: &State| s.seen & SEEN_GONE_GRANT != 0),
            Property::sometimes(DROPPED, |_, s: &State| s.seen & SEEN_DROP != 0),
            Property::sometimes(SERVED_BEHIND, |_, s: &State| s.seen & SEEN_BEHIND != 0),
            Property::sometimes(CUT_GRANT, |_, s: &State| s.seen & SEEN_CUT_GRANT != 0),
        ]
    }
}
