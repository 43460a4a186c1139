//! Does a server-side compare-and-delete pay on the mutex's release path? Compares, on one
//! connection to one private server, the library's release of a free mutex (`EVALSHA` of
//! `release.lua`: `GET` the lock, compare, `LPOP` the hand-off queue, `DEL` the lock and its
//! holder details) with the server's single command: Valkey 9's `DELIFEQ key value`, or
//! Redis 8.4's `DELEX key IFEQ value`.
//!
//! `REDLEASE_REDIS_SERVER=path/to/valkey-server cargo run --release -p redlease --example
//! release_command [-- PAIRS [RELEASES]]` (not part of `make bench`: Debian's Redis 7.0 has
//! neither command). Starts a private server (`redlease-local`) and prints, for each side,
//! the Redis commands per release (`INFO commandstats`, the script's inner calls included),
//! the server's time inside the command (`usec_per_call`), and the client's wall clock per
//! release as interleaved slice pairs (ABBA order, 5 pairs of 20,000 releases by default):
//! each pair's two means, then the median and range of the pairs. Each release is timed
//! alone; the `PSETEX` that sets the lock up before it is not. Exit code 2 when the server
//! has neither command or a side does not release as it should.
#![allow(
    clippy::print_stdout,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

/// The library's script texts, put together by its own recipes (`src/lua.rs`, included
/// here as a module).
#[path = "../src/lua.rs"]
#[allow(dead_code, reason = "the example uses the release script only")]
mod lua;

/// The library's release script.
const RELEASE_LUA: &str = lua::RELEASE_LUA;

/// The keys `release.lua` takes, as a lock's keys are laid out (one hash tag, one slot).
const KEYS: [&str; 5] = [
    "{release-bench}",
    "{release-bench}:fence",
    "{release-bench}:holder",
    "{release-bench}:queue",
    "{release-bench}:waiters",
];

/// The owner token the lock is set to before each release.
const TOKEN: &str = "0123456789abcdef0123456789abcdef";

/// The server's single-command compare-and-delete.
#[derive(Clone, Copy, Debug)]
enum Single {
    /// Valkey 9: `DELIFEQ key value`.
    DelIfEq,
    /// Redis 8.4: `DELEX key IFEQ value`.
    DelExIfEq,
}

impl Single {
    fn command(self) -> redis::Cmd {
        match self {
            Self::DelIfEq => {
                let mut cmd = redis::cmd("DELIFEQ");
                cmd.arg(KEYS[0]).arg(TOKEN);
                cmd
            }
            Self::DelExIfEq => {
                let mut cmd = redis::cmd("DELEX");
                cmd.arg(KEYS[0]).arg("IFEQ").arg(TOKEN);
                cmd
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::DelIfEq => "DELIFEQ key token",
            Self::DelExIfEq => "DELEX key IFEQ token",
        }
    }
}

/// One way of releasing the lock set up by `set_up`.
#[derive(Clone, Copy, Debug)]
enum Side {
    Script,
    Single(Single),
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Self::Script => "EVALSHA release.lua",
            Self::Single(single) => single.name(),
        }
    }

    /// Releases the lock; `true` when the reply says it was ours and is gone.
    async fn release(
        self,
        conn: &mut MultiplexedConnection,
        sha: &str,
    ) -> redis::RedisResult<bool> {
        let reply: i64 = match self {
            Self::Script => {
                redis::cmd("EVALSHA")
                    .arg(sha)
                    .arg(KEYS.len())
                    .arg(&KEYS[..])
                    .arg(TOKEN)
                    .query_async(conn)
                    .await?
            }
            Self::Single(single) => single.command().query_async(conn).await?,
        };
        Ok(reply == 1)
    }
}

/// Sets the lock and its holder details as an uncontended acquisition leaves them.
async fn set_up(conn: &mut MultiplexedConnection) -> redis::RedisResult<()> {
    redis::pipe()
        .cmd("PSETEX")
        .arg(KEYS[0])
        .arg(30_000)
        .arg(TOKEN)
        .ignore()
        .cmd("PSETEX")
        .arg(KEYS[2])
        .arg(30_000)
        .arg("1 bench")
        .ignore()
        .query_async(conn)
        .await
}

/// Does the server know `name` (`COMMAND INFO` answers nil for an unknown command)?
async fn knows(conn: &mut MultiplexedConnection, name: &str) -> redis::RedisResult<bool> {
    let info: Vec<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query_async(conn)
        .await?;
    Ok(info.first().is_some_and(|v| *v != redis::Value::Nil))
}

/// `INFO commandstats`: (calls, usec) per command name, then `CONFIG RESETSTAT`.
async fn stats(
    conn: &mut MultiplexedConnection,
) -> redis::RedisResult<BTreeMap<String, (u64, u64)>> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    let mut found = BTreeMap::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .strip_prefix("cmdstat_")
            .and_then(|rest| rest.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
        };
        found.insert(name.to_owned(), (field("calls="), field("usec=")));
    }
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await?;
    Ok(found)
}

