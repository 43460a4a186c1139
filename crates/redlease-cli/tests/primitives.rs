//! `redlease run --permits N` (a semaphore) and `--read` / `--write` (a read-write lock)
//! against a real redis-server, and what `status`, `list` and `release --force` show of
//! them.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Job, STEP, TestResult, output, redlease, redlease_on, server, start_run, text};
use redlease_local::RedisServer;

/// A command body that appends `start PID FENCE` to `DIR/marks`, waits until `DIR/marks`
/// has `PEERS` starts (or 20 s pass: a broken exclusion then shows as too few overlaps,
/// not as a hang), holds a little longer (room for an intruder to overlap), and appends
/// `end PID`.
const OVERLAP_BODY: &str = "echo \"start $$ $REDLEASE_FENCING_TOKEN\" >> DIR/marks; \
    i=0; while [ \"$(grep -c start DIR/marks)\" -lt PEERS ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; \
    sleep 0.3; echo \"end $$\" >> DIR/marks";

/// The most sections of `DIR/marks` that were open at once, and how many there were.
fn overlap(dir: &Path) -> Result<(usize, usize), Box<dyn std::error::Error>> {
    let marks = std::fs::read_to_string(dir.join("marks"))?;
    let (mut open, mut most, mut sections) = (0usize, 0usize, 0usize);
    for line in marks.lines() {
        if line.starts_with("start ") {
            open += 1;
            sections += 1;
            most = most.max(open);
        } else {
            open = open.saturating_sub(1);
        }
    }
    assert_eq!(open, 0, "a section never ended:\n{marks}");
    Ok((most, sections))
}

