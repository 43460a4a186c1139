//! A discovery path of the serve model told as a numbered timeline.

use super::model::{Action, ServeModel, unclaimed_too_long};
use super::state::{Rule, ServeConfig, State};
use crate::path;
use crate::state::client_name;

/// The numbered timeline of `steps` (a path the checker found in a model of `config`).
pub fn timeline(config: &ServeConfig, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let model = ServeModel::new(config.clone());
    let rule = match config.rule {
        Rule::TraceOnly => "before the fix: a grant for a token not waited for is only traced",
        Rule::GiveBack => "the fix: a grant for a token not waited for is given back",
    };
    let grants = match config.window {
        None => String::from("a pushed grant lasts the whole lease"),
        Some(w) => format!("a pushed grant lasts a claim window of {w} tick(s) until confirmed"),
    };
    let mut lines = vec![format!(
        "{:>3}. t=0   start: {} permits, a lease of {} ticks, {grants}; {} ({rule})",
        1,
        config.permits,
        config.ttl,
        describe_state(&steps.first().map_or_else(empty, |(s, _)| s.clone()))
    )];
    let Some((first, _)) = steps.first() else {
        return lines;
    };
    let mut s = first.clone();
    let mut t = 0u32;
    for action in steps.iter().filter_map(|(_, a)| *a) {
        let next = model.apply(&s, action);
        if action == Action::Tick {
            t += 1;
        }
        let text = describe(action, &s, &next);
        lines.push(format!("{:>3}. t={t:<3} {text}", lines.len() + 1));
        s = next;
    }
    lines
}

/// What the last state of `steps` shows.
pub fn verdict_of(
    config: &ServeConfig,
    _property: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let model = ServeModel::new(config.clone());
    let Some(last) = path::last(steps, |s, a| model.apply(s, a)) else {
        return String::new();
    };
    let found = unclaimed_too_long(&last, config.bound, false)
        .map(|p| (p, config.bound))
        .or_else(|| {
            unclaimed_too_long(&last, config.cut_bound, true).map(|p| (p, config.cut_bound))
        });
    match found {
        Some((p, bound)) => format!(
            "{}'s permit, which nobody takes, has been taken for {} tick(s) (bound {bound}); \
             it runs out only {} tick(s) later; {}",
            client_name(p.token),
            p.unclaimed,
            p.left,
            describe_state(&last)
        ),
        None => describe_state(&last),
    }
}

fn empty() -> State {
    State {
        permits: Vec::new(),
        queue: Vec::new(),
        clients: Vec::new(),
        crashes: 0,
        abandons: 0,
        cuts: 0,
        seen: 0,
    }
}

fn describe_state(s: &State) -> String {
    let permits: Vec<String> = s.permits.iter().map(|p| client_name(p.token)).collect();
    let queue: Vec<String> = s.queue.iter().map(|&q| client_name(q)).collect();
    format!(
        "permits taken by [{}], queue [{}]",
        permits.join(", "),
        queue.join(", ")
    )
}

fn describe(action: Action, before: &State, after: &State) -> String {
    let name = client_name;
    let served = || {
        let newly: Vec<String> = (after.permits.iter())
            .filter(|p| !before.permits.iter().any(|b| b.token == p.token))
            .map(|p| client_name(p.token))
            .collect();
        let dropped: Vec<String> = (before.queue.iter())
            .filter(|&&q| !after.queue.contains(&q) && !after.permits.iter().any(|p| p.token == q))
            .map(|&q| client_name(q))
            .collect();
        let dropped = if dropped.is_empty() {
            String::new()
        } else {
            format!(
                "; PUBLISH to {} reaches no one: dropped",
                dropped.join(", ")
            )
        };
        let granted = if newly.is_empty() {
            String::new()
        } else {
            format!("; serve grants a permit to {}", newly.join(", "))
        };
        format!("{dropped}{granted}")
    };
    match action {
        Action::Tick => format!("time passes; {}", describe_state(after)),
        Action::Release(i) => format!("{} releases{}", name(i), served()),
        Action::Take(i) => format!("{} reads its grant: it holds a permit", name(i)),
        Action::Handle(i) => {
            if after.permits.iter().any(|p| usize::from(p.token) == i) {
                format!(
                    "{}'s client reads a grant for a token it no longer waits for: only traced",
                    name(i)
                )
            } else {
                format!(
                    "{}'s client reads a grant for a token it no longer waits for: gives it back{}",
                    name(i),
                    served()
                )
            }
        }
        Action::Recheck(i) => format!("{}'s re-check attempt runs{}", name(i), served()),
        Action::Crash(i) => format!(
            "{}'s client crashes: nothing listens on its grant channel",
            name(i)
        ),
        Action::Abandon(i) => format!(
            "{} gives up while cut off: its give-back is lost, its place stays, its client \
             listens on for other waits",
            name(i)
        ),
        Action::Cut(i) => format!(
            "{}'s links are cut silently: Redis still counts its grant subscription, it hears \
             and sends nothing",
            name(i)
        ),
    }
}
