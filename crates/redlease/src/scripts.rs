//! One typed call per Lua script: the one place that lays out each script's KEYS and
//! ARGV (the scripts themselves are in `crate::lua`, their replies are parsed in
//! `crate::replies`).

use redis::{Cmd, Pipeline, ScriptInvocation};

use crate::keys::LockKeys;
use crate::lua::{ACQUIRE, FENCED_SET, RAISE_FENCE, RELEASE};
pub(crate) use crate::lua::{EXTEND, RENEW};

/// The arguments of one acquisition attempt.
pub(crate) struct AcquireArgs<'a> {
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) holder: &'a str,
    /// Join the FIFO queue when busy: the grant channel and the queue keys' expiry in ms.
    pub(crate) queue: Option<(&'a str, u64)>,
}

/// One lease for the renewal scheduler.
pub(crate) struct RenewItem<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
}

/// Leases per `renew.lua` call in a renewal round trip (each touches 2 keys).
pub(crate) const BATCH: usize = 500;

/// `acquire.lua`: one attempt, joining the queue when `args.queue` says so.
pub(crate) fn acquire(keys: &LockKeys, args: &AcquireArgs<'_>) -> ScriptInvocation<'static> {
    let mut invocation = ACQUIRE.key(&keys.script_keys()[..]);
    invocation.arg(args.token).arg(args.ttl_ms).arg(args.holder);
    match args.queue {
        Some((channel, linger_ms)) => invocation.arg("1").arg(channel).arg(linger_ms),
        None => invocation.arg("0"),
    };
    invocation
}

/// `release.lua` for `token`; with `announce`, a lock freed (not handed on) is announced
/// on its release channel.
pub(crate) fn release(keys: &LockKeys, token: &str, announce: bool) -> ScriptInvocation<'static> {
    let mut invocation = RELEASE.key(&keys.script_keys()[..]);
    invocation.arg(token);
    if announce {
        invocation.arg(&keys.channel);
    }
    invocation
}

/// `extend.lua`: the lease of `token` reset to `ttl_ms`.
pub(crate) fn extend(keys: &LockKeys, token: &str, ttl_ms: u64) -> ScriptInvocation<'static> {
    let mut invocation = EXTEND.key(&keys.key);
    invocation.key(&keys.holder).arg(token).arg(ttl_ms);
    invocation
}

/// `extend.lua` as an `EVALSHA` in `pipe` (for a pipeline that follows it with `WAIT`).
pub(crate) fn push_extend(pipe: &mut Pipeline, keys: &LockKeys, token: &str, ttl_ms: u64) {
    pipe.cmd("EVALSHA")
        .arg(EXTEND.get_hash())
        .arg(2)
        .arg(&keys.key)
        .arg(&keys.holder)
        .arg(token)
        .arg(ttl_ms);
}

/// `renew.lua` for `batch`: one `EVALSHA` per [`BATCH`] leases, in one pipeline.
pub(crate) fn renew(batch: &[RenewItem<'_>]) -> Pipeline {
    let mut pipe = redis::pipe();
    for chunk in batch.chunks(BATCH) {
        let mut cmd = Cmd::new();
        cmd.arg("EVALSHA")
            .arg(RENEW.get_hash())
            .arg(chunk.len() * 2);
        for item in chunk {
            cmd.arg(&item.keys.key).arg(&item.keys.holder);
        }
        for item in chunk {
            cmd.arg(item.token).arg(item.ttl_ms);
        }
        pipe.add_command(cmd);
    }
    pipe
}

/// `raise_fence.lua`: a quorum node's counter raised to `fence` while the lock holds
/// `token`.
pub(crate) fn raise_fence(keys: &LockKeys, fence: u64, token: &str) -> ScriptInvocation<'static> {
    let mut invocation = RAISE_FENCE.key(&keys.fence);
    invocation.key(&keys.key).arg(fence).arg(token);
    invocation
}

/// `fenced_set.lua`: `value` written at `key` for fencing token `token`, the last
/// accepted token kept at `fence`.
pub(crate) fn fenced_set(
    key: &str,
    fence: &str,
    token: u64,
    value: impl redis::ToRedisArgs,
) -> ScriptInvocation<'static> {
    let mut invocation = FENCED_SET.key(key);
    invocation.key(fence).arg(token).arg(value);
    invocation
}
