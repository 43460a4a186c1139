//! The Lua scripts (`scripts/*.lua`), loaded once and sent with EVALSHA (redis-rs reloads
//! them on NOSCRIPT), and their texts by SHA1 for the places that need them: `EVAL` where
//! a cluster node lacks a script, and error messages that name the script.
//!
//! Each script's header in `scripts/*.lua` states its KEYS, ARGV and reply; the typed
//! calls that lay them out are in `crate::scripts`.

use std::sync::LazyLock;

use redis::Script;

/// `acquire.lua` with the hybrid-clock fencing rule of `fence.lua` in front.
const ACQUIRE_LUA: &str = concat!(
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/acquire.lua")
);
/// `release.lua` (whose hand-off grants) with `fence.lua` in front.
const RELEASE_LUA: &str = concat!(
    include_str!("../scripts/fence.lua"),
    include_str!("../scripts/release.lua")
);
const EXTEND_LUA: &str = include_str!("../scripts/extend.lua");
const RENEW_LUA: &str = include_str!("../scripts/renew.lua");
const RAISE_FENCE_LUA: &str = include_str!("../scripts/raise_fence.lua");
const FENCED_SET_LUA: &str = include_str!("../scripts/fenced_set.lua");

/// One attempt to take a lock (or join its FIFO queue).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));

/// Compare-and-delete, then hand-off to the oldest live waiter; also withdraws a waiter.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// Compare-and-PEXPIRE.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));

/// Compare-and-PEXPIRE of many leases in one call, for the renewal scheduler.
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));

/// Raise a quorum node's fencing counter to the token handed out (never lower it).
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE_LUA));

/// Write a resource's value only for a fencing token not older than the last accepted.
pub(crate) static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_SET_LUA));

/// Every script: the loaded script, its file name, and the exact text it was made from.
fn all() -> [(&'static Script, &'static str, &'static str); 6] {
    [
        (&*ACQUIRE, "acquire.lua", ACQUIRE_LUA),
        (&*RELEASE, "release.lua", RELEASE_LUA),
        (&*EXTEND, "extend.lua", EXTEND_LUA),
        (&*RENEW, "renew.lua", RENEW_LUA),
        (&*RAISE_FENCE, "raise_fence.lua", RAISE_FENCE_LUA),
        (&*FENCED_SET, "fenced_set.lua", FENCED_SET_LUA),
    ]
}

/// The file name of the script whose SHA1 `text` (a Redis error message) mentions.
pub(crate) fn named_in(text: &str) -> Option<&'static str> {
    all()
        .into_iter()
        .find(|(script, _, _)| text.contains(script.get_hash()))
        .map(|(_, name, _)| name)
}

/// The text of the script whose SHA1 is `sha`, to send with `EVAL` where a node lacks it
/// (a cluster loads a script on the one node that needs it, never on every node).
pub(crate) fn source(sha: &str) -> Option<&'static str> {
    all()
        .into_iter()
        .find(|(script, _, _)| script.get_hash() == sha)
        .map(|(_, _, source)| source)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text sent with `EVAL` is the very script whose SHA1 `EVALSHA` sent (the
    /// `fence.lua` prelude included).
    #[test]
    fn every_source_hashes_to_its_script() {
        for (script, name, _) in all() {
            let text = source(script.get_hash());
            assert!(text.is_some(), "{name}");
            let again = Script::new(text.unwrap_or_default());
            assert_eq!(again.get_hash(), script.get_hash(), "{name}");
        }
    }
}
