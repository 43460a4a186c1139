//! Key and channel naming: every key of one lock, and its channel, share one cluster slot,
//! and two different lock keys never share a key or a channel.
//!
//! A lock named `N` lives at key `K = prefix + N`, so with an empty prefix it is the very
//! key another library's `SET K token NX PX` lock uses. That key is public interop and never
//! moves. Every other key and channel of the lock (its *side keys*) is a base, a NUL byte
//! and a part (`fence`, `holder`, `queue`, `sem:permits`, `rw:owners`, ...):
//!
//! - if `K` has no Redis Cluster hash tag, the base is `{K}`, whose tag is all of `K`, so
//!   the side keys hash like `K`: `{redlease:job}\0fence`;
//! - if `K` already has a tag (`{...}` with non-empty content), the base is `K` and one more
//!   NUL, keeping that tag: `redlease:{t}job\0\0fence`. The extra NUL keeps `{x}`'s side
//!   keys apart from those of `x`, whose base is also `{x}`;
//! - a `K` with a `}` but no valid tag (e.g. `a{}b`) cannot be tagged so that `{K}` hashes
//!   like `K`: such names are refused with [`Error::InvalidName`].
//!
//! No lock key contains a NUL byte (such names are refused: no command line, environment
//! variable or C string can carry one anyway), so no name reaches another name's side keys,
//! and a side key names its lock key and part unambiguously (everything after its last NUL
//! is the part). Before this layout the parts followed a `:`, and a name such as
//! `{t}y:fence` was the fencing counter of `{t}y`.

use crate::error::{Error, Result};

/// Separates a side key's base from its part: a byte no lock key contains.
const SEPARATOR: char = '\0';

/// The longest lock name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// Which primitive a name's keys belong to. Each keeps its own holder details, queue and
/// waiter table beside the shared key `K` (whose type, a string, a ZSET or a hash, makes
/// two primitives of one name refuse each other) and the shared fencing counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// A lock: `K` holds the owner token (a plain `SET NX PX` lock).
    Lock,
    /// A semaphore: `K` is a ZSET owner token -> lease expiry (ms since 1970, by the
    /// server's clock); [`LockKeys::permits`] keeps the permit count.
    Semaphore,
    /// A read-write lock: `K` is a hash with the `mode` (`read` or `write`) while held;
    /// [`LockKeys::holds`] is the ZSET owner token -> lease expiry.
    RwLock,
    /// A count-down latch: `K` is the SET of outstanding counts' owner tokens; a side key
    /// keeps their leases (a ZSET owner token -> lease expiry), another its rounds.
    Latch,
}

/// All the Redis names one lock uses.
///
/// **What is stable**: the lock key [`LockKeys::key`], `prefix + name`, and for a lock
/// ([`Primitive::Lock`]) its value, the plain owner token with a `PX` expiry, so that a
/// `SET K token NX PX` lock of another library on the same key (with an empty prefix)
/// excludes redlease's and the other way round. Every other key and channel (the fencing
/// counter, holder details, queues, waiter tables, channels, a semaphore's or read-write
/// lock's layout) is an implementation detail that may change in any release: read it
/// through [`Client::inspect`](crate::Client::inspect), never from Redis directly. The
/// side keys' accessors ([`fence`](Self::fence), [`holder`](Self::holder),
/// [`queue`](Self::queue), [`waiters`](Self::waiters), [`channel`](Self::channel),
/// [`term`](Self::term), and per primitive [`permits`](Self::permits),
/// [`holds`](Self::holds), [`counts`](Self::counts), [`rounds`](Self::rounds)) are for
/// tools that must name them (ACL rules, clean-up, redlease's own CLI, chaos suite and
/// tests); each names one key of one meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockKeys {
    /// The lock key: the owner token with a PX expiry.
    pub(crate) key: String,
    /// The fencing counter.
    pub(crate) fence: String,
    /// Holder details for operators.
    pub(crate) holder: String,
    /// An election's term record over a quorum: `"<term> <owner token>"`.
    pub(crate) term: String,
    /// FIFO queue of waiting tokens.
    pub(crate) queue: String,
    /// Waiter table.
    pub(crate) waiters: String,
    /// A pub/sub channel in the lock's slot.
    pub(crate) channel: String,
    /// The start of the lock's grant channels on a Cluster (`{K}\0grant:`), each client's
    /// id follows: a shard channel in the lock's slot.
    grants: String,
    /// The semaphore's permit count, the read-write lock's holds, the latch's counts'
    /// leases (empty for a lock).
    pub(crate) extra: String,
    /// A latch's rounds (empty for the other primitives).
    pub(crate) rounds: String,
    /// Whose keys these are.
    primitive: Primitive,
}

