//! Lease lengths: the accepted range, the drift margin, and the wire form (leaf module).

use std::time::Duration;

use crate::error::{Error, Result};

/// The shortest lease accepted: shorter ones would be eaten by the drift margin.
pub const MIN_TTL: Duration = Duration::from_millis(10);
/// The longest lease accepted (30 days).
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// The safety margin subtracted from every lease: `ttl / 100 + 2 ms`, the Redlock rule for
/// clock drift between this process and Redis.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// How much earlier than Redis can expire a lease its holder reports the lease lost, on
/// top of [`drift`]: a twentieth of the ttl, so that work under [`Lock::run`](crate::Lock::run)
/// is cancelled (and a holder told) with time to stop before another holder can start,
/// even when renewals failed silently until the end.
pub(crate) fn loss_margin(ttl: Duration) -> Duration {
    ttl / 20
}

/// How long a lease of `ttl` is claimed from the send time of the request that set it:
/// `ttl - drift(ttl) - loss_margin(ttl)`.
pub(crate) fn claim(ttl: Duration) -> Duration {
    ttl.saturating_sub(drift(ttl))
        .saturating_sub(loss_margin(ttl))
}

/// Checks a lease length: [`Error::InvalidOption`] outside [`MIN_TTL`] ..= [`MAX_TTL`]
/// (what every acquisition checks; for bindings and tools that check options early).
///
/// # Errors
/// [`Error::InvalidOption`] for a ttl out of range.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// assert!(redlease::validate_ttl(Duration::from_secs(30)).is_ok());
/// assert!(redlease::validate_ttl(Duration::ZERO).is_err());
/// ```
pub fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl < MIN_TTL || ttl > MAX_TTL {
        return Err(Error::InvalidOption {
            option: "ttl",
            reason: format!("{ttl:?} is outside the accepted range {MIN_TTL:?} ..= 30 days"),
        });
    }
    Ok(())
}

/// Whole milliseconds of a validated duration.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}
