//! Runs the real `redlease bench` binary: a short run against a private redis-server.

use std::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn redlease() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redlease"))
}

#[test]
fn short_bench_reports_every_scenario_as_json() -> TestResult {
    let out = redlease()
        .args(["bench", "--json", "--duration", "150ms", "--workers", "3"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let uncontended = report["uncontended"].as_array().ok_or("no uncontended")?;
    let contended = report["contended"].as_array().ok_or("no contended")?;
    assert_eq!(uncontended.len(), 2);
    assert_eq!(contended.len(), 4);
    for c in contended {
        assert_eq!(c["counter"], c["sections"], "{c}");
        assert_eq!(c["per_worker"].as_array().map(Vec::len), Some(3));
        assert!(c["sections"].as_u64() > Some(0), "{c}");
    }
    assert_eq!(report["failures"].as_array().map(Vec::len), Some(0));
    Ok(())
}

/// `--only shared`: the semaphore (4 permits) and the 90%-read read-write lock, 16 tasks
/// each; 4 permit holders at most (and reached), readers together, never a writer beside
/// anyone, the counters right.
#[test]
fn the_semaphore_and_rwlock_scenarios_keep_their_exclusion() -> TestResult {
    let out = redlease()
        .args(["bench", "--json", "--only", "shared", "--duration", "300ms"])
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(report["uncontended"].as_array().map(Vec::len), Some(0));
    assert_eq!(report["contended"].as_array().map(Vec::len), Some(0));
    let shared = report["shared"].as_array().ok_or("no shared")?;
    assert_eq!(shared.len(), 2);
    for s in shared {
        assert_eq!(s["contenders"], 16, "{s}");
        assert!(s["sections"].as_u64() > Some(0), "{s}");
        assert_eq!(s["violations"], 0, "{s}");
        assert_eq!(s["counter"], s["expected_counter"], "{s}");
    }
    assert_eq!(shared[0]["permits"], 4);
    assert_eq!(
        shared[0]["most_inside"], 4,
        "4 permits never all held: {}",
        shared[0]
    );
    assert!(
        shared[1]["most_inside"].as_u64() > Some(1),
        "readers never shared"
    );
    assert!(shared[1]["writes"].as_u64() > Some(0), "{}", shared[1]);
    assert_eq!(report["failures"].as_array().map(Vec::len), Some(0));
    Ok(())
}

#[test]
fn table_output_and_help_name_the_scenarios() -> TestResult {
    let help = redlease().args(["bench", "--help"]).output()?;
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout)?;
    for needle in [
        "uncontended, redlease",
        "bare busy-retry",
        "--workers",
        "Exit codes",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let out = redlease()
        .args([
            "bench",
            "--duration",
            "100ms",
            "--workers",
            "2",
            "--hot-cpus",
            "1",
        ])
        .output()?;
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout)?;
    assert!(text.contains("hot CPUs: 1"), "{text}");
    assert!(text.contains("redlease acquire + release"), "{text}");
    assert!(text.contains("every counter matches"), "{text}");
    Ok(())
}

#[test]
fn bad_arguments_exit_2_and_unreachable_redis_69() -> TestResult {
    let out = redlease().args(["bench", "--duration", "1ms"]).output()?;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8(out.stderr)?.starts_with("redlease: --duration"));

    let port = redlease_local::free_port()?;
    let out = redlease()
        .args(["bench", "--redis", &format!("redis://127.0.0.1:{port}")])
        .output()?;
    assert_eq!(out.status.code(), Some(69));
    let stderr = String::from_utf8(out.stderr)?;
    assert!(
        stderr.starts_with("redlease: connecting to Redis"),
        "{stderr}"
    );
    Ok(())
}
