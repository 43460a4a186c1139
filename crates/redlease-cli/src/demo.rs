//! `redlease demo`: the flash-sale coupon race of the seed article, across real OS
//! processes, without a lock, with redlease, and with a crashed and a paused holder.

use std::collections::HashMap;
use std::process::{ExitCode, Stdio};
use std::time::Duration;

use anyhow::{Context as _, bail};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis::AsyncCommands as _;
use redis::aio::MultiplexedConnection;
use tokio::process::Child;
use tokio::time::Instant;

use crate::connect::RedisArgs;
use crate::exit;
use crate::output::{human, print};

mod outcome;
mod report;
mod setup;
mod worker;

use outcome::{Sale, Step};
pub(crate) use setup::DemoArgs;
use setup::{Keys, LOCK};
use worker::Mode;
pub(crate) use worker::{WorkerArgs, worker};

/// `--help` of `redlease demo`.
pub(crate) const LONG_ABOUT: &str = "\
The flash-sale coupon race, across real OS processes, without and with a lock.

A shop sells --coupons coupons from a stock kept in Redis. Every buyer does what the
naive code of the seed article does: GET the stock, think for a millisecond, SET it to
stock-1 and record the sale: a read-modify-write that is not atomic. --workers processes
of this very binary (redlease demo-worker), each with --tasks buyer tasks, race for them:

1. without a lock: buyers read the same stock and each sells \"the same\" coupon: the shop
   oversells;
2. with redlease: each purchase runs under lock.run(); exactly --coupons are sold, and the
   fencing tokens recorded with the sales strictly increase;
3. a holder killed with SIGKILL in the middle of its section: the lock frees itself when
   its lease (--crash-ttl) runs out, and the next holder gets a larger fencing token;
4. a holder paused (SIGSTOP, like a long GC pause) past its lease: the next holder sells
   the last coupon; when the paused one wakes up, its write carrying the older fencing
   token is refused by the fenced resource (a Lua check of the highest token seen), and its
   release reports the lock lost.

Without --redis, a private redis-server is started on a free loopback port and removed at
the end (REDIS_URL is ignored, so that the demo never writes to a shared server by
accident); with --redis, the demo's keys (redlease-demo:<pid>:*) are removed at the end.
Progress bars show on a terminal; a table sums up. It takes a few seconds.

Examples:
  redlease demo
  redlease demo --workers 8 --tasks 16 --coupons 500
  redlease demo --redis redis://127.0.0.1:6379";

/// One demo run: where Redis is, and how to start workers.
struct Demo {
    url: String,
    keys: Keys,
    conn: MultiplexedConnection,
    args: DemoArgs,
}

/// `redlease demo`.
pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    // `server` is dropped last, after every connection to it.
    let (server, url, where_) = crate::connect::url_or_private_server(&args.redis).await?;
    let redis = RedisArgs {
        urls: vec![url.clone()],
        prefix: String::new(),
        ..args.redis.clone()
    };
    let conn = redis.raw().await?;
    let ns = format!("redlease-demo:{}:", std::process::id());
    let demo = Demo {
        url,
        keys: Keys::new(&ns),
        conn,
        args,
    };
    print(&format!(
        "redlease demo: the flash-sale coupon race; {} coupons, {} worker processes x {} buyer tasks,\non {where_}",
        demo.args.coupons, demo.args.workers, demo.args.tasks
    ))?;
    let outcome = demo.all_steps().await;
    demo.remove_keys().await;
    let (text, ok) = outcome?;
    print(&text)?;
    drop(demo);
    drop(server);
    Ok(exit::code(if ok { 0 } else { exit::NEGATIVE }))
}

impl Demo {
    /// Runs every step; returns the report and whether every check held.
    async fn all_steps(&self) -> anyhow::Result<(String, bool)> {
        let unlocked = self.sale(Mode::Unlocked, "without a lock").await?;
        let locked = self.sale(Mode::Locked, "with redlease").await?;
        let crash = self.crash().await?;
        let pause = self.pause().await?;
        Ok(report::render(
            &self.args, &unlocked, &locked, &crash, &pause,
        ))
    }

