//! [`LeaseHandle`]: what another process needs to take over a held lease, and its string
//! form (leaf module).
//!
//! A handle names the lease (key prefix and name), carries its owner token, its fencing
//! token and its length, and what it is a lease on. It carries no validity: the
//! adopter asks Redis whether the lease is still there (`Lock::adopt`), and dates its own
//! claim from that request.
//!
//! # The string form
//! `redlease1:<kind>:<fencing token>:<ttl in ms>:<owner token>:<prefix length>:<prefix><name>`
//! where `<kind>` is `lock`, `leader`, `permit`, `read`, `write` or `count`, the owner token is
//! 32 lowercase hex digits, and `<prefix length>` counts the prefix's bytes, so that the
//! prefix and the name may hold any character (colons included) but NUL.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::scripts::Kind;
use crate::token::{FencingToken, OwnerToken};
use crate::ttl::{ttl_millis, validate_ttl};

/// The first field of the string form: its format and version.
const TAG: &str = "redlease1";

/// What a handle's lease is a lease on, as the string form spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// A lock: the only kind [`Lock::adopt`](crate::Lock::adopt) takes over.
    Lock,
    /// An election's lock.
    Leader,
    /// A semaphore's permit.
    Permit,
    /// A read hold of a read-write lock.
    Read,
    /// A write hold of a read-write lock.
    Write,
    /// A count of a latch.
    Count,
}

impl Held {
    fn of(kind: Kind) -> Self {
        match kind {
            Kind::Mutex => Self::Lock,
            Kind::Leader => Self::Leader,
            Kind::Permit { .. } => Self::Permit,
            Kind::Read => Self::Read,
            Kind::Write => Self::Write,
            Kind::Count => Self::Count,
        }
    }

    /// The lease kind's word (`Kind::word`: the same in metrics and Python).
    fn word(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Leader => "election",
            Self::Permit => "semaphore",
            Self::Read => "read",
            Self::Write => "write",
            Self::Count => "latch",
        }
    }

    /// The kind a handle's word names; the words of handles written before the words were
    /// one set (`leader`, `permit`, `count`) are read too.
    fn parse(word: &str) -> Option<Self> {
        let word = match word {
            "leader" => "election",
            "permit" => "semaphore",
            "count" => "latch",
            other => other,
        };
        [
            Self::Lock,
            Self::Leader,
            Self::Permit,
            Self::Read,
            Self::Write,
            Self::Count,
        ]
        .into_iter()
        .find(|held| held.word() == word)
    }
}

/// A held lease handed from one process to another: made by
/// [`Guard::detach`](crate::Guard::detach), taken over by
/// [`Lock::adopt`](crate::Lock::adopt) (also in another process, on another
/// [`Client`](crate::Client) of the same deployment).
///
/// Its [`Display`](fmt::Display) form is one line to pass through an environment variable,
/// a file or a command line, and [`FromStr`] reads it back:
/// `redlease1:<kind>:<fencing token>:<ttl in ms>:<owner token>:<prefix length>:<prefix><name>`,
/// where `<kind>` is `lock`, `leader`, `permit`, `read`, `write` or `count`, the owner token is 32
/// lowercase hex digits, and `<prefix length>` counts the prefix's bytes (so the prefix
/// and the name may hold any character, colons included).
///
/// # A secret
/// The string carries the lease's **owner token** whole: whoever has it can renew, extend
/// and release the lock. Treat it as a password (an environment variable of the child
/// process, a file only its user reads); never log it. `Debug` shows only a prefix of the
/// token.
///
/// # One adopter
/// Hand a handle to **one** process. Two processes that adopt the same handle both hold
/// the lease under the same owner token: Redis cannot tell them apart, both renew it,
/// both believe they hold the lock, and the first to release frees it under the other.
/// That is the caller's to prevent, as it is with any secret.
///
/// # Examples
/// ```no_run
/// # async fn example(client: redlease::Client) -> Result<(), Box<dyn std::error::Error>> {
/// let guard = client.lock("migration").acquire().await?;
/// let handle = guard.detach(); // no longer renewed here; still held in Redis
/// std::process::Command::new("migrate")
///     .env("MIGRATION_LOCK", handle.to_string())
///     .spawn()?;
/// // In `migrate`:
/// let handle: redlease::LeaseHandle = std::env::var("MIGRATION_LOCK")?.parse()?;
/// let guard = client.lock(handle.name()).adopt(handle).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct LeaseHandle {
    pub(crate) held: Held,
    pub(crate) prefix: String,
    pub(crate) name: String,
    pub(crate) token: OwnerToken,
    pub(crate) fence: FencingToken,
    pub(crate) ttl: Duration,
}

