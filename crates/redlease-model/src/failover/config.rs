//! What one run of the failover model explores, and the rule a waiter follows when a
//! grant is pushed to it.

/// When a waiter trusts a grant pushed over its pub/sub link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    /// The code before the fix behind a single URL (`trusts_grants()` true): a pushed grant
    /// is trusted whichever server the link that carried it is on.
    TrustAnyLink,
    /// Mutation of the fix: the link's role is checked when it is made (as a classic link
    /// does when sharded), not again: a grant is trusted from a link that was on the
    /// primary when it was made.
    TrustLinkCheckedOnce,
    /// A grant is trusted only from a link on the server that is the primary at the very
    /// moment the grant is read (an exact check no client can make); otherwise it is
    /// confirmed by an attempt on the primary. Sound across one failover, not across a
    /// failback: the server a grant was relayed by can be the primary again by then.
    TrustLinkOnPrimary,
    /// The code before the one hand-off: `ROLE` asked on the link after the grant is read,
    /// its answer read at any later moment; a grant is trusted when the answer says
    /// primary, else confirmed by an attempt.
    TrustRoleAskedAfter,
    /// The one hand-off (`scripts/lib/grants.lua`): a pushed grant is never trusted, it
    /// sets a claim window that only the waiter's attempt on the primary confirms.
    ConfirmByAttempt,
}

/// One configuration of the failover model.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FailoverConfig {
    /// A short label for reports.
    pub name: &'static str,
    /// Clients: the first holds the lock, the second waits with its link on the first
    /// primary, the others call `acquire` at any moment (through the endpoint: their
    /// links go to the primary of the moment).
    pub clients: usize,
    /// The rule.
    pub rule: Rule,
    /// How many times the primary may move (a failover, then back, and so on).
    pub role_changes: u8,
}

impl FailoverConfig {
    /// A holder, a waiter and a third client, under `rule`, with one failover.
    pub fn code(rule: Rule) -> Self {
        FailoverConfig {
            name: "failover",
            clients: 3,
            rule,
            role_changes: 1,
        }
    }

    /// The same with the primary moving `role_changes` times (back and forth).
    #[must_use]
    pub fn moving(mut self, role_changes: u8) -> Self {
        self.role_changes = role_changes;
        self
    }
}

impl crate::check::Named for FailoverConfig {
    fn name(&self) -> &str {
        self.name
    }
}
