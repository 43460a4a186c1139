//! The bare redis-rs floor every redlease scenario is compared with: a `SET NX PX` lock
//! released by compare-and-delete, with tokens as long as redlease's. A leaf of `bench/`.

use std::sync::LazyLock;

use anyhow::Context as _;
use redis::aio::ConnectionManager;
use redis::{Script, Value};

/// Lease of the bare loops' `SET NX PX`.
pub(super) const BARE_TTL_MS: u64 = 30_000;

/// The bare floor's release: compare-and-delete.
pub(super) static COMPARE_AND_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end",
    )
});

/// The bare floor's lock: `SET key token NX PX`, released by compare-and-delete.
#[derive(Debug, Clone)]
pub(super) struct BareLock {
    pub(super) key: String,
}

impl BareLock {
    pub(super) fn new(key: String) -> Self {
        Self { key }
    }

    /// One `SET NX PX`: true when it took the lock.
    pub(super) async fn try_acquire(
        &self,
        conn: &mut ConnectionManager,
        token: &str,
    ) -> anyhow::Result<bool> {
        let reply: Value = redis::cmd("SET")
            .arg(&self.key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(BARE_TTL_MS)
            .query_async(conn)
            .await
            .context("bare lock: SET NX PX")?;
        Ok(!matches!(reply, Value::Nil))
    }

    /// EVALSHA compare-and-delete: true when the lock still held `token`.
    pub(super) async fn release(
        &self,
        conn: &mut ConnectionManager,
        token: &str,
    ) -> anyhow::Result<bool> {
        let deleted: i64 = COMPARE_AND_DELETE
            .key(&self.key)
            .arg(token)
            .invoke_async(conn)
            .await
            .context("bare lock: EVALSHA compare-and-delete")?;
        Ok(deleted == 1)
    }
}

/// A token unique to this process, worker and iteration, as long as redlease's (32 hex
/// digits). Not secret: the bare loops only need uniqueness.
pub(super) fn bare_token(worker: usize, seq: u64) -> String {
    format!("{:08x}{worker:08x}{seq:016x}", std::process::id())
}
