//! Owner tokens and fencing tokens.

use std::fmt;

use crate::error::{Error, Result};

/// A lock owner's secret: 128 bits from the operating system's random source, never
/// reused, never derived from time or process id.
///
/// Its `Debug` and `Display` show only a short prefix, so logs never carry a whole token.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct OwnerToken(String);

impl OwnerToken {
    pub(crate) fn generate() -> Result<Self> {
        let mut bytes = [0u8; 16];
        let filled = getrandom::fill(&mut bytes);
        Self::from_random(filled.map(|()| bytes))
    }

    /// The token of 16 random bytes, or the error of a random source that failed.
    fn from_random(bytes: Result<[u8; 16], getrandom::Error>) -> Result<Self> {
        let bytes = bytes.map_err(|e| Error::Randomness {
            reason: e.to_string(),
        })?;
        let mut hex = String::with_capacity(32);
        for b in bytes {
            hex.push(char::from(HEX[usize::from(b >> 4)]));
            hex.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Ok(Self(hex))
    }

    /// A token read back from its full hex form (a lease handle's): `None` unless it is
    /// 32 lowercase hex digits, the form [`OwnerToken::generate`] makes.
    pub(crate) fn from_secret(secret: &str) -> Option<Self> {
        let hex = secret.len() == 32 && secret.bytes().all(|b| HEX.contains(&b));
        hex.then(|| Self(secret.to_owned()))
    }

    /// The full token, for the wire only.
    pub(crate) fn secret(&self) -> &str {
        &self.0
    }

    /// The first 8 hex digits, safe to log.
    pub(crate) fn prefix(&self) -> &str {
        self.0.get(..8).unwrap_or("")
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({}…)", self.prefix())
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}…", self.prefix())
    }
}

/// A number that grows with every fresh acquisition of one lock name on one deployment.
///
/// Pass it to the resource you protect and have the resource refuse any write carrying a
/// token lower than the highest it has seen: a holder that was paused past its lease (a
/// GC pause, a SIGSTOP, a slow network) then cannot overwrite the newer holder's work.
///
/// # A hybrid clock
/// Every grant takes `max(last token + 1, Redis' TIME in microseconds)`, so a token is
/// roughly the time of its grant (about 1.8e15 today, below 2^53 until the year 2255, so
/// exact in JSON, doubles and JavaScript) and still grows when Redis loses the counter:
/// - after a restart without persistence, as long as the server's clock did not step
///   back by more than the outage lasted;
/// - after an asynchronous failover, as long as the new primary's clock does not trail
///   the old one's by more than the failover took (NTP-synchronised hosts: milliseconds
///   against seconds);
/// - after the counter key expired (the client's
///   [`fence_keep`](crate::ClientBuilder::fence_keep), an hour by default, after the
///   server's clock passed it, so that counters of names no longer used do not pile up),
///   as long as the clock does not step back by more than that keep.
///
/// Counters written by earlier versions (small integers) keep working: the first new
/// token jumps ahead to the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw counter value.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw counter value.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_redacted() -> Result<()> {
        let a = OwnerToken::generate()?;
        let b = OwnerToken::generate()?;
        assert_ne!(a, b);
        assert_eq!(a.secret().len(), 32);
        assert!(!format!("{a:?}").contains(a.secret()));
        assert!(!a.to_string().contains(a.secret()));
        Ok(())
    }

    #[test]
    fn a_failed_random_source_has_its_own_error() {
        let failed = OwnerToken::from_random(Err(getrandom::Error::UNSUPPORTED));
        assert!(
            matches!(&failed, Err(Error::Randomness { reason }) if !reason.is_empty()),
            "{failed:?}"
        );
        let text = failed.map_or_else(|e| e.to_string(), |_| String::new());
        assert!(
            text.starts_with("the operating system's random source failed"),
            "{text}"
        );
    }
}
