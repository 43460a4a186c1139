//! The failover transition system: which steps are possible, what each does, and the
//! properties checked.

use stateright::{Model, Property};

use super::config::{FailoverConfig, Rule};
use super::state::{Client, Phase, Reply, SEEN_CONFIRM, SEEN_RELAYED, SEEN_SKIP, State};

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// The replica is promoted (the endpoint now leads new connections to it); the old
    /// primary becomes its replica, and the links on it stay open. Any number of times,
    /// up to the configuration's `role_changes`: a failover, a failback, ...
    Failover,
    /// The client calls `acquire`: its link and its attempt go to the primary.
    Begin(usize),
    /// The primary runs the client's attempt (`acquire.lua`).
    Run(usize),
    /// The client reads the reply to its attempt.
    Read(usize),
    /// The client's re-check timer fires: it sends another attempt.
    Recheck(usize),
    /// The client reads a grant pushed over its link.
    Take(usize),
    /// The client reads the answer to the `ROLE` it asked on its link after a grant.
    Role(usize),
    /// The holder releases (`release.lua` on the primary).
    Release(usize),
    /// Replication delivers the oldest PUBLISH on its way to the replica, to the links on
    /// the replica.
    Replicate,
}

/// The model of grants across a failover behind an endpoint for one [`FailoverConfig`].
#[derive(Debug, Clone)]
pub struct FailoverModel {
    /// What is explored.
    pub config: FailoverConfig,
}

/// Property: never two clients that believe they hold the lock at once.
pub const MUTUAL_EXCLUSION: &str = "no two clients believe they hold the lock";
/// Property: a client believes it holds only while the lock key holds its token.
pub const WITHIN_TRUTH: &str = "a client believes it holds only while the key holds its token";
/// Example: a release skipped a waiter with no receiver on the primary.
pub const SKIPPED: &str = "sometimes a release skips a waiter whose link is on the replica";
/// Example: a grant reached a waiter over the replica.
pub const RELAYED: &str = "sometimes a grant reaches a waiter over the replica";
/// Example: a waiter confirmed a grant by an attempt.
pub const CONFIRMED: &str = "sometimes a waiter confirms a grant by an attempt";

impl FailoverModel {
    /// A model of `config`.
    pub fn new(config: FailoverConfig) -> Self {
        FailoverModel { config }
    }

    /// The state after `action`.
    pub fn apply(&self, last: &State, action: Action) -> State {
        let mut s = last.clone();
        match action {
            Action::Failover => {
                s.primary = 1 - s.primary;
                s.changes += 1;
            }
            Action::Begin(i) => {
                let c = &mut s.clients[i];
                c.link = Some(s.primary);
                c.link_checked = true;
                c.phase = Phase::Attempting(None);
            }
            Action::Run(i) => {
                let reply = script(&mut s, i);
                s.clients[i].phase = Phase::Attempting(Some(reply));
            }
            Action::Read(i) => {
                let c = &mut s.clients[i];
                c.phase = match c.phase {
                    Phase::Attempting(Some(Reply::Ours)) => Phase::Holding,
                    _ => Phase::Waiting,
                };
            }
            Action::Recheck(i) => s.clients[i].phase = Phase::Attempting(None),
            Action::Take(i) => {
                let primary = s.primary;
                let c = &mut s.clients[i];
                c.grants -= 1;
                let trusted = match self.config.rule {
                    Rule::TrustAnyLink => Some(true),
                    Rule::TrustLinkCheckedOnce => Some(c.link_checked),
                    Rule::TrustLinkOnPrimary => Some(c.link == Some(primary)),
                    Rule::TrustRoleAskedAfter => None,
                    Rule::ConfirmByAttempt => Some(false),
                };
                match trusted {
                    Some(true) => c.phase = Phase::Holding,
                    Some(false) => {
                        c.phase = Phase::Attempting(None);
                        s.seen |= SEEN_CONFIRM;
                    }
                    None => c.phase = Phase::Checking,
                }
            }
            Action::Role(i) => {
                // The server answers as what it is when ROLE reaches it: now.
                let primary = s.primary;
                let c = &mut s.clients[i];
                if c.link == Some(primary) {
                    c.phase = Phase::Holding;
                } else {
                    c.phase = Phase::Attempting(None);
                    s.seen |= SEEN_CONFIRM;
                }
            }
            Action::Release(i) => {
                release(&mut s, i);
                s.clients[i] = Client {
                    phase: Phase::Done,
                    link: None,
                    link_checked: false,
                    grants: 0,
                };
            }
            Action::Replicate => {
                let to = s.relayed.remove(0);
                let replica = 1 - s.primary;
                let c = &mut s.clients[usize::from(to)];
                if c.link == Some(replica) {
                    c.grants += 1;
                    s.seen |= SEEN_RELAYED;
                }
            }
        }
        s
    }
}

