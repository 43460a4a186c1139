//! RELIABILITY.md: the matrix as a table, with what redlease promises.

use std::fmt::Write as _;
use std::time::Duration;

use crate::scenario::Promise;
use crate::scenarios::{Budget, Outcome};

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.1}", d.as_secs_f64() * 1000.0),
    )
}

/// The verdict column: safety, then the liveness target where it is promised.
pub(crate) fn verdict(o: &Outcome) -> String {
    let safety = safety_verdict(o);
    if o.late > 0 {
        return format!("{safety}; **{} round(s) past the bound**", o.late);
    }
    if !o.live {
        return safety.to_owned();
    }
    if o.kept_liveness() {
        format!("{safety}; live")
    } else {
        format!("{safety}; **liveness target missed**")
    }
}

fn safety_verdict(o: &Outcome) -> &'static str {
    let f = &o.findings;
    match o.promise {
        _ if !o.kept_promise() => "**UNEXPECTED VIOLATION**",
        Promise::Fenced if f.overlaps + f.mutex_violations > 0 => {
            "fenced safety held; overlaps as expected"
        }
        Promise::Exclusive | Promise::Fenced => "held",
        Promise::DataLoss if !f.is_safe() => {
            "fenced safety held; exclusion broken by the data loss, as admitted"
        }
        Promise::DataLoss => "held (no exclusion broken this time)",
        Promise::ClockBroken if f.claim_overlaps > 0 => {
            "fenced safety held; claims outlived their keys, as the broken clock admits"
        }
        Promise::ClockBroken if !f.is_safe() => {
            "fenced safety held; exclusion broken, as the broken clock admits"
        }
        Promise::ClockBroken => "held (no claim outlived its key this time)",
    }
}

fn promise(o: &Outcome) -> String {
    let safety = match o.promise {
        Promise::Exclusive => "exclusive + fenced",
        Promise::Fenced => "fenced only",
        Promise::DataLoss => "fenced (data loss)",
        Promise::ClockBroken => "fenced only (clock assumption broken)",
    };
    if o.live {
        format!("{safety} + live")
    } else {
        safety.to_owned()
    }
}

/// `N (M ms)`: stalls after a holder's death and the longest.
fn deaths(l: &redlease_chaos::Liveness) -> String {
    match l.longest_after_death {
        Some(d) => format!("{} ({})", l.after_death, ms(Some(d))),
        None => "-".to_owned(),
    }
}

/// `N`, or `N (M run out at entry)`: overlapping claims, and claims already run out when
/// their section began.
fn claims(f: &redlease_chaos::Findings) -> String {
    if f.claims_expired > 0 {
        format!(
            "{} ({} run out at entry)",
            f.claim_overlaps, f.claims_expired
        )
    } else {
        f.claim_overlaps.to_string()
    }
}

/// The table of a run.
pub(crate) fn table(outcomes: &[Outcome]) -> String {
    let mut out = String::from(
        "| fault | promise | expected | sections | faults | stale writes accepted | stale writes rejected | overlaps | overlapping claims | most inside at once | mutex violations | tokens backwards | leases lost | acquire errors | takeover p50/p99 ms | detect p50/p99 ms | stalls > 100 ms | longest stall ms | stalls after SIGKILL (longest ms) | waits over bound | verdict |\n\
         |---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n",
    );
    for o in outcomes {
        let f = &o.findings;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {}/{}{} | {} | {} | {} | {} | {} |",
            o.name,
            promise(o),
            o.expected,
            f.sections,
            o.injected,
            f.stale_accepted,
            f.stale_rejected,
            f.overlaps,
            claims(f),
            f.most_inside,
            f.mutex_violations,
            f.tokens_backwards,
            f.lost,
            f.errors,
            ms(f.takeover.p50),
            ms(f.takeover.p99),
            ms(f.detect.p50),
            ms(f.detect.p99),
            if f.undetected > 0 {
                format!(" ({} undetected)", f.undetected)
            } else {
                String::new()
            },
            f.liveness.over_limit,
            ms(f.liveness.longest),
            deaths(&f.liveness),
            f.liveness.overruns,
            verdict(o),
        );
    }
    out
}

/// What the semaphore, read-write lock, multi-lock and election rows run and count.
const PRIMITIVES: &str =
    "The *semaphore 2* rows run workers that each hold one of 2 permits of a semaphore, the
