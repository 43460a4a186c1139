//! `redlease-chaos worker` (hidden): one worker OS process. It loops acquire → `BEGIN` →
//! work → `WRITE` → `END` → `REL` → release, reporting each step on stdout and waiting for
//! the judge's answer on stdin before going on. An answer to `BEGIN` may carry `hold=MS`:
//! the section then stays open until the lease is lost, at most that long (a holder that
//! stays a holder while the runner partitions it).
//!
//! Each wait is announced with `WAIT` and its bound, and ends with `ACQ`, `TIMEOUT`, `ERR`
//! or (in the cancellation storm) `CANCEL`; a worker that stops says `BYE`. With `--storm`
//! the worker drops its `acquire` and `run` futures at random points (see [`storm`]).
//!
//! The worker holds a lock by default, one of `--permits N` permits of a semaphore, or,
//! with `--rwlock`, the write side of a read-write lock in one attempt in three (at random)
//! and its read side otherwise; every line it sends about a read-write lock hold carries
//! the hold's mode. With `--multi N` it holds a multi-lock of two names drawn at random
//! (in a random order) out of the first N one-letter names, `a`, `b`, ...; its `ACQ`,
//! `BEGIN`, `WRITE`, `END`, `REL` and `LOST` then come once per name, each with that name
//! (`@a`) and its fencing token. With `--elect` it campaigns in an election instead
//! (`campaign` is its acquisition, `resign` its release): it leads for one section, and its
//! lines carry its term as their token.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use redlease_chaos::{Kind, Mode};
use tokio::io::BufReader;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::link::{Jitter, Link, Next, claim};

/// The lock every worker of a run contends for.
pub(crate) const LOCK: &str = "chaos";

/// How a worker reaches Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Deployment {
    /// One Redis (`--url` once).
    Single,
    /// A Redlock quorum (`--url` once per node).
    Quorum,
    /// Sentinels (`--url` once per sentinel) watching `--master`.
    Sentinel,
    /// A Redis Cluster (`--url` once per seed node).
    Cluster,
}

/// Arguments of the hidden `worker` subcommand.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct WorkerArgs {
    /// This worker's id in the run
    #[arg(long)]
    pub(crate) id: u32,
    /// How to reach Redis
    #[arg(long, value_enum)]
    pub(crate) deployment: Deployment,
    /// Redis URLs (see --deployment)
    #[arg(long = "url", required = true)]
    pub(crate) urls: Vec<String>,
    /// The primary's name, for --deployment sentinel
    #[arg(long, default_value = redlease_local::DEFAULT_MASTER_NAME)]
    pub(crate) master: String,
    /// Lease of the lock
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) ttl: Duration,
    /// Replicas that must acknowledge an acquisition (Sentinel, Cluster; 0: none)
    #[arg(long, default_value_t = 0)]
    pub(crate) min_replicas: usize,
    /// The client's response timeout (the library's default when absent)
    #[arg(long, value_parser = humantime::parse_duration)]
    pub(crate) response_timeout: Option<Duration>,
    /// Give up after this long whatever happens
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3m")]
    pub(crate) deadline: Duration,
    /// The lock's wait: the bound of every acquisition
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    pub(crate) wait: Duration,
    /// Cancellation storm: drop `acquire` and `run` futures at random points
    #[arg(long)]
    pub(crate) storm: bool,
    /// Hold one of this many permits of a semaphore instead of a lock
    #[arg(long, conflicts_with_all = ["rwlock", "storm"])]
    pub(crate) permits: Option<u32>,
    /// Hold a read-write lock instead of a lock: a write one attempt in three, else a read
    #[arg(long, conflicts_with = "storm")]
    pub(crate) rwlock: bool,
    /// Hold a multi-lock of 2 names drawn out of this many (`a`, `b`, ...) instead of a lock
    #[arg(long, conflicts_with_all = ["rwlock", "storm", "permits"], value_parser = clap::value_parser!(u8).range(2..=26))]
    pub(crate) multi: Option<u8>,
    /// Campaign in an election and lead for one section instead of holding a lock
    #[arg(long, conflicts_with_all = ["rwlock", "storm", "permits", "multi"])]
    pub(crate) elect: bool,
    /// In every section, extend the lock's lease to this shorter ttl, then stay inside
    /// while the guard claims it (see [`shortened_section`])
    #[arg(long, value_parser = humantime::parse_duration, conflicts_with_all = ["rwlock", "storm", "permits", "multi", "elect"])]
    pub(crate) shorten: Option<Duration>,
    /// With --shorten, how the extend goes wrong: `dropped`, its future dropped at a random
    /// 0-60 ms; `slow`, its replies held back for twice the response timeout by a proxy
    /// of this worker's own, through which it reaches Redis (the extend runs, then fails)
    #[arg(long, value_enum, requires = "shorten")]
    pub(crate) shorten_fault: Option<ShortenHow>,
}

