//! The properties checked, as plain functions of a state.

use crate::state::{Fence, State, client_name};

/// The clients that believe they hold the lock in `state` (see
/// [`Client::believes_held`](crate::Client::believes_held)).
pub fn overlapping_holders(state: &State) -> Vec<usize> {
    (state.clients.iter().enumerate())
        .filter(|(_, c)| c.believes_held())
        .map(|(i, _)| i)
        .collect()
}

/// How many clients believe they hold the lock in `state`.
pub fn holders(state: &State) -> usize {
    state.clients.iter().filter(|c| c.believes_held()).count()
}

/// What broke fenced safety in `state`, if anything:
/// - the resource accepted a token lower than one it had accepted (impossible with the
///   judge as modelled; checked so that a broken judge cannot hide a bug),
/// - it accepted the same token from two different holders, or
/// - it accepted a write of a holder after a write of a *newer* holder, one whose
///   acquisition began only after the older holder's `acquire` had returned.
pub fn fenced_violation(state: &State) -> Option<String> {
    fenced_violation_shown(state, &|v| v.to_string())
}

/// As [`fenced_violation`], with tokens written by `show` (the timeline gives hybrid-clock
/// tokens, kept relative to global time, their absolute value).
pub fn fenced_violation_shown(state: &State, show: &dyn Fn(Fence) -> String) -> Option<String> {
    let log = &state.resource.accepted;
    for (j, later) in log.iter().enumerate() {
        for earlier in &log[..j] {
            let (old, new) = (client_name(later.client), client_name(earlier.client));
            if later.token < earlier.token {
                return Some(format!(
                    "the resource accepted token {} after token {}",
                    show(later.token),
                    show(earlier.token)
                ));
            }
            if later.token == earlier.token && later.client != earlier.client {
                return Some(format!(
                    "the resource accepted token {} from two holders, {new} and {old}",
                    show(later.token)
                ));
            }
            if earlier.after & (1 << later.client) != 0 {
                return Some(format!(
                    "the resource accepted {old}'s write (token {}) after {new}'s (token {}), \
                     though {new} began to acquire only after {old}'s acquire had returned",
                    show(later.token),
                    show(earlier.token)
                ));
            }
        }
    }
    None
}
