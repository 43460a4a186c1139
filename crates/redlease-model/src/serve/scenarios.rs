//! The serve configurations checked by the tests and the `explore` example, each with
//! what it is expected to show: the semaphore's (of one permit, of two, a request for two)
//! and the read-write lock's, under the one hand-off and under the rules before it.

use super::check;
use super::model::{
    CUT_GRANT, CUT_GRANT_FREED, DEAD_HEAD_DROPPED, DROPPED, GONE_GRANT, GONE_GRANT_FREED,
    HELD_BACK, LIVE_SERVED, NUDGED, SERVED_BEHIND, SERVES_ALL, SHARED, WITHIN_PERMITS,
};
use super::state::{Kind, Rule, ServeConfig, Want};
use crate::check::Report;
use crate::scenarios::{Expect, judge};

/// A configuration and what it is expected to show.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub config: ServeConfig,
    /// The expectation for [`GONE_GRANT_FREED`] ([`WITHIN_PERMITS`] and [`SERVES_ALL`]
    /// always hold).
    pub freed: Expect,
    /// The expectation for [`CUT_GRANT_FREED`].
    pub cut_freed: Expect,
    /// The expectation for [`LIVE_SERVED`].
    pub live: Expect,
    /// The examples (`sometimes` properties) the run must find.
    pub examples: Vec<&'static str>,
}

impl Scenario {
    /// Runs the checker over every state (the spaces are small).
    pub fn run(&self) -> Report<ServeConfig> {
        check(self.config.clone())
    }

    /// The `always` properties this scenario expects to be violated.
    pub fn violated(&self) -> Vec<&'static str> {
        [
            (GONE_GRANT_FREED, self.freed),
            (CUT_GRANT_FREED, self.cut_freed),
            (LIVE_SERVED, self.live),
        ]
        .into_iter()
        .filter(|&(_, e)| e == Expect::Violated)
        .map(|(p, _)| p)
        .collect()
    }

    /// Whether `report` (of this scenario) shows what was expected; otherwise, why not.
    pub fn verify(&self, report: &Report<ServeConfig>) -> Result<(), String> {
        judge(
            report,
            &[
                (WITHIN_PERMITS, Expect::Holds),
                (SERVES_ALL, Expect::Holds),
                (GONE_GRANT_FREED, self.freed),
                (CUT_GRANT_FREED, self.cut_freed),
                (LIVE_SERVED, self.live),
            ],
        )?;
        if let Some(missing) = (self.examples.iter()).find(|e| report.discovery(e).is_none()) {
            return Err(format!("{missing}: no example found"));
        }
        Ok(())
    }
}

fn scenario(name: &'static str, rule: Rule, freed: Expect) -> Scenario {
    let mut config = ServeConfig::code(rule);
    config.name = name;
    config.crashes = 1;
    Scenario {
        config,
        freed,
        cut_freed: Expect::Holds,
        live: freed,
        examples: vec![GONE_GRANT, DROPPED, SERVED_BEHIND],
    }
}

/// A waiter cut off silently (Redis counts it) is granted a permit it never hears of: with
/// `window` (`None`: the whole lease), how long that permit stays taken.
fn cut(name: &'static str, window: Option<u8>, cut_freed: Expect) -> Scenario {
    let mut config = ServeConfig::code(Rule::GiveBack);
    config.name = name;
    config.abandons = 0;
    config.cuts = 1;
    config.window = window;
    // Claim windows and nudges came together, with the one hand-off.
    config.nudges = window.is_some();
    Scenario {
        config,
        freed: Expect::Holds,
        cut_freed,
        live: cut_freed,
        examples: vec![CUT_GRANT, SERVED_BEHIND],
    }
}

/// Before the one hand-off: a pushed grant lasts the whole lease, so a permit granted to a
/// silently cut waiter sits with nobody for it.
pub fn before_cut_whole_lease() -> Scenario {
    cut(
        "serve before the one hand-off: a grant to a silently cut waiter lasts the whole lease",
        None,
        Expect::Violated,
    )
}

/// The one hand-off: a pushed grant lasts a claim window until its waiter confirms it.
pub fn cut_claim_window() -> Scenario {
    cut(
        "serve, the one hand-off: a grant to a silently cut waiter lasts its claim window",
        Some(1),
        Expect::Holds,
    )
}

/// Before the fix: a permit granted to an abandoned token sits with nobody for its lease.
pub fn before_trace_only() -> Scenario {
    scenario(
        "serve before the fix: a grant to an abandoned token only traced",
        Rule::TraceOnly,
        Expect::Violated,
    )
}

