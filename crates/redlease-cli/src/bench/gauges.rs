//! What the scale scenarios read around a measuring window: Redis' CPU time, memory and
//! command counts (`INFO`), this process' CPU time and resident memory, and two probes that
//! run beside the work on threads of their own with plain blocking connections (so that a
//! busy tokio runtime does not delay them): another client's `PING` latency, and the least
//! lease left of sampled keys as Redis sees it (`PTTL`). A leaf of `bench/` beside
//! [`super::env`]: it uses the figures ([`super::stats`]) alone.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use redis::aio::ConnectionManager;
use serde::Serialize;

use super::stats::{CommandDelta, CommandStats, Summary};

/// One `INFO` section's text.
async fn info(conn: &ConnectionManager, section: &str) -> anyhow::Result<String> {
    let mut conn = conn.clone();
    redis::cmd("INFO")
        .arg(section)
        .query_async(&mut conn)
        .await
        .with_context(|| format!("INFO {section}"))
}

/// The number `name:` of an `INFO` text.
fn field(info: &str, name: &str) -> Option<f64> {
    info.lines().find_map(|line| {
        let (key, value) = line.trim().split_once(':')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// Redis' `used_memory`, in bytes.
pub(super) async fn used_memory(conn: &ConnectionManager) -> anyhow::Result<u64> {
    let info = info(conn, "memory").await?;
    let bytes = field(&info, "used_memory").ok_or_else(|| anyhow!("no used_memory in INFO"))?;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // a byte count
    Ok(bytes as u64)
}

/// `MEMORY USAGE` of each of `keys` summed (absent keys count 0).
pub(super) async fn memory_usage(conn: &ConnectionManager, keys: &[&str]) -> anyhow::Result<u64> {
    let mut pipe = redis::pipe();
    for key in keys {
        pipe.cmd("MEMORY")
            .arg("USAGE")
            .arg(*key)
            .arg("SAMPLES")
            .arg(0);
    }
    let mut conn = conn.clone();
    let sizes: Vec<Option<u64>> = pipe.query_async(&mut conn).await.context("MEMORY USAGE")?;
    Ok(sizes.into_iter().flatten().sum())
}

/// What is read at each end of a window.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    at: Instant,
    /// Redis' `used_cpu_sys + used_cpu_user`, in seconds.
    redis_cpu: f64,
    commands: CommandStats,
    /// This process' user + system CPU time.
    client_cpu: Duration,
}

impl Mark {
    pub(super) async fn take(conn: &ConnectionManager) -> anyhow::Result<Self> {
        let cpu = info(conn, "cpu").await?;
        let redis_cpu = field(&cpu, "used_cpu_sys").unwrap_or(0.0)
            + field(&cpu, "used_cpu_user").unwrap_or(0.0);
        let commands = CommandStats::parse(&info(conn, "commandstats").await?);
        Ok(Self {
            at: Instant::now(),
            redis_cpu,
            commands,
            client_cpu: client_cpu(),
        })
    }

    /// What happened between `self` and the later `end`.
    pub(super) fn until(&self, end: &Self) -> Window {
        let elapsed = end.at.saturating_duration_since(self.at);
        let secs = elapsed.as_secs_f64().max(1e-9);
        Window {
            elapsed,
            commands: self.commands.delta(&end.commands),
            redis_cpu: (end.redis_cpu - self.redis_cpu).max(0.0) / secs,
            client_cpu: end.client_cpu.saturating_sub(self.client_cpu).as_secs_f64() / secs,
        }
    }
}

/// Between two [`Mark`]s.
#[derive(Debug, Clone)]
pub(super) struct Window {
    pub(super) elapsed: Duration,
    pub(super) commands: CommandDelta,
    /// Redis' CPU time over wall time (1.0: one CPU busy).
    pub(super) redis_cpu: f64,
    /// This process' CPU time over wall time.
    pub(super) client_cpu: f64,
}

impl Window {
    /// Commands Redis ran per second, scripts' inner calls included.
    pub(super) fn commands_per_sec(&self) -> f64 {
        super::stats::per_second(self.commands.total, self.elapsed)
    }

    /// Calls per second of the command `name` (`INFO commandstats` name).
    pub(super) fn calls_per_sec(&self, name: &str) -> f64 {
        let calls = self.commands.by_command.get(name).copied().unwrap_or(0);
        super::stats::per_second(calls, self.elapsed)
    }
}

/// This process' user + system CPU time so far (`/proc/self/stat`, in `USER_HZ` ticks of
/// 10 ms, as the Linux ABI fixes them; zero off Linux).
fn client_cpu() -> Duration {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Duration::ZERO;
    };
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let ticks: u64 = stat.rsplit_once(')').map_or(0, |(_, rest)| {
        rest.split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|t| t.parse::<u64>().ok())
            .sum()
    });
    Duration::from_millis(ticks * 10)
}

