//! A discovery path told as a numbered timeline a person can follow.
//!
//! States hold no absolute time (only what is left or elapsed on each clock), so the
//! timeline replays the path to give each step its global time `t` and each clock its
//! reading, all starting at 0. Under the hybrid clock, the path is replayed without the
//! canonical renumbering (`QuorumModel::apply`) and every fencing value is shown as an
//! absolute one: the value plus the global time in fence units, so `TIME` reads 0 on every
//! node at the start.

use std::fmt::Write as _;

use crate::config::{Config, Fencing, PauseClock};
use crate::model::{Action, ClockId, MUTUAL_EXCLUSION, QuorumModel};
use crate::properties::{fenced_violation, fenced_violation_shown, overlapping_holders};
use crate::state::{ABSENT, Fence, Phase, Reply, Request, State, client_name, node_name};

/// Global time and every clock's reading, replayed along a path.
#[derive(Debug, Clone)]
struct Clocks {
    now: i32,
    clients: Vec<i32>,
    nodes: Vec<i32>,
    /// Fence units per tick (0: a plain counter).
    per_tick: i32,
}

impl Clocks {
    fn advance(&mut self, config: &Config, prev: &State, action: Action) {
        let slow = match action {
            Action::Tick => None,
            Action::TickSlow(clock) => Some(clock),
            Action::Fast(ClockId::Client(i)) => {
                self.clients[i] += 1;
                return;
            }
            Action::Fast(ClockId::Node(i)) => {
                self.nodes[i] += 1;
                return;
            }
            Action::StepBack(i) => {
                self.nodes[i] -= i32::from(config.clock_step_back);
                return;
            }
            _ => return,
        };
        self.now += 1;
        for (i, c) in self.clients.iter_mut().enumerate() {
            let stopped = config.pause_clock == PauseClock::Stops && prev.clients[i].paused;
            if slow != Some(ClockId::Client(i)) && !stopped {
                *c += 1;
            }
        }
        for (i, n) in self.nodes.iter_mut().enumerate() {
            if slow != Some(ClockId::Node(i)) {
                *n += 1;
            }
        }
    }

    /// A fencing value as the timeline shows it: absolute, or `none`.
    fn fence(&self, v: Fence) -> String {
        if v == ABSENT {
            "none".to_owned()
        } else {
            (i32::from(v) + self.per_tick * self.now).to_string()
        }
    }

    fn reading(&self, clock: ClockId) -> i32 {
        match clock {
            ClockId::Client(i) => self.clients[i],
            ClockId::Node(i) => self.nodes[i],
        }
    }

    fn summary(&self) -> String {
        let clients =
            (self.clients.iter().enumerate()).map(|(i, c)| format!("{} {c}", client_name(i)));
        let nodes = (self.nodes.iter().enumerate()).map(|(i, n)| format!("{} {n}", node_name(i)));
        clients.chain(nodes).collect::<Vec<_>>().join(", ")
    }
}

/// The steps of a path (`(state, action taken from it)`, the last with no action) as
/// numbered lines; runs of plain ticks are folded into one line.
pub fn timeline(config: &Config, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let steps = replay(config, steps);
    let Some((first, _)) = steps.first() else {
        return Vec::new();
    };
    let mut clocks = start_clocks(config, first);
    let counters: Vec<String> = (first.nodes.iter().enumerate())
        .map(|(i, n)| format!("{} {}", node_name(i), clocks.fence(n.counter)))
        .collect();
    let time = match config.fencing {
        Fencing::Counter => String::new(),
        Fencing::HybridClock { per_tick } | Fencing::CounterThenClock { per_tick } => {
            format!(" (a node's TIME reads {per_tick} units a tick of its clock)")
        }
    };
    let mut lines = vec![(
        0,
        format!(
            "start: fence counters {}; every clock reads 0{time}",
            counters.join(", ")
        ),
    )];
    let mut ticks_from: Option<i32> = None;
    for pair in steps.windows(2) {
        let [(prev, Some(action)), (next, _)] = pair else {
            continue;
        };
        let before = clocks.clone();
        clocks.advance(config, prev, *action);
        if *action == Action::Tick {
            ticks_from.get_or_insert(before.now);
            continue;
        }
        if let Some(from) = ticks_from.take() {
            lines.push((before.now, time_passes(from, &before, prev)));
        }
        let text = describe(config, &clocks, prev, *action, next);
        lines.push((clocks.now, text));
    }
    if let (Some(from), Some((last, _))) = (ticks_from, steps.last()) {
        lines.push((clocks.now, time_passes(from, &clocks, last)));
    }
    (lines.into_iter().enumerate())
        .map(|(i, (now, text))| format!("{:>3}. t={now:<3} {text}", i + 1))
        .collect()
}