*rwlock* rows workers that take the write side of a read-write lock in one attempt in
three (at random) and the read side otherwise. There *overlaps* count the BEGINs that
broke the primitive's rule: a 3rd holder of the semaphore inside (a capacity violation),
or a writer beginning with anyone inside or a reader with a writer inside (a writer
overlap); readers inside together are not one. *Mutex violations* compare the history
with a model of the primitive the same way. A reader's WRITE is a read of the fenced
resource: accepted with a token no lower than the last accepted write, while a writer's
needs a token no lower than the last accepted read or write. The semaphore's holders are
concurrent, so their tokens cannot order writes to one resource: each holder writes a
resource of its own (as the jobs a semaphore caps do), and *tokens backwards* checks that
every token is new and above every token reported before its holder began to wait. A
semaphore stall is a stretch where fewer than 2 workers held a permit while one wanted
it; a killed holder's permit counts as *after SIGKILL* until 2 hold again. A read-write
lock stall is, as for the lock, nobody holding while someone wants it (a writer waiting
behind readers is not one); a killed holder's hold counts as *after SIGKILL* until a
grant it would have kept out. In the SIGKILL rows the next round waits for that.
*Takeover* there is the next acquisition by another worker, of any permit or a read
beside live readers, not necessarily of the dead holder's hold.

The *multi-lock* rows run workers that each hold a multi-lock (`client.multi_lock`) of
two names drawn at random, in a random order, out of 4 (`a` to `d`; 4 so that sections over
disjoint pairs may run at once). Each name is a lock of its own: a worker reports its
acquisition, BEGIN, WRITE, END, release and loss once per name, each with that name's
fencing token, and every figure is counted per name. *Overlaps* count BEGINs on a name
another live worker was inside (a section holding {a, b} overlaps any other holding a or
b; *most inside at once* reaching 2 shows disjoint pairs running together); *mutex
violations* model each name as a mutex; the judge keeps one fenced resource per name,
written with that name's token; *tokens backwards* are acquisitions of a name whose token
was not above every earlier one of that name; *leases lost* count names (a worker gives up
its whole section when one of its names is lost, and reports each). A multi-lock stall is
a stretch where nobody held any name while someone waited (not per name: a worker
announces one wait for both names and takes them one by one, so the history cannot tell
when it began to want each); a killed holder's names count as *after SIGKILL* until each
is acquired again, and *takeover* is the next acquisition of one of its names.

