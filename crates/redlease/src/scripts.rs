//! One typed call per Lua script: the one place that lays out each script's KEYS and
//! ARGV (the scripts themselves are in `crate::lua`, their replies are parsed in
//! `crate::replies`). A lease's [`Kind`] picks its primitive's row (`crate::rows`): its
//! scripts and key layouts.

use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, RedisResult, Script, ToRedisArgs, Value};

use crate::keys::{LockKeys, Primitive};
pub(crate) use crate::lua::LOCK_EXTEND;
use crate::lua::{
    FENCED_SET, HOLDS, LATCH_CHECK, LATCH_EXPECT, LEADER, LEASE_RENEW, LOCK_RENEW, MULTI_ACQUIRE,
    PROCLAIM, RAISE_FENCE, RW_DOWNGRADE, SEM_RESIZE,
};
use crate::script_args::{self as args, Args};

/// What a lease is a lease on: which scripts take, give back and renew it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A lock (mutual exclusion).
    Mutex,
    /// An election's lock: a lock whose grants and hand-offs are announced on its
    /// channel, for the election's observers.
    Leader,
    /// `weight` permits (one lease) of a semaphore of `permits`.
    Permit {
        /// The semaphore's permit count.
        permits: u32,
        /// How many of them the lease counts for (1 to `permits`).
        weight: u32,
    },
    /// A read hold of a read-write lock.
    Read,
    /// A write hold of a read-write lock.
    Write,
    /// One outstanding count of a latch.
    Count,
}

impl Kind {
    /// Whether the lease is a lock's (the key holds the owner token).
    pub(crate) fn is_lock(self) -> bool {
        matches!(self, Self::Mutex | Self::Leader)
    }

    /// Whether a lease of this kind covers an acquisition of `asked` by the same owner
    /// (which re-enters it): the same kind; a write hold covers a read; a lease of more
    /// permits of the same semaphore covers one of fewer.
    pub(crate) fn covers(self, asked: Self) -> bool {
        match (self, asked) {
            (
                Self::Permit {
                    permits,
                    weight: held,
                },
                Self::Permit {
                    permits: wanted,
                    weight,
                },
            ) => permits == wanted && held >= weight,
            (Self::Write, Self::Read) => true,
            (held, asked) => held == asked,
        }
    }

    /// The word for a lease of this kind, the same in metrics' `kind` label, tracing spans,
    /// lease handles and the Python binding: `lock`, `election`, `semaphore`, `read`,
    /// `write` or `latch`.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Self::Mutex => "lock",
            Self::Leader => "election",
            Self::Permit { .. } => "semaphore",
            Self::Read => "read",
            Self::Write => "write",
            Self::Count => "latch",
        }
    }

    /// The row of the primitive whose lease this is: its scripts and key layouts.
    pub(crate) fn row(self) -> &'static crate::rows::Row {
        crate::rows::row(self.primitive())
    }

    /// The primitive whose lease this is (its keys).
    pub(crate) fn primitive(self) -> Primitive {
        match self {
            Self::Mutex | Self::Leader => Primitive::Lock,
            Self::Permit { .. } => Primitive::Semaphore,
            Self::Read | Self::Write => Primitive::RwLock,
            Self::Count => Primitive::Latch,
        }
    }
}

/// How the scripts tell waiters (and an election's observers) that a lease changed hands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notices {
    /// No release notices: waiters are handed the lease (a single Redis, Sentinel). An
    /// election's changes are still announced, by `PUBLISH`.
    Off,
    /// Release notices by `PUBLISH` on the lease's channel (a quorum's nodes).
    Publish,
    /// Release notices, announcements and hand-off grants by `SPUBLISH` (Redis Cluster):
    /// every channel carries the lease's hash tag, so each message stays in the shard that
    /// owns the lease's slot instead of crossing the whole cluster bus.
    Sharded,
}

impl Notices {
    /// Whether a freed lease is announced on its channel.
    pub(crate) fn on(self) -> bool {
        self != Self::Off
    }

    /// The scripts' flag argument choosing `SPUBLISH`, when they must use it.
    fn flag(self) -> Option<&'static str> {
        (self == Self::Sharded).then_some("S")
    }
}

/// The arguments of one acquisition attempt.
pub(crate) struct AcquireArgs<'a> {
    pub(crate) kind: Kind,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) holder: &'a str,
    /// Whether to join the FIFO queue when busy.
    pub(crate) join: Join<'a>,
    /// The fencing clock's step in µs (`fence.lua`): 1, or [`QUORUM_FENCE_STEP`] on a
    /// quorum's nodes. Only the lock's own script (`acquire.lua`) takes it.
    pub(crate) fence_step: u64,
    /// How the deployment's scripts publish (an election's announcement, a silent place's
    /// wake-up).
    pub(crate) notices: Notices,
    /// How long a grant keeps the fencing counter past the clock, in ms as sent
    /// (`Deployment::fence_keep`): `None` for the scripts' default.
    pub(crate) fence_keep: Option<&'a str>,
}

