//! The command line of `redlease run`: its flags, their checks, and what they ask for
//! (the primitive, the names, the wait, the ttl and the kill deadline).

use std::ffi::OsString;
use std::time::Duration;

use redlease::Wait;

use crate::connect::RedisArgs;
use crate::output::{echo, human};

/// `--help` of `redlease run`.
pub(crate) const LONG_ABOUT: &str = "\
Run a command while holding a distributed lock: one instance of a cron job or deploy
script across many machines (a distributed flock(1)).

redlease takes the lock NAME (Redis key PREFIX+NAME) with a lease of --ttl, waiting up to
--wait for it when it is busy, then runs CMD with its arguments. While CMD runs the lease
is renewed every ttl/4, so CMD may run for longer than the TTL, while a crashed machine
frees the lock within one TTL. When CMD exits, however it exits, the lock is released and
redlease exits with CMD's exit code.

Instead of the lock, --permits N holds one of N permits of the semaphore NAME: at most N
commands run at once (say, 3 concurrent backups), the others wait in line (FIFO) for a
permit. --take M (with --permits N, 1 <= M <= N) holds M of them at once, as one lease and
one fencing token: a heavy job that counts for M; a run asking for M waits at the head of
the line until M permits are free, and the runs behind it wait too. --read and --write take the read-write lock NAME: any number of --read runs share
it, a --write run holds it alone, and a waiting --write run stops later --read runs until
it has had its turn. Everything else (waiting, renewal, environment, signals, loss,
supervisor, exit codes) is the same for all three. A name is one kind at a time: a lock, a
semaphore or a read-write lock; every run of a semaphore must give the same N. Semaphores
are refused over a quorum (several --redis): a permit counted on a majority of nodes
would not be sound.

--key given several times holds several locks at once, all or nothing: \"move money
between two accounts, locking both\". The names are taken one by one in one order (sorted;
a name given twice is one name), within the one --wait, so two runs over overlapping
names never deadlock whatever order they name them in; while a run waits it holds the
names before the one it waits for, and when the wait runs out it gives back what it took
(exit 75, naming the lock still busy). Each name is a plain lock (a run with a single
--key of that name excludes it too) with its own lease and fencing token; losing any of
them is losing the hold (exit 79, below). Not with --permits, --read or --write.

--elect NAME campaigns in the leader election NAME instead: \"exactly one active
scheduler\". Candidates wait in line (FIFO), by default as long as it takes; CMD starts
once this run leads and is terminated if leadership is lost, as with a lost lock (exit
79). When CMD exits the run resigns and the next candidate leads. Its note (host, pid,
CMD's name) and term are what redlease leader --elect NAME shows. Leadership is the lock NAME:
not with --key, --permits, --read or --write.

CMD's environment gets:
  REDLEASE_FENCING_TOKEN   a number larger than that of every earlier holder of the lock:
                           hand it to the resource you write to, so that it can refuse
                           writes from a holder that outlived its lease. With several
                           --key, the first --key's; with --elect, the term
  REDLEASE_KEY             the lock's name (NAME); the first --key, or the --elect NAME
  REDLEASE_KEYS            every name held, in the order given, separated by spaces
  REDLEASE_FENCING_TOKENS  NAME=TOKEN for every name held, in the order given, separated
                           by spaces (e.g. \"from=12 to=7\")
                           In these two lists a space, =, % or control character in a
                           name is written %XX as in a URL (\"x y\" is x%20y, \"p=q\" is
                           p%3Dq), so they always split back; other names stand as given
  REDLEASE_TERM            with --elect: the leader's term (its fencing token)
  REDLEASE_PROCLAIM        with --elect: where CMD's `redlease proclaim NOTE` asks this run
                           to change the leader's note (a socket in a directory only this
                           user can enter; no secret: this run proclaims, while it leads)

SIGINT, SIGTERM and SIGHUP sent to redlease are passed on to CMD's process group. CMD runs
in a process group of its own (shared only with its supervisor, below), so that it and
the processes it starts can be stopped together; it is therefore not the terminal's
foreground job (programs that read the terminal interactively are not a good fit).

If the lease is lost while CMD runs (renewal found the key gone or taken, or could not
reach Redis for the rest of the lease), another holder may already be running: CMD's
process group gets SIGTERM, then SIGKILL after --kill-after, and redlease exits with 79.
The same for any one lease of several --key, and for leadership with --elect.

If redlease itself dies while CMD runs, even by a signal it cannot handle (SIGKILL from
kill -9 or the OOM killer), the lease is no longer renewed and another holder gets the
lock within one TTL: so CMD must not run on. A small supervisor process between redlease
and CMD (`redlease __supervise` in ps; it leads CMD's process group and passes CMD's exit
code through) then gives CMD's process group SIGTERM at once, then SIGKILL after
--kill-after. The lease still has about three quarters of --ttl left when redlease dies
(it is renewed every ttl/4): --kill-after must be below that, less the drift allowance
(ttl/100 + 2ms) and the margin below (ttl/20), so that CMD is gone before anyone else can
take the lock; redlease refuses a longer one (exit 2). Without --kill-after it is a third
of --ttl, at most 10s.

If redlease lives on but stops renewing, because it is stopped (SIGSTOP, Ctrl-Z, a
debugger) or Redis does not answer, the supervisor acts too: a stopped process cannot
stop CMD. redlease moves the lease's end as it knows it (reckoned from when the renewal
was sent, less the drift allowance) forward with every renewal, and unless it moves, the
supervisor gives CMD's process group SIGTERM --kill-after before, and SIGKILL a margin of
ttl/20 before, that end: CMD is gone at least ttl/20 + ttl/100 + 2ms before Redis can
expire the lease. A redlease that resumes then says so and exits with 79. A machine that
stalls as a whole (a paused VM) stops the supervisor with it; it acts as soon as the
machine runs again, which may be too late: the fencing token protects the resource then.