The *election* row runs workers that each campaign in one election (`client.election`),
lead for one section and resign: `campaign` is their acquisition and `resign` their
release, and the term (`Leadership::term`, the lease's fencing token) stamps their lines
and their WRITE. Leadership is a lease on the election's lock, so the row counts as the
lock's rows do: two leaders inside at once are an *overlap*, the model is a mutex over the
leadership, and the judge is one fenced resource that must refuse a deposed leader's
stale term; *detect* is SIGCONT of the paused leader → it observed `Leadership::lost()`
(or `Err(Lost)` from `resign`).

The *waiter SIGSTOP* rows aim at the hand-off. A holder is kept inside for half a lease
while the runner pauses (SIGSTOP) a worker waiting in `acquire` behind it (the oldest
waiter, the queue's head most likely; a writer in the read-write lock's row); the holder
leaves, the lock is handed to the paused waiter, its lease runs out in Redis, the next
holder takes over and is kept inside for two leases, and the waiter gets SIGCONT 1.5
leases after its SIGSTOP, while that holder is inside. Awake, the waiter must not believe
it holds: its claim would overlap the holder's (and its section the holder's section). They
run on one Redis (a lock, a semaphore of 1 and of 2 permits, a read-write lock's writers),
where a grant message is trusted, and over a quorum of 5, where an attempt confirms it.
The *waits give up* rows run Redis with an AOF (fsync always), 2 s leases, 200 ms waits and
a 300 ms response timeout: a holder is kept inside across an 800 ms outage (SIGKILL, then a
restart with the data), longer than the response timeout, while the other workers' waits
end (they leave their queue places, or try to); it releases 300 ms after Redis is back. The
hand-off must reach a live waiter: a place left behind would keep the lock for a lease, a
2 s stall. The row's note lists Redis' keys and their PTTL 100 ms after the first round's
release.";

/// What the rows of a lease's whole life run.
const LEASE_LIFE: &str =
    "The *shortening extend* rows run workers that, in every section, extend their lock's
lease to a tenth of the ttl, then stay inside while the guard claims at least a quarter of
that, at most two short ttls. The extend is dropped at a random 0-60 ms while a proxy in
front of Redis delays replies 50-400 ms for 2 s per round; or each worker reaches Redis
through a proxy of its own that holds the replies back for twice the response timeout (a
twentieth of the ttl) while the extend is in flight, so that it runs and then fails, while
the script cache is flushed every 20 ms (an extend to the lease's own ttl, answered at once,
loads the script first). Just before the extend a worker announces the bound a true guard
keeps to from then (the short ttl from now: the guard cannot be read while its extend is in
flight), and once the extend returned it reports the guard's own claim: a guard that kept
its old claim after Redis cut the lease stays inside and its claim meets the next holder's.
With the guard, lease and renewal code of `5ba27a0` these rows counted 33 and 269
overlapping claims (11 and 65 overlaps) in 2 rounds of 10 sections.
The *leadership held while its fencing counter is deleted* row keeps a leader inside for two
leases, deletes the election's fencing counter (as if it had expired during a hold longer
than its week), and asks `leader()` from a client of the runner's for the term right after
and a ttl later (the note says what it read); the next terms must keep growing.
The *redis clock* rows start Redis with an `LD_PRELOAD` shim
(`crates/redlease/tests/clock/fast_clock.c`) that makes its wall clock run x1.005 or x1.05,
and cut the holder off silently for 1.5 leases; each worker's client estimates the server's
clock rate (`Client::server_clock_rate`), and the note gives the estimates and how many were
above the 1.01 allowance, where the client warns. The *cut off silently* rows give every
worker a proxy of its own to one Redis and cut the holder's (nothing passes either way, no
reset, what was sent is delivered at the heal) for 1 s, 5 s, or 8 s at a 200 ms lease (the
40 s heal of a 1 s lease, scaled to a fifth to fit the run; 2 rounds); the note gives when
the holder reported its loss and how soon after the heal it acquired again. A proxy's cut
holds bytes in user space: the kernel's retransmission back-off after a real partition is
not reproduced. The *waiter cut off silently* row keeps a holder inside for half a lease and
silences the link of the oldest worker waiting behind it (every byte dropped either way,
nothing closed: Redis still counts the waiter's grant subscription) once Redis has queued
it; the holder releases and the lock is handed to the cut waiter, which never hears of it.
The hand-off lasts its claim window (a tenth of the ttl, 50 ms to 1 s) until the waiter
confirms it; then the releasing client serves the next waiter. The note gives, per round,
the time from the holder's release to the next holder's acquisition, against the ttl (the
stall when a hand-off lasted a whole lease) and the window, and how soon after the heal (two
leases after the cut) the cut waiter acquired again. With the hand-off code before
`3fa1645` (a hand-off held for the whole lease) the row measured 1002-1006 ms of a 1 s lease
in each of 4 rounds (longest stall 1006.1 ms). Connections that lived through the silence
stay mute after the heal (as if their retransmissions were still backing off): the cut
waiter queues again over a new connection while its grant subscription stays on a mute one
until its health check (every 5 s) replaces it, and each hand-off to it meanwhile costs the
others a window too; those are the other stalls over 100 ms of the row.";

/// What the rows of issue 42 (one hand-off for every primitive) run and bound.
const ISSUE42: &str =
    "The *issue 42* rows give every worker a link of its own to one Redis, as the *cut off
silently* rows do, and bound each round, from its event to the next holder's acquisition
(the workers' send times), by the claim window and 0.5 s (600 ms at a 1 s lease, the bound of
`crates/redlease/tests/handoff_liveness.rs`): a round over it, or with no next holder, fails
the row (its verdict says so and the run exits 3). *Holder's link silenced, first 2 waiters
give up* (5 workers): a holder (a writer for the read-write lock) is kept inside while three
workers queue behind it, read from Redis' queue (each place's waiter details name its
process); its link goes silent (a crash: no renewal, no release), the first two of the queue
give up their waits (SIGUSR1: the worker drops its `acquire` and reports `CANCEL`, then queues
again at the tail), and the round measures from the lease's end in Redis (its PTTL read right
after the silence) to the third one's acquisition. *Releaser exits right after a hand-off to
a waiter cut off silently* (4 workers): the *waiter cut off silently* round, with the
holder's process ending right after its release (the runner reaps it and starts another
worker), so nothing of the releaser is left to serve the next waiter; measured from the
release. *Queued writer SIGKILLed while a reader holds* and *queued request for 2 permits
SIGKILLed while 1 is held* (4 workers): a reader (of a read-write lock whose workers all read
meanwhile), or the holder of one of a semaphore's 2 permits, is kept inside for two leases
while another worker is asked for a write, or for both permits, and queues at the head of the
queue in front of another waiter; the head is killed (SIGKILL) and the round measures from
the kill to the next acquisition by a worker behind it. A head that was not queued in front
of a waiter in time fails its round; a round that found no holder with the waiters it needs
injects nothing (the note says how many).";

