//! The lease-life transition system: which steps are possible, what each does, and the
//! properties checked.

use stateright::{Model, Property};

use super::config::{LifeConfig, Rule};
use super::state::{
    Budget, Holder, Key, Reply, Request, SEEN_ORPHAN, SEEN_RAISED, SEEN_RESENT, SEEN_SHORTENED,
    SEEN_TAKEN, State, Step,
};

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Time advances one tick on every clock; the key and the claim run down.
    Tick,
    /// Redis' clock gains a tick on the holder's (within the drift allowance).
    Skew,
    /// The renewer sends a renewal with the lease's ttl.
    Renew,
    /// The holder calls `extend` to this ttl.
    Extend(u8),
    /// Redis runs the request at the head of the connection.
    Run,
    /// Redis answers NOSCRIPT to the request at the head: a waiting client loads the
    /// script and re-sends it (behind everything sent since); a request nobody waits for
    /// is not re-sent.
    Reload,
    /// Redis runs the request at the head, the connection drops before its reply: the
    /// waiting client reconnects and re-sends it.
    Retry,
    /// The request at `index`, which nobody waits for, is held back on a dead connection:
    /// it now reaches Redis after everything sent so far.
    Late(usize),
    /// The holder reads the `index`-th of the replies on their way.
    Read(usize),
    /// The client stops waiting for its `step` (a cancelled extend, a response timeout):
    /// the request may still run, its reply goes nowhere.
    Cancel(Step),
    /// Another client takes the free key.
    Take,
}

/// The model of one lease's life for one [`LifeConfig`].
#[derive(Debug, Clone)]
pub struct LifeModel {
    /// What is explored.
    pub config: LifeConfig,
}

/// Property: whenever the holder's claim says held, Redis' key holds its token.
pub const BELIEF_WITHIN_TRUTH: &str = "the holder's claim never outlives its key in Redis";
/// Example: an extend ran that set the key shorter than it had left.
pub const SHORTENED: &str = "sometimes an extend shortens the key";
/// Example: a re-sent request (NOSCRIPT, a reconnect) ran.
pub const RESENT_RAN: &str = "sometimes a re-sent request runs";
/// Example: a request ran after its client stopped waiting for it.
pub const ORPHAN_RAN: &str = "sometimes a request runs after its client stopped waiting";
/// Example: a lengthening extend's reply raised the claim.
pub const RAISED: &str = "sometimes a lengthening extend raises the claim";
/// Example: the other client took the key.
pub const TAKEN: &str = "sometimes the other client takes the key";

impl LifeModel {
    /// A model of `config`.
    pub fn new(config: LifeConfig) -> Self {
        LifeModel { config }
    }

    fn rule(&self) -> Rule {
        self.config.rule
    }

