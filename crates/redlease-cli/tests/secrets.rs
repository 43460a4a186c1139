//! The real binary never prints a password: not in `--help` (even with `REDIS_URL` set),
//! not in its errors, not in its TRACE logs.

mod common;

use common::{TestResult, output, redlease};
use redlease_local::{RedisServer, ServerOptions};

const SECRET: &str = "SECRET-pw-4242";

fn assert_clean(what: &str, out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{what} printed the password:\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
}

#[test]
fn help_never_shows_the_url_from_the_environment() {
    let url = format!("redis://u:{SECRET}@127.0.0.1:1");
    for args in [
        &["--help"][..],
        &["run", "--help"],
        &["status", "--help"],
        &["list", "--help"],
        &["release", "--help"],
        #[cfg(feature = "local")]
        &["demo", "--help"],
        #[cfg(feature = "bench")]
        &["bench", "--help"],
        &["run", "-h"],
        &["run", "--no-such-flag"],
        &["status"],
    ] {
        let mut cmd = redlease();
        cmd.env("REDIS_URL", &url).args(args);
        assert_clean(&format!("redlease {}", args.join(" ")), &output(cmd));
    }
}

#[test]
fn connection_errors_never_show_the_password() {
    let url = format!("redis://u:{SECRET}@127.0.0.1:1");
    let runs: [&[&str]; 6] = [
        &["run", "--key", "k", "--no-wait", "--", "true"],
        &["status", "k"],
        &["status", "--json", "k"],
        &["list"],
        &["release", "--force", "k"],
        &["run", "--key", "k", "--", "true"],
    ];
    for args in runs {
        // From --redis, from REDIS_URL, and as a quorum of three.
        let mut flag = redlease();
        let (head, tail) =
            args.split_at(args.iter().position(|a| *a == "--").unwrap_or(args.len()));
        flag.env("RUST_LOG", "trace")
            .args(head)
            .args(["--redis", &url])
            .args(tail);
        let out = output(flag);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?}: no error message");
        assert_clean(&format!("redlease {} --redis URL", args.join(" ")), &out);

        let mut env = redlease();
        env.env("RUST_LOG", "trace")
            .env("REDIS_URL", &url)
            .args(args);
        assert_clean(
            &format!("REDIS_URL=URL redlease {}", args.join(" ")),
            &output(env),
        );

        let mut quorum = redlease();
        quorum.env("RUST_LOG", "trace").args(head);
        for _ in 0..3 {
            quorum.args(["--redis", &url]);
        }
        quorum.args(tail);
        assert_clean(
            &format!("redlease {} --redis URL x3", args.join(" ")),
            &output(quorum),
        );
    }
    // A URL that does not parse.
    let mut bad = redlease();
    bad.args([
        "status",
        "k",
        "--redis",
        &format!("redis://u:{SECRET}@127.0.0.1:nope"),
    ]);
    assert_clean("a malformed URL", &output(bad));
}

#[test]
fn a_wrong_password_is_refused_without_echoing_it() -> TestResult {
    let server = RedisServer::start_with(
        ServerOptions::default()
            .arg("--requirepass")
            .arg("the-right-one"),
    )?;
    let url = format!("redis://default:{SECRET}@127.0.0.1:{}", server.port());
    for args in [
        &["status", "k"][..],
        &["list"],
        &["release", "--force", "k"],
        &["run", "--key", "k", "--no-wait"],
    ] {
        let mut cmd = redlease();
        cmd.env("RUST_LOG", "trace")
            .args(args)
            .args(["--redis", &url]);
        if args[0] == "run" {
            cmd.args(["--", "true"]);
        }
        let out = output(cmd);
        assert_ne!(out.status.code(), Some(0), "{args:?}");
        assert_clean(
            &format!("redlease {} with a wrong password", args.join(" ")),
            &out,
        );
    }
    Ok(())
}

/// A server that wants a password and got none (or a wrong one): exit 77 (`EX_NOPERM`)
/// with a message that says the credentials were refused, for `status` and for `run`
/// (whose command does not start). The password from `REDISCLI_AUTH` then connects,
/// without being on the command line, and is never printed.
#[test]
fn a_refused_password_exits_77_and_redis_cli_auth_gives_one() -> TestResult {
    let server =
        RedisServer::start_with(ServerOptions::default().arg("--requirepass").arg(SECRET))?;
    let url = format!("redis://127.0.0.1:{}", server.port());
    let marker = server.dir().join("ran");
    let marker_arg = marker.display().to_string();
    let status = ["status", "--redis", &url, "--json", "--key", "job"];
    let run = [
        "run",
        "--redis",
        &url,
        "--key",
        "job",
        "--",
        "touch",
        &marker_arg,
    ];
    let with = |auth: Option<&str>, args: &[&str]| {
        let mut cmd = redlease();
        if let Some(auth) = auth {
            cmd.env("REDISCLI_AUTH", auth);
        }
        cmd.args(args);
        output(cmd)
    };
    for args in [&status[..], &run[..]] {
        let out = with(None, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(77), "{args:?}: {stderr}");
        assert!(stderr.contains("refused the credentials"), "{stderr}");
        assert!(stderr.contains("NOAUTH"), "{stderr}");
        let out = with(Some("not-the-password"), args);
        assert_eq!(
            out.status.code(),
            Some(77),
            "{args:?}, wrong password: {out:?}"
        );
    }
    assert!(!marker.exists(), "run started its command without a lock");
    for args in [&status[..], &run[..]] {
        let out = with(Some(SECRET), args);
        assert_clean("redlease with REDISCLI_AUTH", &out);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
    }
    assert!(marker.exists(), "run did not run its command");
    Ok(())
}