/// The fencing clock's step on a quorum's nodes: 10 ms, so that the nodes asked by one
/// attempt (which answer within well under that) grant the same token and no write-back
/// round trip is needed (see `backend::quorum`); a node that lost its counter must stay
/// down that much longer than the skew between the nodes' clocks.
pub(crate) const QUORUM_FENCE_STEP: u64 = 10_000;

/// Whether and how an attempt that finds its name busy joins the FIFO queue. The scripts
/// take it as their mode (`acquire.lua`'s ARGV[4], `sem_acquire.lua`'s and
/// `rw_acquire.lua`'s ARGV[5]), by the variant's name: "no", "leave", "grants" (or
/// "grants-first"), "silent" (or "silent-first"), "listen"; the semaphore's and read-write
/// lock's scripts know no "leave" or "listen" and are sent "no" for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Join<'a> {
    /// Only try.
    No,
    /// Only try, and withdraw a place this token may hold (a lock's script, when it takes
    /// the lock; the semaphore's and read-write lock's serve a caller's own place anyway).
    Leave,
    /// Queue for a hand-off on this client's grant `channel`; the queue keys live
    /// `linger_ms` past the last arrival. `first`: the acquisition's first attempt, whose
    /// fresh token cannot be queued yet (the script then skips withdrawing it when it
    /// takes the lease: one Redis call fewer on the uncontended path).
    Grants {
        channel: &'a str,
        linger_ms: u64,
        first: bool,
    },
    /// Keep a place without a grant channel (read-write locks where no hand-off can reach
    /// the waiter): the waiter comes back for the lock itself (woken by release notices on
    /// a Cluster, by its own re-checks elsewhere); the place is dropped when it has not
    /// come back for `stale_ms`. `first` as for `Grants`.
    Silent {
        linger_ms: u64,
        stale_ms: u64,
        first: bool,
    },
    /// Only try, but mark the queue when busy (a lock's waiter that listens for release
    /// notices: Cluster, quorum), so that the release announces; the mark lives
    /// `linger_ms`. A release with nothing queued or marked announces nothing.
    Listen { linger_ms: u64 },
}

/// One lease for the renewal scheduler.
pub(crate) struct RenewItem<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) kind: Kind,
    pub(crate) token: &'a str,
    pub(crate) ttl_ms: u64,
    /// A lock's holder details' new expiry in ms, when this renewal keeps them too.
    pub(crate) details_ms: Option<u64>,
}

/// Leases per renewal script call in a renewal round trip (each touches 2 or 3 keys).
pub(crate) const BATCH: usize = 500;

/// Room for a call's arguments besides its keys: the `EVALSHA` header and a few values.
const CALL_ARGS_BYTES: usize = 320;

/// One script call: its `EVALSHA` written straight into one command (keys, then
/// arguments). Built once per call, sent as is: no intermediate copy of the keys and
/// arguments (redis-rs' `ScriptInvocation` keeps them apart and copies them into a new
/// command on every send). A `NOSCRIPT` reply is answered by [`EvalOnNoscript`], which
/// finds the script's text by the SHA1 in the command.
pub(crate) struct Call {
    cmd: Cmd,
    /// The script's arguments by name, and how many were set (see `set`).
    args: Args,
    set: usize,
}

impl Call {
    fn new(script: &'static Script, args: Args, keys: &[&str]) -> Self {
        // Sized once for the keys and a few arguments (tokens, channels, holder details):
        // growing the command argument by argument reallocated several times per call.
        let bytes = keys.iter().map(|k| k.len()).sum::<usize>() + CALL_ARGS_BYTES;
        let mut cmd = Cmd::with_capacity(keys.len() + 12, bytes);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys);
        Self { cmd, args, set: 0 }
    }

    /// Sets the next argument, `name` (checked against the script's declaration in debug
    /// builds: a slot sent in the wrong place fails the tests).
    fn set<T: ToRedisArgs>(&mut self, name: &'static str, arg: T) -> &mut Self {
        debug_assert_eq!(
            self.args.names.get(self.set).copied(),
            Some(name),
            "{}: ARGV[{}] is not `{name}`",
            self.args.file,
            self.set + 1
        );
        self.set += 1;
        self.cmd.arg(arg);
        self
    }

    /// Sets a granting script's `fence_keep` (its last argument: how long a grant keeps
    /// the fencing counter past the clock, in ms), the slots before it sent empty; nothing
    /// for `None` (the scripts' default, `FENCE_KEEP_MS` in `lib/fence.lua`: the common
    /// case costs no argument) or for a script that grants nothing (`latch_down.lua`, a
    /// latch's release).
    fn fence_keep(&mut self, keep: Option<&str>) -> &mut Self {
        let Some(keep) = keep else {
            return self;
        };
        if !self.args.names.contains(&"fence_keep") {
            return self;
        }
        while let Some(&name) = self.args.names.get(self.set) {
            if name == "fence_keep" {
                break;
            }
            self.set(name, "");
        }
        self.set("fence_keep", keep)
    }

    /// Sends the call on `conn`; on `NOSCRIPT` (a server that restarted, failed over, had
    /// its script cache flushed, or never saw the script) it runs anyway, as
    /// [`EvalOnNoscript`] says.
    pub(crate) async fn invoke_async<T: FromRedisValue, C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> RedisResult<T> {
        self.cmd.query_async(&mut EvalOnNoscript(conn)).await
    }
}

