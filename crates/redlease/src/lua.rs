//! The Lua scripts (`scripts/*.lua`), sent with EVALSHA, and their texts by SHA1 for the
//! places that need them: `EVAL` where a server lacks a script (`NOSCRIPT`, see
//! `scripts::EvalOnNoscript`), and error messages that name the script.
//!
//! Each script's header in `scripts/*.lua` states its KEYS, ARGV and reply; the typed
//! calls that lay them out are in `crate::scripts`. The files in `scripts/lib/` are not
//! scripts: they are libraries (local functions and constants) put in front of the
//! scripts that use them, in the order given here (a library may use those before it).

use std::sync::LazyLock;

use redis::Script;

/// `acquire.lua` with the clock reader of `lib/clock.lua`, the hybrid-clock fencing rule of `lib/fence.lua`, the expiry helper of
/// `lib/expiry.lua`, the hand-off every primitive shares (`lib/grants.lua`) and the lock's
/// (`lib/handoff.lua`) in front.
pub(crate) const ACQUIRE_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/fence.lua"),
    include_str!("../scripts/lib/expiry.lua"),
    include_str!("../scripts/lib/grants.lua"),
    include_str!("../scripts/lib/handoff.lua"),
    include_str!("../scripts/acquire.lua")
);
/// `release.lua` (whose hand-off grants) with `lib/clock.lua`, `lib/fence.lua`, `lib/grants.lua` and
/// `lib/handoff.lua` in front.
pub(crate) const RELEASE_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/fence.lua"),
    include_str!("../scripts/lib/grants.lua"),
    include_str!("../scripts/lib/handoff.lua"),
    include_str!("../scripts/release.lua")
);
/// The semaphore scripts, each with `lib/clock.lua`, `lib/common.lua`, `lib/fence.lua`, `lib/grants.lua`,
/// `lib/shared.lua` and `lib/semaphore.lua` in front.
macro_rules! semaphore_script {
    ($file:literal) => {
        concat!(
            include_str!("../scripts/lib/clock.lua"),
            include_str!("../scripts/lib/common.lua"),
            include_str!("../scripts/lib/fence.lua"),
            include_str!("../scripts/lib/grants.lua"),
            include_str!("../scripts/lib/shared.lua"),
            include_str!("../scripts/lib/semaphore.lua"),
            include_str!($file)
        )
    };
}
/// The read-write lock scripts, each with `lib/clock.lua`, `lib/common.lua`, `lib/fence.lua`,
/// `lib/grants.lua`, `lib/shared.lua` and `lib/rwlock.lua` in front.
macro_rules! rwlock_script {
    ($file:literal) => {
        concat!(
            include_str!("../scripts/lib/clock.lua"),
            include_str!("../scripts/lib/common.lua"),
            include_str!("../scripts/lib/fence.lua"),
            include_str!("../scripts/lib/grants.lua"),
            include_str!("../scripts/lib/shared.lua"),
            include_str!("../scripts/lib/rwlock.lua"),
            include_str!($file)
        )
    };
}
/// The latch scripts, each with `lib/clock.lua`, `lib/common.lua`, `lib/fence.lua` and `lib/latch.lua` in
/// front.
macro_rules! latch_script {
    ($file:literal) => {
        concat!(
            include_str!("../scripts/lib/clock.lua"),
            include_str!("../scripts/lib/common.lua"),
            include_str!("../scripts/lib/fence.lua"),
            include_str!("../scripts/lib/latch.lua"),
            include_str!($file)
        )
    };
}
pub(crate) const LATCH_UP_LUA: &str = latch_script!("../scripts/latch_up.lua");
pub(crate) const LATCH_DOWN_LUA: &str = latch_script!("../scripts/latch_down.lua");
pub(crate) const LATCH_CHECK_LUA: &str = latch_script!("../scripts/latch_check.lua");
pub(crate) const LATCH_EXPECT_LUA: &str = latch_script!("../scripts/latch_expect.lua");
pub(crate) const SEM_ACQUIRE_LUA: &str = semaphore_script!("../scripts/sem_acquire.lua");
pub(crate) const SEM_RELEASE_LUA: &str = semaphore_script!("../scripts/sem_release.lua");
pub(crate) const SEM_RESIZE_LUA: &str = semaphore_script!("../scripts/sem_resize.lua");
pub(crate) const RW_ACQUIRE_LUA: &str = rwlock_script!("../scripts/rw_acquire.lua");
pub(crate) const RW_RELEASE_LUA: &str = rwlock_script!("../scripts/rw_release.lua");
pub(crate) const RW_DOWNGRADE_LUA: &str = rwlock_script!("../scripts/rw_downgrade.lua");
/// The ZSET lease scripts, each with `lib/clock.lua`, `lib/common.lua` and `lib/expiry.lua` in front.
pub(crate) const LEASE_EXTEND_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/common.lua"),
    include_str!("../scripts/lib/expiry.lua"),
    include_str!("../scripts/lease_extend.lua")
);
pub(crate) const LEASE_RENEW_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/common.lua"),
    include_str!("../scripts/lib/expiry.lua"),
    include_str!("../scripts/lease_renew.lua")
);
/// `lock_extend.lua` with `lib/expiry.lua` in front.
pub(crate) const LOCK_EXTEND_LUA: &str = concat!(
    include_str!("../scripts/lib/expiry.lua"),
    include_str!("../scripts/lock_extend.lua")
);
pub(crate) const LOCK_RENEW_LUA: &str = include_str!("../scripts/lock_renew.lua");
/// `raise_fence.lua` with `lib/clock.lua`, `lib/common.lua` and `lib/fence.lua` (for how long a fencing
/// counter is kept) in front.
pub(crate) const RAISE_FENCE_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/common.lua"),
    include_str!("../scripts/lib/fence.lua"),
    include_str!("../scripts/raise_fence.lua")
);
pub(crate) const FENCED_SET_LUA: &str = include_str!("../scripts/fenced_set.lua");
pub(crate) const LEADER_LUA: &str = include_str!("../scripts/leader.lua");
/// `holds.lua` with `lib/clock.lua` and `lib/common.lua` in front.
pub(crate) const HOLDS_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/common.lua"),
    include_str!("../scripts/holds.lua")
);
pub(crate) const PROCLAIM_LUA: &str = include_str!("../scripts/proclaim.lua");
/// `multi_acquire.lua` with `lib/clock.lua` and `lib/fence.lua` in front.
pub(crate) const MULTI_ACQUIRE_LUA: &str = concat!(
    include_str!("../scripts/lib/clock.lua"),
    include_str!("../scripts/lib/fence.lua"),
    include_str!("../scripts/multi_acquire.lua")
);

