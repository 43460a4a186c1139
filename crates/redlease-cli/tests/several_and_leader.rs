//! `redlease run --key A --key B` (several locks at once), `redlease run --elect NAME` and
//! `redlease leader NAME [--watch]` against a real redis-server.

mod common;

use std::collections::HashMap;
use std::io::BufRead as _;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{
    Job, STEP, TestResult, output, redlease, redlease_on, server, signal, start_run, text,
    wait_for_file,
};
use nix::sys::signal::Signal;
use redlease_local::RedisServer;

/// Polls `redlease status --json NAME` until `check` accepts it, within [`STEP`].
fn status_until(server: &RedisServer, name: &str, check: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + STEP;
    loop {
        let out = output(redlease_on(server, &["status", "--json", name]));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if check(&json) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "status of {name} never matched: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A command body that counts in `DIR/count` with a read, a pause and a write (runs that
/// overlap lose counts), between `start PID TOKENS` and `end PID` lines in `DIR/marks`.
const COUNT_BODY: &str = "echo \"start $$ $REDLEASE_KEYS|$REDLEASE_FENCING_TOKENS\" >> DIR/marks; \
    n=$(cat DIR/count 2>/dev/null || echo 0); sleep 0.15; echo $((n+1)) > DIR/count; \
    echo \"end $$\" >> DIR/marks";

#[test]
fn several_keys_in_either_order_never_deadlock_and_exclude_each_other() -> TestResult {
    const ROUNDS: usize = 6;
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = common::script(dir.path(), COUNT_BODY);
    // Two loops at once, one naming the locks a, b and the other b, a: taken in the given
    // order they would deadlock (each waiting for the other's first, until --wait ends
    // with 75).
    let loops: Vec<_> = [["a", "b"], ["b", "a"]]
        .into_iter()
        .map(|[first, second]| {
            let url = server.url();
            let body = body.clone();
            std::thread::spawn(move || {
                (0..ROUNDS)
                    .map(|_| {
                        let mut cmd = redlease();
                        cmd.args(["run", "--key", first, "--key", second, "--wait", "40s"])
                            .args(["--redis", &url, "--", "sh", "-c", &body]);
                        output(cmd)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    for handle in loops {
        let Ok(outs) = handle.join() else {
            return Err("a loop of runs panicked".into());
        };
        for out in outs {
            assert!(
                out.status.success(),
                "{}: {}",
                out.status,
                text(&out.stderr)
            );
        }
    }
    let count: usize = std::fs::read_to_string(dir.path().join("count"))?
        .trim()
        .parse()?;
    assert_eq!(count, 2 * ROUNDS, "overlapping runs lost counts");

    // Never interleaved; each name's fencing token grows from one run to the next, and
    // the environment names both locks in the order given.
    let marks = std::fs::read_to_string(dir.path().join("marks"))?;
    let lines: Vec<&str> = marks.lines().collect();
    assert_eq!(lines.len(), 4 * ROUNDS, "{marks}");
    let mut last: HashMap<String, u64> = HashMap::new();
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].splitn(3, ' ').collect();
        assert_eq!(start[0], "start", "interleaved runs:\n{marks}");
        assert_eq!(
            pair[1],
            format!("end {}", start[1]),
            "interleaved:\n{marks}"
        );
        let (keys, tokens) = start[2].split_once('|').ok_or("no | in the marks")?;
        let names: Vec<&str> = tokens
            .split(' ')
            .map(|t| t.split_once('=').map_or("", |(n, _)| n))
            .collect();
        assert!(keys == "a b" || keys == "b a", "{marks}");
        assert_eq!(keys, names.join(" "), "tokens in the order given:\n{marks}");
        for pair in tokens.split(' ') {
            let (name, token) = pair.split_once('=').ok_or("no = in the tokens")?;
            let token: u64 = token.parse()?;
            let before = last.insert(name.to_owned(), token).unwrap_or(0);
            assert!(token > before, "{name}'s token must grow:\n{marks}");
        }
    }
    assert_eq!(
        server.command(&["EXISTS", "redlease:a", "redlease:b"])?,
        ":0"
    );
    Ok(())
}

#[test]
fn several_keys_are_all_or_nothing_and_the_loss_of_one_ends_the_command() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    // b is busy: the run names it, takes nothing, and does not run its command.
    let hold_b = "touch DIR/b-held; while [ ! -e DIR/stop ]; do sleep 0.05; done";
    let mut holder = start_run(&server, dir.path(), &["--key", "b"], hold_b);
    wait_for_file(&dir.path().join("b-held"));
    let out = output(redlease_on(
        &server,
        &[
            "run", "--key", "a", "--key", "b", "--wait", "300ms", "--", "touch",
        ],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(
        stderr.contains("lock `b` (key redlease:b, one of locks `a`, `b`) is busy")
            && stderr.contains("cmd=sh"),
        "{stderr}"
    );
    assert_eq!(
        server.command(&["EXISTS", "redlease:a"])?,
        ":0",
        "a given back"
    );
    std::fs::write(dir.path().join("stop"), "")?;
    assert!(holder.wait().success(), "{}", holder.stderr());

    // Both held; deleting one of them (b) is the loss of the hold: 79, CMD terminated.
    let body = "trap 'echo term >> DIR/marks; exit 0' TERM; touch DIR/started; while :; do sleep 0.05; done";
    let mut job = start_run(
        &server,
        dir.path(),
        &["--key", "a", "--key", "b", "--ttl", "900ms"],
        body,
    );
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["DEL", "redlease:b"])?, ":1");
    assert_eq!(job.wait().code(), Some(79));
    let stderr = job.stderr();
    assert!(
        stderr.contains("lock `b` (one of locks `a`, `b`) was lost"),
        "{stderr}"
    );
    assert!(std::fs::read_to_string(dir.path().join("marks"))?.contains("term"));
    assert_eq!(
        server.command(&["EXISTS", "redlease:a"])?,
        ":0",
        "a released"
    );
    Ok(())
}

/// `redlease leader --json --elect NAME`: its exit code and the leader object (null for
/// nobody).
fn leader_json(server: &RedisServer, name: &str) -> (Option<i32>, serde_json::Value) {
    let out = output(redlease_on(server, &["leader", "--json", "--elect", name]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    (out.status.code(), json["leader"].clone())
}

/// Holds until `DIR/stop-$TAG` appears, having written its term and environment to
/// `DIR/env-$TAG` and touched `DIR/started-$TAG`.
const LEAD_BODY: &str = "echo \"$REDLEASE_TERM $REDLEASE_FENCING_TOKEN $REDLEASE_KEY\" > DIR/env-TAG; \
    touch DIR/started-TAG; while [ ! -e DIR/stop-TAG ]; do sleep 0.05; done";

fn lead(server: &RedisServer, dir: &std::path::Path, tag: &str) -> Job {
    start_run(
        server,
        dir,
        &["--elect", "sched"],
        &LEAD_BODY.replace("TAG", tag),
    )
}

/// The term `run --elect` gave the command tagged `tag` (checking that
/// `REDLEASE_FENCING_TOKEN` is the term and `REDLEASE_KEY` the election).
fn term_of(dir: &std::path::Path, tag: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let env = std::fs::read_to_string(dir.join(format!("env-{tag}")))?;
    let fields: Vec<&str> = env.split_whitespace().collect();
    assert_eq!(fields.len(), 3, "{env}");
    assert_eq!(fields[0], fields[1], "the fencing token is the term: {env}");
    assert_eq!(fields[2], "sched", "{env}");
    Ok(fields[0].parse()?)
}

#[test]
fn leader_shows_the_leader_of_run_elect_and_nobody_after_it_ends() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let out = output(redlease_on(&server, &["leader", "sched"]));
    assert_eq!(out.status.code(), Some(1), "nobody leads yet");
    assert!(
        text(&out.stdout).contains("election `sched` (key redlease:sched): nobody leads"),
        "{}",
        text(&out.stdout)
    );

    let mut job = lead(&server, dir.path(), "1");
    wait_for_file(&dir.path().join("started-1"));
    let term = term_of(dir.path(), "1")?;
    let out = output(redlease_on(&server, &["leader", "--elect", "sched"]));
    let shown = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let pid = format!("pid={} cmd=sh", job.id());
    assert!(
        shown.contains("election `sched` (key redlease:sched): led by host=")
            && shown.contains(&pid)
            && shown.contains(&format!("term {term},")),
        "{shown}"
    );
    let (code, leader) = leader_json(&server, "sched");
    assert_eq!(code, Some(0));
    assert_eq!(leader["term"].as_u64(), Some(term), "{leader}");
    assert!(
        leader["note"].as_str().is_some_and(|n| n.contains(&pid)),
        "{leader}"
    );
    assert!(
        leader["remaining_ms"].as_u64().is_some_and(|t| t > 0),
        "{leader}"
    );

    std::fs::write(dir.path().join("stop-1"), "")?;
    assert!(job.wait().success(), "{}", job.stderr());
    // With --json nobody leading is an answer, not a failure: exit 0, "leader": null.
    let (code, leader) = leader_json(&server, "sched");
    assert_eq!((code, leader), (Some(0), serde_json::Value::Null));
    Ok(())
}

#[test]
fn a_waiting_candidate_takes_over_after_the_first_leaders_command_exits() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let mut first = lead(&server, dir.path(), "1");
    wait_for_file(&dir.path().join("started-1"));
    let mut second = lead(&server, dir.path(), "2");
    // The second candidate waits in line (no --wait: as long as it takes).
    status_until(&server, "sched", |j| {
        j["waiters"].as_array().map_or(0, Vec::len) == 1
    });
    assert!(
        !dir.path().join("started-2").exists(),
        "two leaders at once"
    );
    std::fs::write(dir.path().join("stop-1"), "")?;
    assert!(first.wait().success(), "{}", first.stderr());
    // The first resigned as its command ended: the second leads at once, not when the
    // first's lease (30 s) would have run out.
    let ended = Instant::now();
    wait_for_file(&dir.path().join("started-2"));
    assert!(
        ended.elapsed() < Duration::from_secs(20),
        "took over only after {:?}",
        ended.elapsed()
    );
    let (first_term, second_term) = (term_of(dir.path(), "1")?, term_of(dir.path(), "2")?);
    assert!(second_term > first_term, "{first_term} then {second_term}");
    let (code, leader) = leader_json(&server, "sched");
    assert_eq!(code, Some(0));
    assert_eq!(leader["term"].as_u64(), Some(second_term), "{leader}");
    std::fs::write(dir.path().join("stop-2"), "")?;
    assert!(second.wait().success(), "{}", second.stderr());

    // --no-wait against a leader: 75, saying who leads.
    let mut third = lead(&server, dir.path(), "3");
    wait_for_file(&dir.path().join("started-3"));
    let out = output(redlease_on(
        &server,
        &["run", "--elect", "sched", "--no-wait", "--", "true"],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(75), "{stderr}");
    assert!(
        stderr.contains("election `sched` (key redlease:sched) has another leader")
            && stderr.contains(&format!("pid={} cmd=sh", third.id())),
        "{stderr}"
    );
    std::fs::write(dir.path().join("stop-3"), "")?;
    assert!(third.wait().success(), "{}", third.stderr());
    Ok(())
}

#[test]
fn losing_leadership_terminates_the_command_with_exit_code_79() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let body = "trap 'echo term >> DIR/marks; exit 0' TERM; touch DIR/started; while :; do sleep 0.05; done";
    let mut job = start_run(
        &server,
        dir.path(),
        &["--elect", "sched", "--ttl", "900ms"],
        body,
    );
    wait_for_file(&dir.path().join("started"));
    assert_eq!(server.command(&["DEL", "redlease:sched"])?, ":1");
    assert_eq!(job.wait().code(), Some(79));
    let stderr = job.stderr();
    assert!(
        stderr.contains("leadership of election `sched` was lost"),
        "{stderr}"
    );
    assert!(std::fs::read_to_string(dir.path().join("marks"))?.contains("term"));
    Ok(())
}

/// What one line of `leader --watch --json` says: `None` for nobody, else the term and
/// the note.
fn watched(line: &str) -> Option<(u64, String)> {
    let json: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
    assert!(json["at"].is_string() && json["name"] == "sched", "{line}");
    let leader = &json["leader"];
    let term = leader["term"].as_u64()?;
    Some((term, leader["note"].as_str().unwrap_or_default().to_owned()))
}

#[test]
fn leader_watch_prints_each_change_until_interrupted() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let mut cmd = redlease_on(&server, &["leader", "sched", "--watch", "--json"]);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut watcher = Job(cmd.spawn()?);
    let stdout = watcher.0.stdout.take().ok_or("no stdout")?;
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = || -> Result<Option<(u64, String)>, Box<dyn std::error::Error>> {
        let line = lines
            .recv_timeout(STEP)
            .map_err(|e| format!("no line from leader --watch: {e}"))?;
        Ok(watched(&line))
    };
    assert_eq!(next()?, None, "nobody leads at first");

    let mut first = lead(&server, dir.path(), "1");
    let (first_term, note) = next()?.ok_or("the first leader was not shown")?;
    assert!(note.contains(&format!("pid={} ", first.id())), "{note}");
    let mut second = lead(&server, dir.path(), "2");
    status_until(&server, "sched", |j| {
        j["waiters"].as_array().map_or(0, Vec::len) == 1
    });

    // The first resigns when its command ends; the second, waiting, takes over.
    std::fs::write(dir.path().join("stop-1"), "")?;
    assert!(first.wait().success(), "{}", first.stderr());
    let (second_term, note) = loop {
        // A moment with nobody between the two may be told, or skipped.
        if let Some(seen) = next()? {
            break seen;
        }
    };
    assert!(note.contains(&format!("pid={} ", second.id())), "{note}");
    assert!(second_term > first_term, "{first_term} then {second_term}");
    wait_for_file(&dir.path().join("started-2"));
    assert_eq!(term_of(dir.path(), "2")?, second_term);

    std::fs::write(dir.path().join("stop-2"), "")?;
    assert!(second.wait().success(), "{}", second.stderr());
    assert_eq!(next()?, None, "nobody leads at the end");

    signal(watcher.id(), Signal::SIGTERM);
    assert_eq!(watcher.wait().code(), Some(143));
    assert!(
        lines.recv_timeout(Duration::from_secs(1)).is_err(),
        "no change told twice"
    );
    Ok(())
}

#[test]
fn bad_combinations_of_several_keys_and_elect_are_usage_errors() {
    let cases: [(&[&str], &str); 9] = [
        (&["--key", "a", "--key", "b", "--permits", "2"], "--permits"),
        (&["--key", "a", "--key", "b", "--read"], "--read"),
        (&["--key", "a", "--key", "b", "--write"], "--write"),
        (&["--elect", "e", "--key", "a"], "'--key <NAME>'"),
        (&["--elect", "e", "--permits", "2"], "--permits"),
        (&["--elect", "e", "--read"], "--read"),
        (&["--elect", "e", "--write"], "--write"),
        (&["--elect", "e", "--no-wait", "--wait", "1s"], "--wait"),
        (&[], "--key <NAME>"),
    ];
    let port = redlease_local::free_port().unwrap_or(1);
    let nowhere = format!("redis://127.0.0.1:{port}");
    for (args, needle) in cases {
        let out = output({
            let mut cmd = redlease();
            cmd.arg("run")
                .args(args)
                .args(["--redis", &nowhere, "--", "true"]);
            cmd
        });
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            stderr.starts_with("redlease: ") && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
    // A name given twice is one name: a plain lock, so --permits is fine (it only fails
    // to connect here).
    let out = output({
        let mut cmd = redlease();
        cmd.args(["run", "--key", "a", "--key", "a", "--permits", "2"])
            .args(["--redis", &nowhere, "--", "true"]);
        cmd
    });
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    let out = output({
        let mut cmd = redlease();
        cmd.args(["leader", "--redis", &nowhere]);
        cmd
    });
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn help_explains_several_keys_elections_and_leader() {
    let help = |args: &[&str]| {
        let out = output({
            let mut cmd = redlease();
            cmd.args(args);
            cmd
        });
        assert!(out.status.success(), "{args:?}");
        text(&out.stdout)
    };
    let run = help(&["run", "--help"]);
    for needle in [
        "--key account:7 --key account:3",
        "--elect scheduler",
        "REDLEASE_FENCING_TOKENS",
        "REDLEASE_KEYS",
        "REDLEASE_TERM",
        "never deadlock",
    ] {
        assert!(run.contains(needle), "run --help lacks {needle:?}");
    }
    let leader = help(&["leader", "--help"]);
    for needle in ["Examples", "Exit codes", "--watch", "--json", "nobody"] {
        assert!(leader.contains(needle), "leader --help lacks {needle:?}");
    }
    assert!(help(&["--help"]).contains("redlease leader --elect scheduler --watch"));
}

/// `%XX` back to its byte, as a consumer of `REDLEASE_KEYS` does (`run --help`).
fn percent_decode(item: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut rest = item.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail.get(..2).ok_or("a % without two hex digits")?;
            out.push(u8::from_str_radix(std::str::from_utf8(hex)?, 16)?);
            rest = &tail[2..];
        } else {
            out.push(byte);
            rest = tail;
        }
    }
    Ok(String::from_utf8(out)?)
}

#[test]
fn names_with_spaces_and_equals_signs_parse_back_from_the_environment() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let names = ["x y", "p=q", "50%", "plain"];
    let mut args = Vec::new();
    for name in names {
        args.extend(["--key", name]);
    }
    let mut job = start_run(
        &server,
        dir.path(),
        &args,
        "printf '%s\\n%s\\n' \"$REDLEASE_KEYS\" \"$REDLEASE_FENCING_TOKENS\" > DIR/env",
    );
    assert!(job.wait().success(), "{}", job.stderr());
    let env = std::fs::read_to_string(dir.path().join("env"))?;
    let mut lines = env.lines();
    let keys = lines
        .next()
        .unwrap_or("")
        .split(' ')
        .map(percent_decode)
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(keys, names, "REDLEASE_KEYS: {env}");
    let pairs: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    assert_eq!(pairs.len(), names.len(), "REDLEASE_FENCING_TOKENS: {env}");
    let mut conn = redis::Client::open(server.url())?.get_connection()?;
    for (pair, name) in pairs.into_iter().zip(names) {
        let (encoded, token) = pair.rsplit_once('=').ok_or("no =")?;
        assert_eq!(percent_decode(encoded)?, name, "{pair}");
        // The token each name was granted: its fencing counter's value.
        let keys = redlease::LockKeys::new("redlease:", name)?;
        let counter: String = redis::cmd("GET").arg(keys.fence()).query(&mut conn)?;
        assert_eq!(token, counter, "{pair}");
    }
    Ok(())
}

#[test]
fn the_command_of_a_leader_proclaims_a_new_note_through_its_run() -> TestResult {
    let server = server();
    let dir = tempfile::tempdir()?;
    let bin = env!("CARGO_BIN_EXE_redlease");
    let body = format!(
        "{bin} proclaim 'serving on :8080' > DIR/said 2>&1; echo $? > DIR/code; \
         while [ ! -e DIR/stop ]; do sleep 0.05; done"
    );
    let mut job = start_run(&server, dir.path(), &["--elect", "sched"], &body);
    common::wait_for_file(&dir.path().join("code"));
    let code = std::fs::read_to_string(dir.path().join("code"))?;
    let said = std::fs::read_to_string(dir.path().join("said"))?;
    assert_eq!(code.trim(), "0", "{said}");
    let (exit, leader) = leader_json(&server, "sched");
    assert_eq!(exit, Some(0));
    assert_eq!(leader["note"], "serving on :8080", "{leader}");
    std::fs::write(dir.path().join("stop"), "")?;
    let status = job.wait();
    assert!(status.success(), "{status}: {}", job.stderr());
    // Not from the command of a leader: a usage error naming the variable.
    let out = output({
        let mut cmd = redlease();
        cmd.args(["proclaim", "x"]).env_remove("REDLEASE_PROCLAIM");
        cmd
    });
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("REDLEASE_PROCLAIM"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}