/// This process' resident memory now, in bytes (`VmRSS`; `None` off Linux).
pub(super) fn client_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// How often the latency probe sends its `PING`.
const PING_EVERY: Duration = Duration::from_millis(2);
/// How often the lease probe reads the `PTTL` of its sample.
const PTTL_EVERY: Duration = Duration::from_millis(100);

/// Another client's view during a window: its `PING` latency, and the least lease left of
/// the sampled keys.
#[derive(Debug, Clone, Default, Serialize)]
pub(super) struct Probed {
    /// Round trips of `PING`, one every 2 ms, on a connection of its own.
    pub(super) ping: Summary,
    /// The least `PTTL` seen of any sampled key, in milliseconds (`None`: no sample).
    pub(super) least_pttl_ms: Option<i64>,
    /// Samples that found a key gone or without expiry (a lease lost: must be 0).
    pub(super) missing: u64,
    /// `PTTL` reads made (one per sampled key per round).
    pub(super) pttl_reads: u64,
}

/// The two probes, running until [`Probes::finish`].
pub(super) struct Probes {
    stop: Arc<AtomicBool>,
    ping: JoinHandle<redis::RedisResult<Vec<Duration>>>,
    pttl: JoinHandle<redis::RedisResult<(Option<i64>, u64, u64)>>,
}

impl Probes {
    /// Starts both probes on `redis`; the lease probe reads the `PTTL` of `sample` (none
    /// when it is empty).
    pub(super) fn start(redis: &redis::Client, sample: Vec<String>) -> anyhow::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut ping_conn = redis
            .get_connection()
            .context("connecting the PING probe")?;
        let mut pttl_conn = redis
            .get_connection()
            .context("connecting the PTTL probe")?;
        let ping = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut samples = Vec::new();
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let () = redis::cmd("PING").query(&mut ping_conn)?;
                    samples.push(sent.elapsed());
                    next += PING_EVERY;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
                Ok(samples)
            })
        };
        let pttl = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut pipe = redis::pipe();
                for key in &sample {
                    pipe.cmd("PTTL").arg(key);
                }
                let (mut least, mut missing, mut reads) = (None::<i64>, 0, 0);
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let left: Vec<i64> = if sample.is_empty() {
                        Vec::new()
                    } else {
                        pipe.query(&mut pttl_conn)?
                    };
                    reads += u64::try_from(left.len()).unwrap_or(u64::MAX);
                    for ms in left {
                        if ms < 0 {
                            missing += 1;
                        } else {
                            least = Some(least.map_or(ms, |l| l.min(ms)));
                        }
                    }
                    next += PTTL_EVERY;
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    } else {
                        next = now;
                    }
                }
                Ok((least, missing, reads))
            })
        };
        Ok(Self { stop, ping, pttl })
    }

    /// Stops both probes and returns what they saw.
    pub(super) fn finish(self) -> anyhow::Result<Probed> {
        self.stop.store(true, Ordering::Relaxed);
        let ping = self
            .ping
            .join()
            .map_err(|_| anyhow!("the PING probe panicked"))?
            .context("the PING probe")?;
        let (least_pttl_ms, missing, pttl_reads) = self
            .pttl
            .join()
            .map_err(|_| anyhow!("the PTTL probe panicked"))?
            .context("the PTTL probe")?;
        Ok(Probed {
            ping: Summary::of(ping),
            least_pttl_ms,
            missing,
            pttl_reads,
        })
    }
}

/// Waits until Redis ran no command (but `INFO`) for 200 ms in a row, up to `limit`: the
/// background work of the previous step (withdrawals, releases) is over.
pub(super) async fn quiesce(conn: &ConnectionManager, limit: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    let mut last = CommandStats::parse(&info(conn, "commandstats").await?);
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = CommandStats::parse(&info(conn, "commandstats").await?);
        if last.delta(&now).total == 0 {
            return Ok(());
        }
        last = now;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_fields_are_read_by_exact_name() {
        let info = "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_sys_children:9\r\nused_cpu_user:0.25\r\n";
        assert_eq!(field(info, "used_cpu_sys"), Some(1.5));
        assert_eq!(field(info, "used_cpu_user"), Some(0.25));
        assert_eq!(field(info, "used_memory"), None);
    }
}