/// `conn`, on which a call of one of our scripts refused with `NOSCRIPT` runs anyway: it is
/// sent again at once as `EVAL` with the script's text (found by its SHA1 in
/// `crate::lua`), which cannot meet `NOSCRIPT`, in one round trip with a `SCRIPT LOAD` of
/// that text so that later calls find the script under its SHA1 again. (An ACL user
/// without `+eval` is sent the `EVALSHA` again after the load instead.)
///
/// Loading the script and then sending the `EVALSHA` again (redis-rs' way) never gets
/// through while the cache is flushed more often than a round trip: each reload is gone
/// before the retry arrives. Every `EVALSHA` of ours is sent through this rule: a
/// [`Call`] and a pipeline of them (`Node::pipeline`: renewals, an extend followed by
/// `WAIT`), on every deployment.
///
/// On a cluster the pipeline goes to the node of its first keyed command, the `EVAL`'s, so
/// the script is loaded on that one node only: a keyless `SCRIPT LOAD` sent alone would go
/// to every primary and wait for all of them (one silent primary would then stall the
/// calls on the healthy ones until the response timeout).
pub(crate) struct EvalOnNoscript<'c, C: ?Sized>(pub(crate) &'c mut C);

impl<C: ConnectionLike + Send + ?Sized> ConnectionLike for EvalOnNoscript<'_, C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let reply = self.0.req_packed_command(cmd).await;
            let refused = match &reply {
                Err(e) => e.code() == Some("NOSCRIPT"),
                Ok(value) => is_noscript(value),
            };
            if !refused {
                return reply;
            }
            match again_as_eval(&mut *self.0, &[cmd]).await {
                Some(again) => again?.pop().ok_or_else(|| {
                    redis::RedisError::from((
                        redis::ErrorKind::UnexpectedReturnType,
                        "no reply to a script call sent again as EVAL",
                    ))
                }),
                None => reply,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipe: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut values = self.0.req_packed_commands(pipe, offset, count).await?;
            // Replies match the commands one to one only outside a transaction (ours
            // never hold a script call).
            if pipe.is_transaction() || offset != 0 || values.len() != pipe.len() {
                return Ok(values);
            }
            let (refused, cmds): (Vec<usize>, Vec<&Cmd>) = pipe
                .cmd_iter()
                .zip(&values)
                .enumerate()
                .filter(|(_, (_, value))| is_noscript(value))
                .map(|(i, (cmd, _))| (i, cmd))
                .unzip();
            if refused.is_empty() {
                return Ok(values);
            }
            // Only the refused calls are sent again: the others ran.
            if let Some(again) = again_as_eval(&mut *self.0, &cmds).await {
                for (i, value) in refused.into_iter().zip(again?) {
                    if let Some(slot) = values.get_mut(i) {
                        *slot = value;
                    }
                }
            }
            Ok(values)
        })
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