/// How a shortening extend goes wrong in the workers (see `worker --shorten`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ShortenHow {
    /// Its future is dropped at a random 0-60 ms (`worker --shorten-fault dropped`).
    Dropped,
    /// Its reply comes later than the response timeout (`worker --shorten-fault slow`).
    Slow,
}

async fn connect(
    args: &WorkerArgs,
    proxy: Option<&redlease_local::Proxy>,
) -> redlease::Result<redlease::Client> {
    let builder = match args.deployment {
        Deployment::Single => match proxy {
            Some(proxy) => redlease::Client::builder(&proxy.url()),
            None => redlease::Client::builder(&args.urls[0]),
        },
        Deployment::Quorum => redlease::Client::quorum_builder(&args.urls),
        Deployment::Sentinel => redlease::Client::sentinel_builder(&args.urls, &args.master),
        Deployment::Cluster => redlease::Client::cluster_builder(&args.urls),
    };
    match args.response_timeout {
        Some(timeout) => builder.response_timeout(timeout),
        None => builder,
    }
    .connect()
    .await
}

/// What the worker contends for.
enum Target {
    Lock(redlease::Lock),
    Semaphore(redlease::Semaphore),
    RwLock(redlease::RwLock),
    /// Multi-locks of 2 of this many names, with the worker's ttl and wait.
    Multi {
        client: redlease::Client,
        names: usize,
        ttl: Duration,
        wait: Duration,
    },
    /// An election, and the note this worker campaigns with.
    Election(redlease::Election, String),
}

/// A hold of a [`Target`].
enum Held {
    Guard(redlease::Guard),
    Write(redlease::WriteGuard),
    Multi(redlease::MultiGuard),
    Leader(redlease::Leadership),
}

impl Held {
    /// Each lock held and its fencing token: `(None, token)` but for a multi-lock, whose
    /// names are one letter each.
    fn tokens(&self) -> Vec<(Option<char>, u64)> {
        match self {
            Held::Guard(guard) => vec![(None, guard.fencing_token().get())],
            Held::Write(write) => vec![(None, write.fencing_token().get())],
            Held::Leader(leadership) => vec![(None, leadership.term().get())],
            Held::Multi(multi) => multi
                .guards()
                .iter()
                .map(|g| (g.name().chars().next(), g.fencing_token().get()))
                .collect(),
        }
    }

    /// What each lock held claims now (see [`claim`]), in the order of
    /// [`tokens`](Self::tokens).
    fn claims(&self) -> Vec<Option<Duration>> {
        match self {
            Held::Guard(guard) => vec![claim(|| guard.remaining())],
            Held::Write(write) => vec![claim(|| write.remaining())],
            Held::Leader(leadership) => vec![claim(|| leadership.remaining())],
            Held::Multi(multi) => multi
                .guards()
                .iter()
                .map(|g| claim(|| g.remaining()))
                .collect(),
        }
    }

    /// Resolves when the lease (any lease, of a multi-lock) is lost.
    async fn lost(&self) {
        match self {
            Held::Guard(guard) => guard.lost().await,
            Held::Write(write) => write.lost().await,
            Held::Multi(multi) => multi.lost().await,
            Held::Leader(leadership) => leadership.lost().await,
        }
    }

    async fn release(self) -> redlease::Result<()> {
        match self {
            Held::Guard(guard) => guard.release().await,
            Held::Write(write) => write.release().await,
            Held::Multi(multi) => multi.release().await,
            Held::Leader(leadership) => leadership.resign().await,
        }
    }
}