fn start_clocks(config: &Config, first: &State) -> Clocks {
    Clocks {
        now: 0,
        clients: vec![0; first.clients.len()],
        nodes: vec![0; first.nodes.len()],
        per_tick: i32::from(config.fencing.per_tick()),
    }
}

/// The path with every state as `QuorumModel::apply` leaves it (no canonical
/// renumbering of values every clock has left behind), so that values can be shown as
/// they are.
fn replay(config: &Config, steps: &[(State, Option<Action>)]) -> Vec<(State, Option<Action>)> {
    let model = QuorumModel::new(config.clone());
    let mut raw: Vec<(State, Option<Action>)> = Vec::with_capacity(steps.len());
    for (state, action) in steps {
        let state = match raw.last() {
            Some((prev, Some(a))) => model.apply(prev, *a).unwrap_or(*state),
            _ => *state,
        };
        raw.push((state, *action));
    }
    raw
}

/// What the last state of a discovery shows, with values as the timeline shows them.
pub fn verdict_of(config: &Config, property: &str, steps: &[(State, Option<Action>)]) -> String {
    let steps = replay(config, steps);
    let Some((first, _)) = steps.first() else {
        return String::new();
    };
    let mut clocks = start_clocks(config, first);
    for pair in steps.windows(2) {
        if let [(prev, Some(action)), _] = pair {
            clocks.advance(config, prev, *action);
        }
    }
    let Some((last, _)) = steps.last() else {
        return String::new();
    };
    if property != MUTUAL_EXCLUSION
        && let Some(found) = fenced_violation_shown(last, &|v| clocks.fence(v))
    {
        return found;
    }
    verdict(property, last)
}

fn time_passes(from: i32, clocks: &Clocks, state: &State) -> String {
    let mut text = format!("time passes (t={from} -> t={})", clocks.now);
    let paused: Vec<String> = (state.clients.iter().enumerate())
        .filter(|(_, c)| c.paused)
        .map(|(i, _)| client_name(i))
        .collect();
    if !paused.is_empty() {
        let _ = write!(text, " while {} is paused", paused.join(", "));
    }
    let _ = write!(text, "; clocks read {}", clocks.summary());
    text
}