/// One attempt to take a lock (or join its FIFO queue).
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));

/// Compare-and-delete, then hand-off to the oldest live waiter; also withdraws a waiter.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));

/// Compare-and-PEXPIRE.
pub(crate) static LOCK_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(LOCK_EXTEND_LUA));

/// Compare-and-PEXPIRE of many leases in one call, for the renewal scheduler.
pub(crate) static LOCK_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(LOCK_RENEW_LUA));

/// Raise a quorum node's fencing counter to the token handed out (never lower it).
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| Script::new(RAISE_FENCE_LUA));

/// Write a resource's value only for a fencing token not older than the last accepted.
pub(crate) static FENCED_SET: LazyLock<Script> = LazyLock::new(|| Script::new(FENCED_SET_LUA));

/// One attempt to take a semaphore's permit (or join its FIFO queue).
pub(crate) static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_ACQUIRE_LUA));

/// Gives a permit back, handing it to the oldest live waiter; also withdraws a waiter.
pub(crate) static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_RELEASE_LUA));

/// Changes a semaphore's permit count, handing newly free permits to its waiters.
pub(crate) static SEM_RESIZE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_RESIZE_LUA));

/// One attempt to take a read-write lock for reading or writing (or join its queue).
pub(crate) static RW_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_ACQUIRE_LUA));

/// Gives a read or write hold back, granting the queue's head as far as it fits.
pub(crate) static RW_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_RELEASE_LUA));

/// Turns a write hold into a read hold, atomically, and lets queued readers in.
pub(crate) static RW_DOWNGRADE: LazyLock<Script> = LazyLock::new(|| Script::new(RW_DOWNGRADE_LUA));

/// Extends one lease kept as a ZSET score (a permit, a read or write hold).
pub(crate) static LEASE_EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_EXTEND_LUA));

/// Extends many leases kept as ZSET scores in one call, for the renewal scheduler.
pub(crate) static LEASE_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(LEASE_RENEW_LUA));

/// Several locks on one node taken at once, all or nothing.
pub(crate) static MULTI_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(MULTI_ACQUIRE_LUA));

/// Who holds a lock now (an election's leader), read-only.
pub(crate) static LEADER: LazyLock<Script> = LazyLock::new(|| Script::new(LEADER_LUA));

