//! How every command connects, through the real binary against real redis-servers: the
//! connection options before or after the subcommand, `--connect-timeout` and
//! `--response-timeout`, the library's own errors for `list` as for every command (77 for
//! refused credentials, 69 for a server that cannot be reached), advice that follows
//! `REDISCLI_AUTH` and the URL's scheme, a server that stops answering, and
//! `redis+cluster://` URLs.

mod common;

use std::io::{BufRead as _, BufReader};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{Job, TestResult, hold_elsewhere, output, redlease, server, text};
use redlease_local::{Cluster, Proxy, RedisServer, ServerOptions};

const PASSWORD: &str = "conn-pw-9137";

fn code_and_stderr(out: &Output) -> (Option<i32>, String) {
    (out.status.code(), text(&out.stderr))
}

/// `redlease ARGS` with `REDISCLI_AUTH` set to `auth` when given.
fn cli(auth: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = redlease();
    if let Some(auth) = auth {
        cmd.env("REDISCLI_AUTH", auth);
    }
    cmd.args(args);
    output(cmd)
}

#[test]
fn connection_options_go_before_or_after_the_subcommand() -> TestResult {
    let server = server();
    hold_elsewhere(&server, "job")?;
    let url = server.url();
    for args in [
        &["--redis", &url, "status", "--key", "job"][..],
        &["status", "--key", "job", "--redis", &url],
        &["--redis", &url, "--connect-timeout", "2s", "list"],
        &["list", "--response-timeout", "1500ms", "--redis", &url],
        &[
            "--prefix",
            "redlease:",
            "--redis",
            &url,
            "release",
            "--force",
            "-k",
            "job",
        ],
    ] {
        let (code, stderr) = code_and_stderr(&cli(None, args));
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
    }
    // `run` too, its command after `--`.
    let out = cli(
        None,
        &["--redis", &url, "run", "--key", "job", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Another prefix before the subcommand applies to it.
    hold_elsewhere(&server, "other")?;
    let out = cli(
        None,
        &[
            "--prefix",
            "elsewhere:",
            "--redis",
            &url,
            "status",
            "-k",
            "other",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    Ok(())
}

#[test]
fn timeouts_are_durations_above_zero() {
    for flag in ["--connect-timeout", "--response-timeout"] {
        for bad in ["0s", "0", "0ms", "soon"] {
            let out = cli(None, &["status", "-k", "x", flag, bad]);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{flag} {bad}: {stderr}");
            assert!(stderr.contains(flag), "{flag} {bad}: {stderr}");
        }
    }
}

/// A server that never answers (a silent proxy from the start): every command, `list`
/// included, gives up within `--connect-timeout` with the library's message and 69.
#[test]
fn a_connect_timeout_is_the_flags_and_exits_69() -> TestResult {
    let server = server();
    let proxy = Proxy::start(server.port())?;
    proxy.silence();
    let url = proxy.url();
    for command in [&["list"][..], &["status", "-k", "x"]] {
        let started = Instant::now();
        let mut args = vec!["--connect-timeout", "400ms", "--redis", &url];
        args.extend_from_slice(command);
        let (code, stderr) = code_and_stderr(&cli(None, &args));
        assert_eq!(code, Some(69), "{command:?}: {stderr}");
        assert!(
            stderr.contains("within 400ms (the connect timeout)"),
            "{stderr}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{command:?} took {:?}",
            started.elapsed()
        );
    }
    Ok(())
}

/// A wrong or missing password: `list` exits 77 with the library's words, as `status`
/// does; a password from `REDISCLI_AUTH` is to be fixed there, never put in a URL.
#[test]
fn refused_credentials_exit_77_with_advice_that_fits_how_they_were_given() -> TestResult {
    let server =
        RedisServer::start_with(ServerOptions::default().arg("--requirepass").arg(PASSWORD))?;
    let plain = format!("redis://127.0.0.1:{}", server.port());
    let wrong = format!("redis://:not-{PASSWORD}@127.0.0.1:{}", server.port());
    for command in [&["list"][..], &["status", "-k", "x"]] {
        let with = |auth: Option<&str>, url: &str| {
            let mut args = command.to_vec();
            args.extend(["--redis", url]);
            code_and_stderr(&cli(auth, &args))
        };
        // In the URL: the library's error, in the URL's form.
        let (code, stderr) = with(None, &wrong);
        assert_eq!(code, Some(77), "{command:?}: {stderr}");
        assert!(stderr.contains("refused the credentials"), "{stderr}");
        assert!(stderr.contains("redis://USER:PASSWORD@"), "{stderr}");
        assert!(!stderr.contains(PASSWORD), "{stderr}");
        // None at all.
        let (code, stderr) = with(None, &plain);
        assert_eq!(code, Some(77), "{command:?}: {stderr}");
        assert!(stderr.contains("NOAUTH"), "{stderr}");
        // From REDISCLI_AUTH: fix it there.
        let (code, stderr) = with(Some("not-it"), &plain);
        assert_eq!(code, Some(77), "{command:?}: {stderr}");
        assert!(
            stderr.contains("check the password in REDISCLI_AUTH"),
            "{stderr}"
        );
        assert!(!stderr.contains("PASSWORD@"), "{stderr}");
        // And the right one connects.
        let (code, stderr) = with(Some(PASSWORD), &plain);
        assert!(matches!(code, Some(0 | 1)), "{command:?}: {stderr}");
    }
    Ok(())
}

/// Over TLS, the advice keeps the URL's `rediss://` scheme, and with `REDISCLI_AUTH` it
/// names the variable, not a URL with a password.
#[test]
fn the_advice_keeps_a_tls_urls_scheme() -> TestResult {
    let server = RedisServer::start_with(
        ServerOptions::default()
            .tls()
            .arg("--requirepass")
            .arg(PASSWORD),
    )?;
    let url = server.tls_url().ok_or("no TLS port")?;
    let ca = server
        .ca_certificate()
        .ok_or("no CA")?
        .display()
        .to_string();
    let args = ["--cacert", &ca, "--redis", &url, "status", "-k", "x"];
    let (code, stderr) = code_and_stderr(&cli(None, &args));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(
        stderr.contains("(rediss://USER:PASSWORD@host:port"),
        "{stderr}"
    );
    assert!(!stderr.contains("redis://USER"), "{stderr}");
    let (code, stderr) = code_and_stderr(&cli(Some("not-it"), &args));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("REDISCLI_AUTH"), "{stderr}");
    assert!(stderr.contains("rediss://USER@host:port"), "{stderr}");
    assert!(!stderr.contains("PASSWORD@"), "{stderr}");
    let (code, stderr) = code_and_stderr(&cli(Some(PASSWORD), &args));
    assert_eq!(code, Some(1), "{stderr}");
    Ok(())
}

/// A link that worked goes silent under `status --watch`: the next snapshot says that
/// Redis stopped answering within the response timeout, not to check the address.
#[test]
fn a_server_that_stops_answering_is_said_to() -> TestResult {
    let server = server();
    let proxy = Proxy::start(server.port())?;
    let mut cmd = redlease();
    cmd.args(["--response-timeout", "300ms", "--redis", &proxy.url()])
        .args(["status", "--watch", "200ms", "-k", "x"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut job = Job(cmd.spawn()?);
    let stdout = job.0.stdout.take().ok_or("no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next().ok_or("no snapshot")??;
    assert!(first.contains("free"), "{first}");
    proxy.silence();
    let deadline = Instant::now() + common::STEP;
    let said = loop {
        let line = lines.next().ok_or("the watch ended")??;
        if line.starts_with("redlease: ") {
            break line;
        }
        assert!(Instant::now() < deadline, "no error while silent");
    };
    proxy.heal();
    drop(job);
    assert!(said.contains("stopped answering"), "{said}");
    assert!(said.contains("response timeout"), "{said}");
    assert!(!said.contains("address, TLS"), "{said}");
    Ok(())
}

/// `redis+cluster://` works for every command, `list` included: it scans every primary.
#[test]
fn cluster_urls_are_accepted_and_list_scans_every_primary() -> TestResult {
    let cluster = Cluster::start()?;
    let seeds: Vec<String> = cluster
        .primaries()
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.port()))
        .collect();
    let url = format!("redis+cluster://{}", seeds[..1].join(","));
    // Names on several slots, hence several primaries.
    let names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
    for name in names {
        hold_elsewhere(cluster.primary_for_key(&format!("redlease:{name}"))?, name)?;
    }
    let out = cli(None, &["--redis", &url, "list", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let mut found: Vec<&str> = listed.iter().filter_map(|s| s["name"].as_str()).collect();
    found.sort_unstable();
    assert_eq!(found, names);
    let out = cli(None, &["status", "-k", "alpha", "--redis", &url]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = cli(
        None,
        &["--redis", &url, "run", "--key", "golf", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    Ok(())
}
