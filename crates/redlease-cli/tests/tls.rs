//! `rediss://` from the command line: `--cacert` for a private CA, `--cert` and `--tls-key`
//! for a server that requires client certificates, `--insecure`, and the errors of a
//! missing file or a half-given pair.

mod common;

use common::{TestResult, output, redlease, text};
use redlease_local::{RedisServer, ServerOptions};

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
    for (args, code) in [
        (&["run", "--key", "k", "--", "true"][..], 0),
        (&["status", "k"], 1),
        (&["list"], 0),
    ] {
        let out = output(on(&url, args, &["--cacert", ca]));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
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
    for (args, code) in [
        (&["run", "--key", "k", "--", "true"][..], 0),
        (&["status", "k"], 1),
        (&["list"], 0),
        (&["release", "--force", "k"], 1),
    ] {
        let out = output(on(&url, args, &mutual));
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
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