/// Whether a lease still holds an owner token, read-only.
pub(crate) static HOLDS: LazyLock<Script> = LazyLock::new(|| Script::new(HOLDS_LUA));

/// One more outstanding count of a latch.
pub(crate) static LATCH_UP: LazyLock<Script> = LazyLock::new(|| Script::new(LATCH_UP_LUA));

/// Counts a latch down, ending (and announcing) its round at zero.
pub(crate) static LATCH_DOWN: LazyLock<Script> = LazyLock::new(|| Script::new(LATCH_DOWN_LUA));

/// What a latch's waiter sees now (after reclaiming expired counts).
pub(crate) static LATCH_CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(LATCH_CHECK_LUA));

/// Arrivals a latch's round expects before anyone counted up.
pub(crate) static LATCH_EXPECT: LazyLock<Script> = LazyLock::new(|| Script::new(LATCH_EXPECT_LUA));

/// Replaces an election leader's note while it leads, and announces it.
pub(crate) static PROCLAIM: LazyLock<Script> = LazyLock::new(|| Script::new(PROCLAIM_LUA));

/// Every script: the loaded script, its file name, and the exact text it was made from.
fn all() -> [(&'static Script, &'static str, &'static str); 22] {
    [
        (&*PROCLAIM, "proclaim.lua", PROCLAIM_LUA),
        (&*LATCH_UP, "latch_up.lua", LATCH_UP_LUA),
        (&*LATCH_DOWN, "latch_down.lua", LATCH_DOWN_LUA),
        (&*LATCH_CHECK, "latch_check.lua", LATCH_CHECK_LUA),
        (&*LATCH_EXPECT, "latch_expect.lua", LATCH_EXPECT_LUA),
        (&*HOLDS, "holds.lua", HOLDS_LUA),
        (&*MULTI_ACQUIRE, "multi_acquire.lua", MULTI_ACQUIRE_LUA),
        (&*LEADER, "leader.lua", LEADER_LUA),
        (&*SEM_ACQUIRE, "sem_acquire.lua", SEM_ACQUIRE_LUA),
        (&*SEM_RELEASE, "sem_release.lua", SEM_RELEASE_LUA),
        (&*SEM_RESIZE, "sem_resize.lua", SEM_RESIZE_LUA),
        (&*RW_ACQUIRE, "rw_acquire.lua", RW_ACQUIRE_LUA),
        (&*RW_RELEASE, "rw_release.lua", RW_RELEASE_LUA),
        (&*RW_DOWNGRADE, "rw_downgrade.lua", RW_DOWNGRADE_LUA),
        (&*LEASE_EXTEND, "lease_extend.lua", LEASE_EXTEND_LUA),
        (&*LEASE_RENEW, "lease_renew.lua", LEASE_RENEW_LUA),
        (&*ACQUIRE, "acquire.lua", ACQUIRE_LUA),
        (&*RELEASE, "release.lua", RELEASE_LUA),
        (&*LOCK_EXTEND, "lock_extend.lua", LOCK_EXTEND_LUA),
        (&*LOCK_RENEW, "lock_renew.lua", LOCK_RENEW_LUA),
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

/// What a script error (a Redis error message naming the script by its SHA1) says the
/// server lacks: the script's file name and the commands named on the failing line, when
/// the server refused a command the script called (an unknown command, or one called with
/// arguments this server does not know). Valkey 9 names no script in that message
/// (`Unknown command called from script script: on @user_script:142.`): the script and
/// its commands are then unknown (`None` and none). `None` for any other error.
pub(crate) fn lacking(text: &str) -> Option<(Option<&'static str>, Vec<&'static str>)> {
    let lower = text.to_ascii_lowercase();
    // Redis: "Unknown Redis command called from (Lua) script"; Valkey: "Unknown command
    // called from script".
    let unknown = lower.contains("unknown") && lower.contains("command called from");
    if !unknown && !lower.contains("wrong number of args calling redis command") {
        return None;
    }
    let Some((_, name, source)) = all()
        .into_iter()
        .find(|(script, _, _)| text.contains(script.get_hash()))
    else {
        // The line number alone does not say which script: many have a call there.
        return Some((None, Vec::new()));
    };
    // Redis 6.2: "@user_script:46: ..."; 7.0 and later: "... on @user_script:46."
    let line = text
        .split("@user_script:")
        .nth(1)
        .map(|rest| {
            rest.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .and_then(|digits| digits.parse::<usize>().ok());
    let commands = line
        .and_then(|n| source.lines().nth(n.checked_sub(1)?))
        .map(commands_on)
        .unwrap_or_default();
    Some((Some(name), commands))
}

/// The command names quoted in the `redis.call(...)` of one script line (`'SPUBLISH'`,
/// `'PUBLISH'`); none when the line calls a command held in a variable.
fn commands_on(line: &'static str) -> Vec<&'static str> {
    let Some(start) = line
        .find("redis.call(")
        .or_else(|| line.find("redis.pcall("))
    else {
        return Vec::new();
    };
    let call = &line[start..];
    let head = call.split(',').next().unwrap_or_default();
    head.split('\'')
        .skip(1)
        .step_by(2)
        .filter(|word| word.len() > 1 && word.bytes().all(|b| b.is_ascii_uppercase()))
        .collect()
}

/// The text of the script whose SHA1 is `sha`, to send with `EVAL` (and load) where a
/// server answered `NOSCRIPT`.
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
    /// `lib/fence.lua` prelude included).
    #[test]
    fn every_source_hashes_to_its_script() {
        for (script, name, _) in all() {
            let text = source(script.get_hash());
            assert!(text.is_some(), "{name}");
            let again = Script::new(text.unwrap_or_default());
            assert_eq!(again.get_hash(), script.get_hash(), "{name}");
        }
    }

    /// Each script's header names the libraries it is sent with, in their order (`Sent as
    /// lib/clock.lua .. lib/fence.lua .. acquire.lua`), as its recipe above puts them in
    /// front; a script sent alone names none.
    #[test]
    fn every_header_names_its_libraries() {
        for (_, name, text) in all() {
            // Each library's text begins with its line "-- lib/<name>: a library, ...".
            let libraries: Vec<String> = text
                .lines()
                .filter_map(|line| line.strip_prefix("-- lib/"))
                .filter_map(|rest| rest.split_once(": a library, not a script"))
                .map(|(library, _)| format!("lib/{library}.lua"))
                .collect();
            // The script's own header, after the libraries: its comment lines, joined.
            let stem = name.trim_end_matches(".lua");
            let start = text
                .match_indices(&format!("-- {stem}:"))
                .map(|(at, _)| at)
                .find(|&at| at == 0 || text[..at].ends_with('\n'));
            assert!(start.is_some(), "{name} does not begin with `-- {stem}:`");
            let header = text[start.unwrap_or_default()..]
                .lines()
                .filter_map(|line| line.strip_prefix("--"))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let named: Vec<String> = match header.split_once("Sent as ") {
                Some((_, rest)) => rest
                    .split(" .. ")
                    .take_while(|part| !part.starts_with(name))
                    .map(str::to_owned)
                    .collect(),
                None => Vec::new(),
            };
            assert_eq!(named, libraries, "{name}: its header's `Sent as` line");
        }
    }
}

#[cfg(test)]
mod lacking_tests {
    use super::*;

    /// The first line of `acquire.lua`'s text (its preludes in front) that calls
    /// `SPUBLISH` or `PUBLISH`, 1-based as Redis counts.
    fn publish_line() -> usize {
        ACQUIRE_LUA
            .lines()
            .position(|l| l.contains("redis.call(sharded and 'SPUBLISH' or 'PUBLISH'"))
            .map_or(0, |i| i + 1)
    }

    /// Each server's wording of a command a script called that it does not know names the
    /// script and the commands on the failing line; other errors are not taken for it.
    #[test]
    fn every_servers_unknown_command_is_read() {
        let sha = ACQUIRE.get_hash();
        let n = publish_line();
        let redis62 = format!(
            "Error running script (call to f_{sha}): @user_script:{n}: @user_script: {n}: Unknown Redis command called from Lua script"
        );
        let redis70 =
            format!("Unknown Redis command called from script script: {sha}, on @user_script:{n}.");
        let valkey =
            format!("Unknown command called from script script: {sha}, on @user_script:{n}.");
        for text in [redis62, redis70, valkey] {
            assert_eq!(
                lacking(&text),
                Some((Some("acquire.lua"), vec!["SPUBLISH", "PUBLISH"])),
                "{text}"
            );
        }
        // Valkey 9.1.2 names no script: still a command the server lacks.
        let valkey9 = format!("Unknown command called from script script: on @user_script:{n}.");
        assert_eq!(lacking(&valkey9), Some((None, Vec::new())), "{valkey9}");
        let wrongtype = format!(
            "Error running script (call to f_{sha}): @user_script:{n}: WRONGTYPE Operation against a key"
        );
        assert_eq!(lacking(&wrongtype), None);
    }
}