    /// `redlease demo-worker --mode MODE ...`, with Redis in its environment.
    fn spawn(&self, mode: Mode, tasks: u16) -> anyhow::Result<Child> {
        let exe = std::env::current_exe().context("finding the redlease binary")?;
        let mode = clap::ValueEnum::to_possible_value(&mode)
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default();
        tokio::process::Command::new(exe)
            .args(["demo-worker", "--mode", &mode, "--ns", &self.keys.ns])
            .args(["--tasks", &tasks.to_string()])
            .arg("--ttl")
            .arg(humantime::format_duration(self.args.crash_ttl).to_string())
            .env("REDIS_URL", &self.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a demo worker process")
    }

    /// Steps 1 and 2: every worker buys until sold out.
    async fn sale(&self, mode: Mode, label: &str) -> anyhow::Result<Sale> {
        let mut conn = self.conn.clone();
        let coupons = self.args.coupons;
        let () = conn.set(&self.keys.stock, coupons).await?;
        let _: i64 = conn.del(&self.keys.sold).await?;
        let bar = ProgressBar::new(u64::from(coupons)).with_prefix(label.to_owned());
        bar.set_style(
            ProgressStyle::with_template("{prefix:>16} [{bar:32}] {pos:>4}/{len} sold {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let started = Instant::now();
        let workers = (0..self.args.workers)
            .map(|_| self.spawn(mode, self.args.tasks))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut watch = conn.clone();
        let sold_key = self.keys.sold.clone();
        let ticker = async {
            loop {
                if let Ok(n) = watch.llen::<_, u64>(&sold_key).await {
                    bar.set_position(n);
                    if n > u64::from(coupons) {
                        bar.set_message(format!("- oversold by {}!", n - u64::from(coupons)));
                    }
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        };
        let finished = async {
            for w in workers {
                finish(w).await?;
            }
            anyhow::Ok(())
        };
        tokio::select! {
            done = finished => done?,
            () = ticker => {}
        }
        let took = started.elapsed();
        let tokens: Vec<u64> = conn.lrange(&self.keys.sold, 0, -1).await?;
        let stock: i64 = conn.get(&self.keys.stock).await?;
        let sold = tokens.len() as u64;
        bar.set_position(sold);
        bar.finish();
        Ok(Sale {
            sold,
            stock,
            tokens,
            took,
        })
    }

    /// Step 3: a holder killed (SIGKILL) mid-section; the next one gets the lock after its TTL.
    async fn crash(&self) -> anyhow::Result<Step> {
        let mut conn = self.conn.clone();
        let () = conn.set(&self.keys.stock, 1).await?;
        let _: i64 = conn.del(&self.keys.in_section).await?;
        let spinner = spinner("holder SIGKILLed");
        let mut holder = self.spawn(Mode::Crash, 1)?;
        let crashed_fence = self.wait_in_section(&mut holder).await?;
        let lock_key = format!("{}{LOCK}", self.keys.ns);
        let lease_left: i64 = conn.pttl(&lock_key).await?;
        holder.start_kill().context("killing the holder")?;
        let _ = holder.wait().await;
        spinner.set_message(format!(
            "killed the holder (fencing token {crashed_fence}) mid-section; its lease has {} left",
            human(Duration::from_millis(
                u64::try_from(lease_left).unwrap_or(0)
            ))
        ));
        finish(self.spawn(Mode::Next, 1)?).await?;
        let next = self.report("next").await?;
        spinner.finish_and_clear();
        let stock: i64 = conn.get(&self.keys.stock).await?;
        let next_applied = field(&next, "applied")? == 1;
        Ok(Step {
            sold: u64::from(next_applied),
            stock,
            old_fence: crashed_fence,
            next_fence: field(&next, "fence")?,
            next_applied,
            next_waited: Duration::from_millis(field(&next, "waited_ms")?),
            lease_left: Duration::from_millis(u64::try_from(lease_left).unwrap_or(0)),
            stale_refused: None,
            stale_release_lost: None,
        })
    }

    /// Step 4: a holder paused past its lease; its late write is refused.
    async fn pause(&self) -> anyhow::Result<Step> {
        let mut conn = self.conn.clone();
        let () = conn.set(&self.keys.stock, 1).await?;
        let _: i64 = conn
            .del(&[&self.keys.in_section, &self.keys.report("next")])
            .await?;
        let spinner = spinner("holder paused");
        let mut holder = self.spawn(Mode::Pause, 1)?;
        let paused_fence = self.wait_in_section(&mut holder).await?;
        let pid = holder.id().context("the paused holder has no pid")?;
        wait_stopped(pid).await?;
        let lock_key = format!("{}{LOCK}", self.keys.ns);
        let lease_left: i64 = conn.pttl(&lock_key).await?;
        spinner.set_message(format!(
            "holder (fencing token {paused_fence}) stopped mid-section; waiting for the next one"
        ));
        finish(self.spawn(Mode::Next, 1)?).await?;
        spinner.set_message("waking the paused holder up".to_owned());
        let raw = i32::try_from(pid).context("pid out of range")?;
        kill(Pid::from_raw(raw), Signal::SIGCONT).context("continuing the paused holder")?;
        finish(holder).await?;
        let next = self.report("next").await?;
        let paused = self.report("pause").await?;
        spinner.finish_and_clear();
        let stock: i64 = conn.get(&self.keys.stock).await?;
        let next_applied = field(&next, "applied")? == 1;
        let stale_applied = field(&paused, "applied")? == 1;
        Ok(Step {
            sold: u64::from(next_applied) + u64::from(stale_applied),
            stock,
            old_fence: paused_fence,
            next_fence: field(&next, "fence")?,
            next_applied,
            next_waited: Duration::from_millis(field(&next, "waited_ms")?),
            lease_left: Duration::from_millis(u64::try_from(lease_left).unwrap_or(0)),
            stale_refused: Some(!stale_applied),
            stale_release_lost: Some(paused.get("release").is_some_and(|r| r == "lost")),
        })
    }

    /// Waits until the holder says it is in its section; returns its fencing token.
    async fn wait_in_section(&self, holder: &mut Child) -> anyhow::Result<u64> {
        let mut conn = self.conn.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(fence) = conn.get::<_, Option<u64>>(&self.keys.in_section).await? {
                return Ok(fence);
            }
            if let Some(status) = holder.try_wait()? {
                bail!("a demo worker exited ({status}) before entering its section");
            }
            if Instant::now() > deadline {
                bail!("a demo worker did not enter its section within 30s");
            }
            // The worker announces itself through Redis; poll for it.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn report(&self, name: &str) -> anyhow::Result<HashMap<String, String>> {
        let mut conn = self.conn.clone();
        Ok(conn.hgetall(self.keys.report(name)).await?)
    }

    /// Removes every key of this run (they matter only on a shared Redis).
    async fn remove_keys(&self) {
        let mut conn = self.conn.clone();
        let mut doomed: Vec<String> = Vec::new();
        if let Ok(keys) = redlease::LockKeys::new(&self.keys.ns, LOCK) {
            doomed.extend(
                [
                    keys.key(),
                    keys.fence(),
                    keys.holder(),
                    keys.queue(),
                    keys.waiters(),
                ]
                .map(str::to_owned),
            );
        }
        if let Ok(iter) = conn
            .scan_match::<_, String>(format!("{}*", self.keys.ns))
            .await
        {
            let found: Vec<redis::RedisResult<String>> =
                futures_util::StreamExt::collect(iter).await;
            doomed.extend(found.into_iter().flatten());
        }
        if let Err(e) = conn.del::<_, i64>(&doomed).await {
            tracing::warn!(error = %e, "could not remove the demo's keys");
        }
    }
}

fn spinner(prefix: &str) -> ProgressBar {
    let bar = ProgressBar::new_spinner().with_prefix(prefix.to_owned());
    bar.set_style(
        ProgressStyle::with_template("{prefix:>16} {spinner} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(80));
    bar
}

/// Waits for a worker; fails with its stderr if it failed.
async fn finish(child: Child) -> anyhow::Result<()> {
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .context("a demo worker did not finish within 2 minutes")??;
    if !out.status.success() {
        bail!(
            "a demo worker failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Waits until process `pid` (a child of ours) is stopped.
async fn wait_stopped(pid: u32) -> anyhow::Result<()> {
    let path = format!("/proc/{pid}/stat");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stat = std::fs::read_to_string(&path).unwrap_or_default();
        // "pid (comm) STATE ...": the state follows the last ')'.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, Some('T' | 't')) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the paused demo worker did not stop within 30s");
        }
        // A stop is not an event we can await without reaping; poll /proc.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn field(report: &HashMap<String, String>, name: &str) -> anyhow::Result<u64> {
    report
        .get(name)
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("a demo worker did not report `{name}`"))
}