fn describe(
    config: &Config,
    clocks: &Clocks,
    prev: &State,
    action: Action,
    next: &State,
) -> String {
    let clock_name = |clock| match clock {
        ClockId::Client(i) => format!("{}'s clock", client_name(i)),
        ClockId::Node(i) => format!("{}'s clock", node_name(i)),
    };
    match action {
        Action::Tick => time_passes(clocks.now.saturating_sub(1), clocks, next),
        Action::TickSlow(clock) => format!(
            "time passes, but {} misses the tick (runs slow: reads {})",
            clock_name(clock),
            clocks.reading(clock)
        ),
        Action::Fast(clock) => format!(
            "{} jumps a tick ahead (runs fast: reads {})",
            clock_name(clock),
            clocks.reading(clock)
        ),
        Action::Start(i) => format!(
            "{} sends acquire (SET NX PX {} + {}) to every node at its clock {}; \
             a guard from this attempt is valid while its clock < {}",
            client_name(i),
            config.ttl,
            config.fencing.rule(),
            clocks.clients[i],
            clocks.clients[i] + i32::from(config.ttl.saturating_sub(config.drift_allowance))
        ),
        Action::Deliver { client, node } => delivered(clocks, prev, next, client, node),
        Action::DeliverNoReply { client, node } => format!(
            "{}; the reply to {} is lost",
            delivered(clocks, prev, next, client, node),
            client_name(client)
        ),
        Action::Lose { client, node } => format!(
            "{}'s oldest request to {} is lost with its connection, before it runs",
            client_name(client),
            node_name(node)
        ),
        Action::Decide(i) | Action::DecidePicking { client: i, .. } => {
            decided(clocks, prev, next, i)
        }
        Action::DecideReleaseLost { client, node } => format!(
            "{}; the release to {} is lost (the key stays until it expires)",
            decided(clocks, prev, next, client),
            node_name(node)
        ),
        Action::Check(i) => checked(clocks, prev, next, i),
        Action::Write(i) => wrote(clocks, prev, next, i),
        Action::Pause(i) => match config.pause_clock {
            PauseClock::Runs => format!(
                "{} is paused (GC pause / SIGSTOP: its monotonic clock keeps running)",
                client_name(i)
            ),
            PauseClock::Stops => format!(
                "{} is paused (VM suspended: its clock stops too)",
                client_name(i)
            ),
        },
        Action::Resume(i) => format!(
            "{} resumes; its clock reads {}",
            client_name(i),
            clocks.clients[i]
        ),
        Action::Crash(i) => format!(
            "{} crashes ({})",
            node_name(i),
            config.restart.persistence.crash()
        ),
        Action::Restart(i) => format!(
            "{} restarts (key: {}, counter {})",
            node_name(i),
            next.nodes[i]
                .lock
                .map_or_else(|| "none".to_owned(), |l| client_name(l.owner)),
            clocks.fence(next.nodes[i].counter)
        ),
        Action::StepBack(i) => format!(
            "{}'s clock steps back {} tick(s) (reads {}{}){}",
            node_name(i),
            config.clock_step_back,
            clocks.nodes[i],
            time_reading(clocks, next, i),
            if next.nodes[i].lock.is_some() {
                "; its key lives that much longer"
            } else {
                ""
            }
        ),
        Action::ExpireCounter(i) => format!(
            "{}'s fencing counter expires ({} -> none){}",
            node_name(i),
            clocks.fence(prev.nodes[i].counter),
            time_reading(clocks, next, i)
        ),
    }
}

/// `, TIME t` under the hybrid clock: what `TIME` reads on the node, in fence units.
fn time_reading(clocks: &Clocks, state: &State, node: usize) -> String {
    if clocks.per_tick == 0 {
        return String::new();
    }
    format!(
        ", TIME {}",
        clocks.per_tick * clocks.now + i32::from(state.nodes[node].clock)
    )
}

fn delivered(clocks: &Clocks, prev: &State, next: &State, client: usize, node: usize) -> String {
    let name = client_name(client);
    let (before, after) = (&prev.nodes[node], &next.nodes[node]);
    let c = &prev.clients[client];
    let n = node_name(node);
    let (request, late) = match c.backlog[node].head() {
        Some(request) => (
            Some(request),
            format!(" (late: {name} stopped waiting for it)"),
        ),
        None => (c.request(), String::new()),
    };
    let reply = next.clients[client].replies[node];
    match request {
        Some(Request::Acquire) => match before.lock {
            None => format!(
                "{n} runs {name}'s acquire{late}: grants, key set until {n}'s clock reads {}; \
                 counter {} -> {}{}",
                clocks.nodes[node] + i32::from(after.lock.map_or(0, |l| l.ttl_left)),
                clocks.fence(before.counter),
                clocks.fence(after.counter),
                time_reading(clocks, prev, node)
            ),
            Some(l) if usize::from(l.owner) == client => format!(
                "{n} runs {name}'s acquire{late}: its own key, granted again with counter {}",
                clocks.fence(after.counter)
            ),
            Some(l) => format!(
                "{n} runs {name}'s acquire{late}: refused, the key holds {}'s token",
                client_name(l.owner)
            ),
        },
        Some(Request::Raise(token)) if reply == Reply::No && late.is_empty() => {
            let token = clocks.fence(token);
            format!("{n} refuses {name}'s raise_fence({token}): the key is not {name}'s")
        }
        Some(Request::Raise(token)) => format!(
            "{n} runs {name}'s raise_fence({}){late}: counter {} -> {}{}",
            clocks.fence(token),
            clocks.fence(before.counter),
            clocks.fence(after.counter),
            match before.lock {
                Some(l) if usize::from(l.owner) == client => String::new(),
                Some(l) => format!(" (though the key is {}'s now)", client_name(l.owner)),
                None => format!(" (though {name}'s key there is gone)"),
            }
        ),
        None => format!("{n} has nothing of {name}'s to run"),
    }
}