fn is_noscript(value: &Value) -> bool {
    matches!(value, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// [`EvalOnNoscript`]'s second round trip: `refused` (`EVALSHA`s of our scripts) as
/// `EVAL`s, then a `SCRIPT LOAD` of each script among them; the `EVAL`s' replies, in order.
/// `None` (nothing sent) when one of them is not a call of one of our scripts.
async fn again_as_eval<C: ConnectionLike + ?Sized>(
    conn: &mut C,
    refused: &[&Cmd],
) -> Option<RedisResult<Vec<Value>>> {
    let mut pipe = redis::pipe();
    let mut texts: Vec<&'static str> = Vec::new();
    for cmd in refused {
        let (eval, text) = as_eval(cmd)?;
        pipe.add_command(eval);
        if !texts.iter().any(|t| std::ptr::eq(*t, text)) {
            texts.push(text);
        }
    }
    for text in &texts {
        pipe.cmd("SCRIPT").arg("LOAD").arg(*text);
    }
    let mut values = match conn.req_packed_commands(&pipe, 0, pipe.len()).await {
        Ok(values) => values,
        Err(e) => return Some(Err(e)),
    };
    let loads = values.split_off(refused.len().min(values.len()));
    for load in loads {
        // The calls ran anyway: a failed load only costs the next call an `EVAL` too.
        if let Value::ServerError(e) = load {
            tracing::debug!(code = e.code(), details = ?e.details(), "could not load a script again after NOSCRIPT");
        }
    }
    // An ACL user without `+eval` (the least-privilege line of earlier versions) is
    // refused the `EVAL`s, not the loads: the scripts were loaded by this very round trip,
    // so their `EVALSHA`s are sent again, as before there was an `EVAL`.
    let denied: Vec<usize> = values
        .iter()
        .enumerate()
        .filter(|(_, value)| matches!(value, Value::ServerError(e) if e.code() == "NOPERM"))
        .map(|(i, _)| i)
        .collect();
    if !denied.is_empty() {
        tracing::debug!("EVAL refused by the ACL after NOSCRIPT; sending EVALSHA again");
        let mut again = redis::pipe();
        for cmd in denied.iter().filter_map(|&i| refused.get(i)) {
            again.add_command((*cmd).clone());
        }
        match conn.req_packed_commands(&again, 0, again.len()).await {
            Ok(answers) => {
                for (&i, answer) in denied.iter().zip(answers) {
                    if let Some(slot) = values.get_mut(i) {
                        *slot = answer;
                    }
                }
            }
            Err(e) => return Some(Err(e)),
        }
    }
    Some(Ok(values))
}

/// `EVALSHA <sha> <numkeys> ...` of one of our scripts as `EVAL <text> <numkeys> ...`, with
/// the script's text.
fn as_eval(cmd: &Cmd) -> Option<(Cmd, &'static str)> {
    let mut args = cmd.args_iter();
    let redis::Arg::Simple(name) = args.next()? else {
        return None;
    };
    if !name.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let redis::Arg::Simple(sha) = args.next()? else {
        return None;
    };
    let text = crate::lua::source(std::str::from_utf8(sha).ok()?)?;
    let mut eval = Cmd::with_capacity(cmd.args_iter().count(), text.len() + CALL_ARGS_BYTES);
    eval.arg("EVAL").arg(text);
    for arg in args {
        let redis::Arg::Simple(arg) = arg else {
            return None;
        };
        eval.arg(arg);
    }
    Some((eval, text))
}

/// `script` with the keys of `kind`'s primitive, in its scripts' order.
fn with_keys(script: &'static Script, args: Args, keys: &LockKeys, kind: Kind) -> Call {
    Call::new(script, args, (kind.row().script_keys)(keys).as_slice())
}

/// The release channel and how to publish on it, as every latch script ends its ARGV:
/// a latch's waiters listen on every deployment, so its scripts always announce.
fn latch_notices(invocation: &mut Call, keys: &LockKeys, notices: Notices) {
    invocation
        .set("channel", &keys.channel)
        .set("sharded", notices.flag().unwrap_or(""));
}

/// The release channel and how to publish on it (`channel`, `sharded`), for a script
/// that announces only where releases are announced at all (`notices` on).
fn announce_when_on(invocation: &mut Call, keys: &LockKeys, notices: Notices) {
    if notices.on() {
        invocation.set("channel", &keys.channel);
        if let Some(flag) = notices.flag() {
            invocation.set("sharded", flag);
        }
    }
}

/// `latch_check.lua`: what a latch's waiter sees, `seen` the round it saw open on its
/// previous check (`None`: its first check).
pub(crate) fn latch_check(keys: &LockKeys, seen: Option<u64>, notices: Notices) -> Call {
    let mut invocation = with_keys(&LATCH_CHECK, args::LATCH_CHECK, keys, Kind::Count);
    match seen {
        Some(round) => invocation.set("seen", round),
        None => invocation.set("seen", ""),
    };
    latch_notices(&mut invocation, keys, notices);
    invocation
}

/// `latch_expect.lua`: `n` more arrivals expected by the open round (`only_idle`: only
/// when no round is open).
pub(crate) fn latch_expect(keys: &LockKeys, n: u64, only_idle: bool, notices: Notices) -> Call {
    let mut invocation = with_keys(&LATCH_EXPECT, args::LATCH_EXPECT, keys, Kind::Count);
    invocation
        .set("n", n)
        .set("only_idle", if only_idle { "1" } else { "" });
    latch_notices(&mut invocation, keys, notices);
    invocation
}

/// One acquisition attempt (`acquire.lua`, `sem_acquire.lua`, `rw_acquire.lua`), joining
/// the queue when `args.queue` says so.
pub(crate) fn acquire(keys: &LockKeys, args: &AcquireArgs<'_>) -> Call {
    let (script, declared) = args.kind.row().acquire;
    let mut invocation = with_keys(script, declared, keys, args.kind);
    invocation
        .set("token", args.token)
        .set("ttl", args.ttl_ms)
        .set("holder", args.holder);
    if args.kind == Kind::Count {
        // A latch is never busy: no queue, nothing to join.
        latch_notices(&mut invocation, keys, args.notices);
        invocation.fence_keep(args.fence_keep);
        return invocation;
    }
    let lock = args.kind.is_lock();
    match args.kind {
        Kind::Mutex | Kind::Leader | Kind::Count => {}
        Kind::Permit { permits, .. } => {
            invocation.set("permits", permits);
        }
        Kind::Read => {
            invocation.set("side", "read");
        }
        Kind::Write => {
            invocation.set("side", "write");
        }
    }
    match args.join {
        Join::Grants {
            channel,
            linger_ms,
            first,
        } => {
            let mode = if first { "grants-first" } else { "grants" };
            invocation
                .set("mode", mode)
                .set("channel", channel)
                .set("linger", linger_ms);
        }
        Join::Silent {
            linger_ms,
            stale_ms,
            first,
        } => {
            invocation
                .set("mode", if first { "silent-first" } else { "silent" })
                .set("channel", &keys.channel)
                .set("linger", linger_ms)
                .set("stale", stale_ms);
            // rw_acquire.lua's `sharded` (the other scripts do not keep silent places).
            if let Some(flag) = args.notices.flag() {
                invocation.set("sharded", flag);
            }
        }
        Join::Listen { linger_ms } if lock => {
            invocation
                .set("mode", "listen")
                .set("channel", "")
                .set("linger", linger_ms);
        }
        Join::Leave if lock => {
            invocation.set("mode", "leave");
        }
        Join::No | Join::Leave | Join::Listen { .. } => {
            invocation.set("mode", "no");
        }
    }
    // sem_acquire.lua's `take`: the permits asked, sent only when more than one (the
    // join arguments before it padded when the attempt does not queue).
    if let Kind::Permit { weight, .. } = args.kind
        && weight > 1
    {
        if !matches!(args.join, Join::Grants { .. }) {
            invocation.set("channel", "").set("linger", "");
        }
        invocation.set("take", weight);
    }
    // A Cluster's hand-offs from an attempt are SPUBLISHed (ARGV[8]).
    let sharded = args.notices.flag().is_some();
    if lock && (args.kind == Kind::Leader || args.fence_step > 1 || sharded) {
        if matches!(args.join, Join::No | Join::Leave) {
            invocation.set("channel", "").set("linger", 0);
        }
        // `announce`: the channel a fresh grant is announced on ("": none); `sharded` how
        // ("S": SPUBLISH); `fence_step` the fencing clock's step.
        if args.kind == Kind::Leader {
            invocation.set("announce", &keys.channel);
        } else {
            invocation.set("announce", "");
        }
        invocation.set("sharded", args.notices.flag().unwrap_or(""));
        if args.fence_step > 1 {
            invocation.set("fence_step", args.fence_step);
        }
    }
    invocation.fence_keep(args.fence_keep);
    invocation
}

/// The release script of `kind` for `token` (also withdraws it from the queue); with
/// `notices` on, a lease freed (not handed on) is announced on the release channel, and
/// with [`Notices::Sharded`] every message of the script (grants included) is an
/// `SPUBLISH`. `own`, the releasing client's grant channel for the lease: a lease handed to
/// a waiter listening there is granted for its whole ttl (every release script's ARGV[5]);
/// the reply reports every hand-off the run made. `fence_keep` as [`AcquireArgs`]'s (a
/// release's hand-off grants).
pub(crate) fn release(
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    notices: Notices,
    own: Option<&str>,
    fence_keep: Option<&str>,
) -> Call {
    let mut invocation = release_args(keys, kind, token, notices, own);
    invocation.fence_keep(fence_keep);
    invocation
}

/// [`release`]'s arguments up to `own`.
fn release_args(
    keys: &LockKeys,
    kind: Kind,
    token: &str,
    notices: Notices,
    own: Option<&str>,
) -> Call {
    let (script, _, declared) = kind.row().release;
    let mut invocation = with_keys(script, declared, keys, kind);
    invocation.set("token", token);
    if kind == Kind::Count {
        latch_notices(&mut invocation, keys, notices);
        return invocation;
    }
    let weight = match kind {
        Kind::Permit { weight, .. } => weight,
        _ => 1,
    };
    let channel = if kind == Kind::Leader || notices.on() {
        keys.channel.as_str()
    } else {
        ""
    };
    if let Some(own) = own {
        // Every release script's ARGV[2] to ARGV[5], every slot sent: the release channel,
        // release.lua's announcement flag or the SPUBLISH flag, and so on as each script's
        // header says, then the releasing client's grant channel.
        if kind.is_lock() {
            invocation
                .set("channel", channel)
                .set("announce", if kind == Kind::Leader { "1" } else { "0" })
                .set("sharded", notices.flag().unwrap_or(""));
        } else {
            // sem_release.lua's weight (rw_release.lua's `unused`) in ARGV[4].
            let fourth = if kind == Kind::Read || kind == Kind::Write {
                "unused"
            } else {
                "weight"
            };
            invocation
                .set("channel", channel)
                .set("sharded", notices.flag().unwrap_or(""))
                .set(fourth, weight);
        }
        invocation.set("own", own);
        return invocation;
    }
    if weight > 1 {
        // sem_release.lua's `weight`: the permits of a lease taken as several, after the
        // optional channel and flag (sent empty when unused).
        invocation
            .set("channel", channel)
            .set("sharded", notices.flag().unwrap_or(""))
            .set("weight", weight);
        return invocation;
    }
    if kind == Kind::Leader {
        // Every change of leader is announced, hand-offs included.
        invocation
            .set("channel", &keys.channel)
            .set("announce", "1");
    } else if notices.on() {
        invocation.set("channel", &keys.channel);
        if kind.is_lock() && notices.flag().is_some() {
            // release.lua's `announce`: no announcement after a hand-off.
            invocation.set("announce", "0");
        }
    }
    if let Some(flag) = notices.flag() {
        invocation.set("sharded", flag);
    }
    invocation
}

/// `multi_acquire.lua`: every lock of `keys` (on one node) for `token`, all or nothing;
/// `fence_keep` as [`AcquireArgs`]'s.
pub(crate) fn acquire_all(
    keys: &[&LockKeys],
    token: &str,
    ttl_ms: u64,
    holder: &str,
    fence_keep: Option<&str>,
) -> Call {
    let names: Vec<&str> = keys
        .iter()
        .flat_map(|k| [k.key.as_str(), &k.fence, &k.holder])
        .collect();
    let mut invocation = Call::new(&MULTI_ACQUIRE, args::MULTI_ACQUIRE, &names);
    invocation
        .set("token", token)
        .set("ttl", ttl_ms)
        .set("holder", holder)
        .fence_keep(fence_keep);
    invocation
}

/// `leader.lua`: who holds the lock at `keys` now, with the term recorded for it.
pub(crate) fn leader(keys: &LockKeys) -> Call {
    Call::new(
        &LEADER,
        args::LEADER,
        &[&keys.key, &keys.fence, &keys.holder, &keys.term],
    )
}

/// `proclaim.lua`: the note of the leader holding `token` at `keys` replaced by `note`
/// (`fence` written in front of it where the holder details key has none), and the change
/// announced on the election's channel as `notices` says (`SPUBLISH` for
/// [`Notices::Sharded`], else `PUBLISH`: an election's changes are always announced).
pub(crate) fn proclaim(
    keys: &LockKeys,
    token: &str,
    note: &str,
    fence: u64,
    notices: Notices,
) -> Call {
    let mut invocation = Call::new(&PROCLAIM, args::PROCLAIM, &[&keys.key, &keys.holder]);
    invocation
        .set("token", token)
        .set("note", note)
        .set("fence", fence)
        .set("channel", &keys.channel);
    if let Some(flag) = notices.flag() {
        invocation.set("sharded", flag);
    }
    invocation
}

/// `holds.lua`: whether the lease of `kind` at `keys` holds `token` now.
pub(crate) fn holds(keys: &LockKeys, kind: Kind, token: &str) -> Call {
    let (key, layout): (&str, _) = if kind.is_lock() {
        (&keys.key, "lock")
    } else {
        (lease_keys(keys, kind)[0], "zset")
    };
    let mut invocation = Call::new(&HOLDS, args::HOLDS, &[key]);
    invocation.set("token", token).set("layout", layout);
    invocation
}

/// The file name of `kind`'s release script, for messages.
pub(crate) fn release_name(kind: Kind) -> &'static str {
    kind.row().release.1
}

/// `rw_downgrade.lua`: `token`'s write hold turned into a read hold (readers let in are
/// granted: `fence_keep` as [`AcquireArgs`]'s).
pub(crate) fn downgrade(
    keys: &LockKeys,
    token: &str,
    notices: Notices,
    fence_keep: Option<&str>,
) -> Call {
    let mut invocation = with_keys(&RW_DOWNGRADE, args::RW_DOWNGRADE, keys, Kind::Read);
    invocation.set("token", token);
    announce_when_on(&mut invocation, keys, notices);
    invocation.fence_keep(fence_keep);
    invocation
}

/// `sem_resize.lua`: the semaphore at `keys` set to `permits`, kept at least `keep_ms`;
/// with `notices` on, permits left free after its queue is served are announced on the
/// release channel (`SPUBLISH` for [`Notices::Sharded`]); `fence_keep` as
/// [`AcquireArgs`]'s (its queue's waiters are granted).
pub(crate) fn resize(
    keys: &LockKeys,
    permits: u32,
    keep_ms: u64,
    notices: Notices,
    fence_keep: Option<&str>,
) -> Call {
    let kind = Kind::Permit { permits, weight: 1 };
    let mut invocation = with_keys(&SEM_RESIZE, args::SEM_RESIZE, keys, kind);
    invocation.set("permits", permits).set("keep", keep_ms);
    announce_when_on(&mut invocation, keys, notices);
    invocation.fence_keep(fence_keep);
    invocation
}

/// The three keys `lease_extend.lua` and `lease_renew.lua` take for a lease of `kind`.
fn lease_keys(keys: &LockKeys, kind: Kind) -> [&str; 3] {
    (kind.row().lease_keys)(keys)
}

/// The extend script of `kind`: the lease of `token` reset to `ttl_ms` (`lock_extend.lua`
/// takes the first two of the lease keys).
pub(crate) fn extend(keys: &LockKeys, kind: Kind, token: &str, ttl_ms: u64) -> Call {
    let (script, _, declared) = kind.row().extend;
    let lease_keys = lease_keys(keys, kind);
    let used = if kind.is_lock() { 2 } else { 3 };
    let mut invocation = Call::new(script, declared, &lease_keys[..used]);
    invocation.set("token", token).set("ttl", ttl_ms);
    invocation
}

/// The file name of `kind`'s extend script, for messages.
pub(crate) fn extend_name(kind: Kind) -> &'static str {
    kind.row().extend.1
}