impl LeaseHandle {
    /// The handle of a lease of `kind`.
    pub(crate) fn new(
        kind: Kind,
        (prefix, name): (&str, &str),
        token: &OwnerToken,
        fence: FencingToken,
        ttl: Duration,
    ) -> Self {
        Self {
            held: Held::of(kind),
            prefix: prefix.to_owned(),
            name: name.to_owned(),
            token: token.clone(),
            fence,
            ttl,
        }
    }

    /// The lock's name (without the key prefix).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key prefix the lock was acquired under; the adopting
    /// [`Lock`](crate::Lock) must have the same [`prefix`](crate::Lock::prefix).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The fencing token of the acquisition: an adopted guard keeps it.
    pub fn fencing_token(&self) -> FencingToken {
        self.fence
    }

    /// The lease's length: what an adopter sets the lease to, and what its renewals
    /// restore.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the handle is a lock's (the kind [`Lock::adopt`](crate::Lock::adopt)
    /// takes).
    pub(crate) fn is_lock(&self) -> bool {
        self.held == Held::Lock
    }
}

impl fmt::Debug for LeaseHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseHandle")
            .field("kind", &self.held.word())
            .field("prefix", &self.prefix)
            .field("name", &self.name)
            .field("token", &self.token)
            .field("fencing_token", &self.fence)
            .field("ttl", &self.ttl)
            .finish()
    }
}

impl fmt::Display for LeaseHandle {
    /// The string form, owner token included: a secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{TAG}:{}:{}:{}:{}:{}:{}{}",
            self.held.word(),
            self.fence,
            ttl_millis(self.ttl),
            self.token.secret(),
            self.prefix.len(),
            self.prefix,
            self.name
        )
    }
}

impl FromStr for LeaseHandle {
    type Err = Error;

    /// Reads the string form back.
    ///
    /// # Errors
    /// [`Error::InvalidHandle`] naming the part that is wrong.
    fn from_str(text: &str) -> Result<Self> {
        let mut fields = text.splitn(7, ':');
        let mut next = |what: &str| {
            fields
                .next()
                .ok_or_else(|| invalid(format!("it ends before its {what}")))
        };
        let tag = next("format tag")?;
        if tag != TAG {
            return Err(invalid(format!(
                "it does not start with `{TAG}:` (a handle written by another version of redlease, or no handle at all)"
            )));
        }
        let word = next("kind")?;
        let held = Held::parse(word).ok_or_else(|| {
            invalid(format!(
                "unknown kind `{}` (lock, leader, permit, read or write)",
                word.escape_debug()
            ))
        })?;
        let fence = next("fencing token")?
            .parse::<u64>()
            .map_err(|e| invalid(format!("its fencing token is no number ({e})")))?;
        let ttl_ms = next("ttl")?
            .parse::<u64>()
            .map_err(|e| invalid(format!("its ttl is no number of milliseconds ({e})")))?;
        let ttl = Duration::from_millis(ttl_ms);
        validate_ttl(ttl).map_err(|e| invalid(format!("its ttl: {e}")))?;
        let token = OwnerToken::from_secret(next("owner token")?)
            .ok_or_else(|| invalid("its owner token is not 32 lowercase hex digits".to_owned()))?;
        let prefix_len = next("prefix length")?
            .parse::<usize>()
            .map_err(|e| invalid(format!("its prefix length is no number ({e})")))?;
        let rest = next("name")?;
        let (Some(prefix), Some(name)) = (rest.get(..prefix_len), rest.get(prefix_len..)) else {
            return Err(invalid(format!(
                "its prefix length {prefix_len} does not fit the {} bytes of prefix and name that follow",
                rest.len()
            )));
        };
        if name.is_empty() {
            return Err(invalid("its lock name is empty".to_owned()));
        }
        Ok(Self {
            held,
            prefix: prefix.to_owned(),
            name: name.to_owned(),
            token,
            fence: FencingToken::new(fence),
            ttl,
        })
    }
}

