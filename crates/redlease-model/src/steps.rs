//! The steps themselves: what each action does to the state, following `quorum.rs` and
//! the Lua scripts.

use crate::config::{BeforeWrite, Drift, Fencing, PauseClock, Persistence, WriteBack};
use crate::model::{ClockId, QuorumModel};
use crate::slots::Slots;
use crate::state::{
    ABSENT, Accepted, Backlog, Before, Client, Fence, LockKey, MAX_NODES, Node, Phase, Reply,
    Request, State,
};

impl QuorumModel {
    /// A fan-out to the nodes in `to`: pending on the nodes that are up, failed at once on
    /// the others (the connection is refused).
    pub(crate) fn send(state: &State, to: impl Fn(usize) -> bool) -> Slots<Reply, MAX_NODES> {
        (0..state.nodes.len())
            .map(|n| match (to(n), state.nodes[n].up) {
                (false, _) => Reply::Unsent,
                (true, true) => Reply::Pending,
                (true, false) => Reply::Failed,
            })
            .collect()
    }

    /// The lease's validity on the client's clock, counted from the send: `ttl - drift`.
    pub(crate) fn validity(&self) -> u8 {
        self.config.ttl.saturating_sub(self.config.drift_allowance)
    }

    pub(crate) fn start(&self, state: &mut State, i: usize) {
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
    pub(crate) fn execute(
        &self,
        state: &mut State,
        client: usize,
        node: usize,
        request: Request,
    ) -> Reply {
        let remember = self.config.restart.persistence == Persistence::LastWriteLost;
        let n = &mut state.nodes[node];
        let ours = n.lock.is_some_and(|l| usize::from(l.owner) == client);
        let before = n.counter;
        match request {
            // acquire.lua: SET NX PX and a grant (INCR, fence.lua's max(stored + 1, TIME),
            // or its INCR that takes TIME only when the counter is gone); our own key: GET
            // the counter.
            Request::Acquire => match n.lock {
                None => {
                    n.lock = Some(LockKey {
                        owner: u8::try_from(client).unwrap_or(u8::MAX),
                        ttl_left: self.config.ttl,
                    });
                    n.counter = match self.config.fencing {
                        Fencing::HybridClock { .. } => n.counter.saturating_add(1).max(n.clock),
                        Fencing::CounterThenClock { .. } if n.counter == ABSENT => n.clock,
                        Fencing::Counter | Fencing::CounterThenClock { .. } => {
                            n.counter.saturating_add(1)
                        }
                    };
                    if remember {
                        n.previous = before;
                    }
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
                if remember && n.counter != before {
                    n.previous = before;
                }
                Reply::Yes
            }
        }
    }

    /// The network step on the client's connection to the node: the oldest request left
    /// behind runs first; otherwise the one the client waits for, whose reply is recorded
    /// unless `reply_lost`.
    pub(crate) fn deliver(&self, state: &mut State, client: usize, node: usize, reply_lost: bool) {
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
    pub(crate) fn lose(state: &mut State, client: usize, node: usize) {
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
    pub(crate) fn release(&self, state: &mut State, i: usize, lost: Option<usize>) {
        for node in 0..state.nodes.len() {
            if !state.nodes[node].up || lost == Some(node) {
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
    pub(crate) fn give_back(&self, state: &mut State, i: usize, lost: Option<usize>) {
        self.release(state, i, lost);
        let c = &mut state.clients[i];
        c.phase = if c.attempts_left > 0 {
            Phase::Idle
        } else {
            Phase::Done
        };
        c.replies.fill(Reply::Unsent);
    }

    pub(crate) fn hold(state: &mut State, i: usize, token: Fence, valid_left: u8, after: Before) {
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
    pub(crate) fn decide_acquire(
        &self,
        state: &mut State,
        i: usize,
        (valid_left, after): (u8, Before),
        pick: Option<usize>,
        lost: Option<usize>,
    ) {
        let c = &state.clients[i];
        let fences: Vec<Option<Fence>> = (c.replies.iter())
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
        self.give_back(state, i, lost);
    }

    pub(crate) fn decide(
        &self,
        state: &mut State,
        i: usize,
        pick: Option<usize>,
        lost: Option<usize>,
    ) {
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
            } => self.decide_acquire(state, i, (valid_left, after), pick, lost),
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
                    self.give_back(state, i, lost);
                }
            }
            _ => {}
        }
    }

    pub(crate) fn finish(&self, state: &mut State, i: usize) {
        self.release(state, i, None);
        let c = &mut state.clients[i];
        c.phase = Phase::Done;
        c.replies.fill(Reply::Unsent);
    }

    pub(crate) fn check(&self, state: &mut State, i: usize) {
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

    pub(crate) fn write(&self, state: &mut State, i: usize) {
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
    pub(crate) fn client_clock_tick(&self, c: &mut Client) {
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
    pub(crate) fn node_clock_tick(n: &mut Node) {
        if let Some(l) = &mut n.lock {
            l.ttl_left = l.ttl_left.saturating_sub(1);
            if l.ttl_left == 0 {
                n.lock = None;
            }
        }
    }

    pub(crate) fn tick(&self, state: &mut State, slow: Option<ClockId>) {
        // Under the hybrid clock, values are kept relative to global time, which moves on
        // by a tick; a slow node's clock falls behind it by as much.
        let per_tick = self.config.fencing.per_tick();
        if per_tick > 0 {
            state.for_each_fence(|v| *v = v.saturating_sub(per_tick).max(ABSENT + 1));
        }
        for (i, n) in state.nodes.iter_mut().enumerate() {
            if slow == Some(ClockId::Node(i)) {
                n.clock = n.clock.saturating_sub(per_tick);
            } else {
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

    pub(crate) fn mark_drifted(state: &mut State, clock: ClockId) {
        match clock {
            ClockId::Client(i) => state.clients[i].drifted = true,
            ClockId::Node(i) => state.nodes[i].drifted = true,
        }
        state.budget.drifts = state.budget.drifts.saturating_sub(1);
    }

    pub(crate) fn fast(&self, state: &mut State, clock: ClockId) {
        match clock {
            ClockId::Client(i) => self.client_clock_tick(&mut state.clients[i]),
            ClockId::Node(i) => {
                let n = &mut state.nodes[i];
                Self::node_clock_tick(n);
                n.clock = n.clock.saturating_add(self.config.fencing.per_tick());
            }
        }
        Self::mark_drifted(state, clock);
    }

    /// A node's clock steps back by [`Config::clock_step_back`](crate::Config) ticks:
    /// `TIME` reads that much less, and a key present lives that much longer (Redis
    /// expires keys on the wall clock).
    pub(crate) fn step_back(&self, state: &mut State, i: usize) {
        state.budget.steps_back = state.budget.steps_back.saturating_sub(1);
        let back = self.config.clock_step_back;
        let n = &mut state.nodes[i];
        let units = i8::try_from(back)
            .unwrap_or(i8::MAX)
            .saturating_mul(self.config.fencing.per_tick());
        n.clock = n.clock.saturating_sub(units);
        n.stepped_back = true;
        if let Some(l) = &mut n.lock {
            l.ttl_left = l.ttl_left.saturating_add(back);
        }
    }

    /// A node's fencing counter expires (`EX` of `fence.lua`): it is gone, as after a
    /// restart without persistence.
    pub(crate) fn expire_counter(&self, state: &mut State, i: usize) {
        state.budget.expiries = state.budget.expiries.saturating_sub(1);
        let n = &mut state.nodes[i];
        if self.config.restart.persistence == Persistence::LastWriteLost {
            n.previous = n.counter;
        }
        n.counter = self.lost_counter();
    }

    /// A counter that is gone: `GET` answers nil, read as 0.
    pub(crate) fn lost_counter(&self) -> Fence {
        match self.config.fencing {
            Fencing::Counter => 0,
            Fencing::HybridClock { .. } | Fencing::CounterThenClock { .. } => ABSENT,
        }
    }

    /// Whether a node's counter may expire now. Under a rule with a clock: once the
    /// node's clock is past the counter (`fence.lua` keeps a counter its keep past the
    /// later of its value and the clock, so it goes only once the clock has passed it),
    /// whether or not the node holds a lock key (a hold may outlive the keep). A plain
    /// counter has no clock to follow: only on a node holding no lock key (an expiry
    /// between two holders).
    pub(crate) fn may_expire(&self, n: &Node) -> bool {
        let counted = match self.config.fencing {
            Fencing::Counter => n.lock.is_none() && n.counter > 0,
            Fencing::HybridClock { .. } | Fencing::CounterThenClock { .. } => {
                n.counter != ABSENT && n.counter < n.clock
            }
        };
        n.up && counted
    }

    /// The lowest value any node's clock can read from now on, relative to global time:
    /// a value below it only ever meets other values in comparisons, never a clock.
    fn clock_floor(&self, state: &State) -> i16 {
        let per_tick = i16::from(self.config.fencing.per_tick());
        let step = i16::from(self.config.clock_step_back) * per_tick;
        let may_step = state.budget.steps_back > 0;
        let may_slow = state.budget.drifts > 0 && self.config.drift == Drift::Any;
        (state.nodes.iter())
            .map(|n| {
                let slow = if may_slow && !n.drifted { per_tick } else { 0 };
                let back = if may_step && !n.stepped_back { step } else { 0 };
                i16::from(n.clock) - slow - back
            })
            .min()
            .unwrap_or(0)
    }

    /// Grants still possible in this run: every attempt left on every node, the acquire
    /// requests in flight and those left behind on a connection. Each grant adds one to
    /// one counter, so no value can gain more than this from here on.
    fn grants_left(state: &State) -> i16 {
        let nodes = state.nodes.len();
        let grants: usize = (state.clients.iter())
            .map(|c| {
                let pending = match c.phase {
                    Phase::Acquiring { .. } => {
                        c.replies.iter().filter(|r| **r == Reply::Pending).count()
                    }
                    _ => 0,
                };
                let behind = (c.backlog.iter())
                    .filter(|b| matches!(b, Backlog::Acquire | Backlog::AcquireRaise(_)))
                    .count();
                usize::from(c.attempts_left) * nodes + pending + behind
            })
            .sum();
        i16::try_from(grants).unwrap_or(i16::MAX)
    }

    /// The canonical form of a state under a rule with a clock: the values below every
    /// clock's floor (see [`clock_floor`](Self::clock_floor)) are renumbered just below
    /// it, keeping their order and equalities, which is all that can still matter about
    /// them under the hybrid clock (a grant there takes `max(value + 1, clock)`, and the
    /// clock is above them: they only meet other values in comparisons), so they are
    /// renumbered by rank. Under [`Fencing::CounterThenClock`] a grant adds one to such a
    /// value, so distances matter too, but only up to the grants left in the run: a
    /// distance is kept when it is at most that many, and cut down to one more than that
    /// otherwise (the floor counts as a value, the top of the chain), which keeps every
    /// comparison of `a + i` with `b + j` (or with a clock) that can still happen. This
    /// keeps the states finite though values keep falling as time passes.
    pub(crate) fn canonical(&self, state: &mut State) {
        if !self.config.fencing.uses_clock() {
            return;
        }
        let cap = match self.config.fencing {
            Fencing::CounterThenClock { .. } => Self::grants_left(state).saturating_add(1),
            _ => 1,
        };
        let floor = self.clock_floor(state);
        let mut old: Vec<Fence> = Vec::new();
        state.for_each_fence(|v| {
            if i16::from(*v) < floor {
                old.push(*v);
            }
        });
        if old.is_empty() {
            return;
        }
        old.sort_unstable_by(|a, b| b.cmp(a));
        old.dedup();
        // Walking down from the floor: each value's new place, its distance to the one
        // above it kept up to `cap`.
        let mut renumbered: Vec<i16> = Vec::with_capacity(old.len());
        let (mut above, mut above_new) = (floor, floor);
        for &v in &old {
            let gap = (above - i16::from(v)).min(cap);
            above = i16::from(v);
            above_new -= gap;
            renumbered.push(above_new);
        }
        state.for_each_fence(|v| {
            if let Some(rank) = old.iter().position(|o| o == v) {
                *v = i8::try_from(renumbered[rank]).unwrap_or(ABSENT + 1);
            }
        });
    }

    pub(crate) fn crash(&self, state: &mut State, i: usize) {
        state.budget.crashes = state.budget.crashes.saturating_sub(1);
        let lost = self.lost_counter();
        let n = &mut state.nodes[i];
        n.up = false;
        n.down_for = 0;
        match self.config.restart.persistence {
            Persistence::Everything => {}
            Persistence::CounterOnly => n.lock = None,
            Persistence::Nothing => {
                n.lock = None;
                n.counter = lost;
            }
            Persistence::LastWriteLost => {
                n.lock = None;
                n.counter = n.previous;
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
