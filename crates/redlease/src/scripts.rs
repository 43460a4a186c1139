//! The Lua scripts, loaded once and sent with EVALSHA (redis-rs reloads them on NOSCRIPT).
//!
//! Each script's header in `scripts/*.lua` states its KEYS, ARGV and reply.

use std::sync::LazyLock;

use redis::Script;

/// One attempt to take a lock (or join its FIFO queue).
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/acquire.lua")));

/// Compare-and-delete, then hand-off to the oldest live waiter; also withdraws a waiter.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/release.lua")));

/// Compare-and-PEXPIRE.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/extend.lua")));

/// Compare-and-PEXPIRE of many leases in one call, for the renewal scheduler.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/renew.lua")));

/// Raise a quorum node's fencing counter to the token handed out (never lower it).
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../scripts/raise_fence.lua")));

/// The file name of the script whose SHA1 `text` (a Redis error message) mentions.
pub(crate) fn named_in(text: &str) -> Option<&'static str> {
    [
        (&ACQUIRE, "acquire.lua"),
        (&RELEASE, "release.lua"),
        (&EXTEND, "extend.lua"),
        (&RENEW, "renew.lua"),
        (&RAISE_FENCE, "raise_fence.lua"),
    ]
    .into_iter()
    .find(|(script, _)| text.contains(script.get_hash()))
    .map(|(_, name)| name)
}

/// The text of the script whose SHA1 is `sha`, to send with `EVAL` where a node lacks it
/// (a cluster loads a script on the one node that needs it, never on every node).
pub(crate) fn source(sha: &str) -> Option<&'static str> {
    [
        (&ACQUIRE, include_str!("../scripts/acquire.lua")),
        (&RELEASE, include_str!("../scripts/release.lua")),
        (&EXTEND, include_str!("../scripts/extend.lua")),
        (&RENEW, include_str!("../scripts/renew.lua")),
        (&RAISE_FENCE, include_str!("../scripts/raise_fence.lua")),
    ]
    .into_iter()
    .find(|(script, _)| script.get_hash() == sha)
    .map(|(_, source)| source)
}