fn invalid(reason: String) -> Error {
    Error::InvalidHandle { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(prefix: &str, name: &str) -> Result<LeaseHandle> {
        Ok(LeaseHandle::new(
            Kind::Mutex,
            (prefix, name),
            &OwnerToken::generate()?,
            FencingToken::new(1_754_000_000_000_123),
            Duration::from_millis(2500),
        ))
    }

    #[test]
    fn the_string_form_reads_back_whatever_the_name_holds() -> Result<()> {
        for (prefix, name) in [
            ("redlease:", "job"),
            ("", "a:b:c"),
            ("app:{x}:", "ünïcode: 7"),
            ("p", "with\nnewline"),
        ] {
            let handle = handle(prefix, name)?;
            let text = handle.to_string();
            assert_eq!(text.parse::<LeaseHandle>()?, handle, "{text}");
        }
        Ok(())
    }

    #[test]
    fn handles_name_their_kind_with_the_words_of_metrics_and_read_the_earlier_words() -> Result<()>
    {
        let token = OwnerToken::generate()?;
        let permit = LeaseHandle::new(
            Kind::Permit {
                permits: 3,
                weight: 1,
            },
            ("redlease:", "pool"),
            &token,
            FencingToken::new(7),
            Duration::from_millis(2500),
        );
        let text = permit.to_string();
        assert!(text.contains(":semaphore:"), "{text}");
        let earlier = text.replace(":semaphore:", ":permit:");
        assert_eq!(earlier.parse::<LeaseHandle>()?, permit);
        Ok(())
    }

    #[test]
    fn debug_hides_the_owner_token() -> Result<()> {
        let handle = handle("redlease:", "job")?;
        assert!(!format!("{handle:?}").contains(handle.token.secret()));
        assert!(handle.to_string().contains(handle.token.secret()));
        Ok(())
    }

    #[test]
    fn a_malformed_string_says_what_is_wrong() -> Result<()> {
        let good = handle("redlease:", "job")?.to_string();
        let token = good.split(':').nth(4).unwrap_or_default().to_owned();
        for (text, says) in [
            (String::new(), "does not start with"),
            ("redlease1:lock:1".to_owned(), "ends before its ttl"),
            (good.replacen("lock", "mutex", 1), "unknown kind"),
            (good.replacen(":2500:", ":soon:", 1), "ttl is no number"),
            (good.replacen(":2500:", ":0:", 1), "ttl: invalid option"),
            (good.replacen(&token, "abc", 1), "32 lowercase hex"),
            (good.replacen(":9:", ":99:", 1), "does not fit"),
            (
                good.replacen(":9:redlease:job", ":13:redlease:job", 1),
                "does not fit",
            ),
            (good.replacen("job", "", 1), "name is empty"),
        ] {
            let parsed = text.parse::<LeaseHandle>();
            let message = parsed
                .as_ref()
                .map_or_else(ToString::to_string, |h| format!("parsed: {h:?}"));
            assert!(
                matches!(parsed, Err(Error::InvalidHandle { .. })) && message.contains(says),
                "`{text}`: {message}"
            );
        }
        Ok(())
    }
}
