//! A discovery path told as a numbered timeline a person can follow.
//!
//! States hold no absolute time (only what is left or elapsed on each clock), so the
//! timeline replays the path to give each step its global time `t` and each clock its
//! reading, all starting at 0.

use std::fmt::Write as _;

use crate::config::{Config, PauseClock, Persistence};
use crate::model::{Action, ClockId, MUTUAL_EXCLUSION};
use crate::properties::{fenced_violation, overlapping_holders};
use crate::state::{Phase, Reply, Request, State};

/// `A`, `B`, ... for client 0, 1, ...
pub fn client_name(i: impl Into<usize>) -> String {
    let i: usize = i.into();
    u8::try_from(i)
        .ok()
        .and_then(|i| i.checked_add(b'A'))
        .filter(u8::is_ascii_uppercase)
        .map_or_else(|| format!("client{i}"), |c| char::from(c).to_string())
}

/// `n1`, `n2`, ... for node 0, 1, ...
pub fn node_name(i: usize) -> String {
    format!("n{}", i + 1)
}

/// Global time and every clock's reading, replayed along a path.
#[derive(Debug, Clone)]
struct Clocks {
    now: u32,
    clients: Vec<u32>,
    nodes: Vec<u32>,
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

    fn reading(&self, clock: ClockId) -> u32 {
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
    let Some((first, _)) = steps.first() else {
        return Vec::new();
    };
    let mut clocks = Clocks {
        now: 0,
        clients: vec![0; first.clients.len()],
        nodes: vec![0; first.nodes.len()],
    };
    let counters: Vec<String> = (first.nodes.iter().enumerate())
        .map(|(i, n)| format!("{} {}", node_name(i), n.counter))
        .collect();
    let mut lines = vec![(
        0,
        format!(
            "start: fence counters {}; every clock reads 0",
            counters.join(", ")
        ),
    )];
    let mut ticks_from: Option<u32> = None;
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

fn time_passes(from: u32, clocks: &Clocks, state: &State) -> String {
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
            "{} sends acquire (SET NX PX {} + INCR) to every node at its clock {}; \
             a guard from this attempt is valid while its clock < {}",
            client_name(i),
            config.ttl,
            clocks.clients[i],
            clocks.clients[i] + u32::from(config.ttl.saturating_sub(config.drift_allowance))
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
        Action::Write(i) => wrote(prev, next, i),
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
            match config.restart.persistence {
                Persistence::Everything => "its lock key and counter are on disk",
                Persistence::CounterOnly => "it loses the lock key; the counter is kept",
                Persistence::Nothing => "no persistence: it loses the lock key and the counter",
            }
        ),
        Action::Restart(i) => format!(
            "{} restarts (key: {}, counter {})",
            node_name(i),
            next.nodes[i]
                .lock
                .map_or_else(|| "none".to_owned(), |l| client_name(l.owner)),
            next.nodes[i].counter
        ),
    }
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
                 counter {} -> {}",
                clocks.nodes[node] + u32::from(after.lock.map_or(0, |l| l.ttl_left)),
                before.counter,
                after.counter
            ),
            Some(l) if usize::from(l.owner) == client => format!(
                "{n} runs {name}'s acquire{late}: its own key, granted again with counter {}",
                after.counter
            ),
            Some(l) => format!(
                "{n} runs {name}'s acquire{late}: refused, the key holds {}'s token",
                client_name(l.owner)
            ),
        },
        Some(Request::Raise(token)) if reply == Reply::No && late.is_empty() => {
            format!("{n} refuses {name}'s raise_fence({token}): the key is not {name}'s")
        }
        Some(Request::Raise(token)) => format!(
            "{n} runs {name}'s raise_fence({token}){late}: counter {} -> {}{}",
            before.counter,
            after.counter,
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
        .map(|(n, r)| format!("{} {}", node_name(n), reply_text(*r)))
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
    match (before.phase, after.phase) {
        (Phase::Acquiring { .. }, Phase::Raising { token, .. }) => format!(
            "{name} counts the replies ({replies}): a majority, in time; token {token} \
             ({}); sends raise_fence({token}) to the nodes behind",
            which(token)
        ),
        (Phase::Acquiring { .. }, Phase::Holding { token, .. }) => format!(
            "{name} counts the replies ({replies}): a majority, in time; \
             acquire returns a guard with fencing token {token} ({})",
            which(token)
        ),
        (
            Phase::Raising { .. },
            Phase::Holding {
                token, valid_left, ..
            },
        ) => format!(
            "{name} counts the write-back replies ({replies}): token {token} is on a \
             majority; acquire returns a guard with fencing token {token} \
             (is_held() {} at its clock {clock})",
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

fn reply_text(reply: Reply) -> String {
    match reply {
        Reply::Unsent => "-".to_owned(),
        Reply::Pending => "timed out".to_owned(),
        Reply::Failed => "no".to_owned(),
        Reply::Granted(f) => format!("granted/{f}"),
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

fn wrote(prev: &State, next: &State, i: usize) -> String {
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
        "the resource {verdict} {name}'s write with token {token} (highest so far {}); \
         {name} releases on every node",
        prev.resource.highest
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
