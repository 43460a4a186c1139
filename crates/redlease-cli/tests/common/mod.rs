//! Shared set-up of the CLI tests: a private redis-server, the real `redlease` binary, and
//! bounded waits (a hang fails the test instead of stalling it).
#![allow(
    dead_code,
    unreachable_pub,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redlease_local::RedisServer;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// Bound on any one step: generous, because the machine is shared with other builds.
pub const STEP: Duration = Duration::from_secs(60);

pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("cannot start redis-server: {e}"),
    }
}

/// The `redlease` binary with a clean environment for Redis (no inherited `REDIS_URL`).
pub fn redlease() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlease"));
    cmd.env_remove("REDIS_URL")
        .env_remove("REDISCLI_AUTH")
        .env_remove("RUST_LOG");
    cmd
}

/// `redlease ARGS --redis URL`.
pub fn redlease_on(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = redlease();
    let (head, tail) = match args.iter().position(|a| *a == "--") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    cmd.args(head).arg("--redis").arg(server.url()).args(tail);
    cmd
}

/// Runs `cmd` to completion within [`STEP`] and returns its output; on a hang, kills it
/// (by its PID) and fails.
pub fn output(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => panic!("cannot start {cmd:?}: {e}"),
    };
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(STEP) {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("waiting for {cmd:?}: {e}"),
        Err(_) => {
            signal(pid, Signal::SIGKILL);
            panic!("{cmd:?} did not finish within {STEP:?}");
        }
    }
}

/// Waits for `child` within [`STEP`]; on a hang, kills it and fails.
pub fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + STEP;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("process {} did not exit within {STEP:?}", child.id());
            }
            Err(e) => panic!("waiting for process {}: {e}", child.id()),
        }
    }
}

/// Polls until `path` exists (a marker a command creates), within [`STEP`].
pub fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + STEP;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {STEP:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Calls `check` until it returns `Some`, within [`STEP`] (for a state another process
/// reaches in the background); `what` names it when it does not.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + STEP;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "{what} not within {STEP:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` to a process this test started.
pub fn signal(pid: u32, sig: Signal) {
    if let Ok(raw) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(raw), sig);
    }
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A shell command line for `sh -c`, with `dir` substituted for `DIR`.
pub fn script(dir: &Path, body: &str) -> String {
    body.replace("DIR", &dir.display().to_string())
}

/// A `redlease run` started by a test; if the test fails before it ends, dropping it
/// sends SIGTERM (which redlease forwards to its command's process group), then SIGKILL.
pub struct Job(pub Child);

impl Job {
    /// Waits for it within [`STEP`].
    pub fn wait(&mut self) -> ExitStatus {
        wait(&mut self.0)
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Waits for it and returns what it wrote on stderr.
    pub fn stderr(&mut self) -> String {
        let mut err = String::new();
        if let Some(mut pipe) = self.0.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
        }
        err
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            signal(self.0.id(), Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(self.0.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `redlease run ARGS --redis URL -- sh -c BODY`, where `DIR` in BODY stands for
/// `dir`; stdin closed, stderr piped.
pub fn start_run(server: &RedisServer, dir: &Path, args: &[&str], body: &str) -> Job {
    let body = script(dir, body);
    let mut cmd = redlease();
    cmd.arg("run")
        .args(args)
        .arg("--redis")
        .arg(server.url())
        .args(["--", "sh", "-c", &body])
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    match cmd.spawn() {
        Ok(child) => Job(child),
        Err(e) => panic!("cannot start {cmd:?}: {e}"),
    }
}

/// The command body of the exclusion tests: appends `start PID FENCE`, sleeps, appends
/// `end PID` to `DIR/marks`.
pub const MARKS_BODY: &str = "echo \"start $$ $REDLEASE_FENCING_TOKEN\" >> DIR/marks; sleep 0.1; echo \"end $$\" >> DIR/marks";

/// Checks `dir/marks` (written by [`MARKS_BODY`] commands): `sections` sections, never
/// interleaved (each start is followed by the same process's end), fencing tokens strictly
/// increasing from one section to the next.
pub fn check_marks(dir: &Path, sections: usize) -> TestResult {
    let marks = std::fs::read_to_string(dir.join("marks"))?;
    let lines: Vec<&str> = marks.lines().collect();
    assert_eq!(lines.len(), 2 * sections, "{marks}");
    let mut last_fence = 0u64;
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        assert_eq!(start[0], "start", "interleaved sections:\n{marks}");
        let end = format!("end {}", start[1]);
        assert_eq!(pair[1], end, "interleaved sections:\n{marks}");
        let fence: u64 = start[2].parse()?;
        assert!(fence > last_fence, "fencing tokens must grow:\n{marks}");
        last_fence = fence;
    }
    Ok(())
}

/// Whether process `pid` is gone: no such process, or a zombie (dead, not yet reaped by
/// whoever adopted it).
pub fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z"),
    }
}

/// The pid a command wrote to `path` (a line), once the line is whole.
pub fn pid_in(path: &Path) -> Result<u32, Box<dyn std::error::Error>> {
    wait_for_file(path);
    // The file appears before its content: wait for the whole line.
    let deadline = Instant::now() + STEP;
    loop {
        let text = std::fs::read_to_string(path)?;
        if text.ends_with('\n') {
            return Ok(text.trim().parse()?);
        }
        assert!(Instant::now() < deadline, "{} stayed empty", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills, by PID, the processes a test started through `redlease run` if they outlive it
/// (they do on a failure: they would otherwise run on after the test).
pub struct Leftovers(pub Vec<u32>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if !gone(pid) {
                signal(pid, Signal::SIGKILL);
            }
        }
    }
}

/// Takes `redlease:NAME` with a plain `SET NX PX`, as another library's lock would.
pub fn hold_elsewhere(server: &RedisServer, name: &str) -> TestResult {
    let key = format!("redlease:{name}");
    assert_eq!(
        server.command(&["SET", &key, "0123456789abcdef", "PX", "60000"])?,
        "+OK"
    );
    Ok(())
}
