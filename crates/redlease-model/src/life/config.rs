//! What one run of the lease-life model explores: the lease, the extends the holder may
//! ask for, the faults, and the rule the holder follows when it sends and applies the
//! steps of its lease.

use super::state::Step;

/// How the holder orders the steps of its lease (renewals and extends) and what each lets
/// it claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The code before the fix: renewals and extends overlap; a reply is applied unless
    /// its request was *sent* before the request that last set the validity (Redis is
    /// assumed to run requests in send order); an extend sets the lease's ttl and the
    /// claim only after its reply, and a cancelled or failed extend leaves both as they
    /// were.
    SendOrder,
    /// The fix: the steps of one lease never overlap (a renewal is skipped while an
    /// extend is in flight, an extend waits for an in-flight renewal); an extend that may
    /// shorten the lease (to less than its ttl) lowers the claim to
    /// `min(claim, sent + t - drift)` and makes `t` the lease's ttl *before* it is sent,
    /// and keeps that lower value when it is cancelled or fails; a lengthening extend
    /// raises the claim only on its reply.
    OneStepLowerFirst,
    /// Mutation of the fix: steps never overlap, but a shortening extend lowers nothing
    /// before its reply (as [`Rule::SendOrder`]).
    OneStep,
    /// Mutation of the fix: a shortening extend lowers the claim first, but renewals and
    /// extends overlap (as [`Rule::SendOrder`]).
    LowerFirst,
}

impl Rule {
    /// Whether one step of a lease waits for the one in flight (else they overlap).
    pub fn serialises(self) -> bool {
        matches!(self, Rule::OneStepLowerFirst | Rule::OneStep)
    }

    /// Whether an extend that may shorten lowers the claim and the ttl before it is sent.
    pub fn lowers_first(self) -> bool {
        matches!(self, Rule::OneStepLowerFirst | Rule::LowerFirst)
    }
}

/// One configuration of the lease-life model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LifeConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// The lease's ttl when it was acquired, in ticks.
    pub ttl: u8,
    /// The drift allowance, in ticks (`ttl / 100 + 2 ms` in the code): a claim is
    /// `sent + ttl - drift` on the holder's clock.
    pub drift: u8,
    /// The ttl of an extend to a shorter lease, if the holder may ask for one.
    pub short: Option<u8>,
    /// The ttl of an extend to a longer lease, if the holder may ask for one.
    pub long: Option<u8>,
    /// How many extends the holder may call.
    pub extends: u8,
    /// How many times the client may stop waiting for a request (a cancelled extend, a
    /// response timeout of either step): the request may still run.
    pub cancels: u8,
    /// The only step a cancellation may hit (`None`: either), to isolate one defect.
    pub cancelled_step: Option<Step>,
    /// How many times Redis may answer NOSCRIPT: the client loads the script and re-sends
    /// the request, which then runs after requests sent after it.
    pub reloads: u8,
    /// How many times a request may run with its reply lost to a dropped connection: the
    /// client reconnects and re-sends it (`across_reconnects`), so it runs twice.
    pub retries: u8,
    /// How many times a request the client stopped waiting for may reach Redis after
    /// requests sent after it (stuck in a dead connection, delivered when a partition
    /// heals, while the client went on over a new one).
    pub late_orphans: u8,
    /// Whether the client reads a reply before time passes (`false`: a reply may come at
    /// any later moment; a failure after the request ran is then only a cancellation).
    pub prompt_replies: bool,
    /// Whether Redis' clock may run fast against the holder's, within the drift allowance:
    /// a tick ahead, at most once in any stretch of [`LifeConfig::window`] ticks.
    pub skew: bool,
    /// The rule.
    pub rule: Rule,
}

impl LifeConfig {
    /// A lease of 4 ticks, a drift allowance of 1, one extend to 2 ticks or to 6, no fault,
    /// under `rule`: an extend may cut the lease by more than the allowance, or lengthen
    /// it by more.
    pub fn code(rule: Rule) -> Self {
        LifeConfig {
            name: "lease life",
            ttl: 4,
            drift: 1,
            short: Some(2),
            long: Some(6),
            extends: 1,
            cancels: 0,
            cancelled_step: None,
            reloads: 0,
            retries: 0,
            late_orphans: 0,
            prompt_replies: false,
            skew: false,
            rule,
        }
    }

    /// The longest lease the holder can have, in ticks.
    pub fn longest(&self) -> u8 {
        self.ttl
            .max(self.short.unwrap_or(0))
            .max(self.long.unwrap_or(0))
    }

    /// The stretch of time within which Redis' clock gains at most one tick on the
    /// holder's: longer than any lease, so no claim spans two skews.
    pub fn window(&self) -> u8 {
        self.longest() + 1
    }
}

impl crate::check::Named for LifeConfig {
    fn name(&self) -> &str {
        self.name
    }
}