The holder's details recorded beside the lock (see redlease status) are this host, this
pid and CMD's program name, never its arguments.

A run that finds the lock busy exits with 75 and one line on stderr naming the holder;
-q/--quiet leaves the line out (cron mails every line a job prints). -E/--conflict-exit-code
N exits with N instead of 69, 75 and 79 (unreachable, busy, lost), so that a wrapper can
tell them from CMD's own exit codes (flock -E).

Examples:
  # crontab: at most one nightly report across all machines; skip quietly if one is running
  0 3 * * *  redlease run --key nightly-report --no-wait --quiet -- /opt/report/run.sh

  # a deploy that waits up to 5 minutes for the previous one
  redlease run --key deploy-prod --wait 5m --ttl 1m -- ./deploy.sh v1.2.3

  # pass the fencing token on to the protected resource
  redlease run --key ledger -- sh -c 'ledger-write --fence \"$REDLEASE_FENCING_TOKEN\"'

  # at most 3 backups at once across the fleet; the 4th waits for a permit
  redlease run --key backups --permits 3 --wait forever -- ./backup.sh

  # a full backup counts for 2 of the 3 slots
  redlease run --key backups --permits 3 --take 2 --wait forever -- ./backup.sh --full

  # readers of a cache run side by side; its rebuild runs alone
  redlease run --key cache --read -- ./copy-cache.sh
  redlease run --key cache --write --wait 10m -- ./rebuild-cache.sh

  # a transfer holds both accounts; one in the other direction never deadlocks with it
  redlease run --key account:7 --key account:3 -- sh -c 'transfer 7 3 100 --fences \"$REDLEASE_FENCING_TOKENS\"'

  # one active scheduler across the fleet; the others stand by and take over
  redlease run --elect scheduler -- sh -c 'exec ./scheduler --term \"$REDLEASE_TERM\"'

  # TLS and ACL credentials come with the URL
  REDIS_URL='rediss://locker:secret@redis.internal:6380' redlease run --key job -- ./job";