impl Target {
    /// What `args` ask the worker to hold: `lock` unless they ask for another primitive.
    fn of(args: &WorkerArgs, client: &redlease::Client, lock: redlease::Lock) -> Self {
        if let Some(permits) = args.permits {
            Target::Semaphore(client.semaphore(LOCK, permits))
        } else if args.rwlock {
            Target::RwLock(client.rwlock(LOCK))
        } else if args.elect {
            Target::Election(client.election(LOCK), format!("chaos worker {}", args.id))
        } else if let Some(names) = args.multi {
            Target::Multi {
                client: client.clone(),
                names: usize::from(names),
                ttl: args.ttl,
                wait: args.wait,
            }
        } else {
            Target::Lock(lock)
        }
        .configured(args)
    }

    /// The semaphore, read-write lock or election with the worker's ttl and wait (a lock
    /// has them).
    fn configured(self, args: &WorkerArgs) -> Self {
        match self {
            Target::Semaphore(s) => Target::Semaphore(s.ttl(args.ttl).wait(args.wait)),
            Target::RwLock(rw) => Target::RwLock(rw.ttl(args.ttl).wait(args.wait)),
            Target::Election(e, note) => Target::Election(e.ttl(args.ttl).wait(args.wait), note),
            same @ (Target::Lock(_) | Target::Multi { .. }) => same,
        }
    }

    /// The mode of the next attempt: for a read-write lock, a write one time in three.
    fn mode(&self, jitter: &mut Jitter) -> Option<Mode> {
        match self {
            Target::RwLock(_) if jitter.below(3) == 0 => Some(Mode::Write),
            Target::RwLock(_) => Some(Mode::Read),
            Target::Lock(_)
            | Target::Semaphore(_)
            | Target::Multi { .. }
            | Target::Election(..) => None,
        }
    }

    /// The mode of the next attempt as the judge asked it (`next`; a side of a read-write
    /// lock only), else drawn as [`mode`](Self::mode) does.
    fn mode_of(&self, next: Option<Next>, jitter: &mut Jitter) -> Option<Mode> {
        match (self, next) {
            (Target::RwLock(_), Some(Next::Write)) => Some(Mode::Write),
            (Target::RwLock(_), Some(Next::Read)) => Some(Mode::Read),
            _ => self.mode(jitter),
        }
    }

    /// `many`: 2 permits of a semaphore at once (ignored by the other primitives).
    async fn acquire(
        &self,
        mode: Option<Mode>,
        many: bool,
        jitter: &mut Jitter,
    ) -> redlease::Result<Held> {
        Ok(match (self, mode) {
            (
                Target::Multi {
                    client,
                    names,
                    ttl,
                    wait,
                },
                _,
            ) => {
                // Two different names in a random order (the multi-lock sorts them).
                let n = u64::try_from(*names).unwrap_or(2);
                let first = jitter.below(n);
                let second = (first + 1 + jitter.below(n - 1)) % n;
                let pair = [first, second].map(|i| {
                    redlease_chaos::Primitive::name(usize::try_from(i).unwrap_or(0)).to_string()
                });
                let multi = client.multi_lock(pair).ttl(*ttl).wait(*wait);
                Held::Multi(multi.acquire().await?)
            }
            (Target::Lock(lock), _) => Held::Guard(lock.acquire().await?),
            // Leads for this one section: `release` resigns.
            (Target::Election(election, note), _) => {
                Held::Leader(election.campaign(note.as_str()).await?)
            }
            (Target::Semaphore(semaphore), _) if many => {
                Held::Guard(semaphore.acquire_many(2).await?)
            }
            (Target::Semaphore(semaphore), _) => Held::Guard(semaphore.acquire().await?),
            (Target::RwLock(rw), Some(Mode::Read)) => Held::Guard(rw.read().acquire().await?),
            (Target::RwLock(rw), _) => Held::Write(rw.write().acquire().await?),
        })
    }
}

