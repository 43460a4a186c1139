//! `redlease status`, `list` and `release --force` as a least-privilege Redis user: the
//! library's ACL line of docs/SECURITY.md plus the operator rules
//! `+lrange +scan +type +zrange +hgetall`, no `+multi +exec`.
#![allow(clippy::panic, reason = "tests fail loudly")]

mod common;

use common::{TestResult, output, redlease, text};
use redlease_local::{REDLEASE_ACL_RULES, RedisServer, ServerOptions};

const PASSWORD: &str = "inspect-pw-52e1";
const ADMIN_PASSWORD: &str = "inspect-admin-pw-93d7";

/// What docs/SECURITY.md tells operators to add for `status`, `list` and `release --force`.
const OPERATOR_RULES: [&str; 5] = ["+lrange", "+scan", "+type", "+zrange", "+hgetall"];

/// A server whose `default` user is off, with an `admin` (for the test's own writes) and a
/// `redlease` user with the documented line plus `extra`.
fn acl_server(extra: &[&str]) -> RedisServer {
    let mut options = ServerOptions::default();
    for arg in ["--user", "default", "off", "--user", "admin", "on"] {
        options = options.arg(arg);
    }
    options = options
        .arg(format!(">{ADMIN_PASSWORD}"))
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("--user")
        .arg("redlease")
        .arg("on")
        .arg(format!(">{PASSWORD}"));
    for rule in REDLEASE_ACL_RULES.iter().chain(extra) {
        options = options.arg(*rule);
    }
    RedisServer::start_with(options).unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

fn url(server: &RedisServer) -> String {
    format!("redis://redlease:{PASSWORD}@127.0.0.1:{}", server.port())
}

/// Writes, as `admin`, the keys of lock `job` held by `token` (as `acquire.lua` leaves
/// them), with fencing counter 5 and a waiter queued (in the queue and its table).
fn hold_job(server: &RedisServer, token: &str) -> TestResult {
    let mut conn = redis::Client::open(format!(
        "redis://admin:{ADMIN_PASSWORD}@127.0.0.1:{}",
        server.port()
    ))?
    .get_connection()?;
    let job = redlease::LockKeys::new("redlease:", "job")?;
    redis::pipe()
        .cmd("SET")
        .arg("redlease:job")
        .arg(token)
        .arg("PX")
        .arg(60_000)
        .cmd("SET")
        .arg(job.fence())
        .arg(5)
        .cmd("SET")
        .arg(job.holder())
        .arg("host=h1 pid=42")
        .arg("PX")
        .arg(60_000)
        .cmd("RPUSH")
        .arg(job.queue())
        .arg("waiter-token")
        .cmd("HSET")
        .arg(job.waiters())
        .arg("waiter-token")
        .arg(r#"{"ttl":"60000","ch":"chan","who":"host=h3 pid=9","since":"1"}"#)
        .exec(&mut conn)?;
    Ok(())
}

/// Writes, as `admin`, the keys of semaphore `pool` (2 permits) with one permit held by
/// `token`, as `sem_acquire.lua` leaves them, with fencing counter 7.
fn hold_pool(server: &RedisServer, token: &str) -> TestResult {
    let mut conn = redis::Client::open(format!(
        "redis://admin:{ADMIN_PASSWORD}@127.0.0.1:{}",
        server.port()
    ))?
    .get_connection()?;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut conn)?;
    let expiry = secs * 1000 + micros / 1000 + 60_000;
    let pool = redlease::LockKeys::of("redlease:", "pool", redlease::Primitive::Semaphore)?;
    redis::pipe()
        .cmd("ZADD")
        .arg("redlease:pool")
        .arg(expiry)
        .arg(token)
        .cmd("HSET")
        .arg(pool.holder())
        .arg(token)
        .arg(r#"["7","host=h2 pid=7"]"#)
        .cmd("SET")
        .arg(pool.permits())
        .arg(2)
        .cmd("SET")
        .arg(pool.fence())
        .arg(7)
        .exec(&mut conn)?;
    Ok(())
}

fn run_as_user(server: &RedisServer, args: &[&str]) -> std::process::Output {
    let mut cmd = redlease();
    cmd.args(args).arg("--redis").arg(url(server));
    output(cmd)
}

#[test]
fn status_list_and_forced_release_work_with_the_documented_acl_plus_the_operator_rules()
-> TestResult {
    let server = acl_server(&OPERATOR_RULES);
    let token = "0123456789abcdef0123456789abcdef";
    hold_job(&server, token)?;
    hold_pool(&server, "fedcba9876543210fedcba9876543210")?;

    let out = run_as_user(&server, &["status", "pool"]);
    let status = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{status}{}", text(&out.stderr));
    assert!(status.contains("1 of 2 permits held"), "{status}");
    assert!(status.contains("host=h2 pid=7"), "{status}");

    let out = run_as_user(&server, &["status", "job"]);
    let status = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "status: {status}\n{}",
        text(&out.stderr)
    );
    assert!(status.contains("held"), "{status}");
    assert!(status.contains("fencing token   5"), "{status}");
    assert!(status.contains("host=h1 pid=42"), "{status}");
    assert!(status.contains("queued waiters  1"), "{status}");
    assert!(
        status.contains("host=h3 pid=9"),
        "the waiter's details: {status}"
    );

    let out = run_as_user(&server, &["list"]);
    assert_eq!(out.status.code(), Some(0), "list: {}", text(&out.stderr));
    assert!(text(&out.stdout).contains("job"), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("semaphore 2"),
        "{}",
        text(&out.stdout)
    );

    let out = run_as_user(&server, &["release", "--force", "pool"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = run_as_user(&server, &["release", "--force", "job"]);
    let removed = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "release: {removed}\n{}",
        text(&out.stderr)
    );
    assert!(removed.starts_with("removed lock `job`"), "{removed}");
    assert!(
        removed.contains("the fencing counter stays at 5"),
        "{removed}"
    );

    let out = run_as_user(&server, &["status", "job"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "free now: {}",
        text(&out.stdout)
    );
    // The forced release served the queue: its waiter (nobody listens for it here) was
    // offered the lock, which burns a fencing number; the counter never goes back.
    let status = text(&out.stdout);
    let counter: u64 = status
        .split("free; fencing counter ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(counter >= 5, "{status}");
    Ok(())
}

/// Without `+lrange`, `status` names the missing permission (it said only `broken pipe`
/// while it read in a `MULTI` that the user may not send).
#[test]
fn status_names_a_missing_permission() -> TestResult {
    let rules: Vec<&str> = OPERATOR_RULES
        .into_iter()
        .filter(|r| *r != "+hgetall")
        .collect();
    let server = acl_server(&rules);
    hold_job(&server, "0123456789abcdef0123456789abcdef")?;
    let out = run_as_user(&server, &["status", "job"]);
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(
        stderr.contains("hgetall") && !stderr.contains("broken pipe"),
        "{stderr}"
    );
    Ok(())
}