impl LockKeys {
    /// Checks `name` and derives every key of the lock named `name` under `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or oversized name, one whose side keys could
    /// not share its cluster slot (a `}` without a valid `{hash tag}`), or a name or
    /// prefix with a NUL byte.
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        Self::of(prefix, name, Primitive::Lock)
    }

    /// As [`LockKeys::new`], for the `primitive` named `name`.
    ///
    /// # Errors
    /// As [`LockKeys::new`].
    pub fn of(prefix: &str, name: &str, primitive: Primitive) -> Result<Self> {
        if name.is_empty() {
            return Err(invalid(
                "the name is empty; give every lock a non-empty name",
            ));
        }
        if name.len() > MAX_NAME_LEN {
            return Err(invalid(format!(
                "the name is {} bytes long; at most {MAX_NAME_LEN} are allowed",
                name.len()
            )));
        }
        Self::from_key_of(format!("{prefix}{name}"), primitive)
    }

    /// Derives the side keys from the full lock key.
    ///
    /// # Errors
    /// As [`LockKeys::new`].
    pub fn from_key(key: String) -> Result<Self> {
        Self::from_key_of(key, Primitive::Lock)
    }

    /// As [`LockKeys::from_key`], for the `primitive` whose key is `key`.
    ///
    /// # Errors
    /// As [`LockKeys::new`].
    pub fn from_key_of(key: String, primitive: Primitive) -> Result<Self> {
        if key.contains(SEPARATOR) {
            return Err(invalid(format!(
                "`{}` contains a NUL byte, which redlease keeps for the keys it stores beside each lock; remove it from the name (and the prefix)",
                key.escape_debug()
            )));
        }
        let base = if hash_tag(key.as_bytes()).is_some() {
            format!("{key}{SEPARATOR}{SEPARATOR}")
        } else if key.contains('}') {
            return Err(invalid(format!(
                "`{key}` contains `}}` without a valid {{hash tag}}, so its side keys cannot share its cluster slot; remove the brace or add a tag such as `{{{key_hint}}}`",
                key_hint = key.replace(['{', '}'], "")
            )));
        } else {
            format!("{{{key}}}{SEPARATOR}")
        };
        let (side, extra) = match primitive {
            Primitive::Lock => ("", String::new()),
            Primitive::Semaphore => ("sem:", format!("{base}sem:permits")),
            Primitive::RwLock => ("rw:", format!("{base}rw:owners")),
            Primitive::Latch => ("latch:", format!("{base}latch:counts")),
        };
        let rounds = if primitive == Primitive::Latch {
            format!("{base}latch:rounds")
        } else {
            String::new()
        };
        Ok(Self {
            fence: format!("{base}fence"),
            term: format!("{base}term"),
            holder: if side.is_empty() {
                format!("{base}holder")
            } else {
                format!("{base}{side}holders")
            },
            queue: format!("{base}{side}queue"),
            waiters: format!("{base}{side}waiters"),
            channel: format!("{base}released"),
            grants: format!("{base}grant:"),
            extra,
            rounds,
            primitive,
            key,
        })
    }

    /// The key `K`: a lock's owner token with a PX expiry; a semaphore's permits (ZSET);
    /// a read-write lock's mode (hash). See [`Primitive`].
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whose keys these are.
    pub fn primitive(&self) -> Primitive {
        self.primitive
    }

    /// The Redis Cluster hash slot (0..16384) of the lock key, which every side key and
    /// channel of the lock shares.
    pub fn hash_slot(&self) -> u16 {
        hash_slot(self.key.as_bytes())
    }

    /// Whether `key` is one that redlease stores beside a lock (a fencing counter, holder
    /// details, a queue, a waiter table, a semaphore's permit count, a read-write lock's
    /// holds) rather than a lock key: side keys, and only they, contain a NUL byte. For
    /// tools that list a keyspace and want the locks only.
    ///
    /// # Examples
    /// ```
    /// use redlease::LockKeys;
    /// let keys = LockKeys::new("redlease:", "job")?;
    /// assert!(!LockKeys::is_side_key(keys.key()));
    /// assert!(LockKeys::is_side_key(keys.fence()));
    /// # Ok::<(), redlease::Error>(())
    /// ```
    pub fn is_side_key(key: &str) -> bool {
        key.contains(SEPARATOR)
    }

    /// A semaphore's permit count (a string), or `None` for another primitive.
    pub fn permits(&self) -> Option<&str> {
        (self.primitive == Primitive::Semaphore).then_some(self.extra.as_str())
    }

    /// A read-write lock's holds (a ZSET owner token -> lease expiry in ms since 1970), or
    /// `None` for another primitive.
    pub fn holds(&self) -> Option<&str> {
        (self.primitive == Primitive::RwLock).then_some(self.extra.as_str())
    }

    /// A latch's counts' leases (a ZSET owner token -> lease expiry in ms since 1970), or
    /// `None` for another primitive.
    pub fn counts(&self) -> Option<&str> {
        (self.primitive == Primitive::Latch).then_some(self.extra.as_str())
    }

    /// A latch's rounds (a hash), or `None` for another primitive.
    pub fn rounds(&self) -> Option<&str> {
        (self.primitive == Primitive::Latch).then_some(self.rounds.as_str())
    }

    /// The fencing counter (an integer, kept the client's
    /// [`fence_keep`](crate::ClientBuilder::fence_keep) past the later of its value and
    /// the server's clock: see `fence.lua`).
    pub fn fence(&self) -> &str {
        &self.fence
    }

    /// An election's term record over a quorum (a string `"<term> <owner token>"`
    /// without expiry, one per election name): written by a campaign on the nodes that
    /// granted it, so that a reader can tell a granted term from a counter that the
    /// campaign has not written back yet. Unused by other primitives and deployments.
    pub fn term(&self) -> &str {
        &self.term
    }

    /// Holder details for operators (host, pid): a lock's string `"<fence> <details>"`
    /// (the holder's fencing token first) with the lock's expiry; a semaphore's or
    /// read-write lock's hash owner token -> `["<fence>", details]`.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The FIFO queue of waiting owner tokens (a list).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The waiter table (a hash: token -> the waiter record, a JSON object: see
    /// `scripts/lib/grants.lua`).
    pub fn waiters(&self) -> &str {
        &self.waiters
    }

    /// A pub/sub channel in the lock's cluster slot (for sharded pub/sub in Redis Cluster,
    /// where a channel must live in the slot of the keys a script touches).
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// The channel on which a Cluster client whose grant id is `client` hears that the
    /// lock was handed to one of its waiters (in the lock's slot, for `SPUBLISH`).
    pub(crate) fn grant_channel(&self, client: &str) -> String {
        format!("{}{client}", self.grants)
    }

    /// The keys in the order the mutex scripts declare them.
    pub(crate) fn script_keys(&self) -> [&str; 5] {
        [
            &self.key,
            &self.fence,
            &self.holder,
            &self.queue,
            &self.waiters,
        ]
    }

    /// The keys in the order the latch scripts declare them.
    pub(crate) fn latch_keys(&self) -> [&str; 5] {
        [
            &self.key,
            &self.fence,
            &self.holder,
            &self.rounds,
            &self.extra,
        ]
    }

    /// The keys in the order the semaphore and read-write lock scripts declare them.
    pub(crate) fn shared_lease_keys(&self) -> [&str; 6] {
        [
            &self.key,
            &self.fence,
            &self.holder,
            &self.queue,
            &self.waiters,
            &self.extra,
        ]
    }
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidName {
        reason: reason.into(),
    }
}