/// Runs `n` releases of `side`; the mean wall clock per release, only the releases timed.
async fn slice(
    conn: &mut MultiplexedConnection,
    sha: &str,
    side: Side,
    n: u32,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let mut spent = Duration::ZERO;
    for _ in 0..n {
        set_up(conn).await?;
        let started = Instant::now();
        let released = side.release(conn, sha).await?;
        spent += started.elapsed();
        if !released {
            return Err(format!("{} did not release a lock it held", side.name()).into());
        }
    }
    Ok(spent / n)
}

/// The commands per release of `side` and its server time per call, over `n` releases.
async fn count(
    conn: &mut MultiplexedConnection,
    sha: &str,
    side: Side,
    n: u32,
) -> Result<String, Box<dyn std::error::Error>> {
    stats(conn).await?;
    for _ in 0..n {
        set_up(conn).await?;
        side.release(conn, sha).await?;
    }
    let found = stats(conn).await?;
    let mut total = 0;
    let mut listed = Vec::new();
    let mut outer_usec = 0.0;
    for (name, (calls, usec)) in &found {
        // The set-up's commands and the measuring ones are not part of the release.
        if matches!(
            name.as_str(),
            "psetex" | "info" | "config|resetstat" | "config"
        ) {
            continue;
        }
        total += calls;
        listed.push(format!("{name} {}", *calls as f64 / f64::from(n)));
        if matches!(name.as_str(), "evalsha" | "delifeq" | "delex") {
            outer_usec = *usec as f64 / *calls as f64;
        }
    }
    Ok(format!(
        "{:.2} commands ({}); {outer_usec:.2} us of server time per release",
        total as f64 / f64::from(n),
        listed.join(", ")
    ))
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

async fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let pairs: usize = args.next().map_or(Ok(5), |a| a.parse())?;
    let releases: u32 = args.next().map_or(Ok(20_000), |a| a.parse())?;
    if pairs < 5 {
        println!("at least 5 pairs");
        return Ok(ExitCode::from(2));
    }
    let server = redlease_local::RedisServer::start()?;
    let mut conn = redis::Client::open(server.url())?
        .get_multiplexed_async_connection()
        .await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await?;
    let version = |field: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(field))
            .map(str::to_owned)
    };
    let shown = version("valkey_version:").map_or_else(
        || format!("Redis {}", version("redis_version:").unwrap_or_default()),
        |v| format!("Valkey {v}"),
    );
    let single = if knows(&mut conn, "DELIFEQ").await? {
        Single::DelIfEq
    } else if knows(&mut conn, "DELEX").await? {
        Single::DelExIfEq
    } else {
        println!("{shown} has neither DELIFEQ nor DELEX: nothing to compare");
        return Ok(ExitCode::from(2));
    };
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(RELEASE_LUA)
        .query_async(&mut conn)
        .await?;
    let sides = [Side::Script, Side::Single(single)];

    // Both refuse a token that is not the holder's, and leave the lock to its holder.
    for side in sides {
        redis::cmd("PSETEX")
            .arg(KEYS[0])
            .arg(30_000)
            .arg("someone else")
            .query_async::<()>(&mut conn)
            .await?;
        let holder: Option<String> = redis::cmd("GET")
            .arg(KEYS[0])
            .query_async(&mut conn)
            .await?;
        if side.release(&mut conn, &sha).await? || holder.as_deref() != Some("someone else") {
            println!("{} released a lock it did not hold", side.name());
            return Ok(ExitCode::from(2));
        }
    }

    println!("Release of a free mutex on {shown}, one connection, loopback");
    for side in sides {
        slice(&mut conn, &sha, side, releases / 10).await?;
        println!(
            "  {:24} {}",
            side.name(),
            count(&mut conn, &sha, side, 1_000).await?
        );
    }
    let mut script = Vec::new();
    let mut one = Vec::new();
    let mut ratio = Vec::new();
    println!("  {pairs} pairs of {releases} releases each (ABBA), mean wall clock per release:");
    for pair in 0..pairs {
        let order = if pair % 2 == 0 {
            [sides[0], sides[1]]
        } else {
            [sides[1], sides[0]]
        };
        let mut means = [Duration::ZERO; 2];
        for side in order {
            let mean = slice(&mut conn, &sha, side, releases).await?;
            means[usize::from(matches!(side, Side::Single(_)))] = mean;
        }
        let (a, b) = (means[0].as_secs_f64() * 1e6, means[1].as_secs_f64() * 1e6);
        println!(
            "    pair {}: script {a:.2} us, single command {b:.2} us, {:.3}x",
            pair + 1,
            b / a
        );
        script.push(a);
        one.push(b);
        ratio.push(b / a);
    }
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        format!("{lo:.3}-{hi:.3}")
    };
    let (rs, ro, rr) = (range(&script), range(&one), range(&ratio));
    println!(
        "  median: script {:.2} us ({rs}), single command {:.2} us ({ro}), single / script {:.3}x ({rr})",
        median(&mut script),
        median(&mut one),
        median(&mut ratio)
    );
    Ok(ExitCode::SUCCESS)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match run().await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("release_command: {err}");
            ExitCode::from(2)
        }
    }
}