/// Connects, reporting each failure as an `ERR` and trying again (Redis may be down on
/// purpose) until `deadline`.
async fn connect_until(
    args: &WorkerArgs,
    proxy: Option<&redlease_local::Proxy>,
    link: &Mutex<Link>,
    deadline: Instant,
) -> anyhow::Result<redlease::Client> {
    loop {
        match connect(args, proxy).await {
            Ok(client) => return Ok(client),
            Err(e) if Instant::now() > deadline => return Err(e).context("connecting"),
            Err(_) => {
                link.lock().await.send(Kind::Error, 0).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Keeps a section of `acquired` open until its lease is lost or `hold` has passed,
/// sending a `CLAIM` per lock every `every` meanwhile.
async fn stay_inside(
    link: &Mutex<Link>,
    acquired: &Held,
    tokens: &[(Option<char>, u64)],
    hold: Duration,
    every: Duration,
) -> anyhow::Result<()> {
    let until = Instant::now() + hold;
    loop {
        let next = (Instant::now() + every).min(until);
        if tokio::time::timeout_at(next, acquired.lost()).await.is_ok() || Instant::now() >= until {
            return Ok(());
        }
        link.lock()
            .await
            .send_claims(Kind::Claim, tokens, &acquired.claims())
            .await?;
    }
}

/// Runs one worker until the judge says stop, the pipe closes, or `--deadline`.
#[expect(
    clippy::too_many_lines,
    reason = "the worker's loop: wait, acquire, section, release, read top to bottom"
)]
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let deadline = Instant::now() + args.deadline;
    let link = Arc::new(Mutex::new(Link {
        out: tokio::io::stdout(),
        input: BufReader::new(tokio::io::stdin()),
        id: args.id,
        seq: 0,
        stop: false,
        hold: None,
        mode: None,
        lock: None,
        until: None,
        exit: false,
        next: None,
        reads: false,
        line: String::new(),
    }));
    let proxy = own_proxy(&args)?;
    let client = connect_until(&args, proxy.as_ref(), &link, deadline).await?;
    let mut lock = client.lock(LOCK).ttl(args.ttl).wait(args.wait);
    if args.min_replicas > 0 {
        lock = lock.min_replicas(args.min_replicas, Duration::from_millis(100));
    }
    let mut jitter = Jitter(u64::from(std::process::id()) | 1);
    if args.storm {
        let link = Arc::try_unwrap(link)
            .map_err(|_| anyhow::anyhow!("the pipe to the judge is shared"))?
            .into_inner();
        return crate::storm::storm(link, &lock, args.wait, jitter, deadline).await;
    }
    let target = Target::of(&args, &client, lock);
    let claim_every = (args.ttl / 4).max(Duration::from_millis(10));
    // SIGUSR1 from the runner: give up the wait under way (its future dropped, as a
    // timeout or a `select!` of the application's does), reported as `CANCEL`.
    let mut give_up = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::user_defined1())
        .context("listening for SIGUSR1")?;
    while !link.lock().await.stop && Instant::now() < deadline {
        let next = {
            let mut link = link.lock().await;
            link.next.take().or(link.reads.then_some(Next::Read))
        };
        let many = next == Some(Next::Many) && matches!(target, Target::Semaphore(_));
        let mode = target.mode_of(next, &mut jitter);
        {
            let mut link = link.lock().await;
            link.mode = mode;
            link.send_bounded(Kind::Wait, 0, Some(args.wait)).await?;
        }
        let attempt = tokio::select! {
            got = target.acquire(mode, many, &mut jitter) => Some(got),
            _ = give_up.recv() => None,
        };
        let acquired = match attempt {
            None => {
                link.lock().await.send(Kind::Cancel, 0).await?;
                continue;
            }
            Some(Ok(acquired)) => acquired,
            Some(Err(redlease::Error::Timeout { .. })) => {
                link.lock().await.send(Kind::Timeout, 0).await?;
                continue;
            }
            Some(Err(_)) => {
                link.lock().await.send(Kind::Error, 0).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let tokens = acquired.tokens();
        let tokens = tokens.as_slice();
        link.lock().await.send_each(Kind::Acquire, tokens).await?;
        if many {
            // 2 permits are not what the judge counts (a holder holds one): given back at
            // once, without a section. The runner's round meant this attempt to be killed
            // while it waited and says so when it was not.
            link.lock().await.send_each(Kind::Release, tokens).await?;
            let _ = acquired.release().await;
            continue;
        }
        if args.shorten.is_some()
            && let Held::Guard(guard) = acquired
        {
            let how = Shorten::of(&args, proxy.as_ref(), &mut jitter);
            shortened_hold(&mut *link.lock().await, guard, tokens[0].1, how).await?;
            continue;
        }
        let work = jitter.work();
        let section = async {
            let hold = {
                let mut link = link.lock().await;
                // The guard's claim at entry: the checker compares the workers' claims.
                link.send_claims(Kind::Begin, tokens, &acquired.claims())
                    .await?;
                link.hold.take()
            };
            match hold {
                None => tokio::time::sleep(work).await,
                // A fault is coming while we hold: stay inside until the lease is lost
                // (the application stops its work then), at most `hold`, saying every
                // quarter lease what the guard claims now (renewals move it on).
                Some(hold) => stay_inside(&link, &acquired, tokens, hold, claim_every).await?,
            }
            // The write goes out whatever happened meanwhile: the process does not know
            // it was paused; the fenced resource must catch a stale one.
            link.lock().await.send_each(Kind::Write, tokens).await?;
            link.lock().await.send_each(Kind::End, tokens).await?;
            anyhow::Ok(())
        };
        // Reports the loss the moment it is seen. It needs the pipe, which the section
        // may hold while it waits for the judge's answer: both are polled together, so
        // that neither waits on the other. The watch is dropped only while it waits
        // for the pipe or the loss (never half-way through a send: the section cannot
        // finish while the watch holds the pipe, and the pipe's mutex is fair).
        let lost_reported = {
            // A multi-lock's worker stops believing it holds any of its names once one is
            // lost: a loss is reported for each.
            let watch = async {
                acquired.lost().await;
                link.lock().await.send_each(Kind::Lost, tokens).await?;
                anyhow::Ok(())
            };
            tokio::pin!(section, watch);
            tokio::select! {
                done = &mut section => {
                    done?;
                    false
                }
                sent = &mut watch => {
                    sent?;
                    section.await?;
                    true
                }
            }
        };
        link.lock().await.send_each(Kind::Release, tokens).await?;
        let tokens = tokens.to_vec();
        if let Err(redlease::Error::Lost { .. }) = acquired.release().await
            && !lost_reported
        {
            link.lock().await.send_each(Kind::Lost, &tokens).await?;
        }
        if link.lock().await.exit {
            // The process ends right after its release, and every task of its client with
            // it (the runner records its departure when it has reaped it).
            return Ok(ExitCode::SUCCESS);
        }
    }
    // The client's estimate of the server's clock rate, in millionths (0: none), rides on
    // the `BYE` as its token: the runner reports it for the clock rows.
    link.lock().await.send(Kind::Bye, rate_ppm(&client)).await?;
    Ok(ExitCode::SUCCESS)
}

/// The proxy of this worker's own that `--shorten-fault slow` needs, to the server of
/// `--url`.
fn own_proxy(args: &WorkerArgs) -> anyhow::Result<Option<redlease_local::Proxy>> {
    if args.shorten_fault != Some(ShortenHow::Slow) {
        return Ok(None);
    }
    let port = port_of(&args.urls[0]).context("the port of --url")?;
    Ok(Some(redlease_local::Proxy::start(port)?))
}

/// The client's estimate of the server's clock rate, in millionths (0: none): the token
/// of the worker's `BYE`, which the runner reports for the clock rows.
fn rate_ppm(client: &redlease::Client) -> u64 {
    client
        .server_clock_rate()
        .and_then(|r| format!("{:.0}", r * 1e6).parse().ok())
        .unwrap_or(0)
}

/// The port of a `redis://[user:password@]host:port[/db]` URL.
fn port_of(url: &str) -> Option<u16> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = host_port.split('/').next()?;
    host_port.rsplit_once(':')?.1.parse().ok()
}

impl<'a> Shorten<'a> {
    /// As `args` ask, to the short ttl of `--shorten` (`proxy`: the worker's own).
    fn of(
        args: &WorkerArgs,
        proxy: Option<&'a redlease_local::Proxy>,
        jitter: &'a mut Jitter,
    ) -> Self {
        Shorten {
            ttl: args.shorten.unwrap_or_default(),
            drop: (args.shorten_fault == Some(ShortenHow::Dropped)).then_some(jitter),
            slow: proxy.zip(args.response_timeout).map(|(p, t)| (p, t * 2)),
            full: args.ttl,
        }
    }
}

/// A hold of a lock whose section shortens its lease (see [`shortened_section`]), then
/// its release.
async fn shortened_hold(
    link: &mut Link,
    guard: redlease::Guard,
    token: u64,
    how: Shorten<'_>,
) -> anyhow::Result<()> {
    let (guard, lost_reported) = shortened_section(link, guard, token, how).await?;
    link.send(Kind::Release, token).await?;
    if let Err(redlease::Error::Lost { .. }) = guard.release().await
        && !lost_reported
    {
        link.send(Kind::Lost, token).await?;
    }
    Ok(())
}

/// How a [`shortened_section`] extends its lease.
struct Shorten<'a> {
    /// The shorter ttl.
    ttl: Duration,
    /// Drop the extend's future at a random 0-60 ms (drawn from this).
    drop: Option<&'a mut Jitter>,
    /// Hold every reply back this long at this proxy while the extend is in flight.
    slow: Option<(&'a redlease_local::Proxy, Duration)>,
    /// The lease's own ttl.
    full: Duration,
}

/// A section in which the holder shortens its lease: `BEGIN` with the guard's claim, an
/// extend to `how.ttl` (dropped, or answered too late, as `how` says; the latter after an
/// extend to the lease's own ttl answered at once, with its `CLAIM`), announced by a
/// `CLAIM` of the short ttl from now, a `CLAIM` with what the guard claims after it, then inside while the guard claims at least a quarter
/// of the short ttl, at most two short ttls, with a `CLAIM` every quarter of it (renewals
/// at the short ttl move it on); then `WRITE` and `END`. A guard that kept its old claim
/// after an extend that shortened the lease in Redis stays inside after the lease ran
/// out there: the next holder's claim meets its own. Returns the guard and whether a
/// loss was reported.
async fn shortened_section(
    link: &mut Link,
    mut guard: redlease::Guard,
    token: u64,
    how: Shorten<'_>,
) -> anyhow::Result<(redlease::Guard, bool)> {
    let short = how.ttl;
    link.until = claim(|| guard.remaining());
    link.send(Kind::Begin, token).await?;
    if let Some((proxy, delay)) = how.slow {
        // An extend to the lease's own ttl first, answered at once: it loads the script
        // (after a flush), so that the slow extend runs at its first request instead of
        // waiting for a `NOSCRIPT` held back by the proxy and never running.
        if guard.extend(how.full).await.is_ok() {
            link.until = claim(|| guard.remaining());
            link.send(Kind::Claim, token).await?;
        }
        proxy.delay_replies(delay);
    }
    // The guard lowers its claim when it sends the extend, but cannot be read while the
    // extend is in flight (it is borrowed), which may outlast the short lease (a slow
    // reply): the worker announces the bound a true guard keeps to from now on, and the
    // guard's own claim once the extend returned. A guard that claims more then meets the
    // next holder's claim (a claim raised runs on from the announcement).
    link.until = claim(|| short);
    link.send(Kind::Claim, token).await?;
    let extend = guard.extend(short);
    match how.drop {
        Some(jitter) => {
            let after = Duration::from_millis(jitter.below(61));
            let _ = tokio::time::timeout(after, extend).await;
        }
        None => {
            let _ = extend.await;
        }
    }
    if let Some((proxy, _)) = how.slow {
        proxy.delay_replies(Duration::ZERO);
    }
    link.until = claim(|| guard.remaining());
    link.send(Kind::Claim, token).await?;
    let quarter = (short / 4).max(Duration::from_millis(5));
    let until = Instant::now() + short * 2;
    let mut lost = false;
    loop {
        let left = guard.remaining().saturating_sub(quarter);
        if left.is_zero() || Instant::now() >= until {
            break;
        }
        let next = (Instant::now() + quarter.min(left)).min(until);
        if tokio::time::timeout_at(next, guard.lost()).await.is_ok() {
            link.send(Kind::Lost, token).await?;
            lost = true;
            break;
        }
        link.until = claim(|| guard.remaining());
        link.send(Kind::Claim, token).await?;
    }
    link.send(Kind::Write, token).await?;
    link.send(Kind::End, token).await?;
    Ok((guard, lost))
}
