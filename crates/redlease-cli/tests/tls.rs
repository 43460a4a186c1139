//! `rediss://` from the command line: `--cacert` for a private CA, `--cert` and `--tls-key`
//! for a server that requires client certificates, `--insecure`, the errors of a
//! missing file or a half-given pair, and `rediss+sentinel://` with the same flags.

mod common;

use common::{TestResult, output, redlease, text};
use redlease_local::{RedisServer, Sentinel, ServerOptions};

fn tls_server(options: ServerOptions) -> Result<RedisServer, redlease_local::Error> {
    RedisServer::start_with(options)
}

/// `redlease ARGS --redis URL TLS_ARGS [-- CMD]`.
fn on(url: &str, args: &[&str], tls: &[&str]) -> std::process::Command {
    let mut cmd = redlease();
    let (head, tail) = match args.iter().position(|a| *a == "--") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    cmd.args(head).args(["--redis", url]).args(tls).args(tail);
    cmd
}

/// Runs each of `cases` (the arguments, the exit code expected) on `url` with `tls`.
fn exit_codes(url: &str, tls: &[&str], cases: &[(&[&str], i32)]) {
    for (args, code) in cases {
        let out = output(on(url, args, tls));
        assert_eq!(
            out.status.code(),
            Some(*code),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn cacert_reaches_a_server_signed_by_a_private_ca_that_the_system_roots_refuse() -> TestResult {
    let server = tls_server(ServerOptions::default().tls())?;
    let url = server.tls_url().ok_or("no TLS port")?;
    let ca = server.ca_certificate().ok_or("no CA")?;
    let ca = ca.to_str().ok_or("path")?;

    let refused = output(on(&url, &["status", "k"], &[]));
    assert_eq!(refused.status.code(), Some(69), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("certificate"),
        "{}",
        text(&refused.stderr)
    );

    // run (the library's client), status (its inspection) and list (plain connections).
    exit_codes(
        &url,
        &["--cacert", ca],
        &[
            (&["run", "--key", "k", "--", "true"], 0),
            (&["status", "k"], 1),
            (&["list"], 0),
        ],
    );
    Ok(())
}

#[test]
fn cert_and_tls_key_reach_a_server_that_requires_a_client_certificate() -> TestResult {
    let server = tls_server(ServerOptions::default().tls_client_certificates())?;
    let url = server.tls_url().ok_or("no TLS port")?;
    let ca = server.ca_certificate().ok_or("no CA")?;
    let (cert, key) = server.client_certificate().ok_or("no client certificate")?;
    let (ca, cert, key) = (
        ca.to_str().ok_or("path")?,
        cert.to_str().ok_or("path")?,
        key.to_str().ok_or("path")?,
    );

    let refused = output(on(
        &url,
        &["run", "--key", "k", "--", "true"],
        &["--cacert", ca],
    ));
    assert_eq!(refused.status.code(), Some(69), "{}", text(&refused.stderr));

    let mutual = ["--cacert", ca, "--cert", cert, "--tls-key", key];
    exit_codes(
        &url,
        &mutual,
        &[
            (&["run", "--key", "k", "--", "true"], 0),
            (&["status", "k"], 1),
            (&["list"], 0),
            (&["release", "--force", "k"], 1),
        ],
    );
    Ok(())
}

#[test]
fn a_missing_file_is_named_and_a_cert_without_its_key_is_a_usage_error() -> TestResult {
    let server = tls_server(ServerOptions::default().tls())?;
    let url = server.tls_url().ok_or("no TLS port")?;
    let missing = "/nonexistent/redlease-test/ca.crt";
    for args in [
        &["run", "--key", "k", "--", "true"][..],
        &["status", "k"],
        &["list"],
    ] {
        let out = output(on(&url, args, &["--cacert", missing]));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--cacert") && stderr.contains(missing),
            "{args:?}: {stderr}"
        );
    }

    let (cert, _) = server.client_certificate().ok_or("no client certificate")?;
    let out = output(on(
        &url,
        &["list"],
        &["--cert", cert.to_str().ok_or("path")?],
    ));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--tls-key"), "{stderr}");
    Ok(())
}

#[test]
fn insecure_accepts_an_unknown_ca_and_an_insecure_url_asks_for_the_flag() -> TestResult {
    let server = tls_server(ServerOptions::default().tls())?;
    let url = server.tls_url().ok_or("no TLS port")?;

    let out = output(on(
        &url,
        &["run", "--key", "k", "--", "true"],
        &["--insecure"],
    ));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let fragment = format!("{url}/#insecure");
    for args in [&["run", "--key", "k", "--", "true"][..], &["list"]] {
        let out = output(on(&fragment, args, &[]));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--insecure") && !stderr.contains("feature"),
            "{args:?}: {stderr}"
        );
        let out = output(on(&fragment, args, &["--insecure"]));
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    Ok(())
}

/// What `redlease list` prints on `url` with `flags` while a `run` on the same holds the
/// lock `listed`: run as that `run`'s command.
fn listed_while_held(url: &str, flags: &[&str]) -> String {
    let bin = env!("CARGO_BIN_EXE_redlease");
    let mut list = vec!["run", "--key", "listed", "--", bin, "list", "--redis", url];
    list.extend_from_slice(flags);
    let out = output(on(url, &list, flags));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn list_scans_the_primary_that_plain_sentinels_name() -> TestResult {
    let deployment = Sentinel::start()?;
    let url = deployment.sentinel_url();
    let listed = listed_while_held(&url, &[]);
    assert!(
        listed.contains("listed") && listed.contains("lock"),
        "{listed}"
    );
    // Held by nobody once the run ended.
    let out = output(on(&url, &["list"], &[]));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "no locks held");
    Ok(())
}

#[test]
fn rediss_sentinel_reaches_tls_sentinels_and_their_primary_with_the_tls_flags() -> TestResult {
    let deployment = Sentinel::start_tls_client_certificates()?;
    let url = deployment.sentinel_url();
    assert!(url.starts_with("rediss+sentinel://"), "{url}");
    let ca = deployment.ca_certificate().ok_or("no CA")?;
    let (cert, key) = deployment
        .client_certificate()
        .ok_or("no client certificate")?;
    let (ca, cert, key) = (
        ca.to_str().ok_or("path")?,
        cert.to_str().ok_or("path")?,
        key.to_str().ok_or("path")?,
    );
    let mutual = ["--cacert", ca, "--cert", cert, "--tls-key", key];

    // The lock is held on the primary while the command runs (its fencing token given).
    let held = r#"test -n "$REDLEASE_FENCING_TOKEN""#;
    exit_codes(
        &url,
        &mutual,
        &[
            (&["run", "--key", "k", "--", "sh", "-c", held], 0),
            (&["status", "k"], 1),
        ],
    );

    // list scans the primary the TLS sentinels name, with the same flags.
    let listed = listed_while_held(&url, &mutual);
    assert!(listed.contains("listed"), "{listed}");

    let run = ["run", "--key", "k", "--", "true"];
    // Without a client certificate, the sentinels drop the connection: the flags are named.
    let out = output(on(&url, &run, &["--cacert", ca]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("--cert"), "{stderr}");
    // Without --cacert, the system's roots refuse the sentinels' certificates.
    let out = output(on(&url, &run, &[]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(
        stderr.contains("certificate") && stderr.contains("--cacert"),
        "{stderr}"
    );
    // A plain redis+sentinel:// URL to the TLS sentinels: unreachable, or a usage error
    // beside the TLS flags; both name rediss+sentinel://.
    let plain = url.replace("rediss+sentinel://", "redis+sentinel://");
    for (flags, code) in [(&[][..], 69), (&mutual[..], 2)] {
        let out = output(on(&plain, &run, flags));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{flags:?}: {stderr}");
        assert!(stderr.contains("rediss+sentinel://"), "{flags:?}: {stderr}");
    }
    Ok(())
}