    /// The state after `action`, before ages are capped (the timeline replays paths with
    /// it); `None` when the action turns out not to be possible.
    pub fn apply(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                expire(&mut s.key);
                let h = &mut s.holder;
                h.claim = h.claim.saturating_sub(1);
                for r in &mut s.queue {
                    r.age = r.age.saturating_add(1);
                }
                for r in &mut s.replies {
                    r.age = r.age.saturating_add(1);
                }
                s.since_skew = s.since_skew.saturating_add(1);
            }
            Action::Skew => {
                expire(&mut s.key);
                s.since_skew = 0;
            }
            Action::Renew => {
                let ttl = s.holder.ttl;
                send(&mut s, Step::Renewal, ttl);
            }
            Action::Extend(ttl) => {
                s.budget.extends -= 1;
                let order = send(&mut s, Step::Extend, ttl);
                let h = &mut s.holder;
                if self.rule().lowers_first() && ttl < h.ttl {
                    h.claim = h.claim.min(ttl.saturating_sub(self.config.drift));
                    h.ttl = ttl;
                    h.set_by = Some(order);
                }
            }
            Action::Run => {
                let request = s.queue.remove(0);
                let ok = run(&mut s, request);
                if request.waited {
                    s.replies.push(Reply {
                        step: request.step,
                        ttl: request.ttl,
                        age: request.age,
                        order: request.order,
                        ok,
                    });
                    s.replies.sort_unstable();
                }
            }
            Action::Reload => {
                s.budget.reloads -= 1;
                let mut request = s.queue.remove(0);
                if request.waited {
                    request.resent = true;
                    s.queue.push(request);
                }
            }
            Action::Retry => {
                s.budget.retries -= 1;
                let mut request = s.queue.remove(0);
                run(&mut s, request);
                request.resent = true;
                s.queue.push(request);
            }
            Action::Late(index) => {
                s.budget.late_orphans -= 1;
                let request = s.queue.remove(index);
                s.queue.push(request);
            }
            Action::Read(index) => {
                if index >= s.replies.len() {
                    return None;
                }
                let reply = s.replies.remove(index);
                self.read(&mut s, reply);
            }
            Action::Cancel(step) => {
                s.budget.cancels -= 1;
                if let Some(r) = (s.queue.iter_mut()).find(|r| r.waited && r.step == step) {
                    r.waited = false;
                } else {
                    s.replies.retain(|r| r.step != step);
                }
            }
            Action::Take => {
                s.key = Key::Theirs;
                s.seen |= SEEN_TAKEN;
            }
        }
        Some(s)
    }

    /// The holder applies a reply by the rule: a lost token ends the lease; an extend's
    /// reply sets the lease's ttl; the validity is set to `sent + ttl - drift` unless the
    /// request was sent before the one that last set it.
    fn read(&self, s: &mut State, reply: Reply) {
        let h = &mut s.holder;
        if !reply.ok {
            h.claim = 0;
            return;
        }
        let before = h.claim;
        if reply.step == Step::Extend {
            h.ttl = reply.ttl;
        }
        if h.set_by.is_some_and(|by| reply.order < by) {
            return;
        }
        h.set_by = Some(reply.order);
        h.claim = (reply.ttl.saturating_sub(reply.age)).saturating_sub(self.config.drift);
        if reply.step == Step::Extend && h.claim > before {
            s.seen |= SEEN_RAISED;
        }
    }

    /// Ages capped past the longest lease (a claim dated from longer ago has nothing
    /// left), the order of sends renumbered by rank, and a lease that is over kept as one
    /// state.
    fn canonical(&self, s: &mut State) {
        let cap = self.config.longest() + 1;
        let mut orders: Vec<u8> = (s.queue.iter().map(|r| r.order))
            .chain(s.replies.iter().map(|r| r.order))
            .chain(s.holder.set_by)
            .collect();
        orders.sort_unstable();
        orders.dedup();
        let rank = |o: u8| u8::try_from(orders.partition_point(|&x| x < o)).unwrap_or(u8::MAX);
        for r in &mut s.queue {
            r.age = r.age.min(cap);
            r.order = rank(r.order);
        }
        for r in &mut s.replies {
            r.age = r.age.min(cap);
            r.order = rank(r.order);
        }
        s.replies.sort_unstable();
        let h = &mut s.holder;
        h.set_by = h.set_by.map(rank);
        s.since_skew = s.since_skew.min(self.config.window());
        if h.claim == 0 {
            // Nothing the holder does matters any more: it believes nothing.
            h.ttl = self.config.ttl;
            h.set_by = None;
            s.queue.clear();
            s.replies.clear();
            s.budget = Budget {
                extends: 0,
                cancels: 0,
                reloads: 0,
                retries: 0,
                late_orphans: 0,
            };
            s.since_skew = 0;
            if s.key != Key::Theirs {
                s.key = Key::Free;
            }
        }
    }
}

/// A tick of Redis' clock: the key runs down, and is gone when nothing is left.
fn expire(key: &mut Key) {
    if let Key::Ours { left } = *key {
        *key = if left > 1 {
            Key::Ours { left: left - 1 }
        } else {
            Key::Free
        };
    }
}

