//! What the CLI echoes from outside (key names, holder details, URLs, paths) reaches the
//! terminal or a cron mail escaped, bounded and recognisable: no raw control character,
//! no 100 KB line, a mistyped URL shown as typed (only a password hidden), the path of a
//! command that could not run.

mod common;

use common::{TestResult, output, redlease, redlease_on, server};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn list_escapes_control_characters_in_foreign_names_and_details() -> TestResult {
    let server = server();
    let name = "evil\n\u{1b}[31mred";
    server.command(&["SET", &format!("redlease:{name}"), "tok", "PX", "60000"])?;
    let out = output(redlease_on(&server, &["list"]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        !stdout.contains('\u{1b}'),
        "a raw escape reached the terminal: {stdout:?}"
    );
    assert!(stdout.contains("evil\\n\\u{1b}[31mred"), "{stdout}");
    assert_eq!(
        stdout.lines().count(),
        2,
        "a name broke the table: {stdout}"
    );
    Ok(())
}

#[test]
fn a_huge_key_is_not_echoed_whole() {
    let server = server();
    let key = "k".repeat(100_000);
    let out = output(redlease_on(&server, &["run", "--key", &key, "--", "true"]));
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.len() < 1_000, "{} bytes of error", text.len());
    assert!(text.contains("100000 bytes"), "{text}");
}

#[test]
fn a_mistyped_url_is_shown_as_typed_and_a_password_is_not() {
    for (url, shown, hidden) in [
        ("not a url", "not a url", None),
        (
            "redis//:pw-1234@localhost",
            "redis//:***@localhost",
            Some("pw-1234"),
        ),
    ] {
        let mut cmd = redlease();
        cmd.args(["status", "--redis", url, "--key", "job"]);
        let out = output(cmd);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains(shown), "{url:?}: {text}");
        if let Some(hidden) = hidden {
            assert!(!text.contains(hidden), "{text}");
        }
    }
}

#[test]
fn a_command_that_cannot_run_is_named_by_the_path_tried() {
    let server = server();
    let out = output(redlease_on(
        &server,
        &["run", "--key", "job", "--", "/nonexistent/dir/cmd"],
    ));
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(127), "{text}");
    assert!(text.contains("`/nonexistent/dir/cmd`"), "{text}");
}