/// The fix: the client gives such a permit back at once; the next waiter is served.
pub fn fixed_give_back() -> Scenario {
    scenario(
        "serve fix: a grant to an abandoned token given back",
        Rule::GiveBack,
        Expect::Holds,
    )
}

/// The one hand-off's rules (claim windows, dead heads dropped, nudges) for `kind`, with
/// the first `holders` of `wants` holding and the others queued.
fn one_hand_off(name: &'static str, kind: Kind, wants: &[Want], holders: usize) -> ServeConfig {
    let mut config = ServeConfig::code(Rule::GiveBack);
    config.name = name;
    config.kind = kind;
    config.wants = wants.to_vec();
    config.clients = wants.len();
    config.holders = holders;
    config.abandons = 0;
    config.window = Some(1);
    config.nudges = true;
    config
}

/// What a read-write lock scenario asks: readers A and B hold, writer C and reader D wait.
const READERS_HOLD: [Want; 4] = [Want::Read, Want::Read, Want::Write, Want::Read];

fn expecting(config: ServeConfig, live: Expect, cut_freed: Expect) -> Scenario {
    Scenario {
        config,
        freed: Expect::Holds,
        cut_freed,
        live,
        examples: Vec::new(),
    }
}

/// A read-write lock where readers A and B hold and writer C and reader D wait, under the
/// one hand-off's rules as `change` leaves them, expecting `live` for [`LIVE_SERVED`] and
/// `cut_freed` for [`CUT_GRANT_FREED`], with `example`.
fn readers_hold(
    name: &'static str,
    change: impl FnOnce(&mut ServeConfig),
    (live, cut_freed): (Expect, Expect),
    example: &'static str,
) -> Scenario {
    let mut config = one_hand_off(name, Kind::ReadWrite, &READERS_HOLD, 2);
    change(&mut config);
    let mut s = expecting(config, live, cut_freed);
    s.examples = vec![example];
    s
}

/// Read-write lock, before the one hand-off: a pushed grant lasts the whole lease, so a
/// write lock granted to a silently cut writer keeps the readers behind it out that long.
pub fn rw_before_cut_whole_lease() -> Scenario {
    readers_hold(
        "serve, rwlock before the one hand-off: a grant to a silently cut writer lasts the whole lease",
        |config| {
            config.window = None;
            config.nudges = false;
            config.cuts = 1;
        },
        (Expect::Violated, Expect::Violated),
        CUT_GRANT,
    )
}

/// Read-write lock, the rule before `listens`: a queued writer whose client crashed keeps
/// the readers behind it out for as long as the readers ahead hold.
pub fn rw_dead_writer_kept() -> Scenario {
    readers_hold(
        "serve, rwlock before listens: a dead queued writer is kept",
        |config| {
            config.drop_dead_head = false;
            config.crashes = 1;
        },
        (Expect::Violated, Expect::Holds),
        DROPPED,
    )
}

/// Read-write lock, the one hand-off: a crashed, a cut, a withdrawn waiter and a reader
/// arriving while the writer waits; readers share, the writer holds alone, the dead writer
/// is dropped by the next attempt behind it.
pub fn rw_one_hand_off() -> Scenario {
    let mut config = one_hand_off(
        "serve, rwlock, the one hand-off: crash, cut, give-up, a reader arriving",
        Kind::ReadWrite,
        &[Want::Read, Want::Read, Want::Write, Want::Read, Want::Read],
        2,
    );
    config.arrivals = 1;
    config.crashes = 1;
    config.cuts = 1;
    config.give_ups = 1;
    let mut s = expecting(config, Expect::Holds, Expect::Holds);
    s.examples = vec![DEAD_HEAD_DROPPED, CUT_GRANT, HELD_BACK, SHARED, NUDGED];
    s
}

/// Read-write lock with one watcher (the code has 3): writer A holds, reader B watches,
/// writer C and reader D wait behind without a timer; C may give up.
fn one_watcher(name: &'static str) -> ServeConfig {
    let mut config = one_hand_off(
        name,
        Kind::ReadWrite,
        &[Want::Write, Want::Read, Want::Write, Want::Read],
        1,
    );
    config.front = 1;
    config.give_ups = 1;
    config
}

/// Mutation: one watcher and no nudges: a waiter that moves up into the front after a
/// grant or a withdrawal has no timer, and nobody serves it when the holds end.
pub fn rw_no_nudges() -> Scenario {
    let mut config = one_watcher("serve, rwlock, mutation: one watcher, no nudges");
    config.nudges = false;
    expecting(config, Expect::Violated, Expect::Holds)
}

/// The same with nudges: the one watcher suffices while it lives.
pub fn rw_one_watcher_nudged() -> Scenario {
    let config = one_watcher("serve, rwlock, one watcher, nudged");
    let mut s = expecting(config, Expect::Holds, Expect::Holds);
    s.examples = vec![NUDGED, SHARED];
    s
}

