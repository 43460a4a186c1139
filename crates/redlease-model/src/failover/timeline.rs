//! A discovery path of the failover model told as a numbered timeline.

use super::config::{FailoverConfig, Rule};
use super::model::{Action, FailoverModel, MUTUAL_EXCLUSION, believers, beyond_truth};
use super::state::{Phase, Reply, State};
use crate::path;
use crate::state::client_name;

/// The numbered timeline of `steps` (a path the checker found in a model of `config`).
pub fn timeline(config: &FailoverConfig, steps: &[(State, Option<Action>)]) -> Vec<String> {
    let model = FailoverModel::new(config.clone());
    let mut lines = vec![format!(
        "{:>3}. start: A holds the lock on server 1 (the primary); B waits, its link on \
         server 1; server 2 replicates server 1 ({})",
        1,
        rule_text(config.rule)
    )];
    let Some((first, _)) = steps.first() else {
        return lines;
    };
    let mut s = first.clone();
    for action in steps.iter().filter_map(|(_, a)| *a) {
        let next = model.apply(&s, action);
        lines.push(format!(
            "{:>3}. {}",
            lines.len() + 1,
            describe(action, &s, &next)
        ));
        s = next;
    }
    lines
}

/// What the last state of `steps` shows for `property`.
pub fn verdict_of(
    config: &FailoverConfig,
    property: &str,
    steps: &[(State, Option<Action>)],
) -> String {
    let model = FailoverModel::new(config.clone());
    let Some(last) = path::last(steps, |s, a| model.apply(s, a)) else {
        return String::new();
    };
    let key = match last.key {
        Some(k) => format!("the key holds {}'s token", client_name(k)),
        None => String::from("the key is free"),
    };
    let who = believers(&last);
    if property == MUTUAL_EXCLUSION && who.len() > 1 {
        let names: Vec<String> = who.iter().map(|&i| client_name(i)).collect();
        return format!(
            "{} both believe they hold the lock; {key}",
            names.join(" and ")
        );
    }
    match beyond_truth(&last) {
        Some(i) => format!("{} believes it holds the lock, but {key}", client_name(i)),
        None => key,
    }
}

fn server(node: u8) -> String {
    format!("server {}", node + 1)
}

fn rule_text(rule: Rule) -> &'static str {
    match rule {
        Rule::TrustAnyLink => "before the fix: a pushed grant trusted from any link",
        Rule::TrustLinkCheckedOnce => "mutation: a link's role checked only when it is made",
        Rule::TrustLinkOnPrimary => {
            "a pushed grant trusted only from a link on the primary of the moment it is read, else confirmed"
        }
        Rule::TrustRoleAskedAfter => {
            "before the one hand-off: ROLE asked on the link after a pushed grant, trusted when it says primary"
        }
        Rule::ConfirmByAttempt => {
            "the one hand-off: a pushed grant is never trusted, the waiter confirms it with an attempt"
        }
    }
}

fn describe(action: Action, before: &State, after: &State) -> String {
    let name = |i: usize| client_name(i);
    match action {
        Action::Failover => format!(
            "{}: {} is promoted, the endpoint leads new connections to it; {} is its \
             replica now, the links on it stay open",
            if before.changes == 0 {
                "failover"
            } else {
                "failover again"
            },
            server(after.primary),
            server(before.primary)
        ),
        Action::Begin(i) => format!(
            "{} calls acquire: its link and its attempt go through the endpoint to {}",
            name(i),
            server(before.primary)
        ),
        Action::Run(i) => {
            let result = match after.clients[i].phase {
                Phase::Attempting(Some(Reply::Ours)) => String::from("the lock is ours"),
                _ => format!("busy; the queue is {}", queue_text(after)),
            };
            format!(
                "{} runs {}'s attempt: {result}",
                server(before.primary),
                name(i)
            )
        }
        Action::Read(i) => match after.clients[i].phase {
            Phase::Holding => format!("{} reads ours: acquire returns, it holds", name(i)),
            _ => format!("{} reads busy: waits for a grant", name(i)),
        },
        Action::Recheck(i) => format!("{}'s re-check timer fires: it sends an attempt", name(i)),
        Action::Take(_) | Action::Role(_) => read_grant(action, before, after),
        Action::Release(i) => {
            let skipped: Vec<String> = (before.queue.iter())
                .filter(|&&q| !after.queue.contains(&q) && after.key != Some(q))
                .map(|&q| client_name(q))
                .collect();
            let skips = if skipped.is_empty() {
                String::new()
            } else {
                format!(
                    ": PUBLISH to {} counts 0 receivers, skipped",
                    skipped.join(", ")
                )
            };
            let handed = match after.key {
                Some(k) => format!(
                    "the lock is handed to {} (a grant published)",
                    client_name(k)
                ),
                None => String::from("the key is deleted"),
            };
            format!(
                "{} releases on {}{skips}; {handed}; each PUBLISH is replicated to {}",
                name(i),
                server(before.primary),
                server(1 - before.primary)
            )
        }
        Action::Replicate => {
            let to = before.relayed[0];
            let delivered =
                after.clients[usize::from(to)].grants > before.clients[usize::from(to)].grants;
            format!(
                "replication delivers the PUBLISH of {}'s grant on {}: {}",
                client_name(to),
                server(1 - before.primary),
                if delivered {
                    "its link there receives it"
                } else {
                    "no receiver there"
                }
            )
        }
    }
}

/// A client reading a pushed grant, or the answer to the `ROLE` it asked about one.
fn read_grant(action: Action, before: &State, after: &State) -> String {
    let name = |i: usize| client_name(i);
    match action {
        Action::Take(i) => {
            let link = before.clients[i].link.map_or(String::from("?"), server);
            if after.clients[i].phase == Phase::Checking {
                format!(
                    "{} reads the grant pushed over its link on {link} and asks ROLE there",
                    name(i)
                )
            } else if after.clients[i].phase == Phase::Holding {
                format!(
                    "{} reads the grant pushed over its link on {link}: trusted, acquire \
                     returns, it holds",
                    name(i)
                )
            } else {
                format!(
                    "{} reads the grant pushed over its link on {link}: not trusted, it \
                     confirms with an attempt",
                    name(i)
                )
            }
        }
        Action::Role(i) => {
            let link = before.clients[i].link.map_or(String::from("?"), server);
            if after.clients[i].phase == Phase::Holding {
                format!(
                    "{link} answers {}'s ROLE: primary (now); the grant is trusted, acquire \
                     returns, it holds",
                    name(i)
                )
            } else {
                format!(
                    "{link} answers {}'s ROLE: replica; it confirms with an attempt",
                    name(i)
                )
            }
        }
        _ => String::new(),
    }
}

fn queue_text(s: &State) -> String {
    let names: Vec<String> = s.queue.iter().map(|&q| client_name(q)).collect();
    format!("[{}]", names.join(", "))
}
