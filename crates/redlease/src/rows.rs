//! One row per primitive: which scripts take, give back and extend its leases, and the
//! order its scripts take its keys in. The calls of `crate::scripts` read these rows
//! instead of matching on the primitive, so a new primitive is its row here, its Lua
//! (`scripts/`, with its recipe in `crate::lua`) and its API file; what differs per lease
//! *kind* within a primitive (a semaphore's weight, a read or write hold, an election's
//! announcements) stays in the calls' arguments.

use std::sync::LazyLock;

use redis::Script;

use crate::keys::{LockKeys, Primitive};
use crate::lua::{
    ACQUIRE, LATCH_DOWN, LATCH_UP, LEASE_EXTEND, LOCK_EXTEND, RELEASE, RW_ACQUIRE, RW_RELEASE,
    SEM_ACQUIRE, SEM_RELEASE,
};
use crate::script_args::{self as args, Args};

/// A primitive's scripts and key layouts.
#[derive(Debug)]
pub(crate) struct Row {
    /// An attempt to take a lease (and join the queue), and its arguments.
    pub(crate) acquire: (&'static LazyLock<Script>, Args),
    /// Giving a lease back (and handing it on); its file name, for messages; its arguments.
    pub(crate) release: (&'static LazyLock<Script>, &'static str, Args),
    /// Setting a lease's ttl from now; its file name, for messages; its arguments.
    pub(crate) extend: (&'static LazyLock<Script>, &'static str, Args),
    /// The KEYS of its acquire and release scripts, in their order (no allocation: a
    /// script call is the hot path).
    pub(crate) script_keys: fn(&LockKeys) -> ScriptKeys<'_>,
    /// The three keys `lease_extend.lua` and `lease_renew.lua` take: the holds (a ZSET of
    /// token -> expiry), the holders table, and the key whose expiry follows the latest
    /// lease (`lock_extend.lua` takes the first two).
    pub(crate) lease_keys: fn(&LockKeys) -> [&str; 3],
}

/// Up to six keys, the most any primitive's acquire and release scripts take.
#[derive(Debug)]
pub(crate) struct ScriptKeys<'k> {
    keys: [&'k str; 6],
    len: usize,
}

impl<'k> ScriptKeys<'k> {
    fn of<const N: usize>(keys: [&'k str; N]) -> Self {
        let mut all = [""; 6];
        let len = N.min(6);
        all[..len].copy_from_slice(&keys[..len]);
        Self { keys: all, len }
    }

    /// The keys, in the scripts' order.
    pub(crate) fn as_slice(&self) -> &[&'k str] {
        &self.keys[..self.len]
    }
}

static LOCK: Row = Row {
    acquire: (&ACQUIRE, args::ACQUIRE),
    release: (&RELEASE, "release.lua", args::RELEASE),
    extend: (&LOCK_EXTEND, "lock_extend.lua", args::LOCK_EXTEND),
    script_keys: |k| ScriptKeys::of(k.script_keys()),
    lease_keys: |k| [&k.key, &k.holder, &k.extra],
};

static SEMAPHORE: Row = Row {
    acquire: (&SEM_ACQUIRE, args::SEM_ACQUIRE),
    release: (&SEM_RELEASE, "sem_release.lua", args::SEM_RELEASE),
    extend: (&LEASE_EXTEND, "lease_extend.lua", args::LEASE_EXTEND),
    script_keys: |k| ScriptKeys::of(k.shared_lease_keys()),
    lease_keys: |k| [&k.key, &k.holder, &k.extra],
};

static RWLOCK: Row = Row {
    acquire: (&RW_ACQUIRE, args::RW_ACQUIRE),
    release: (&RW_RELEASE, "rw_release.lua", args::RW_RELEASE),
    extend: (&LEASE_EXTEND, "lease_extend.lua", args::LEASE_EXTEND),
    script_keys: |k| ScriptKeys::of(k.shared_lease_keys()),
    lease_keys: |k| [&k.extra, &k.holder, &k.key],
};

static LATCH: Row = Row {
    acquire: (&LATCH_UP, args::LATCH_UP),
    release: (&LATCH_DOWN, "latch_down.lua", args::LATCH_DOWN),
    extend: (&LEASE_EXTEND, "lease_extend.lua", args::LEASE_EXTEND),
    script_keys: |k| ScriptKeys::of(k.latch_keys()),
    lease_keys: |k| [&k.extra, &k.holder, &k.key],
};

/// The row of `primitive`.
pub(crate) fn row(primitive: Primitive) -> &'static Row {
    match primitive {
        Primitive::Lock => &LOCK,
        Primitive::Semaphore => &SEMAPHORE,
        Primitive::RwLock => &RWLOCK,
        Primitive::Latch => &LATCH,
    }
}