/// One watcher, cut off silently: nobody re-checks when the holds end (why the code has
/// 3 watchers: the queue stalls only when all of them are gone).
pub fn rw_one_watcher_cut() -> Scenario {
    let mut config = one_watcher("serve, rwlock, one watcher, cut silently");
    config.cuts = 1;
    expecting(config, Expect::Violated, Expect::Holds)
}

/// Two watchers, one of them cut off silently: the other re-checks.
pub fn rw_two_watchers_cut() -> Scenario {
    let mut config = one_watcher("serve, rwlock, two watchers, one cut silently");
    config.cuts = 1;
    config.front = 2;
    let mut s = expecting(config, Expect::Holds, Expect::Holds);
    s.examples = vec![CUT_GRANT, NUDGED];
    s
}

/// What a weighted semaphore scenario asks: A holds one of 2 permits, C asks for both, D
/// for one.
const HEAD_ASKS_TWO: [Want; 3] = [Want::Permits(1), Want::Permits(2), Want::Permits(1)];

/// A semaphore of 2, before `listens`: a request for both permits whose client crashed
/// keeps the one-permit request behind it out for as long as the holder holds.
pub fn sem_dead_head_kept() -> Scenario {
    let mut config = one_hand_off(
        "serve, semaphore before listens: a dead request for 2 permits is kept",
        Kind::Semaphore(2),
        &HEAD_ASKS_TWO,
        1,
    );
    config.drop_dead_head = false;
    config.crashes = 1;
    expecting(config, Expect::Violated, Expect::Holds)
}

/// A semaphore of 2, the one hand-off: a dead request for both permits is dropped by the
/// next attempt behind it; a cut waiter costs a claim window.
pub fn sem_weighted_one_hand_off() -> Scenario {
    let mut config = one_hand_off(
        "serve, semaphore of 2, the one hand-off: a request for 2, crash, cut, give-up",
        Kind::Semaphore(2),
        &[
            Want::Permits(1),
            Want::Permits(2),
            Want::Permits(1),
            Want::Permits(1),
        ],
        1,
    );
    config.crashes = 1;
    config.cuts = 1;
    config.give_ups = 1;
    let mut s = expecting(config, Expect::Holds, Expect::Holds);
    s.examples = vec![DEAD_HEAD_DROPPED, CUT_GRANT, NUDGED];
    s
}

/// A semaphore of 1 (a mutex's hand-off), the one hand-off: three watchers, a newcomer
/// E behind them, one of them crashing. A serve that drops the crashed place and grants
/// the caller directly nudges only the front's last place: E, moved up two places, is not
/// told, and when the new holders' leases end without a release nobody serves it (the
/// client's rare re-check, 45 s, is not modelled).
fn sem_one_permit(name: &'static str, nudge_every_moved: bool) -> ServeConfig {
    let mut config = one_hand_off(name, Kind::Semaphore(1), &[Want::Permits(1); 5], 1);
    config.arrivals = 1;
    config.crashes = 1;
    config.nudge_every_moved = nudge_every_moved;
    config
}

/// The code's rule: a direct grant nudges the front's last place only.
pub fn sem_one_permit_code() -> Scenario {
    let config = sem_one_permit(
        "serve, semaphore of 1, the one hand-off: a crashed watcher dropped, the newcomer behind not nudged",
        false,
    );
    expecting(config, Expect::Violated, Expect::Holds)
}

/// The variant: a direct grant nudges every waiter that moved up into the front; with a
/// cut waiter and a give-up too.
pub fn sem_one_permit_every_moved() -> Scenario {
    let mut config = sem_one_permit(
        "serve, semaphore of 1, variant: every waiter moved up into the front nudged; crash, cut, give-up",
        true,
    );
    config.cuts = 1;
    config.give_ups = 1;
    let mut s = expecting(config, Expect::Holds, Expect::Holds);
    s.examples = vec![DROPPED, CUT_GRANT, NUDGED];
    s
}

/// Every serve scenario (each runs in well under a second in a debug build).
pub fn all() -> Vec<Scenario> {
    vec![
        before_trace_only(),
        fixed_give_back(),
        before_cut_whole_lease(),
        cut_claim_window(),
        rw_before_cut_whole_lease(),
        rw_dead_writer_kept(),
        rw_one_hand_off(),
        rw_no_nudges(),
        rw_one_watcher_nudged(),
        rw_one_watcher_cut(),
        rw_two_watchers_cut(),
        sem_dead_head_kept(),
        sem_weighted_one_hand_off(),
        sem_one_permit_code(),
        sem_one_permit_every_moved(),
    ]
}