/// `lock_extend.lua` as an `EVALSHA` in `pipe` (for a pipeline that follows it with `WAIT`).
pub(crate) fn push_extend(pipe: &mut Pipeline, keys: &LockKeys, token: &str, ttl_ms: u64) {
    pipe.cmd("EVALSHA")
        .arg(LOCK_EXTEND.get_hash())
        .arg(2)
        .arg(&keys.key)
        .arg(&keys.holder)
        .arg(token)
        .arg(ttl_ms);
}

// The per-lease arguments `renew` pushes: `lock_renew.lua`'s token, ttl and holder details'
// ttl, `lease_renew.lua`'s token and ttl (as their declarations say).
const _: () = assert!(args::LOCK_RENEW.names.len() == 3 && args::LEASE_RENEW.names.len() == 2);

/// The renewal calls for `batch`: one `EVALSHA` per [`BATCH`] leases of one script
/// (`lock_renew.lua` for locks, `lease_renew.lua` for the others), in one pipeline; and, for
/// each call in order, the indexes in `batch` of the leases it renews.
pub(crate) fn renew(batch: &[RenewItem<'_>]) -> (Pipeline, Vec<Vec<usize>>) {
    let (locks, others): (Vec<usize>, Vec<usize>) =
        (0..batch.len()).partition(|&i| batch[i].kind.is_lock());
    let mut pipe = redis::pipe();
    let mut calls = Vec::new();
    for (script, indexes) in [(&*LOCK_RENEW, locks), (&*LEASE_RENEW, others)] {
        for chunk in indexes.chunks(BATCH) {
            let mut cmd = Cmd::new();
            let per_lease = if script.get_hash() == LOCK_RENEW.get_hash() {
                2
            } else {
                3
            };
            cmd.arg("EVALSHA")
                .arg(script.get_hash())
                .arg(chunk.len() * per_lease);
            for &i in chunk {
                let item = &batch[i];
                if item.kind.is_lock() {
                    cmd.arg(&item.keys.key).arg(&item.keys.holder);
                } else {
                    cmd.arg(&lease_keys(item.keys, item.kind)[..]);
                }
            }
            for &i in chunk {
                let item = &batch[i];
                cmd.arg(item.token).arg(item.ttl_ms);
                if item.kind.is_lock() {
                    match item.details_ms {
                        Some(ms) => cmd.arg(ms),
                        None => cmd.arg(""),
                    };
                }
            }
            pipe.add_command(cmd);
            calls.push(chunk.to_vec());
        }
    }
    (pipe, calls)
}

/// `raise_fence.lua`: a quorum node's counter raised to `fence` while the lease of `kind`
/// holds `token`; for an election, its term record set to `fence` and `token` too, and
/// announced on its channel. The counter raised is kept `fence_keep` past the clock (as
/// [`AcquireArgs`]'s).
pub(crate) fn raise_fence(
    keys: &LockKeys,
    kind: Kind,
    fence: u64,
    token: &str,
    fence_keep: Option<&str>,
) -> Call {
    let mut invocation = raise_fence_args(keys, kind, fence, token);
    invocation.fence_keep(fence_keep);
    invocation
}

/// [`raise_fence`]'s arguments up to `zset_or_channel`.
fn raise_fence_args(keys: &LockKeys, kind: Kind, fence: u64, token: &str) -> Call {
    match kind {
        Kind::Leader => {
            let mut invocation = Call::new(
                &RAISE_FENCE,
                args::RAISE_FENCE,
                &[&keys.fence, &keys.key, &keys.holder, &keys.term],
            );
            invocation
                .set("fence", fence)
                .set("token", token)
                .set("zset_or_channel", &keys.channel);
            invocation
        }
        Kind::Read | Kind::Write | Kind::Count => {
            let mut invocation =
                Call::new(&RAISE_FENCE, args::RAISE_FENCE, &[&keys.fence, &keys.extra]);
            invocation
                .set("fence", fence)
                .set("token", token)
                .set("zset_or_channel", "zset");
            invocation
        }
        Kind::Mutex => {
            let mut invocation = Call::new(
                &RAISE_FENCE,
                args::RAISE_FENCE,
                &[&keys.fence, &keys.key, &keys.holder],
            );
            invocation.set("fence", fence).set("token", token);
            invocation
        }
        Kind::Permit { .. } => {
            let mut invocation =
                Call::new(&RAISE_FENCE, args::RAISE_FENCE, &[&keys.fence, &keys.key]);
            invocation.set("fence", fence).set("token", token);
            invocation
        }
    }
}

/// `fenced_set.lua`: `value` written at `key` for fencing token `token`, the last
/// accepted token kept at `fence`.
pub(crate) fn fenced_set(
    key: &str,
    fence: &str,
    token: u64,
    value: impl redis::ToRedisArgs,
) -> Call {
    let mut invocation = Call::new(&FENCED_SET, args::FENCED_SET, &[key, fence]);
    invocation.set("token", token).set("value", value);
    invocation
}

#[cfg(test)]
#[allow(clippy::panic, reason = "tests fail loudly")]
mod tests {
    use super::*;

    fn words(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect()
    }

    /// A client's fence keep is the last argument of a granting script, the slots before it
    /// sent empty; the default sends nothing, and a script that grants nothing takes none.
    #[test]
    fn the_fence_keep_goes_last_and_only_when_set() {
        let keys = LockKeys::new("p:", "n").unwrap_or_else(|e| panic!("{e}"));
        let args = |fence_keep| AcquireArgs {
            kind: Kind::Mutex,
            token: "t",
            ttl_ms: 1000,
            holder: "h",
            join: Join::No,
            fence_step: 1,
            notices: Notices::Off,
            fence_keep,
        };
        let plain = words(&acquire(&keys, &args(None)).cmd);
        assert_eq!(plain.last().map(Vec::as_slice), Some(&b"no"[..]));
        let kept = words(&acquire(&keys, &args(Some("2000"))).cmd);
        let sent = &kept[3 + 5..];
        assert_eq!(sent.len(), args::ACQUIRE.names.len());
        assert_eq!(sent.last().map(Vec::as_slice), Some(&b"2000"[..]));
        assert!(sent[4..9].iter().all(Vec::is_empty), "{sent:?}");
        let latch = LockKeys::of("p:", "n", Primitive::Latch).unwrap_or_else(|e| panic!("{e}"));
        let down = words(&release(&latch, Kind::Count, "t", Notices::Off, None, Some("2000")).cmd);
        assert!(
            !down.contains(&b"2000".to_vec()),
            "latch_down.lua grants nothing"
        );
    }

    /// The scripts' default keep is the client's default: a client with it sends none.
    #[test]
    fn the_scripts_default_fence_keep_is_the_clients() {
        let line = format!(
            "local FENCE_KEEP_MS = '{}'",
            crate::DEFAULT_FENCE_KEEP.as_millis()
        );
        assert!(crate::lua::ACQUIRE_LUA.contains(&line), "{line}");
    }

    #[test]
    fn a_refused_call_is_sent_again_with_its_text_and_the_same_keys() {
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(LOCK_EXTEND.get_hash())
            .arg(2)
            .arg("{k}")
            .arg("{k}:holder")
            .arg("token")
            .arg(1000);
        let (eval, text) = as_eval(&evalsha).unwrap_or_else(|| (redis::cmd("NONE"), ""));
        let eval = words(&eval);
        assert_eq!(eval[0], b"EVAL");
        let expected = concat!(
            include_str!("../scripts/lib/expiry.lua"),
            include_str!("../scripts/lock_extend.lua")
        );
        assert_eq!(eval[1], expected.as_bytes().to_vec());
        assert_eq!(text, expected);
        assert_eq!(words(&evalsha)[2..], eval[2..]);
        // Not ours, or not a script call: left alone.
        assert!(as_eval(redis::cmd("EVALSHA").arg("0".repeat(40)).arg(0)).is_none());
        assert!(as_eval(redis::cmd("GET").arg("k")).is_none());
    }
}