/// The part of `key` that Redis Cluster hashes: the content of the first `{...}` when it
/// is non-empty, as Redis defines hash tags.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// The Redis Cluster hash slot (0..16384) of `key`: CRC16/XMODEM of its hash tag or of
/// the whole key.
pub(crate) fn hash_slot(key: &[u8]) -> u16 {
    let data = hash_tag(key).unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 == 0 {
                crc << 1
            } else {
                (crc << 1) ^ 0x1021
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all_slots(keys: &LockKeys) -> Vec<u16> {
        [
            &keys.grant_channel("0123abcd"),
            &keys.key,
            &keys.fence,
            &keys.term,
            &keys.holder,
            &keys.queue,
            &keys.waiters,
            &keys.channel,
            &keys.extra,
            &keys.rounds,
        ]
        .iter()
        .filter(|k| !k.is_empty())
        .map(|k| hash_slot(k.as_bytes()))
        .collect()
    }

    #[test]
    fn slot_matches_redis_reference_values() {
        // Values from the Redis Cluster specification and CLUSTER KEYSLOT.
        assert_eq!(hash_slot(b"123456789"), 12739);
        assert_eq!(hash_slot(b"foo"), 12182);
        assert_eq!(hash_slot(b"{user1000}.following"), hash_slot(b"user1000"));
        assert_ne!(hash_slot(b"foo{}{bar}"), hash_slot(b"bar"));
    }

    #[test]
    fn refuses_empty_long_and_untaggable_names() {
        assert!(matches!(
            LockKeys::new("p:", ""),
            Err(Error::InvalidName { .. })
        ));
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            LockKeys::new("p:", &long),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            LockKeys::new("", "a{}b"),
            Err(Error::InvalidName { .. })
        ));
        assert!(matches!(
            LockKeys::new("", "a}b"),
            Err(Error::InvalidName { .. })
        ));
        assert!(LockKeys::new("", "{a}b}").is_ok(), "valid tag first");
        assert!(LockKeys::new("", "a{b").is_ok());
    }

    const PRIMITIVES: [Primitive; 4] = [
        Primitive::Lock,
        Primitive::Semaphore,
        Primitive::RwLock,
        Primitive::Latch,
    ];

    /// Every key and channel of `keys`, a grant channel included.
    fn everything(keys: &LockKeys) -> Vec<String> {
        [
            keys.grant_channel("0123abcd"),
            keys.key.clone(),
            keys.fence.clone(),
            keys.term.clone(),
            keys.holder.clone(),
            keys.queue.clone(),
            keys.waiters.clone(),
            keys.channel.clone(),
            keys.extra.clone(),
            keys.rounds.clone(),
        ]
        .into_iter()
        .filter(|k| !k.is_empty())
        .collect()
    }

    /// What two primitives of one name may share: the name's key (whose type makes them
    /// refuse each other), its fencing counter and its channels.
    fn shared_by_one_name(keys: &LockKeys) -> Vec<String> {
        vec![
            keys.key.clone(),
            keys.fence.clone(),
            keys.term.clone(),
            keys.channel.clone(),
            keys.grant_channel("0123abcd"),
        ]
    }

    /// Checks the rule for two lock keys of any primitives: different keys share nothing;
    /// one key shares only what its primitives have in common on purpose.
    fn check_apart(a: &str, b: &str) -> std::result::Result<(), TestCaseError> {
        for pa in PRIMITIVES {
            for pb in PRIMITIVES {
                let (Ok(ka), Ok(kb)) = (
                    LockKeys::from_key_of(a.to_owned(), pa),
                    LockKeys::from_key_of(b.to_owned(), pb),
                ) else {
                    continue;
                };
                let theirs = everything(&kb);
                let shared: Vec<_> = everything(&ka)
                    .into_iter()
                    .filter(|k| theirs.contains(k))
                    .collect();
                if a == b && pa == pb {
                    // One lock seen twice.
                } else if a == b {
                    let allowed = shared_by_one_name(&ka);
                    prop_assert!(
                        shared.iter().all(|k| allowed.contains(k)),
                        "{a:?} as {pa:?} and {pb:?} share {shared:?}"
                    );
                } else {
                    prop_assert!(
                        shared.is_empty(),
                        "{a:?} ({pa:?}) and {b:?} ({pb:?}) share {shared:?}"
                    );
                }
            }
        }
        Ok(())
    }

    #[test]
    fn names_that_reached_other_names_keys_no_longer_do() -> std::result::Result<(), TestCaseError>
    {
        // Each pair shared a key in the layout with `:` before the part.
        for (a, b) in [
            ("{t}y", "{t}y:fence"),
            ("{t}w", "{t}w:fence"),
            ("{t}x", "{t}x:holder"),
            ("{t}", "{t}:rw:owners"),
            ("{t}", "{t}:sem:permits"),
            ("x", "{x}:fence"),
            ("x", "{x}"),
            ("redlease:x", "{redlease:x}:queue"),
            ("{t}y", "{t}y:sem"),
            ("{t}y", "{t}y:grant:0123abcd"),
            ("{t}y", "{t}y:released"),
        ] {
            check_apart(a, b)?;
        }
        Ok(())
    }

    #[test]
    fn side_keys_contain_a_nul_and_lock_keys_cannot() -> Result<()> {
        let keys = LockKeys::of("redlease:", "job", Primitive::Semaphore)?;
        assert_eq!(keys.key(), "redlease:job");
        assert_eq!(keys.fence(), "{redlease:job}\0fence");
        assert_eq!(keys.permits(), Some("{redlease:job}\0sem:permits"));
        let tagged = LockKeys::new("redlease:", "{t}job")?;
        assert_eq!(tagged.fence(), "redlease:{t}job\0\0fence");
        assert!(!LockKeys::is_side_key(keys.key()));
        for key in everything(&keys).iter().chain(&everything(&tagged)) {
            assert_eq!(
                LockKeys::is_side_key(key),
                key != keys.key() && key != tagged.key(),
                "{key:?}"
            );
        }
        for (prefix, name) in [("", "a\0b"), ("p\0:", "a"), ("", "\0")] {
            let refused = LockKeys::new(prefix, name);
            assert!(
                matches!(&refused, Err(Error::InvalidName { reason }) if reason.contains("NUL")),
                "{refused:?}"
            );
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn different_lock_keys_never_share_a_key(
            a in "[a-z{}:]{1,10}",
            b in "[a-z{}:]{1,10}",
            part in 0usize..8,
        ) {
            check_apart(&a, &b)?;
            // The names an adversary would pick: `a`'s side keys with the NUL bytes
            // written as the old `:` separator, dropped, or kept.
            for primitive in PRIMITIVES {
                let Ok(keys) = LockKeys::from_key_of(a.clone(), primitive) else { continue };
                let all = everything(&keys);
                let side = &all[part % all.len()];
                for b in [side.replace('\0', ":"), side.replace('\0', ""), side.clone()] {
                    check_apart(&a, &b)?;
                }
            }
        }

        #[test]
        fn every_key_of_a_lock_shares_one_slot(prefix in "[a-z:{}]{0,6}", name in "[a-z{}:]{1,12}") {
            for primitive in PRIMITIVES {
            match LockKeys::of(&prefix, &name, primitive) {
                Ok(keys) => {
                    let slots = all_slots(&keys);
                    prop_assert!(slots.iter().all(|s| *s == slots[0]), "{keys:?} -> {slots:?}");
                    prop_assert_eq!(keys.key, format!("{prefix}{name}"));
                }
                Err(Error::InvalidName { .. }) => {
                    let key = format!("{prefix}{name}");
                    let untaggable = hash_tag(key.as_bytes()).is_none() && key.contains('}');
                    prop_assert!(untaggable, "refused a taggable key {}", key);
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
            }
        }
    }
}
