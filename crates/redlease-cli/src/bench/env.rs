//! What every scenario needs ([`Env`]: where Redis is, connections, run-unique names, the
//! keys to remove at the end) and the command counts around a piece of work
//! ([`counting`]). A leaf of `bench/`: the scenarios and the driver use it, it uses only
//! the figures ([`super::stats`]).

use std::future::Future;
use std::io::IsTerminal as _;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use futures_util::future::join_all;
use redis::aio::ConnectionManager;

use super::stats::{CommandDelta, CommandStats};

/// What every scenario needs: where Redis is, and the keys to remove at the end.
pub(super) struct Env {
    pub(super) redis: redis::Client,
    pub(super) url: String,
    /// For the bench's own commands (INFO, counter reset and check, clean-up).
    pub(super) admin: ConnectionManager,
    /// Makes this run's keys unique on a shared server.
    pub(super) run_id: String,
    pub(super) warm_up: Duration,
    /// `--link-delay`: the delay each way of the delay line in front of every private
    /// redis-server, if any (the quorum's nodes get theirs from it).
    pub(super) link_delay: Option<Duration>,
    pub(super) show_progress: bool,
    pub(super) keys: Mutex<Vec<String>>,
}

impl Env {
    pub(super) async fn connect(
        url: &str,
        duration: Duration,
        link_delay: Option<Duration>,
    ) -> anyhow::Result<Self> {
        // The library checks the URL and redacts passwords from its errors.
        drop(
            redlease::Client::connect(url)
                .await
                .context("connecting to Redis")?,
        );
        let redis = redis::Client::open(url).context("opening the Redis URL")?;
        let admin = ConnectionManager::new(redis.clone())
            .await
            .context("connecting to Redis")?;
        Ok(Self {
            redis,
            url: url.to_owned(),
            admin,
            run_id: std::process::id().to_string(),
            warm_up: warm_up(duration),
            link_delay,
            show_progress: std::io::stderr().is_terminal(),
            keys: Mutex::new(Vec::new()),
        })
    }

    /// A redlease client of its own (two connections: commands and pub/sub).
    pub(super) async fn client(&self) -> anyhow::Result<redlease::Client> {
        redlease::Client::connect(&self.url)
            .await
            .context("connecting a redlease client")
    }

    /// A plain redis-rs connection of its own.
    pub(super) async fn connection(&self) -> anyhow::Result<ConnectionManager> {
        ConnectionManager::new(self.redis.clone())
            .await
            .context("connecting to Redis")
    }

    /// A lock name unique to this run.
    pub(super) fn name(&self, name: &str) -> String {
        format!("bench-{}-{name}", self.run_id)
    }

    /// A plain key unique to this run.
    pub(super) fn key(&self, name: &str) -> String {
        format!("redlease-bench:{}:{name}", self.run_id)
    }

    /// Remembers `key` for removal at the end.
    pub(super) fn clean_up(&self, key: &str) {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(key.to_owned());
    }

    /// Remembers every key of `lock` for removal at the end.
    pub(super) fn clean_up_lock(&self, lock: &redlease::Lock) -> anyhow::Result<()> {
        self.clean_up_keys(&lock.keys()?);
        Ok(())
    }

    /// Remembers every key of a lock, semaphore or read-write lock for removal at the end.
    pub(super) fn clean_up_keys(&self, keys: &redlease::LockKeys) {
        for key in [
            keys.key(),
            keys.fence(),
            keys.holder(),
            keys.queue(),
            keys.waiters(),
        ]
        .into_iter()
        .chain(keys.permits())
        .chain(keys.holds())
        {
            self.clean_up(key);
        }
    }

    /// Deletes the counter `key` that critical sections increment.
    pub(super) async fn reset_counter(&self, key: &str) -> anyhow::Result<()> {
        let mut admin = self.admin.clone();
        let () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut admin)
            .await
            .context("resetting the counter")?;
        Ok(())
    }

    /// The counter `key` that critical sections increment (0 when absent).
    pub(super) async fn read_counter(&self, key: &str) -> anyhow::Result<u64> {
        let mut admin = self.admin.clone();
        let value: Option<u64> = redis::cmd("GET")
            .arg(key)
            .query_async(&mut admin)
            .await
            .context("reading the counter")?;
        Ok(value.unwrap_or(0))
    }

    /// Removes the keys this run created (best effort: a failure is only logged).
    pub(super) async fn remove_keys(&self) {
        let mut keys =
            std::mem::take(&mut *self.keys.lock().unwrap_or_else(PoisonError::into_inner));
        keys.sort();
        keys.dedup();
        if keys.is_empty() {
            return;
        }
        let mut conn = self.admin.clone();
        let removed: redis::RedisResult<u64> =
            redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        if let Err(e) = removed {
            tracing::warn!(error = %e, "could not remove the benchmark's keys");
        }
    }

    /// Runs `work` between two `INFO commandstats` snapshots of the server: what `work`
    /// returned, and the commands the server ran meanwhile.
    pub(super) async fn counting<T>(
        &self,
        work: impl Future<Output = T>,
    ) -> (T, Option<CommandDelta>) {
        counting(std::slice::from_ref(&self.admin), work).await
    }

    pub(super) async fn redis_version(&self) -> String {
        let mut conn = self.admin.clone();
        let info: redis::RedisResult<String> = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await;
        info.ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("redis_version:"))
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_else(|| "(unknown version)".to_owned())
    }

    /// One line of progress on stderr, when it is a terminal.
    pub(super) fn progress(&self, what: &str) {
        if self.show_progress {
            eprintln!("redlease bench: {what}");
        }
    }
}

/// The warm-up before measuring for `duration`: a tenth of it, 50ms..500ms.
pub(super) fn warm_up(duration: Duration) -> Duration {
    (duration / 10).clamp(Duration::from_millis(50), Duration::from_millis(500))
}

/// Calls per command so far; `None` when `INFO commandstats` is not allowed.
async fn command_stats(mut conn: ConnectionManager) -> Option<CommandStats> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .inspect_err(|e| tracing::warn!(error = %e, "INFO commandstats failed; no command counts"))
        .ok()?;
    Some(CommandStats::parse(&info))
}

/// Runs `work` between two `INFO commandstats` snapshots of every server in `servers` (taken
/// on all at once): what `work` returned, and the commands the servers ran meanwhile, summed
/// over them; `None` when one server refused `INFO commandstats`.
pub(super) async fn counting<T>(
    servers: &[ConnectionManager],
    work: impl Future<Output = T>,
) -> (T, Option<CommandDelta>) {
    let snapshot = || async {
        join_all(servers.iter().cloned().map(command_stats))
            .await
            .into_iter()
            .collect::<Option<Vec<_>>>()
    };
    let before = snapshot().await;
    let output = work.await;
    let after = snapshot().await;
    let delta = before.zip(after).map(|(before, after)| {
        let mut sum = CommandDelta::default();
        for (before, after) in before.iter().zip(&after) {
            sum += before.delta(after);
        }
        sum
    });
    (output, delta)
}