/// The client sends a request for `step` with `ttl`; its place in the order of sends.
fn send(s: &mut State, step: Step, ttl: u8) -> u8 {
    let order = (s.queue.iter().map(|r| r.order))
        .chain(s.replies.iter().map(|r| r.order))
        .chain(s.holder.set_by)
        .max()
        .map_or(0, |o| o + 1);
    s.queue.push(Request {
        step,
        ttl,
        age: 0,
        order,
        waited: true,
        resent: false,
    });
    order
}

/// The script, atomically: if the key holds our token, its expiry becomes `ttl` from now.
fn run(s: &mut State, request: Request) -> bool {
    if request.resent {
        s.seen |= SEEN_RESENT;
    }
    if !request.waited {
        s.seen |= SEEN_ORPHAN;
    }
    let Key::Ours { left } = s.key else {
        return false;
    };
    if request.ttl < left {
        s.seen |= SEEN_SHORTENED;
    }
    s.key = Key::Ours { left: request.ttl };
    true
}

impl Model for LifeModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let cfg = &self.config;
        vec![State {
            key: Key::Ours { left: cfg.ttl },
            queue: Vec::new(),
            replies: Vec::new(),
            holder: Holder {
                claim: cfg.ttl.saturating_sub(cfg.drift),
                ttl: cfg.ttl,
                set_by: Some(0),
            },
            since_skew: cfg.window(),
            budget: Budget {
                extends: cfg.extends,
                cancels: cfg.cancels,
                reloads: cfg.reloads,
                retries: cfg.retries,
                late_orphans: cfg.late_orphans,
            },
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let cfg = &self.config;
        // With prompt replies, a reply is read before time passes; it can still be lost
        // by a cancellation.
        if !cfg.prompt_replies || s.replies.is_empty() {
            actions.push(Action::Tick);
        }
        if cfg.skew && s.since_skew >= cfg.window() && matches!(s.key, Key::Ours { .. }) {
            actions.push(Action::Skew);
        }
        if s.key == Key::Free {
            actions.push(Action::Take);
        }
        if let Some(head) = s.queue.first() {
            actions.push(Action::Run);
            if s.budget.reloads > 0 {
                actions.push(Action::Reload);
            }
            if s.budget.retries > 0 && head.waited {
                actions.push(Action::Retry);
            }
        }
        if s.budget.late_orphans > 0 {
            let last = s.queue.len().saturating_sub(1);
            actions.extend(
                (s.queue.iter().enumerate())
                    .filter(|(i, r)| !r.waited && *i < last)
                    .map(|(i, _)| Action::Late(i)),
            );
        }
        actions.extend((0..s.replies.len()).map(Action::Read));
        if s.holder.claim == 0 {
            return;
        }
        let renewing = s.waits_for(Step::Renewal);
        let extending = s.waits_for(Step::Extend);
        let serial = self.rule().serialises();
        if !(renewing || serial && extending) {
            actions.push(Action::Renew);
        }
        if s.budget.extends > 0 && !extending && !(serial && renewing) {
            actions.extend(cfg.short.into_iter().chain(cfg.long).map(Action::Extend));
        }
        if s.budget.cancels > 0 {
            for step in [Step::Renewal, Step::Extend] {
                if s.waits_for(step) && cfg.cancelled_step.is_none_or(|only| only == step) {
                    actions.push(Action::Cancel(step));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = self.apply(last, action)?;
        self.canonical(&mut s);
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(BELIEF_WITHIN_TRUTH, |_, s: &State| !s.belief_beyond_truth()),
            Property::sometimes(SHORTENED, |_, s: &State| s.seen & SEEN_SHORTENED != 0),
            Property::sometimes(RESENT_RAN, |_, s: &State| s.seen & SEEN_RESENT != 0),
            Property::sometimes(ORPHAN_RAN, |_, s: &State| s.seen & SEEN_ORPHAN != 0),
            Property::sometimes(RAISED, |_, s: &State| s.seen & SEEN_RAISED != 0),
            Property::sometimes(TAKEN, |_, s: &State| s.seen & SEEN_TAKEN != 0),
        ]
    }
}