fn decided(clocks: &Clocks, prev: &State, next: &State, i: usize) -> String {
    let name = client_name(i);
    let (before, after) = (&prev.clients[i], &next.clients[i]);
    let replies: Vec<String> = (before.replies.iter().enumerate())
        .filter(|(_, r)| **r != Reply::Unsent)
        .map(|(n, r)| format!("{} {}", node_name(n), reply_text(clocks, *r)))
        .collect();
    let replies = replies.join(", ");
    let clock = clocks.clients[i];
    let largest = (before.replies.iter())
        .filter_map(|r| match r {
            Reply::Granted(f) => Some(*f),
            _ => None,
        })
        .max();
    let which = |token| {
        if Some(token) == largest {
            "the largest"
        } else {
            "one node's counter, not the largest"
        }
    };
    let show = |token| clocks.fence(token);
    match (before.phase, after.phase) {
        (Phase::Acquiring { .. }, Phase::Raising { token, .. }) => format!(
            "{name} counts the replies ({replies}): a majority, in time; token {} \
             ({}); sends raise_fence({}) to the nodes behind",
            show(token),
            which(token),
            show(token)
        ),
        (Phase::Acquiring { .. }, Phase::Holding { token, .. }) => format!(
            "{name} counts the replies ({replies}): a majority, in time; \
             acquire returns a guard with fencing token {} ({})",
            show(token),
            which(token)
        ),
        (
            Phase::Raising { .. },
            Phase::Holding {
                token, valid_left, ..
            },
        ) => format!(
            "{name} counts the write-back replies ({replies}): token {} is on a \
             majority; acquire returns a guard with fencing token {} \
             (is_held() {} at its clock {clock})",
            show(token),
            show(token),
            if valid_left > 0 {
                "true"
            } else {
                "already false"
            }
        ),
        _ => format!(
            "{name} counts the replies ({replies}) at its clock {clock}: not acquired; \
             gives back on every node"
        ),
    }
}

fn reply_text(clocks: &Clocks, reply: Reply) -> String {
    match reply {
        Reply::Unsent => "-".to_owned(),
        Reply::Pending => "timed out".to_owned(),
        Reply::Failed => "no".to_owned(),
        Reply::Granted(f) => format!("granted/{}", clocks.fence(f)),
        Reply::Yes => "ok".to_owned(),
        Reply::No => "not ours".to_owned(),
    }
}

fn checked(clocks: &Clocks, prev: &State, next: &State, i: usize) -> String {
    let name = client_name(i);
    let clock = clocks.clients[i];
    let valid =
        matches!(prev.clients[i].phase, Phase::Holding { valid_left, .. } if valid_left > 0);
    match (next.clients[i].phase, valid) {
        (Phase::Writing { .. }, true) => {
            format!("{name} checks guard.is_held() at its clock {clock}: true; goes to write")
        }
        (Phase::Writing { .. }, false) => {
            format!("{name} goes to write without checking (is_held() would be false)")
        }
        _ => format!(
            "{name} checks guard.is_held() at its clock {clock}: false; releases without writing"
        ),
    }
}

fn wrote(clocks: &Clocks, prev: &State, next: &State, i: usize) -> String {
    let name = client_name(i);
    let token = match prev.clients[i].phase {
        Phase::Writing { token, .. } => token,
        _ => 0,
    };
    let verdict = if next.resource.accepted.len() > prev.resource.accepted.len() {
        "ACCEPTS"
    } else {
        "REJECTS"
    };
    format!(
        "the resource {verdict} {name}'s write with token {} (highest so far {}); \
         {name} releases on every node",
        clocks.fence(token),
        clocks.fence(prev.resource.highest)
    )
}

/// A closing line that says what the last state of a discovery shows.
pub fn verdict(property: &str, last: &State) -> String {
    if property == MUTUAL_EXCLUSION {
        let holders: Vec<String> = overlapping_holders(last)
            .into_iter()
            .map(client_name)
            .collect();
        return format!(
            "{} both believe they hold the lock at this instant",
            holders.join(" and ")
        );
    }
    fenced_violation(last).unwrap_or_else(|| format!("reached: {property}"))
}
