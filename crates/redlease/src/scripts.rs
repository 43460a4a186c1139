//! The Lua scripts, loaded once and sent with EVALSHA (redis-rs reloads them on NOSCRIPT).
//!
//! Each script's header in `scripts/*.lua` states its KEYS, ARGV and reply.

use std::sync::LazyLock;

use redis::Script;

/// One attempt to take a lock (or join its FIFO queue), with the hybrid-clock fencing
/// rule of `fence.lua` in front.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../scripts/fence.lua"),
        include_str!("../scripts/acquire.lua")
    ))
});

/// Compare-and-delete, then hand-off to the oldest live waiter (fenced by `fence.lua`);
/// also withdraws a waiter.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../scripts/fence.lua"),
        include_str!("../scripts/release.lua")
    ))
});

/// Compare-and-PEXPIRE.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/extend.lua")));

/// Compare-and-PEXPIRE of many leases in one call, for the renewal scheduler.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew.lua")));

/// Raise a quorum node's fencing counter to the token handed out (never lower it).
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/raise_fence.lua")));

/// Write a resource's value only for a fencing token not older than the last accepted.
pub(crate) static FENCED_SET: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/fenced_set.lua")));

/// The file name of the script whose SHA1 `text` (a Redis error message) mentions.
pub(crate) fn named_in(text: &str) -> Option<&'static str> {
    [
        (&ACQUIRE, "acquire.lua"),
        (&RELEASE, "release.lua"),
        (&EXTEND, "extend.lua"),
        (&RENEW, "renew.lua"),
        (&RAISE_FENCE, "raise_fence.lua"),
        (&FENCED_SET, "fenced_set.lua"),
    ]
    .into_iter()
    .find(|(script, _)| text.contains(script.get_hash()))
    .map(|(_, name)| name)
}