/// Polls `redlease status --json NAME` until `check` accepts it, within [`STEP`].
fn status_until(
    server: &RedisServer,
    name: &str,
    check: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + STEP;
    loop {
        let out = output(redlease_on(server, &["status", "--json", name]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if check(&json) {
            return json;
        }
        assert!(
            Instant::now() < deadline,
            "status of {name} never matched: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn holders(json: &serde_json::Value) -> usize {
    json["holders"].as_array().map_or(0, Vec::len)
}

fn waiters(json: &serde_json::Value) -> usize {
    json["waiters"].as_array().map_or(0, Vec::len)
}

#[test]
fn two_permits_let_two_of_three_runs_in_and_the_third_after() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = OVERLAP_BODY.replace("PEERS", "2");
    let mut jobs: Vec<Job> = (0..3)
        .map(|_| {
            start_run(
                &server,
                dir.path(),
                &["--key", "pool", "--permits", "2", "--wait", "60s"],
                &body,
            )
        })
        .collect();
    for job in &mut jobs {
        let status = job.wait();
        assert!(status.success(), "{status}: {}", job.stderr());
    }
    let (most, sections) = overlap(dir.path())?;
    assert_eq!(sections, 3, "every run ran its command");
    assert_eq!(most, 2, "two at once, never three (and two reached)");
    assert_eq!(server.command(&["EXISTS", "redlease:pool"])?, ":0");
    Ok(())
}

#[test]
fn take_holds_several_permits_at_once() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let hold = "touch DIR/started; while [ ! -e DIR/stop ]; do sleep 0.05; done";
    let mut heavy = start_run(
        &server,
        dir.path(),
        &["--key", "slots", "--permits", "3", "--take", "2"],
        hold,
    );
    common::wait_for_file(&dir.path().join("started"));
    let json = status_until(&server, "slots", |j| holders(j) == 1);
    assert_eq!(json["holders"][0]["permits"], 2, "{json}");
    // One permit is left: another heavy run finds too few, a light one gets in.
    let busy = output(redlease_on(
        &server,
        &[
            "run",
            "-k",
            "slots",
            "--permits",
            "3",
            "--take",
            "2",
            "--no-wait",
            "--",
            "true",
        ],
    ));
    assert_eq!(busy.status.code(), Some(75), "{}", text(&busy.stderr));
    assert!(
        text(&busy.stderr)
            .contains("semaphore `slots` (key redlease:slots, 3 permits, taking 2) is busy"),
        "{}",
        text(&busy.stderr)
    );
    let light = output(redlease_on(
        &server,
        &[
            "run",
            "-k",
            "slots",
            "--permits",
            "3",
            "--no-wait",
            "--",
            "true",
        ],
    ));
    assert_eq!(light.status.code(), Some(0), "{}", text(&light.stderr));
    std::fs::write(dir.path().join("stop"), "")?;
    let status = heavy.wait();
    assert!(status.success(), "{status}: {}", heavy.stderr());
    assert_eq!(server.command(&["EXISTS", "redlease:slots"])?, ":0");
    Ok(())
}

#[test]
fn readers_share_a_read_write_lock_and_a_writer_excludes_them() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;

    // Two readers run at once.
    let body = OVERLAP_BODY.replace("PEERS", "2");
    let mut readers: Vec<Job> = (0..2)
        .map(|_| {
            start_run(
                &server,
                dir.path(),
                &["--key", "cfg", "--read", "--wait", "60s"],
                &body,
            )
        })
        .collect();
    for job in &mut readers {
        let status = job.wait();
        assert!(status.success(), "{status}: {}", job.stderr());
    }
    assert_eq!(overlap(dir.path())?, (2, 2), "the readers overlapped");

    // A writer holds: neither a reader nor another writer gets in.
    let hold = "touch DIR/$REDLEASE_KEY-started; while [ ! -e DIR/$REDLEASE_KEY-stop ]; do sleep 0.05; done";
    let mut writer = start_run(&server, dir.path(), &["--key", "cfg", "--write"], hold);
    status_until(&server, "cfg", |j| j["mode"] == "write");
    for side in ["--read", "--write"] {
        let out = output(redlease_on(
            &server,
            &["run", "--key", "cfg", side, "--no-wait", "--", "true"],
        ));
        assert_eq!(out.status.code(), Some(75), "{side}: {}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("read-write lock `cfg` (key redlease:cfg")
                && text(&out.stderr).contains("held for writing"),
            "{}",
            text(&out.stderr)
        );
    }
    // A waiting reader runs once the writer is done, not before.
    let mut reader = start_run(
        &server,
        dir.path(),
        &["--key", "cfg", "--read", "--wait", "60s"],
        "touch DIR/reader-ran",
    );
    status_until(&server, "cfg", |j| waiters(j) == 1);
    assert!(!dir.path().join("reader-ran").exists());
    std::fs::write(dir.path().join("cfg-stop"), "")?;
    assert!(writer.wait().success(), "{}", writer.stderr());
    assert!(reader.wait().success(), "{}", reader.stderr());
    assert!(dir.path().join("reader-ran").exists());

    // A reader holds: a writer does not get in.
    let _ = std::fs::remove_file(dir.path().join("cfg-stop"));
    let mut reader = start_run(&server, dir.path(), &["--key", "cfg", "--read"], hold);
    status_until(&server, "cfg", |j| j["mode"] == "read");
    let out = output(redlease_on(
        &server,
        &["run", "--key", "cfg", "--write", "--no-wait", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(75), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("held for reading by 1"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(dir.path().join("cfg-stop"), "")?;
    assert!(reader.wait().success(), "{}", reader.stderr());
    assert_eq!(server.command(&["EXISTS", "redlease:cfg"])?, ":0");
    Ok(())
}

/// The fencing tokens the commands of this test got, from `DIR/fence.*`.
fn fences(dir: &Path) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("fence."))
        {
            out.push(std::fs::read_to_string(&path)?.trim().parse()?);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn json_fences(json: &serde_json::Value) -> Vec<u64> {
    let mut out: Vec<u64> = json["holders"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|h| h["fencing_token"].as_u64())
                .collect()
        })
        .unwrap_or_default();
    out.sort_unstable();
    out
}

#[test]
#[allow(
    clippy::too_many_lines,
    reason = "one story: a semaphore and a read-write lock seen from outside"
)]
fn status_list_and_release_show_semaphore_and_read_write_holders() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // Notes its fencing token, then holds until DIR/<key>-stop appears.
    let hold = "echo $REDLEASE_FENCING_TOKEN > DIR/fence.tmp.$$; mv DIR/fence.tmp.$$ DIR/fence.$$; \
        while [ ! -e DIR/$REDLEASE_KEY-stop ]; do sleep 0.05; done";
    let sem = [
        "--key",
        "pool",
        "--permits",
        "2",
        "--ttl",
        "20s",
        "--wait",
        "60s",
    ];
    let mut first = start_run(&server, dir.path(), &sem, hold);
    let mut second = start_run(&server, dir.path(), &sem, hold);
    // The third starts once the first two hold, so that it is the one that queues.
    status_until(&server, "pool", |j| holders(j) == 2);
    let mut third = start_run(&server, dir.path(), &sem, hold);
    let json = status_until(&server, "pool", |j| holders(j) == 2 && waiters(j) == 1);
    let deadline = Instant::now() + STEP;
    while fences(dir.path())?.len() < 2 {
        assert!(Instant::now() < deadline, "the commands never started");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(json["kind"], "semaphore");
    assert_eq!(json["permits"], 2);
    assert_eq!(json["held"], true);
    assert_eq!(json_fences(&json), fences(dir.path())?, "{json}");
    for holder in json["holders"].as_array().into_iter().flatten() {
        assert!(
            holder["remaining_ms"]
                .as_u64()
                .is_some_and(|t| t > 0 && t <= 20_000),
            "{json}"
        );
        assert!(
            holder["details"]
                .as_str()
                .is_some_and(|d| d.contains("cmd=sh")),
            "{json}"
        );
    }
    let out = output(redlease_on(&server, &["status", "pool"]));
    assert_eq!(out.status.code(), Some(0));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("semaphore `pool` (key redlease:pool): 2 of 2 permits held"),
        "{said}"
    );
    assert!(said.contains("kind            semaphore 2"), "{said}");
    assert!(said.contains("queued waiters  1"), "{said}");
    for fence in fences(dir.path())? {
        assert!(said.contains(&fence.to_string()), "{said}");
    }
    // Two holders, and the queued waiter with how long it has waited.
    assert_eq!(said.matches("cmd=sh").count(), 3, "{said}");
    assert!(
        said.contains("waiters         TOKEN          WAITED"),
        "{said}"
    );

    // A writer holds the read-write lock `cfg`.
    let mut writer = start_run(
        &server,
        dir.path(),
        &["--key", "cfg", "--write", "--ttl", "20s"],
        hold,
    );
    let json = status_until(&server, "cfg", |j| j["held"] == true);
    assert_eq!(json["kind"], "rwlock");
    assert_eq!(json["mode"], "write");
    assert_eq!(holders(&json), 1, "{json}");
    let out = output(redlease_on(&server, &["status", "cfg"]));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("read-write lock `cfg` (key redlease:cfg): held for writing"),
        "{said}"
    );
    assert!(said.contains("kind            rwlock write"), "{said}");

    let out = output(redlease_on(&server, &["list"]));
    assert_eq!(out.status.code(), Some(0));
    let list = text(&out.stdout);
    assert!(list.starts_with("NAME"), "{list}");
    assert!(list.lines().next().is_some_and(|h| h.contains("KIND")));
    assert_eq!(
        list.lines().filter(|l| l.contains("semaphore 2")).count(),
        2,
        "one line per permit holder:\n{list}"
    );
    assert_eq!(
        list.lines().filter(|l| l.contains("rwlock write")).count(),
        1,
        "{list}"
    );
    assert_eq!(list.lines().count(), 4, "header and three holders:\n{list}");
    assert!(
        !list.contains("sem:") && !list.contains("rw:") && !list.contains('\0'),
        "{list}"
    );
    let out = output(redlease_on(&server, &["list", "--json"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let kinds: Vec<&str> = json
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(kinds, ["rwlock", "semaphore"], "{json}");

    // The writer leaves; two readers hold it.
    std::fs::write(dir.path().join("cfg-stop"), "")?;
    assert!(writer.wait().success(), "{}", writer.stderr());
    std::fs::remove_file(dir.path().join("cfg-stop"))?;
    let read = ["--key", "cfg", "--read", "--ttl", "20s"];
    let mut readers = [
        start_run(&server, dir.path(), &read, hold),
        start_run(&server, dir.path(), &read, hold),
    ];
    let json = status_until(&server, "cfg", |j| holders(j) == 2);
    assert_eq!(json["mode"], "read");
    let out = output(redlease_on(&server, &["status", "cfg"]));
    let said = text(&out.stdout);
    assert!(said.contains("held for reading by 2"), "{said}");
    assert!(said.contains("kind            rwlock read"), "{said}");
    std::fs::write(dir.path().join("cfg-stop"), "")?;
    for reader in &mut readers {
        assert!(reader.wait().success(), "{}", reader.stderr());
    }

    // Forced release of the semaphore: its holders find their permits lost (79); the
    // queued third run is served next.
    let out = output(redlease_on(&server, &["release", "--force", "pool"]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("removed semaphore `pool` (key redlease:pool): 2 of 2 permits held"),
        "{said}"
    );
    assert_eq!(first.wait().code(), Some(79));
    assert_eq!(second.wait().code(), Some(79));
    let json = status_until(&server, "pool", |j| holders(j) == 1);
    assert_eq!(waiters(&json), 0);
    std::fs::write(dir.path().join("pool-stop"), "")?;
    assert!(third.wait().success(), "{}", third.stderr());
    let out = output(redlease_on(&server, &["list"]));
    assert_eq!(text(&out.stdout).trim(), "no locks held");
    Ok(())
}

#[test]
fn a_semaphore_and_a_read_write_lock_pass_exit_codes_through() -> TestResult {
    let server = server();
    // The command sees the kind of what it holds (the type of the key) and exits 42.
    let body = format!(
        "redis-cli -p {} type redlease:codes; exit 42",
        server.port()
    );
    for (flags, kind) in [
        (&["--permits", "3"][..], "zset"),
        (&["--read"], "hash"),
        (&["--write"], "hash"),
    ] {
        let mut args = vec!["run", "--key", "codes"];
        args.extend(flags);
        args.extend(["--", "sh", "-c", &body]);
        let out = output(redlease_on(&server, &args));
        assert_eq!(
            out.status.code(),
            Some(42),
            "{flags:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout).trim(), kind, "{flags:?}");
        assert_eq!(server.command(&["EXISTS", "redlease:codes"])?, ":0");
    }
    Ok(())
}

#[test]
fn bad_combinations_of_flags_are_usage_errors() {
    for (args, says) in [
        (
            &["--permits", "0"][..],
            "0 permits would let no command run",
        ),
        (&["--permits=-1"], "give a whole number of permits"),
        (&["--permits", "2", "--read"], "cannot be used with"),
        (&["--permits", "2", "--write"], "cannot be used with"),
        (&["--read", "--write"], "cannot be used with"),
        (
            &["--permits", "3", "--take", "0"],
            "--take 0 would hold no permit",
        ),
        (
            &["--permits", "3", "--take", "4"],
            "--take 4 asks for more permits than the semaphore has (--permits 3)",
        ),
        (&["--take", "2"], "--permits"),
    ] {
        let out = output({
            let mut cmd = redlease();
            cmd.args(["run", "--key", "x"])
                .args(args)
                .args(["--", "true"])
                .env("REDIS_URL", "redis://127.0.0.1:1");
            cmd
        });
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    let out = output({
        let mut cmd = redlease();
        cmd.args(["run", "--help"]);
        cmd
    });
    let help = text(&out.stdout);
    for needle in [
        "--permits <N>",
        "--take <M>",
        "--read",
        "--write",
        "--permits 3",
    ] {
        assert!(help.contains(needle), "run --help lacks {needle:?}");
    }
}

#[test]
fn status_shows_how_many_permits_each_holder_takes() -> TestResult {
    let server = server();
    let runtime = tokio::runtime::Runtime::new()?;
    let client = runtime.block_on(redlease::Client::connect(&server.url()))?;
    let semaphore = client.semaphore("pool-many", 3);
    let two = runtime.block_on(semaphore.acquire_many(2))?;
    let json = status_until(&server, "pool-many", |j| holders(j) == 1);
    assert_eq!(json["permits"], 3, "{json}");
    assert_eq!(json["holders"][0]["permits"], 2, "{json}");
    let out = output(redlease_on(&server, &["status", "pool-many"]));
    let said = text(&out.stdout);
    assert!(
        said.starts_with("semaphore `pool-many` (key redlease:pool-many): 2 of 3 permits held"),
        "{said}"
    );
    assert!(said.contains("2 permits; "), "{said}");
    runtime.block_on(two.release())?;
    Ok(())
}