/// What the overlapping-claims column counts.
const CLAIMS: &str =
    "*Overlapping claims* judge what the holders *believed*. With each BEGIN a worker sends its
guard's `valid_until`, read on `CLOCK_MONOTONIC` (the clock every process of the machine
shares) and converted to the judge's clock, and again every quarter lease while the runner
keeps it inside on purpose (renewals move it on); the guard's *claim* runs from the BEGIN to
the latest of them, cut where the hold ends for the judge (its REL, sent before the release request; its LOST;
its death or departure). Two claims that meet beyond what the primitive allows (two for a
lock, N + 1 for a semaphore of N permits, a writer's and any other for a read-write lock)
are two holders who believed they held at once, fenced or not. A claim lower than the one
so far (a shortening extend), or run out, holds from its line on. A guard's `valid_until` is
never later than the moment its lease ends in Redis (while Redis' clock runs at most 1 %
fast), so this is 0 in every row but those of data loss and of a clock beyond that, even where a holder paused past its lease overlaps the next holder's section
(its claim ended before the next grant), and a row with an overlapping claim breaks its
promise. In brackets, claims already run out at entry (`acquire` returned a lease with no
validity left).";

/// What the liveness columns count.
const LIVENESS: &str =
    "Liveness columns: every worker announces each wait (`WAIT`, with its bound: the lock's
`wait`, 2 s in the rows marked *live*, 5 s elsewhere) and its end (`ACQ`, `TIMEOUT`, an
error, or `CANCEL` when it dropped the future). A *stall* is a stretch of time during which
no worker held the lock (none between `ACQ` and release, loss or death) while at least one
wanted it (from its `WAIT` until it acquired, left or died: a wait that timed out, failed
or was cancelled is followed at once by the next). That covers both a lock left free and
one held by a token nobody holds (an orphaned attempt, a release that never reached
Redis), which the history cannot tell apart. Time during which the runner had Redis down
on purpose (killed, paused, busy) does not count: only the time it took to come back into
service does. *Stalls > 100 ms* counts those longer than 100 ms and *longest stall* gives
the longest (a prompt hand-off is one of about a millisecond); stalls that began when the
holder was SIGKILLed (the lease must run out) are counted apart under *stalls after
SIGKILL*. *Waits over bound* are waits that ended more than 100 ms after their bound.
Both are timed from when the workers sent their lines (on `CLOCK_MONOTONIC`), not from when
the judge read them: a judge that was not scheduled for a while on a loaded machine stamps
the lines that waited meanwhile late and together, which would lengthen a stall that was
not one (the longest such lag of a row is in the JSON outcomes, `judge_lag`).
The *cancellation storm* rows run workers that drop their `acquire`, `run` and `release`
futures at random points (a deadline 0-60 ms into the wait; after the 1st to 6th poll that
left the future pending, i.e. with an attempt or a release in flight; or right after the
work while `run` releases), as `tokio::time::timeout` or `select!` do; *faults* counts
those drops during the fault rounds. The *restarted with its data* rows run Redis with
`appendonly yes` and `appendfsync always`, so SIGKILL loses nothing it acknowledged: the
lock and the fencing counter survive the outage (the row's note reads the counter before
and after). Their files are on a memory file system (`/dev/shm`, where it exists): a SIGKILL
of the server loses nothing the kernel holds either way, and on this machine's virtual disk
a flush under load took up to 244 ms (Redis' `LATENCY HISTORY aof-fsync-always`), which
delays every reply and every hand-off of the server by as much and would be counted as the
library's stall.";

/// The whole page.
pub(crate) fn page(outcomes: &[Outcome], budget: Budget, took: Duration, machine: &str) -> String {
    let notes = notes(outcomes);
    let lease_life = format!("{LEASE_LIFE}\n\n{ISSUE42}");
    format!(
        "# Reliability of redlease under faults

Measured by `make chaos` (`cargo run --release -p redlease-chaos`), which ran the whole
matrix below in {took} on {machine}. Every row is a fresh set of real `redis-server`
processes on free loopback ports and {workers} worker OS processes (the `redlease-chaos`
binary itself) contending for one lock with a {ttl} lease (renewed every ttl/4). Each
worker loops acquire → BEGIN → work 1-20 ms → WRITE → END → release, and reports every
step to a *judge* in the parent process, which stamps it with one monotonic clock and
answers before the worker goes on (so a holder's END is stamped before it releases, hence
before the next holder's BEGIN). The judge is a fenced resource: it accepts a WRITE only
with a fencing token no lower than the highest it accepted. Faults are real: signals to
worker and server processes, servers restarted empty or with their data, `SCRIPT FLUSH`,
a long-running script, `CLIENT KILL`, a TCP proxy that delays or drops replies, Sentinel
and Cluster failovers, workers dropping their own futures.

Columns: *stale writes accepted* are writes the judge accepted with a token lower than,
or equal to but from another holder than, one already accepted (the fenced resource was
fooled); *stale writes rejected* are the writes fencing caught; *overlaps* are BEGINs
stamped while another live worker was between its BEGIN and END (unfenced exclusion
broken); *mutex violations* compare the ACQ/REL/LOST/KILL history with a mutex (an
acquisition while another worker still believed it held the lock); *tokens backwards*
are acquisitions whose token was not above every earlier one; *takeover* is SIGKILL of
the holder → next acquisition by another worker; *detect* is SIGCONT of a paused holder →
it observed `guard.lost()` (or `Err(Lost)` from release); *most inside at once* is the
most workers seen between BEGIN and END together.

{claims}

{primitives}

{lease_life}

{liveness}

{table}
{notes}
## What redlease promises

- **Fenced safety everywhere**: a resource that checks the fencing token never accepts a
  write from a holder older than one it has seen, whatever happens to the clients (crash,
  pause, slow or lossy network) or to Redis (pause, busy script, script cache flushed,
  and data loss: see below). That is the guarantee to build on.
- **Unfenced mutual exclusion only while the timing assumptions hold**: no process pause
  or clock jump longer than the lease's remaining validity. A holder paused past its
  lease (GC pause, SIGSTOP, swapped-out VM) wakes up believing it holds the lock for an
  instant; redlease reports the loss (`guard.lost()`, `Err(Lost)` on release, `run`
  drops the work) but cannot recall a write already in flight; only fencing does.
- **Redis losing its data** (rows *fenced (data loss)*: a restart without persistence,
  an asynchronous failover, a quorum majority restarted empty, a counter that expired)
  can break exclusion: the lock itself is forgotten, and Redlock admits it for nodes
  restarted at once without persistence (its remedy, delaying the restart by the max TTL,
  restores exclusion). Fencing tokens survive it: every grant takes
  `max(last token + 1, Redis TIME in µs)`, a hybrid clock, so tokens keep growing as long
  as a server's clock does not step back by more than the outage lasted and a promoted
  replica's clock does not trail its old primary's by more than the failover took
  (NTP-synchronised hosts: milliseconds against seconds). Tokens stay below 2^53.
- **The clock assumption**: every claim (`valid_until`) assumes Redis' clock runs at most
  1 % faster than the client's (the drift allowance); a claim also ends a twentieth of the
  ttl before Redis can expire the lease. Beyond the allowance (rows *fenced only (clock
  assumption broken)*) a claim may outlive its key; fencing still holds, and the client
  estimates the rate from fresh grants and warns above 1.01 (`Client::server_clock_rate`).
- **Liveness** (rows marked *live*): no stall longer than 100 ms, unless the holder really
  died (SIGKILL), and then no longer than its ttl (+ 100 ms); no wait ending more than
  100 ms past its bound. A lock is never left held by nobody: whatever an attempt, a
  hand-off or a release took is given back when its future is dropped or its connection
  breaks, and an outage shorter than the wait is ridden out. A row that misses it says
  *liveness target missed* and `make chaos` fails.
- **Sentinel failover** replicates asynchronously: a lock granted just before a failover
  can be lost (`min_replicas` narrows the window, it does not close it); the hybrid clock
  keeps the tokens growing across it. A mutex waiter whose grant subscription has not
  followed the new primary yet is skipped by a hand-off but keeps its place for up to
  10 s, served next once it listens (`tests/sentinel_fifo.rs`); semaphore and read-write
  lock waiters still lose theirs and queue again at the tail. **FIFO is not kept across
  an unplanned failover** (the primary killed): until each waiter's grant subscription
  has found the promoted primary (the sentinels take seconds to agree), hand-offs there
  serve whoever listens, newcomers included, and a waiter whose wait ends meanwhile
  times out while others get the lock (measured: 2 of 2 runs, waiters queued for 2.8 s
  served after newcomers, the oldest reaching its 4 s bound). Exclusion and fencing hold;
  only the order is lost.

## Reproduce

```sh
make chaos        # installs Redis if missing, builds, runs the matrix, rewrites RELIABILITY.md
cargo run --release -p redlease-chaos -- --help   # fewer rounds, another TTL, one scenario
cargo run --release -p redlease-chaos -- --only 'cancellation storm' --only 'CLIENT KILL' \\
    --only 'restarted with its data'              # the liveness rows alone (about a minute)
cargo run --release -p redlease-chaos -- --only 'waiter SIGSTOP' --only 'waits give up' \\
    --only 'issue 42'                             # the hand-off rows (issue 42's alone: ~100 s)
cargo run --release -p redlease-chaos -- --only 'shortening extend' --only 'fencing counter is deleted' \\
    --only 'redis clock' --only 'cut off silently'  # the rows of a lease's whole life (about 3 min)
cargo test -p redlease-chaos                      # the reduced matrix + the checker's own tests
```

Budget of this run: {rounds} fault rounds per scenario, {warmup} sections of warm-up and
cool-down, every wait bounded.
",
        took = humantime::format_duration(Duration::from_secs(took.as_secs())),
        workers = budget.workers,
        ttl = humantime::format_duration(budget.ttl),
        table = table(outcomes),
        primitives = PRIMITIVES,
        lease_life = lease_life,
        claims = CLAIMS,
        liveness = LIVENESS,
        rounds = budget.rounds,
        warmup = budget.warmup_sections,
    )
}

/// Notes under the table: per-row notes and what the matrix observed beyond the figures.
fn notes(outcomes: &[Outcome]) -> String {
    let mut notes = String::new();
    for o in outcomes.iter().filter(|o| !o.note.is_empty()) {
        let _ = writeln!(notes, "- {}: {}", o.name, o.note.trim());
    }
    if !notes.is_empty() {
        notes.insert_str(0, "Notes on single rows:\n\n");
    }
    let row = |fault| outcomes.iter().find(|o| o.fault == fault);
    if let Some(o) = row(crate::scenario::Fault::Busy).filter(|o| o.findings.errors > 0) {
        let _ = writeln!(
            notes,
            "\n**Observed (BUSY):** while a script kept Redis busy, {} acquisition attempts \
             failed with an error returned to the caller (Redis' `BUSY` reply) instead of being \
             retried within the lock's `wait`; safety held.",
            o.findings.errors
        );
    }
    if let Some(o) = row(crate::scenario::Fault::PauseRedis).filter(|o| o.findings.lost > 0) {
        let _ = writeln!(
            notes,
            "\n**Observed (Redis paused):** {} leases were reported lost. Acquisitions granted \
             when Redis woke up come back already lost: their validity is counted from a request \
             sent before the stall (conservative, hence safe; `Lock::run` would cancel the work \
             at once and `is_held()` says false), so a stall costs a round of useless holds.",
            o.findings.lost
        );
    }
    if let Some(o) = row(crate::scenario::Fault::SentinelFailover)
        .filter(|o| o.findings.overlaps + o.findings.mutex_violations > 0)
    {
        let after = if o.note.contains("settled") {
            "and they went on after the failover had been confirmed by every sentinel and the \
             replicas had resynchronised (see the row's note)"
        } else {
            "and they stopped once the failover had been confirmed by every sentinel and the \
             replicas had resynchronised"
        };
        let _ = writeln!(
            notes,
            "\n**Sentinel failover:** the {} overlaps and {} mutex violations are holders whose \
             lock was lost with writes the old primary had not replicated, {after}. An earlier \
             version showed thousands of them, holders with *consecutive* tokens, also long \
             after the failover: a client's pub/sub connection still on the demoted primary \
             received hand-off messages replicated from the new one, whose `PUBLISH` had \
             counted no subscriber and taken the grant back. Behind Sentinel a hand-off \
             message now only wakes the waiter, which confirms it with one attempt.",
            o.findings.overlaps, o.findings.mutex_violations
        );
    }
    notes
}
