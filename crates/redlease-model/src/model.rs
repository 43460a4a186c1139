//! The transition system: which steps are possible in a state and what each one does.

use stateright::{Model, Property};

use crate::config::{BeforeWrite, Config, Drift, PauseClock, Persistence, TokenRule, WriteBack};
use crate::properties::{fenced_violation, holders};
use crate::slots::Slots;
use crate::state::{
    Accepted, Backlog, Before, Budget, Client, LockKey, MAX_NODES, Node, Phase, Reply, Request,
    Resource, State,
};

/// A clock that can drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockId {
    /// A client's clock.
    Client(usize),
    /// A node's clock.
    Node(usize),
}

/// One step of the system.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Global time advances one tick, and every running clock with it.
    Tick,
    /// Global time advances one tick, but this clock does not (it runs slow).
    TickSlow(ClockId),
    /// This clock gains one tick (it runs fast).
    Fast(ClockId),
    /// A client sends an acquisition attempt to every node.
    Start(usize),
    /// A node runs the client's oldest request still on its way; if it is the one the
    /// client waits for, the reply arrives.
    Deliver {
        /// The client.
        client: usize,
        /// The node.
        node: usize,
    },
    /// A node runs the client's pending request, but the reply is lost.
    DeliverNoReply {
        /// The client.
        client: usize,
        /// The node.
        node: usize,
    },
    /// The client's oldest request to a node is lost with its connection, before it runs.
    Lose {
        /// The client.
        client: usize,
        /// The node.
        node: usize,
    },
    /// The client acts on the replies of its fan-out (all in, or its timeout fired).
    Decide(usize),
    /// As `Decide`, under [`TokenRule::OneGranter`]: the token is this granting node's
    /// counter.
    DecidePicking {
        /// The client.
        client: usize,
        /// The granting node whose counter becomes the token.
        node: usize,
    },
    /// The client looks at its guard before writing.
    Check(usize),
    /// The client writes to the resource with its fencing token, then releases.
    Write(usize),
    /// The client stops (GC pause, `SIGSTOP`, VM suspend).
    Pause(usize),
    /// The client runs again.
    Resume(usize),
    /// A node crashes.
    Crash(usize),
    /// A crashed node rejoins.
    Restart(usize),
}

/// The model of `redlease`'s quorum protocol for one [`Config`].
#[derive(Debug, Clone)]
pub struct QuorumModel {
    /// What is explored.
    pub config: Config,
}

/// Property: the resource never accepts a token lower than one it accepted, no token from
/// two holders, and no write of an older holder after a newer one's.
pub const FENCED_SAFETY: &str = "fenced safety";
/// Property: never two clients believing they hold the lock at one instant.
pub const MUTUAL_EXCLUSION: &str = "unfenced mutual exclusion";
/// Sanity: some run has a write accepted.
pub const SOME_WRITE: &str = "sometimes a write is accepted";
/// Sanity: some run has both clients' writes accepted.
pub const BOTH_WRITE: &str = "sometimes both clients' writes are accepted";
/// Sanity: some run has the resource reject an older token.
pub const SOME_REJECT: &str = "sometimes the resource rejects an older token";

impl QuorumModel {
    /// A model of `config`.
    pub fn new(config: Config) -> Self {
        QuorumModel { config }
    }