/// `acquire.lua` on the primary: take a free lock, answer ours for our own token, else
/// join the queue once and answer busy.
fn script(s: &mut State, i: usize) -> Reply {
    let me = client_id(i);
    match s.key {
        None => {
            s.key = Some(me);
            s.queue.retain(|&q| q != me);
            Reply::Ours
        }
        Some(k) if k == me => Reply::Ours,
        Some(_) => {
            if !s.queue.contains(&me) {
                s.queue.push(me);
            }
            Reply::Busy
        }
    }
}

/// `release.lua` on the primary: if the key holds our token, PUBLISH a grant to the
/// queue's head; a head with no receiver on the primary is skipped (its place lost) and
/// the next one tried; nobody left: the key is deleted. Every PUBLISH is replicated.
fn release(s: &mut State, i: usize) {
    let me = client_id(i);
    if s.key != Some(me) {
        s.queue.retain(|&q| q != me);
        return;
    }
    s.key = None;
    while !s.queue.is_empty() {
        let head = s.queue.remove(0);
        s.relayed.push(head);
        let waiter = &mut s.clients[usize::from(head)];
        if waiter.link == Some(s.primary) {
            waiter.grants += 1;
            s.key = Some(head);
            return;
        }
        s.seen |= SEEN_SKIP;
    }
}

fn client_id(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}

/// The clients that believe they hold the lock in `s`.
pub fn believers(s: &State) -> Vec<usize> {
    (s.clients.iter().enumerate())
        .filter(|(_, c)| c.phase == Phase::Holding)
        .map(|(i, _)| i)
        .collect()
}

/// The first client that believes it holds the lock while the key holds another token
/// or none.
pub fn beyond_truth(s: &State) -> Option<usize> {
    believers(s)
        .into_iter()
        .find(|&i| s.key != Some(client_id(i)))
}

impl Model for FailoverModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let idle = Client {
            phase: Phase::Idle,
            link: None,
            link_checked: false,
            grants: 0,
        };
        let mut clients = vec![idle; self.config.clients];
        clients[0] = Client {
            phase: Phase::Holding,
            link: Some(0),
            link_checked: true,
            grants: 0,
        };
        clients[1] = Client {
            phase: Phase::Waiting,
            link: Some(0),
            link_checked: true,
            grants: 0,
        };
        vec![State {
            primary: 0,
            changes: 0,
            key: Some(0),
            queue: vec![1],
            relayed: Vec::new(),
            clients,
            seen: 0,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.changes < self.config.role_changes {
            actions.push(Action::Failover);
        }
        if !s.relayed.is_empty() {
            actions.push(Action::Replicate);
        }
        for (i, c) in s.clients.iter().enumerate() {
            match c.phase {
                // Clients after the waiter are interchangeable: they call in order.
                Phase::Idle if s.clients[i - 1].phase != Phase::Idle => {
                    actions.push(Action::Begin(i));
                }
                Phase::Attempting(None) => actions.push(Action::Run(i)),
                Phase::Attempting(Some(_)) => actions.push(Action::Read(i)),
                Phase::Waiting => {
                    actions.push(Action::Recheck(i));
                    if c.grants > 0 {
                        actions.push(Action::Take(i));
                    }
                }
                Phase::Checking => actions.push(Action::Role(i)),
                Phase::Holding => actions.push(Action::Release(i)),
                Phase::Idle | Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let s = self.apply(last, action);
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(MUTUAL_EXCLUSION, |_, s: &State| believers(s).len() <= 1),
            Property::always(WITHIN_TRUTH, |_, s: &State| beyond_truth(s).is_none()),
            Property::sometimes(SKIPPED, |_, s: &State| s.seen & SEEN_SKIP != 0),
            Property::sometimes(RELAYED, |_, s: &State| s.seen & SEEN_RELAYED != 0),
            Property::sometimes(CONFIRMED, |_, s: &State| s.seen & SEEN_CONFIRM != 0),
        ]
    }
}
