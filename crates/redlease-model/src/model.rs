//! The transition system: which steps are possible in a state (what each one does is in
//! `steps.rs`), and the properties checked.

use stateright::{Model, Property};

use crate::config::{Config, Drift, Fencing, Persistence, TokenRule};
use crate::properties::{fenced_violation, holders};
use crate::slots::Slots;
use crate::state::{ABSENT, Backlog, Budget, Client, Fence, Node, Phase, Reply, Resource, State};

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
    /// As `Decide`, when the attempt fails: the release that gives back what it took is
    /// lost on its way to this node (the key stays until it expires).
    DecideReleaseLost {
        /// The client.
        client: usize,
        /// The node that never gets the release.
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
    /// A node's clock steps back by [`Config::clock_step_back`] ticks.
    StepBack(usize),
    /// A node's fencing counter expires.
    ExpireCounter(usize),
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

    /// Every nondecreasing vector of counters in `0..=counter_spread` starting at 0; under
    /// the hybrid clock, of counters absent or at the clock (absent only, for a spread of
    /// 0); counter then clock, the same, and for a spread of 2 or more, of counters absent
    /// or anywhere from two ticks and a unit behind the clock up to it (the canonical
    /// form then merges the ones that cannot be told apart).
    fn initial_counters(&self) -> Vec<Vec<Fence>> {
        let behind = match self.config.fencing {
            Fencing::CounterThenClock { per_tick } if self.config.counter_spread >= 2 => {
                Some(i8::try_from(2 * u16::from(per_tick) + 1).unwrap_or(i8::MAX))
            }
            _ => None,
        };
        if let Some(behind) = behind {
            let values: Vec<Fence> = std::iter::once(ABSENT).chain(-behind..=0).collect();
            let mut all: Vec<Vec<Fence>> = vec![Vec::new()];
            for _ in 0..self.config.nodes {
                all = (all.into_iter())
                    .flat_map(|prefix| {
                        let low = prefix.last().copied().unwrap_or(ABSENT);
                        (values.iter().copied().filter(move |v| *v >= low)).map(move |v| {
                            let mut next = prefix.clone();
                            next.push(v);
                            next
                        })
                    })
                    .collect();
            }
            return all;
        }
        if self.config.fencing.uses_clock() {
            let at_clock = usize::from(self.config.counter_spread.min(1));
            return (0..=self.config.nodes * at_clock)
                .map(|k| {
                    let mut v = vec![ABSENT; self.config.nodes - k];
                    v.resize(self.config.nodes, 0);
                    v
                })
                .collect();
        }
        let spread = i8::try_from(self.config.counter_spread).unwrap_or(i8::MAX);
        let mut all: Vec<Vec<Fence>> = vec![Vec::new()];
        for _ in 0..self.config.nodes {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    let low = prefix.last().copied().unwrap_or(0);
                    let high = if prefix.is_empty() { 0 } else { spread };
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
        // Under the hybrid clock a node's clock also sets its grants, so any node may drift.
        let hybrid = self.config.fencing.uses_clock();
        let nodes = (state.nodes.iter().enumerate())
            .filter(|(_, n)| !n.drifted && (hybrid || n.lock.is_some()))
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
            if self.decidable(c) && state.budget.losses > 0 {
                let holds = |n: usize| {
                    let node = &state.nodes[n];
                    node.up && node.lock.is_some_and(|l| usize::from(l.owner) == i)
                };
                actions.extend(
                    (0..state.nodes.len())
                        .filter(|&n| holds(n))
                        .map(|node| Action::DecideReleaseLost { client: i, node }),
                );
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
            if state.budget.steps_back > 0 && !n.stepped_back {
                actions.push(Action::StepBack(i));
            }
            if state.budget.expiries > 0 && self.may_expire(n) {
                actions.push(Action::ExpireCounter(i));
            }
        }
    }

    /// The state after `action`, before it is put in canonical form (the `explore`
    /// timeline replays paths with it to show every value as it is); `None` when the
    /// action turns out not to be possible.
    pub fn apply(&self, last: &State, action: Action) -> Option<State> {
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
            Action::Decide(i) => self.decide(&mut s, i, None, None),
            Action::DecidePicking { client, node } => {
                self.decide(&mut s, client, Some(node), None);
            }
            Action::DecideReleaseLost { client, node } => {
                self.decide(&mut s, client, None, Some(node));
                if !matches!(s.clients[client].phase, Phase::Idle | Phase::Done) {
                    return None; // acquired: no release to lose
                }
                s.budget.losses = s.budget.losses.saturating_sub(1);
            }
            Action::Check(i) => self.check(&mut s, i),
            Action::Write(i) => self.write(&mut s, i),
            Action::Pause(i) => {
                s.clients[i].paused = true;
                s.budget.pauses = s.budget.pauses.saturating_sub(1);
            }
            Action::Resume(i) => s.clients[i].paused = false,
            Action::Crash(i) => self.crash(&mut s, i),
            Action::Restart(i) => s.nodes[i].up = true,
            Action::StepBack(i) => self.step_back(&mut s, i),
            Action::ExpireCounter(i) => self.expire_counter(&mut s, i),
        }
        Some(s)
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
                        previous: if cfg.restart.persistence == Persistence::LastWriteLost {
                            counter
                        } else {
                            ABSENT
                        },
                        clock: 0,
                        drifted: false,
                        stepped_back: false,
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
                    highest: self.lost_counter(),
                    accepted: Slots::empty(),
                    rejected: 0,
                },
                budget: Budget {
                    drifts: cfg.drifting_clocks,
                    pauses: cfg.pauses,
                    crashes: cfg.crashes,
                    losses: cfg.lost_messages,
                    steps_back: cfg.clocks_stepping_back,
                    expiries: cfg.counter_expiries,
                },
            })
            .map(|mut s| {
                self.canonical(&mut s);
                s
            })
            .fold(Vec::new(), |mut states, s| {
                // Initial counters the canonical form merged are one state.
                if !states.contains(&s) {
                    states.push(s);
                }
                states
            })
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
        let mut s = self.apply(last, action)?;
        self.canonical(&mut s);
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