/// Arguments of `redlease run`.
#[derive(Debug, clap::Args)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "clap's switches: each bool is one flag of the command line"
)]
pub(crate) struct RunArgs {
    /// Name of the lock to hold while CMD runs (of the semaphore with --permits, of the
    /// read-write lock with --read or --write). Repeat it to hold several locks at once,
    /// all or nothing (not with --permits, --read or --write)
    #[arg(
        long,
        short = 'k',
        value_name = "NAME",
        required_unless_present = "elect"
    )]
    pub(super) key: Vec<String>,

    /// Campaign in leader election NAME and run CMD while leading: CMD starts once this
    /// run leads and is terminated if leadership is lost. Waits forever unless --wait or
    /// --no-wait says otherwise
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["key", "permits", "read", "write"]
    )]
    pub(super) elect: Option<String>,

    /// Hold one of N permits of semaphore NAME instead of the lock: at most N commands run
    /// at once across all machines. Every run of NAME must give the same N (1 or more)
    #[arg(long, value_name = "N", value_parser = parse_permits, conflicts_with_all = ["read", "write"])]
    pub(super) permits: Option<u32>,

    /// With --permits: hold M of the semaphore's permits at once instead of one (a heavy
    /// job counts for M), as one lease and one fencing token; 1..N. A request for M waits
    /// in the queue until M permits are free, and later ones wait behind it
    #[arg(long, value_name = "M", value_parser = parse_take, requires = "permits")]
    pub(super) take: Option<u32>,

    /// Take read-write lock NAME for reading: runs with --read share it with each other,
    /// never with a run with --write
    #[arg(long, conflicts_with = "write")]
    pub(super) read: bool,

    /// Take read-write lock NAME for writing: alone, no --read or --write run beside it; a
    /// waiting writer stops later readers
    #[arg(long)]
    pub(super) write: bool,

    /// Lease length: how soon the lock frees itself if this machine dies (renewed every
    /// ttl/4 while CMD runs), 10ms..30days
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TTL_TEXT.as_str(), value_parser = parse_ttl)]
    pub(super) ttl: Duration,

    /// How long to wait for a busy lock (for leadership with --elect) before giving up
    /// with exit code 75; `forever` to wait as long as it takes [default: 10s; forever with
    /// --elect]
    #[arg(long, value_name = "DURATION", value_parser = parse_wait)]
    pub(super) wait: Option<WaitArg>,

    /// Do not wait: exit with 75 at once if the lock is busy
    #[arg(long, conflicts_with = "wait")]
    pub(super) no_wait: bool,

    /// When the lease is lost, or redlease dies or stops renewing, how long CMD's process
    /// group has between SIGTERM and SIGKILL; shorter than two thirds of --ttl less its
    /// drift allowance (the lease left when redlease dies) and ttl/20 (the margin), else
    /// refused [default: a third of --ttl, at most 10s]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub(super) kill_after: Option<Duration>,

    /// Say nothing when the lock is busy: exit with 75 (or -E's N) without the line on
    /// stderr, e.g. for a cron job whose skipped runs are no news. Errors, a lost lease and
    /// renewal warnings are still said
    #[arg(long, short = 'q')]
    pub(super) quiet: bool,

    /// Exit with N instead of 69 (Redis unreachable), 75 (busy) and 79 (lease lost), so
    /// that they cannot be taken for CMD's own exit codes (as flock -E); 1..255
    #[arg(
        long,
        short = 'E',
        value_name = "N",
        value_parser = clap::value_parser!(u8).range(1..)
    )]
    pub(super) conflict_exit_code: Option<u8>,

    /// The connection options (global: before or after the subcommand), set by `main`.
    #[arg(skip)]
    pub(crate) redis: RedisArgs,

    /// Hold one count of the latch `--key` instead of a lock (`redlease latch count`).
    #[arg(skip)]
    pub(super) latch: bool,

    /// The command to run, and its arguments (after `--` if they start with `-`)
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub(super) command: Vec<OsString>,
}

/// `--wait`: a duration or `forever`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WaitArg(Wait);

impl WaitArg {
    /// The wait it gives.
    pub(crate) fn wait(self) -> Wait {
        self.0
    }
}

pub(crate) fn parse_wait(text: &str) -> Result<WaitArg, String> {
    if matches!(text, "forever" | "inf" | "infinity") {
        return Ok(WaitArg(Wait::Forever));
    }
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d > redlease::MAX_TTL {
        return Err("longer than 30 days; use `forever`".into());
    }
    Ok(WaitArg(Wait::For(d)))
}

fn parse_permits(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("0 permits would let no command run; give 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{e}; give a whole number of permits, 1 or more")),
    }
}

fn parse_take(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err("--take 0 would hold no permit; give 1 or more (at most --permits)".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!(
            "{e}; give a whole number of permits to take, 1 or more"
        )),
    }
}