    /// Every nondecreasing vector of counters in `0..=counter_spread` starting at 0.
    fn initial_counters(&self) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..self.config.nodes {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    let low = prefix.last().copied().unwrap_or(0);
                    let high = if prefix.is_empty() {
                        0
                    } else {
                        self.config.counter_spread
                    };
                    (low..=high).map(move |c| {
                        let mut v = prefix.clone();
                        v.push(c);
                        v
                    })
                })
                .collect();
        }
        all
    }

    /// Whether the client's fan-out can be acted on now: every reply is in, or its
    /// per-node timeout fired.
    fn decidable(&self, client: &Client) -> bool {
        match client.phase {
            Phase::Acquiring { elapsed, .. } | Phase::Raising { elapsed, .. } => {
                elapsed >= self.config.node_timeout || !client.replies.contains(&Reply::Pending)
            }
            _ => false,
        }
    }

    /// A running client with something to do at once keeps time from advancing: local
    /// steps take no time unless the client is paused.
    fn urgent(&self, state: &State) -> bool {
        state.clients.iter().any(|c| {
            !c.paused
                && (matches!(c.phase, Phase::Holding { .. } | Phase::Writing { .. })
                    || self.decidable(c))
        })
    }

    fn clock_actions(&self, state: &State, actions: &mut Vec<Action>) {
        let time_may_pass = !self.urgent(state);
        if time_may_pass {
            actions.push(Action::Tick);
        }
        if state.budget.drifts == 0 {
            return;
        }
        // A drift step on a clock that measures nothing at the moment changes nothing but
        // the budget: only clocks timing a fan-out or a lease (a client's) or a key's expiry
        // (a node's) drift.
        let clients = (state.clients.iter().enumerate())
            .filter(|(_, c)| !c.drifted && c.measures())
            .map(|(i, _)| ClockId::Client(i));
        let nodes = (state.nodes.iter().enumerate())
            .filter(|(_, n)| !n.drifted && n.lock.is_some())
            .map(|(i, _)| ClockId::Node(i));
        for clock in clients.chain(nodes) {
            let (slow, fast) = match (self.config.drift, clock) {
                (Drift::Any, _) => (true, true),
                (Drift::Adversarial, ClockId::Client(_)) => (true, false),
                (Drift::Adversarial, ClockId::Node(_)) => (false, true),
            };
            if slow && time_may_pass {
                actions.push(Action::TickSlow(clock));
            }
            if fast {
                actions.push(Action::Fast(clock));
            }
        }
    }

    fn client_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, c) in state.clients.iter().enumerate() {
            if c.paused {
                actions.push(Action::Resume(i));
                continue;
            }
            // Clients are interchangeable: only runs in which A starts first, then B, ...
            // are explored; any other run is one of those with the names swapped.
            let turn = i == 0 || state.clients[i - 1].attempts_left < self.config.attempts;
            match c.phase {
                Phase::Idle if c.attempts_left > 0 && turn => actions.push(Action::Start(i)),
                Phase::Holding { .. } => actions.push(Action::Check(i)),
                Phase::Writing { .. } => actions.push(Action::Write(i)),
                Phase::Acquiring { .. }
                    if self.decidable(c) && self.config.token_rule == TokenRule::OneGranter =>
                {
                    let granting: Vec<usize> = (0..c.replies.len())
                        .filter(|&n| matches!(c.replies[n], Reply::Granted(_)))
                        .collect();
                    if granting.is_empty() {
                        actions.push(Action::Decide(i));
                    }
                    actions.extend(
                        granting
                            .into_iter()
                            .map(|node| Action::DecidePicking { client: i, node }),
                    );
                }
                _ if self.decidable(c) => actions.push(Action::Decide(i)),
                _ => {}
            }
            let pausable = matches!(
                c.phase,
                Phase::Acquiring { .. }
                    | Phase::Raising { .. }
                    | Phase::Holding { .. }
                    | Phase::Writing { .. }
            );
            if pausable && state.budget.pauses > 0 {
                actions.push(Action::Pause(i));
            }
        }
    }

    fn network_actions(state: &State, actions: &mut Vec<Action>) {
        for (client, c) in state.clients.iter().enumerate() {
            for node in 0..c.replies.len() {
                let queued = c.backlog[node] != Backlog::Empty;
                let waited_for = c.replies[node] == Reply::Pending;
                if !state.nodes[node].up || !(queued || waited_for) {
                    continue;
                }
                actions.push(Action::Deliver { client, node });
                if state.budget.losses > 0 {
                    if waited_for && !queued {
                        actions.push(Action::DeliverNoReply { client, node });
                    }
                    actions.push(Action::Lose { client, node });
                }
            }
        }
    }

    fn node_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, n) in state.nodes.iter().enumerate() {
            if n.up && state.budget.crashes > 0 {
                actions.push(Action::Crash(i));
            }
            if !n.up && n.down_for >= self.config.restart.min_down {
                actions.push(Action::Restart(i));
            }
        }
    }

    /// A fan-out to the nodes in `to`: pending on the nodes that are up, failed at once on
    /// the others (the connection is refused).
    fn send(state: &State, to: impl Fn(usize) -> bool) -> Slots<Reply, MAX_NODES> {
        (0..state.nodes.len())
            .map(|n| match (to(n), state.nodes[n].up) {
                (false, _) => Reply::Unsent,
                (true, true) => Reply::Pending,
                (true, false) => Reply::Failed,
            })
            .collect()
    }

    /// The lease's validity on the client's clock, counted from the send: `ttl - drift`.
    fn validity(&self) -> u8 {
        self.config.ttl.saturating_sub(self.config.drift_allowance)
    }

    fn start(&self, state: &mut State, i: usize) {
        let after = (state.clients.iter().enumerate())
            .filter(|(_, c)| c.acquired)
            .fold(0, |mask, (j, _)| mask | (1 << j));
        let replies = Self::send(state, |_| true);
        let c = &mut state.clients[i];
        c.attempts_left = c.attempts_left.saturating_sub(1);
        c.phase = Phase::Acquiring {
            elapsed: 0,
            valid_left: self.validity(),
            after,
        };
        c.replies = replies;
    }

    /// Runs `request` of `client` on `node`; the reply.
    fn execute(&self, state: &mut State, client: usize, node: usize, request: Request) -> Reply {
        let n = &mut state.nodes[node];
        let ours = n.lock.is_some_and(|l| usize::from(l.owner) == client);
        match request {
            // acquire.lua: SET NX PX, INCR on a fresh grant; our own key: GET the counter.
            Request::Acquire => match n.lock {
                None => {
                    n.lock = Some(LockKey {
                        owner: u8::try_from(client).unwrap_or(u8::MAX),
                        ttl_left: self.config.ttl,
                    });
                    n.counter = n.counter.saturating_add(1);
                    Reply::Granted(n.counter)
                }
                Some(_) if ours => Reply::Granted(n.counter),
                Some(_) => Reply::Failed,
            },
            // raise_fence.lua: raise, never lower (the fix: only while the key is ours).
            Request::Raise(token) => {
                if self.config.write_back == WriteBack::WhileHeld && !ours {
                    return Reply::No;
                }
                n.counter = n.counter.max(token);
                Reply::Yes
            }
        }
    }

    /// The network step on the client's connection to the node: the oldest request left
    /// behind runs first; otherwise the one the client waits for, whose reply is recorded
    /// unless `reply_lost`.
    fn deliver(&self, state: &mut State, client: usize, node: usize, reply_lost: bool) {
        let c = &state.clients[client];
        if let Some(request) = c.backlog[node].head() {
            state.clients[client].backlog[node] = c.backlog[node].pop();
            self.execute(state, client, node, request);
        } else if let Some(request) = c.request() {
            let reply = self.execute(state, client, node, request);
            state.clients[client].replies[node] = if reply_lost { Reply::Failed } else { reply };
        }
    }

    /// The oldest request on the client's connection to the node is lost.
    fn lose(state: &mut State, client: usize, node: usize) {
        let c = &mut state.clients[client];
        if c.backlog[node] == Backlog::Empty {
            c.replies[node] = Reply::Failed;
        } else {
            c.backlog[node] = c.backlog[node].pop();
        }
        state.budget.losses = state.budget.losses.saturating_sub(1);
    }

    /// `release.lua` on every node that is up, as one step: what the client left behind on
    /// that connection runs first, then `DEL` where the key holds the client's token.
    fn release(&self, state: &mut State, i: usize) {
        for node in 0..state.nodes.len() {
            if !state.nodes[node].up {
                continue;
            }
            while let Some(request) = state.clients[i].backlog[node].head() {
                state.clients[i].backlog[node] = state.clients[i].backlog[node].pop();
                self.execute(state, i, node, request);
            }
            let n = &mut state.nodes[node];
            if n.lock.is_some_and(|l| usize::from(l.owner) == i) {
                n.lock = None;
            }
        }
    }

    /// Ends an attempt that did not acquire: gives back what it may hold, then retries or
    /// stops.
    fn give_back(&self, state: &mut State, i: usize) {
        self.release(state, i);
        let c = &mut state.clients[i];
        c.phase = if c.attempts_left > 0 {
            Phase::Idle
        } else {
            Phase::Done
        };
        c.replies.fill(Reply::Unsent);
    }

    fn hold(state: &mut State, i: usize, token: u8, valid_left: u8, after: Before) {
        let c = &mut state.clients[i];
        c.phase = Phase::Holding {
            token,
            valid_left,
            after,
        };
        c.acquired = true;
        c.replies.fill(Reply::Unsent);
    }

    /// `quorum::acquire` after the first round trip.
    fn decide_acquire(
        &self,
        state: &mut State,
        i: usize,
        (valid_left, after): (u8, Before),
        pick: Option<usize>,
    ) {
        let c = &state.clients[i];
        let fences: Vec<Option<u8>> = (c.replies.iter())
            .map(|r| match r {
                Reply::Granted(f) => Some(*f),
                _ => None,
            })
            .collect();
        let granted = fences.iter().flatten().count();
        let needed = self.config.majority();
        if granted >= needed && valid_left > 0 {
            // The largest counter among the granting nodes (or, mutated, one node's).
            let token = match pick {
                None => fences.iter().flatten().copied().max().unwrap_or(0),
                Some(n) => fences.get(n).copied().flatten().unwrap_or(0),
            };
            let at_fence = fences.iter().filter(|f| **f == Some(token)).count();
            if self.config.write_back == WriteBack::Off || at_fence >= needed {
                Self::hold(state, i, token, valid_left, after);
                return;
            }
            // quorum.rs writes back to every node not at the token; the fix, only to the
            // nodes that granted this attempt (whose counters the token accounts for).
            let fix = self.config.write_back == WriteBack::WhileHeld;
            let replies = Self::send(state, |n| {
                fences[n] != Some(token) && (!fix || fences[n].is_some())
            });
            let c = &mut state.clients[i];
            c.phase = Phase::Raising {
                elapsed: 0,
                valid_left,
                token,
                at_fence: u8::try_from(at_fence).unwrap_or(u8::MAX),
                after,
            };
            c.replies = replies;
            return;
        }
        // quorum.rs releases when anything was granted or a node did not answer; when every
        // node answered "busy" there is nothing of ours to delete, so releasing always is
        // the same step.
        self.give_back(state, i);
    }

    fn decide(&self, state: &mut State, i: usize, pick: Option<usize>) {
        // Replies still missing at the timeout count as failures; their requests are
        // still on their way and will run before anything sent later on that connection.
        let c = &mut state.clients[i];
        if let Some(request) = c.request() {
            for (r, b) in c.replies.iter_mut().zip(c.backlog.iter_mut()) {
                if *r == Reply::Pending {
                    *r = Reply::Failed;
                    *b = b.push(request);
                }
            }
        }
        match state.clients[i].phase {
            Phase::Acquiring {
                valid_left, after, ..
            } => self.decide_acquire(state, i, (valid_left, after), pick),
            // The write-back is not followed by a second validity check, as in quorum.rs.
            Phase::Raising {
                valid_left,
                token,
                at_fence,
                after,
                ..
            } => {
                let replies = &state.clients[i].replies;
                let confirmed = replies.iter().filter(|r| **r == Reply::Yes).count();
                if usize::from(at_fence) + confirmed >= self.config.majority() {
                    Self::hold(state, i, token, valid_left, after);
                } else {
                    self.give_back(state, i);
                }
            }
            _ => {}
        }
    }

    fn finish(&self, state: &mut State, i: usize) {
        self.release(state, i);
        let c = &mut state.clients[i];
        c.phase = Phase::Done;
        c.replies.fill(Reply::Unsent);
    }

    fn check(&self, state: &mut State, i: usize) {
        if let Phase::Holding {
            token,
            valid_left,
            after,
        } = state.clients[i].phase
        {
            if self.config.before_write == BeforeWrite::JustWrite || valid_left > 0 {
                state.clients[i].phase = Phase::Writing { token, after };
            } else {
                self.finish(state, i);
            }
        }
    }

    fn write(&self, state: &mut State, i: usize) {
        if let Phase::Writing { token, after } = state.clients[i].phase {
            let r = &mut state.resource;
            if token >= r.highest {
                r.highest = token;
                r.accepted.push(Accepted {
                    client: u8::try_from(i).unwrap_or(u8::MAX),
                    token,
                    after,
                });
            } else {
                r.rejected = r.rejected.saturating_add(1);
            }
            self.finish(state, i);
        }
    }

    /// One tick of a client's clock.
    fn client_clock_tick(&self, c: &mut Client) {
        let limit = self.config.node_timeout;
        match &mut c.phase {
            Phase::Acquiring {
                elapsed,
                valid_left,
                ..
            }
            | Phase::Raising {
                elapsed,
                valid_left,
                ..
            } => {
                *elapsed = elapsed.saturating_add(1).min(limit);
                *valid_left = valid_left.saturating_sub(1);
            }
            Phase::Holding { valid_left, .. } => *valid_left = valid_left.saturating_sub(1),
            _ => {}
        }
    }

    /// One tick of a node's clock: its key ages, and is gone when its time is up.
    fn node_clock_tick(n: &mut Node) {
        if let Some(l) = &mut n.lock {
            l.ttl_left = l.ttl_left.saturating_sub(1);
            if l.ttl_left == 0 {
                n.lock = None;
            }
        }
    }

    fn tick(&self, state: &mut State, slow: Option<ClockId>) {
        for (i, n) in state.nodes.iter_mut().enumerate() {
            if slow != Some(ClockId::Node(i)) {
                Self::node_clock_tick(n);
            }
            if !n.up {
                n.down_for = n
                    .down_for
                    .saturating_add(1)
                    .min(self.config.restart.min_down);
            }
        }
        let stops = self.config.pause_clock == PauseClock::Stops;
        for (i, c) in state.clients.iter_mut().enumerate() {
            if slow != Some(ClockId::Client(i)) && !(stops && c.paused) {
                self.client_clock_tick(c);
            }
        }
        if let Some(clock) = slow {
            Self::mark_drifted(state, clock);
        }
    }

    fn mark_drifted(state: &mut State, clock: ClockId) {
        match clock {
            ClockId::Client(i) => state.clients[i].drifted = true,
            ClockId::Node(i) => state.nodes[i].drifted = true,
        }
        state.budget.drifts = state.budget.drifts.saturating_sub(1);
    }

    fn fast(&self, state: &mut State, clock: ClockId) {
        match clock {
            ClockId::Client(i) => self.client_clock_tick(&mut state.clients[i]),
            ClockId::Node(i) => Self::node_clock_tick(&mut state.nodes[i]),
        }
        Self::mark_drifted(state, clock);
    }

    fn crash(&self, state: &mut State, i: usize) {
        state.budget.crashes = state.budget.crashes.saturating_sub(1);
        let n = &mut state.nodes[i];
        n.up = false;
        n.down_for = 0;
        match self.config.restart.persistence {
            Persistence::Everything => {}
            Persistence::CounterOnly => n.lock = None,
            Persistence::Nothing => {
                n.lock = None;
                n.counter = 0;
            }
        }
        // The connections break: requests on their way to the node are lost.
        for c in &mut state.clients {
            if c.replies[i] == Reply::Pending {
                c.replies[i] = Reply::Failed;
            }
            c.backlog[i] = Backlog::Empty;
        }
    }
}

