//! The code as written under one fault at a time, and its mutations: where the lock and
//! the tokens hold, and where they break.

use super::scenario::{Expect, Scenario, with};
use crate::config::{BeforeWrite, Drift, PauseClock, TokenRule, WriteBack};

/// The code as written, no fault beyond what a network always does (delays up to and past
/// the timeouts, on FIFO connections): both properties hold.
pub fn no_fault() -> Scenario {
    let config = with("no fault", |_| {});
    Scenario::new(config, Expect::Holds, Expect::Holds)
}

/// The code as written with one client pause (GC pause, `SIGSTOP`: its clock runs).
/// Fencing holds; the lock alone does not: the classic unfenced overlap.
pub fn pause() -> Scenario {
    let config = with("pause (clock runs)", |c| c.pauses = 1);
    Scenario::new(config, Expect::Holds, Expect::Violated)
}

/// The code as written with one clock (any client's or node's) drifting one tick either
/// way, which the drift allowance covers: both properties hold.
pub fn drift() -> Scenario {
    let config = with("drift within the allowance", |c| c.drifting_clocks = 1);
    Scenario::new(config, Expect::Holds, Expect::Holds)
}

/// The code as written with one crash of a node that persists everything. The lock holds;
/// the tokens do not: the write-back is counted on a node that granted someone else.
pub fn crash() -> Scenario {
    let config = with("crash (node persists everything)", |c| c.crashes = 1);
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// The code as written with one lost message (a request lost with its connection, or a
/// reply lost after the script ran). As [`crash`].
pub fn lost_message() -> Scenario {
    let config = with("lost message", |c| c.lost_messages = 1);
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// Two clocks drift the ways that stretch a lease (a client's slow, a node's fast): more
/// than the allowance covers. The lock breaks, and so do the code's tokens.
pub fn drift_beyond_allowance() -> Scenario {
    let config = with("drift beyond the allowance", |c| {
        c.drifting_clocks = 2;
        c.drift = Drift::Adversarial;
    });
    Scenario::new(config, Expect::Violated, Expect::Violated).slow()
}

/// The code as written with one pause that stops the client's clock too (VM suspend).
pub fn suspend() -> Scenario {
    let config = with("pause (clock stops)", |c| {
        c.pauses = 1;
        c.pause_clock = PauseClock::Stops;
    });
    let mut scenario = Scenario::new(config, Expect::Violated, Expect::Violated);
    scenario.test_spread = 0;
    scenario
}

/// The code as written, with clients that write without checking `is_held()`.
pub fn no_check() -> Scenario {
    let config = with("client skips is_held()", |c| {
        c.before_write = BeforeWrite::JustWrite;
    });
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// The code as written with a retry after a failed attempt whose release was lost on
/// one node: the retry finds its own key there, left by the first attempt, and counts it
/// as granted, but measures validity from the retry's own send, while that key expires a
/// lease after the *first* attempt. The lock breaks without any pause or drift.
pub fn retry_after_lost_release() -> Scenario {
    let config = with("retry after a lost release", |c| {
        c.attempts = 2;
        c.lost_messages = 1;
        c.counter_spread = 0;
    });
    Scenario::new(config, Expect::Unchecked, Expect::Violated).slow()
}

/// Mutation of the code as written with no fault, where fencing holds: no `raise_fence`
/// write-back.
pub fn no_write_back() -> Scenario {
    let config = with("mutation: no write-back", |c| c.write_back = WriteBack::Off);
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}

/// Mutation of the code as written with no fault: the token is one granting node's
/// counter, not the largest.
pub fn one_node_token() -> Scenario {
    let config = with("mutation: token from one node", |c| {
        c.token_rule = TokenRule::OneGranter;
    });
    Scenario::new(config, Expect::Violated, Expect::Unchecked)
}