pub(crate) fn parse_ttl(text: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| e.to_string())?;
    if d < redlease::MIN_TTL || d > redlease::MAX_TTL {
        return Err("out of range; use 10ms to 30days".into());
    }
    Ok(d)
}

/// What `run` holds while CMD runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Primitive {
    /// The lock (the default, one `--key`).
    Lock,
    /// Several locks, all or nothing (`--key` given with several names).
    Multi,
    /// `take` of N permits of a semaphore at once (`--permits N`, `--take M`; 1 without).
    Semaphore { permits: u32, take: u32 },
    /// A read-write lock for reading (`--read`).
    Read,
    /// A read-write lock for writing (`--write`).
    Write,
    /// Leadership of an election (`--elect`).
    Leader,
    /// One count of a latch (`redlease latch count`).
    Count,
}

impl RunArgs {
    /// `redlease latch count`: CMD run holding one count of latch `name`, with `run`'s
    /// supervision, signals and exit codes.
    pub(crate) fn latch_count(
        name: String,
        ttl: Duration,
        kill_after: Option<Duration>,
        conflict_exit_code: Option<u8>,
        command: Vec<OsString>,
    ) -> Self {
        Self {
            key: vec![name],
            elect: None,
            permits: None,
            take: None,
            read: false,
            write: false,
            ttl,
            wait: None,
            no_wait: false,
            kill_after,
            quiet: false,
            conflict_exit_code,
            redis: RedisArgs::default(),
            latch: true,
            command,
        }
    }

    pub(super) fn primitive(&self) -> Primitive {
        if self.elect.is_some() {
            return Primitive::Leader;
        }
        if self.latch {
            return Primitive::Count;
        }
        match (self.permits, self.read, self.write) {
            (Some(permits), _, _) => Primitive::Semaphore {
                permits,
                take: self.take.unwrap_or(1),
            },
            (None, true, _) => Primitive::Read,
            (None, false, true) => Primitive::Write,
            (None, false, false) if self.names().len() > 1 => Primitive::Multi,
            (None, false, false) => Primitive::Lock,
        }
    }

