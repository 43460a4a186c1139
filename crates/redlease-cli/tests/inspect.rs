//! `redlease status`, `list` and `release --force` against a lock held by `redlease run`.

mod common;

use common::{TestResult, output, redlease_on, server, start_run, text, wait_for_file};

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one story: a running job's lock seen from outside, start to end"
)]
fn status_list_and_forced_release_of_a_running_job() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = "touch DIR/started; while [ ! -e DIR/stop ]; do sleep 0.05; done";
    let mut job = start_run(&server, dir.path(), &["--key", "job", "--ttl", "20s"], body);
    let mut other = start_run(&server, dir.path(), &["--key", "other"], body);
    wait_for_file(&dir.path().join("started"));
    // Both are up once both keys exist (either may have touched `started`).
    let deadline = std::time::Instant::now() + common::STEP;
    while server.command(&["EXISTS", "redlease:job", "redlease:other"])? != ":2" {
        assert!(std::time::Instant::now() < deadline, "a job never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let full_token: String = {
        let mut c = redis::Client::open(server.url())?.get_connection()?;
        redis::cmd("GET").arg("redlease:job").query(&mut c)?
    };
    assert_eq!(full_token.len(), 32);

    let out = output(redlease_on(&server, &["status", "--key", "job"]));
    assert_eq!(out.status.code(), Some(0));
    let status = text(&out.stdout);
    assert!(
        status.starts_with("lock `job` (key redlease:job): held"),
        "{status}"
    );
    assert!(
        status.contains(&format!("{}…", &full_token[..8])),
        "{status}"
    );
    let counter: u64 = {
        let mut c = redis::Client::open(server.url())?.get_connection()?;
        let keys = redlease::LockKeys::new("redlease:", "job")?;
        redis::cmd("GET").arg(keys.fence()).query(&mut c)?
    };
    assert!(
        status.contains("cmd=sh") && status.contains(&format!("fencing token   {counter}")),
        "{status}"
    );
    assert!(!status.contains(&full_token), "never the whole token");

    let out = output(redlease_on(&server, &["status", "--json", "-k", "job"]));
    assert!(out.stdout.is_ascii(), "JSON in ASCII");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["held"], true);
    assert_eq!(json["fencing_counter"], counter);
    // Each field once: the lock's holder is holders[0], the waiters one list.
    let mut fields: Vec<&str> = json
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "fencing_counter",
            "held",
            "holders",
            "key",
            "kind",
            "name",
            "waiters"
        ],
        "{json}"
    );
    assert_eq!(json["waiters"], serde_json::json!([]), "{json}");
    let holder = &json["holders"][0];
    assert!(
        holder["remaining_ms"]
            .as_u64()
            .is_some_and(|t| t > 0 && t <= 20_000),
        "{json}"
    );
    assert!(
        holder["details"]
            .as_str()
            .is_some_and(|h| h.contains("cmd=sh")),
        "{json}"
    );
    assert_eq!(holder["token_prefix"], full_token[..8]);
    assert_eq!(holder["fencing_token"], counter);

    let out = output(redlease_on(&server, &["list"]));
    let list = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(list.starts_with("NAME"), "{list}");
    assert_eq!(list.lines().count(), 3, "header, job, other:\n{list}");
    assert!(list.contains("job") && list.contains("other"), "{list}");
    assert!(!list.contains("fence"), "no side keys: {list}");

    let out = output(redlease_on(&server, &["list", "--json", "j*"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let names: Vec<&str> = json
        .as_array()
        .map(|a| a.iter().filter_map(|l| l["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["job"]);

    let out = output(redlease_on(&server, &["release", "job"]));
    assert_eq!(out.status.code(), Some(2), "--force is required");

    let out = output(redlease_on(
        &server,
        &["release", "--force", "--key", "job"],
    ));
    assert_eq!(out.status.code(), Some(0));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("removed lock `job` (key redlease:job): holder "),
        "{said}"
    );
    assert!(
        said.contains("cmd=sh") && said.contains("fencing counter stays at 1"),
        "{said}"
    );
    assert!(!said.contains(&full_token));

    // The job learns at its next renewal that its lock is gone, and is stopped.
    let status = job.wait();
    assert_eq!(status.code(), Some(79));

    // The older spelling, the name alone, still works.
    let out = output(redlease_on(&server, &["status", "job"]));
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("lock `job` (key redlease:job): free; fencing counter {counter}")
    );
    // With --json a free lock is an answer (`set -e` goes on): exit 0, "held": false.
    let out = output(redlease_on(&server, &["status", "--json", "--key", "job"]));
    assert_eq!(out.status.code(), Some(0));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["held"], false, "{json}");
    assert_eq!(json["holders"], serde_json::json!([]), "{json}");

    let out = output(redlease_on(
        &server,
        &["release", "--force", "--json", "--key", "job"],
    ));
    assert_eq!(out.status.code(), Some(0), "the JSON says released: false");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["released"], false);

    std::fs::write(dir.path().join("stop"), "")?;
    assert!(other.wait().success());
    let out = output(redlease_on(&server, &["list"]));
    assert_eq!(text(&out.stdout).trim(), "no locks held");
    let out = output(redlease_on(&server, &["list", "--json"]));
    assert_eq!(text(&out.stdout).trim(), "[]");
    Ok(())
}

#[test]
fn inspecting_an_unreachable_redis_exits_69() -> TestResult {
    let port = redlease_local::free_port()?;
    for sub in ["status", "list", "release"] {
        let mut cmd = common::redlease();
        cmd.arg(sub);
        if sub != "list" {
            cmd.arg("x");
        }
        if sub == "release" {
            cmd.arg("--force");
        }
        cmd.env("REDIS_URL", format!("redis://127.0.0.1:{port}"));
        let out = output(cmd);
        assert_eq!(out.status.code(), Some(69), "{sub}: {}", text(&out.stderr));
        assert_eq!(text(&out.stderr).lines().count(), 1);
    }
    Ok(())
}

/// `status --watch` shows the lock again every interval until a signal ends it: held while
/// a job runs, free once it ended (snapshots separated by a blank line off a terminal).
#[test]
fn status_watch_follows_the_lock_until_interrupted() -> TestResult {
    use std::io::BufRead as _;

    let server = server();
    let dir = tempfile::tempdir()?;
    let body = "touch DIR/started; while [ ! -e DIR/stop ]; do sleep 0.05; done";
    let mut job = start_run(&server, dir.path(), &["--key", "watched"], body);
    wait_for_file(&dir.path().join("started"));

    // A Job: SIGTERM then SIGKILL when dropped, should the test fail half-way.
    let mut watch = common::Job(
        redlease_on(&server, &["status", "--watch", "200ms", "watched"])
            .stdout(std::process::Stdio::piped())
            .spawn()?,
    );
    let stdout = watch.0.stdout.take().ok_or("stdout is piped")?;
    let (lines, seen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if lines.send(line).is_err() {
                return;
            }
        }
    });
    let next = || seen.recv_timeout(common::STEP);
    let first = next()?;
    assert!(
        first.starts_with("lock `watched` (key redlease:watched): held"),
        "{first}"
    );

    std::fs::write(dir.path().join("stop"), "")?;
    assert_eq!(job.wait().code(), Some(0));
    // Snapshots keep coming; one shows the lock free.
    loop {
        let line = next()?;
        if line.starts_with("lock `watched` (key redlease:watched): free") {
            break;
        }
    }
    common::signal(watch.id(), nix::sys::signal::Signal::SIGINT);
    let status = watch.wait();
    assert_eq!(
        status.code(),
        Some(130),
        "ended by SIGINT, as leader --watch"
    );
    Ok(())
}