impl Model for QuorumModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let cfg = &self.config;
        (self.initial_counters().into_iter())
            .map(|counters| State {
                nodes: (counters.into_iter())
                    .map(|counter| Node {
                        up: true,
                        down_for: 0,
                        lock: None,
                        counter,
                        drifted: false,
                    })
                    .collect(),
                clients: (0..cfg.clients)
                    .map(|_| Client {
                        phase: Phase::Idle,
                        drifted: false,
                        paused: false,
                        attempts_left: cfg.attempts,
                        acquired: false,
                        replies: Slots::filled(cfg.nodes, Reply::Unsent),
                        backlog: Slots::filled(cfg.nodes, Backlog::Empty),
                    })
                    .collect(),
                resource: Resource {
                    highest: 0,
                    accepted: Slots::empty(),
                    rejected: 0,
                },
                budget: Budget {
                    drifts: cfg.drifting_clocks,
                    pauses: cfg.pauses,
                    crashes: cfg.crashes,
                    losses: cfg.lost_messages,
                },
            })
            .collect()
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        if state.clients.iter().all(|c| c.phase == Phase::Done) {
            return;
        }
        self.clock_actions(state, actions);
        self.client_actions(state, actions);
        Self::network_actions(state, actions);
        self.node_actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = *last;
        match action {
            Action::Tick => self.tick(&mut s, None),
            Action::TickSlow(clock) => self.tick(&mut s, Some(clock)),
            Action::Fast(clock) => self.fast(&mut s, clock),
            Action::Start(i) => self.start(&mut s, i),
            Action::Deliver { client, node } => self.deliver(&mut s, client, node, false),
            Action::DeliverNoReply { client, node } => {
                self.deliver(&mut s, client, node, true);
                s.budget.losses = s.budget.losses.saturating_sub(1);
            }
            Action::Lose { client, node } => Self::lose(&mut s, client, node),
            Action::Decide(i) => self.decide(&mut s, i, None),
            Action::DecidePicking { client, node } => self.decide(&mut s, client, Some(node)),
            Action::Check(i) => self.check(&mut s, i),
            Action::Write(i) => self.write(&mut s, i),
            Action::Pause(i) => {
                s.clients[i].paused = true;
                s.budget.pauses = s.budget.pauses.saturating_sub(1);
            }
            Action::Resume(i) => s.clients[i].paused = false,
            Action::Crash(i) => self.crash(&mut s, i),
            Action::Restart(i) => s.nodes[i].up = true,
        }
        // A step that changes nothing (time passing over an idle system) is no new state.
        (s != *last).then_some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(FENCED_SAFETY, |_, s: &State| fenced_violation(s).is_none()),
            Property::always(MUTUAL_EXCLUSION, |_, s: &State| holders(s) <= 1),
            Property::sometimes(SOME_WRITE, |_, s: &State| !s.resource.accepted.is_empty()),
            Property::sometimes(BOTH_WRITE, |_, s: &State| {
                let r = &s.resource.accepted;
                r.iter().any(|a| r.iter().any(|b| a.client != b.client))
            }),
            Property::sometimes(SOME_REJECT, |_, s: &State| s.resource.rejected > 0),
        ]
    }
}