    /// The names held, in the order given, each once: the `--key`s, or the `--elect` name.
    pub(super) fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for name in self.elect.iter().chain(&self.key) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        names
    }

    /// The first name held: the first `--key`, or the `--elect` name.
    pub(super) fn first(&self) -> &str {
        self.elect
            .as_deref()
            .or_else(|| self.key.first().map(String::as_str))
            .unwrap_or_default()
    }

    /// How long CMD's process group has between SIGTERM and SIGKILL: `--kill-after`, else
    /// a third of the ttl, at most [`DEFAULT_KILL_AFTER`].
    pub(super) fn kill_after(&self) -> Duration {
        self.kill_after
            .unwrap_or_else(|| (self.ttl / 3).min(DEFAULT_KILL_AFTER))
    }

    /// The exit code for `code` (one of [`exit::UNAVAILABLE`], [`exit::BUSY`],
    /// [`exit::LOST`]): `--conflict-exit-code` when given.
    pub(crate) fn conflict(&self, code: u8) -> u8 {
        self.conflict_exit_code.unwrap_or(code)
    }

    /// The combinations clap cannot refuse by itself; the message for a usage error.
    pub(crate) fn check(&self) -> Result<(), String> {
        let lease_left = lease_left_at_death(self.ttl);
        let below = lease_left.saturating_sub(kill_margin(self.ttl));
        if self.kill_after() >= below {
            return Err(format!(
                "--kill-after {} outlives the lease: when redlease dies the lease of --ttl {} may have only {} left (renewed every ttl/4, less the drift allowance), and CMD must be gone {} (ttl/20) before that, or the next holder could start while CMD still runs; give a --kill-after below {} or a longer --ttl",
                human(self.kill_after()),
                human(self.ttl),
                human(lease_left),
                human(kill_margin(self.ttl)),
                human(below),
            ));
        }
        if let (Some(permits), Some(take)) = (self.permits, self.take)
            && take > permits
        {
            return Err(format!(
                "--take {take} asks for more permits than the semaphore has (--permits {permits}); such a run could never start: give --take {permits} or less"
            ));
        }
        let names = self.names().len();
        if names > 1 {
            let with = match (self.permits, self.read, self.write) {
                (Some(_), _, _) => Some("--permits"),
                (None, true, _) => Some("--read"),
                (None, false, true) => Some("--write"),
                (None, false, false) => None,
            };
            if let Some(with) = with {
                return Err(format!(
                    "--key given {names} names with {with}, which holds one name; several --key hold several plain locks: give one --key with {with}"
                ));
            }
        }
        Ok(())
    }

    /// How long to wait: `--no-wait`, `--wait`, else the library's default
    /// (`redlease::DEFAULT_WAIT`, 10 s; forever for leadership).
    pub(super) fn wait(&self) -> Wait {
        match (self.no_wait, self.wait, self.primitive()) {
            (true, _, _) => Wait::No,
            (false, Some(wait), _) => wait.0,
            (false, None, Primitive::Leader) => Wait::Forever,
            (false, None, _) => redlease::DEFAULT_WAIT,
        }
    }

    /// How messages name what is held: ``lock `job` ``, ``locks `a`, `b` ``, ``semaphore
    /// `pool` (3 permits)``, ``read-write lock `cfg` (write)``, ``election `sched` ``.
    pub(super) fn what(&self) -> String {
        if self.primitive() == Primitive::Multi {
            let names: Vec<String> = self
                .names()
                .iter()
                .map(|n| format!("`{}`", echo(n)))
                .collect();
            return format!("locks {}", names.join(", "));
        }
        self.named(self.first(), None)
    }

    /// As [`RunArgs::what`] for `name` (one of the names held), with `key` in the
    /// parentheses: ``lock `job` (key redlease:job)``, ``semaphore `pool` (key
    /// redlease:pool, 3 permits)``, ``lock `b` (key redlease:b, one of locks `a`, `b`)``.
    pub(super) fn named(&self, name: &str, key: Option<&str>) -> String {
        let (noun, detail) = match self.primitive() {
            Primitive::Lock => ("lock", None),
            Primitive::Multi => ("lock", Some(format!("one of {}", self.what()))),
            Primitive::Semaphore { permits, take } => {
                let of = if permits == 1 { "permit" } else { "permits" };
                let taking = if take > 1 {
                    format!(", taking {take}")
                } else {
                    String::new()
                };
                ("semaphore", Some(format!("{permits} {of}{taking}")))
            }
            Primitive::Read => ("read-write lock", Some("read".to_owned())),
            Primitive::Write => ("read-write lock", Some("write".to_owned())),
            Primitive::Leader => ("election", None),
            Primitive::Count => ("latch", Some("one count".to_owned())),
        };
        let key = key.map(|k| format!("key {}", echo(k)));
        let inner: Vec<String> = key.into_iter().chain(detail).collect();
        let name = echo(name);
        if inner.is_empty() {
            format!("{noun} `{name}`")
        } else {
            format!("{noun} `{name}` ({})", inner.join(", "))
        }
    }
}

/// `--ttl`'s default: the library's (`redlease::DEFAULT_TTL`), written as humantime.
pub(crate) static DEFAULT_TTL_TEXT: std::sync::LazyLock<String> =
    std::sync::LazyLock::new(|| humantime::format_duration(redlease::DEFAULT_TTL).to_string());

/// The longest default `--kill-after` (a third of the ttl when that is shorter).
const DEFAULT_KILL_AFTER: Duration = Duration::from_secs(10);

/// The least lease a `run` with `ttl` can have left in Redis when it dies while renewals
/// keep their schedule: the ttl less a renewal period (the library renews every ttl/4),
/// less the drift allowance by which the holder's clock may run slow against the server's.
fn lease_left_at_death(ttl: Duration) -> Duration {
    ttl.saturating_sub(redlease::diagnostics::renewal_period(ttl))
        .saturating_sub(redlease::diagnostics::drift(ttl))
}

/// How long before the end of its lease (as `run` knows it) CMD's process group gets
/// SIGKILL when `run` stops renewing: a twentieth of the ttl, for the supervisor to wake
/// and the kernel to end the group on a loaded machine, on top of the drift allowance the
/// lease's end already leaves before Redis' expiry.
pub(super) fn kill_margin(ttl: Duration) -> Duration {
    ttl / 20
}
