//! Runs the real `redlease bench` binary: a short run against a private redis-server.
#![cfg(feature = "bench")]

use std::process::{Command, Output};

use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn redlease() -> Command {
    Command::new(env!("CARGO_BIN_EXE_redlease"))
}

/// Short multi-process runs: 2 worker processes, 5 pairs of 100ms slices.
const TWO_PROCESSES: [&str; 6] = ["--processes", "2", "--slice", "100ms", "--pairs", "5"];

/// Runs `redlease ARGS`, which must exit with `code`: its output.
fn run(args: &[&str], code: i32) -> Result<Output, Box<dyn std::error::Error>> {
    let out = redlease().args(args).output()?;
    assert_eq!(
        out.status.code(),
        Some(code),
        "redlease {args:?}: stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(out)
}

/// Runs `redlease bench --json ARGS`, which must exit 0: the report.
fn bench_json(args: &[&str]) -> Result<Value, Box<dyn std::error::Error>> {
    let out = run(&[&["bench", "--json"], args].concat(), 0)?;
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Runs `redlease bench ARGS`, which must exit 0: the text report.
fn bench_text(args: &[&str]) -> Result<String, Box<dyn std::error::Error>> {
    Ok(String::from_utf8(
        run(&[&["bench"], args].concat(), 0)?.stdout,
    )?)
}

/// Checks that `redlease bench --help` names every one of `needles`.
fn help_names(needles: &[&str]) -> TestResult {
    let help = bench_text(&["--help"])?;
    for needle in needles {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    Ok(())
}

/// The length of a JSON array, `None` for anything else.
fn len(v: &Value) -> Option<usize> {
    v.as_array().map(Vec::len)
}

#[test]
fn short_bench_reports_every_scenario_as_json() -> TestResult {
    let report = bench_json(&["--duration", "150ms", "--workers", "3"])?;
    let uncontended = report["uncontended"].as_array().ok_or("no uncontended")?;
    let contended = report["contended"].as_array().ok_or("no contended")?;
    let quorum = report["quorum"].as_array().ok_or("no quorum")?;
    assert_eq!(uncontended.len(), 2);
    assert_eq!(contended.len(), 4);
    assert_eq!(quorum.len(), 2);
    for c in contended {
        assert_eq!(c["counter"], c["sections"], "{c}");
        assert_eq!(len(&c["per_worker"]), Some(3));
        assert!(c["sections"].as_u64() > Some(0), "{c}");
    }
    for side in uncontended.iter().chain(quorum) {
        assert!(side["ops"].as_u64() > Some(0), "{side}");
        assert_eq!(side["checks"]["acquires_failed"], 0, "{side}");
        assert_eq!(side["checks"]["releases_failed"], 0, "{side}");
    }
    // The bare loop's counts: SET, then EVALSHA (GET + DEL inside), 2 round trips (exact
    // but for a few commands of the other side's background work: see the quorum test).
    let bare = &uncontended[1]["commands"];
    assert!(
        (bare["total"].as_f64().unwrap_or(0.0) - 4.0).abs() < 0.01,
        "{bare}"
    );
    assert!(
        (bare["round_trips"].as_f64().unwrap_or(0.0) - 2.0).abs() < 0.01,
        "{bare}"
    );
    assert_eq!(report["pairs"], 5);
    let comparisons = report["comparisons"].as_array().ok_or("no comparisons")?;
    let names: Vec<&str> = comparisons
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [
            "uncontended",
            "contended, one Client / connection",
            "contended, Client / connection per worker",
            "quorum of 5"
        ]
    );
    for c in comparisons {
        check_pairs(c, 5)?;
    }
    // Contended pairs carry each side's longest wait and gap p50.
    let pair = &comparisons[1]["pairs"][0];
    for side in ["redlease", "floor"] {
        assert!(pair[side]["longest_wait_us"].as_f64() > Some(0.0), "{pair}");
        assert!(pair[side]["gap_p50_us"].is_number(), "{pair}");
    }
    assert_eq!(len(&report["failures"]), Some(0));
    Ok(())
}

/// A comparison of `n` interleaved pairs: the side going first alternates (ABBA), each
/// ratio is the pair's redlease rate over its floor rate, and the median lies in min..max.
fn check_pairs(c: &Value, n: usize) -> TestResult {
    let pairs = c["pairs"].as_array().ok_or("no pairs")?;
    assert_eq!(pairs.len(), n, "{c}");
    for (i, p) in pairs.iter().enumerate() {
        assert_eq!(p["redlease_first"], i % 2 == 0, "{c}");
        let (ours, floor) = (
            p["redlease"]["per_sec"].as_f64().ok_or("no rate")?,
            p["floor"]["per_sec"].as_f64().ok_or("no rate")?,
        );
        assert!(ours > 0.0 && floor > 0.0, "{c}");
        let ratio = p["ratio"].as_f64().ok_or("no ratio")?;
        assert!((ratio - ours / floor).abs() < 1e-9, "{c}");
    }
    let (median, min, max) = (
        c["ratio"]["median"].as_f64().ok_or("no median")?,
        c["ratio"]["min"].as_f64().ok_or("no min")?,
        c["ratio"]["max"].as_f64().ok_or("no max")?,
    );
    assert!(min <= median && median <= max, "{c}");
    Ok(())
}

/// Fewer than 5 pairs give no meaningful median or range: refused as bad usage.
#[test]
fn fewer_than_five_pairs_are_refused() -> TestResult {
    let out = run(&["bench", "--pairs", "4"], 2)?;
    let stderr = String::from_utf8(out.stderr)?;
    assert!(
        stderr.starts_with("redlease: --pairs 4 is too few") && stderr.contains("at least 5"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
    Ok(())
}

/// `--only quorum`: 5 private redis-servers, the redlease quorum client against the bare
/// parallel Redlock; every pair checked, the pairs reported, and the bare loop's counts
/// exact: per node and pair, SET NX PX + EVALSHA (whose GET and DEL count too), 2 round
/// trips.
#[test]
fn the_quorum_scenario_checks_every_pair_and_counts_per_node() -> TestResult {
    let text = bench_text(&["--only", "quorum", "--duration", "1s"])?;
    assert!(
        text.contains(
            "correctness (quorum of 5): every acquire succeeded and every release released"
        ),
        "{text}"
    );
    assert!(
        text.contains("quorum of 5: redlease / floor ops/s median"),
        "{text}"
    );
    assert!(!text.contains("Uncontended:"), "{text}");

    let report = bench_json(&["--only", "quorum", "--duration", "600ms", "--pairs", "6"])?;
    let comparisons = report["comparisons"].as_array().ok_or("no comparisons")?;
    assert_eq!(comparisons.len(), 1);
    check_pairs(&comparisons[0], 6)?;
    let quorum = report["quorum"].as_array().ok_or("no quorum")?;
    let bare = &quorum[1];
    assert_eq!(bare["scenario"], "bare parallel Redlock");
    assert_eq!(bare["nodes"], 5);
    // Exact but for the few commands of the redlease side's background work that can
    // finish after its slice ended (e.g. a release still reaching its last nodes) and so
    // land in the next slice's deltas.
    let per_node = |field: &str| bare["commands_per_node"][field].as_f64().unwrap_or(0.0);
    assert!((per_node("total") - 4.0).abs() < 0.01, "{bare}");
    assert!((per_node("round_trips") - 2.0).abs() < 0.01, "{bare}");
    assert!(
        bare["commands_per_node"]["by_command"]["evalsha"].is_number(),
        "{bare}"
    );
    assert!(
        quorum[0]["commands_per_node"]["round_trips"].as_f64() >= Some(2.0),
        "{}",
        quorum[0]
    );
    Ok(())
}

/// The loops `make callgrind` runs under valgrind, run natively here: every side does its
/// pairs or sections and checks them (the contended ones on both runtimes, their counter
/// matching the sections).
#[test]
fn the_callgrind_loops_run_and_check_their_pairs() -> TestResult {
    let server = redlease_local::RedisServer::start()?;
    let url = server.url();
    for runtime in ["current-thread", "multi-thread"] {
        for side in ["contended", "contended-bare"] {
            let loop_args = [
                "--url",
                &url,
                "--side",
                side,
                "--ops",
                "80",
                "--runtime",
                runtime,
            ];
            run(&[&["bench-callgrind-loop"], &loop_args[..]].concat(), 0)?;
        }
    }
    for side in ["redlease", "bare"] {
        let loop_args = ["--url", &url, "--side", side, "--ops", "50"];
        run(&[&["bench-callgrind-loop"], &loop_args[..]].concat(), 0)?;
    }
    let out = run(&["bench-callgrind", "--short", "40", "--long", "40"], 2)?;
    assert!(String::from_utf8(out.stderr)?.contains("must be larger than --short"));
    Ok(())
}

/// `--only shared`: the semaphore (4 permits) and the 90%-read read-write lock, 16 tasks
/// each; 4 permit holders at most (and reached), readers together, never a writer beside
/// anyone, the counters right.
#[test]
fn the_semaphore_and_rwlock_scenarios_keep_their_exclusion() -> TestResult {
    let report = bench_json(&["--only", "shared", "--duration", "300ms"])?;
    assert_eq!(len(&report["uncontended"]), Some(0));
    assert_eq!(len(&report["contended"]), Some(0));
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
    assert_eq!(len(&report["failures"]), Some(0));
    Ok(())
}

#[test]
fn table_output_and_help_name_the_scenarios() -> TestResult {
    help_names(&[
        "uncontended, redlease",
        "bare busy-retry",
        "--workers",
        "--pairs",
        "ABBA",
        "quorum of 5",
        "Exit codes",
    ])?;
    let text = bench_text(&["--duration", "100ms", "--workers", "2", "--hot-cpus", "1"])?;
    assert!(text.contains("hot CPUs: 1"), "{text}");
    assert!(text.contains("multi-thread (2 workers) runtime"), "{text}");
    assert!(text.contains("redlease acquire + release"), "{text}");
    assert!(text.contains("every counter matches"), "{text}");
    Ok(())
}

/// `--runtime current-thread`: every scenario of the default set runs, and keeps its
/// checks, on a current-thread runtime.
#[test]
fn every_scenario_runs_on_a_current_thread_runtime() -> TestResult {
    let args = [
        "--duration",
        "150ms",
        "--workers",
        "3",
        "--runtime",
        "current-thread",
    ];
    let report = bench_json(&args)?;
    assert_eq!(report["runtime"], "current-thread", "{report}");
    for c in report["contended"].as_array().ok_or("no contended")? {
        assert_eq!(c["counter"], c["sections"], "{c}");
        assert!(c["sections"].as_u64() > Some(0), "{c}");
    }
    let uncontended = report["uncontended"].as_array().ok_or("no uncontended")?;
    let quorum = report["quorum"].as_array().ok_or("no quorum")?;
    for side in uncontended.iter().chain(quorum) {
        assert!(side["ops"].as_u64() > Some(0), "{side}");
        assert_eq!(side["checks"]["acquires_failed"], 0, "{side}");
        assert_eq!(side["checks"]["releases_failed"], 0, "{side}");
    }
    let text = bench_text(&[
        "--only",
        "uncontended",
        "--duration",
        "100ms",
        "--runtime",
        "current-thread",
    ])?;
    assert!(text.contains("current-thread runtime"), "{text}");
    Ok(())
}

#[test]
fn bad_arguments_exit_2_and_unreachable_redis_69() -> TestResult {
    let out = run(&["bench", "--duration", "1ms"], 2)?;
    assert!(String::from_utf8(out.stderr)?.starts_with("redlease: --duration"));

    let port = redlease_local::free_port()?;
    let out = run(
        &["bench", "--redis", &format!("redis://127.0.0.1:{port}")],
        69,
    )?;
    let stderr = String::from_utf8(out.stderr)?;
    assert!(
        stderr.starts_with("redlease: connecting to Redis"),
        "{stderr}"
    );
    Ok(())
}

/// `--only scaling` with tiny settings: both points measured over 2 worker processes in
/// alternating slice pairs, every counter right, the targets computed, and `--plot` draws
/// both charts with both series into an SVG.
#[test]
fn the_scaling_scenario_runs_over_processes_and_plots_both_curves() -> TestResult {
    let dir = tempfile::tempdir()?;
    let svg_path = dir.path().join("scaling.svg");
    let svg_arg = svg_path
        .to_str()
        .ok_or("a temporary path that is not UTF-8")?;
    let args = [
        "--only",
        "scaling",
        "--contenders",
        "4,8",
        "--plot",
        svg_arg,
    ];
    let report = bench_json(&[&args[..], &TWO_PROCESSES].concat())?;
    assert_eq!(len(&report["uncontended"]), Some(0));
    assert_eq!(len(&report["contended"]), Some(0));
    assert_eq!(len(&report["failures"]), Some(0));
    let scaling = &report["scaling"];
    assert_eq!(scaling["processes"], 2, "{scaling}");
    let points = scaling["points"].as_array().ok_or("no points")?;
    assert_eq!(points.len(), 2);
    for (point, contenders) in points.iter().zip([4u64, 8]) {
        assert_eq!(point["contenders"], contenders, "{point}");
        assert_eq!(point["processes"], 2, "{point}");
        for side in ["redlease", "busy_retry"] {
            let s = &point[side];
            assert!(s["sections"].as_u64() > Some(0), "{s}");
            assert_eq!(s["counters_matched"], 5, "{s}");
            assert_eq!(len(&s["sections_per_sec"]["slices"]), Some(5));
            assert_eq!(len(&s["per_task"]), usize::try_from(contenders).ok());
            let per_task_sum: u64 = s["per_task"]
                .as_array()
                .ok_or("no per_task")?
                .iter()
                .filter_map(Value::as_u64)
                .sum();
            assert_eq!(Some(per_task_sum), s["sections"].as_u64(), "{s}");
            assert!(s["wait"]["max_us"].as_f64() > Some(0.0), "{s}");
            assert!(s["mean_section_us"].as_f64() > Some(0.0), "{s}");
        }
        // FIFO hand-off: every redlease task got the lock.
        let fewest = point["redlease"]["per_task"]
            .as_array()
            .and_then(|t| t.iter().filter_map(Value::as_u64).min());
        assert!(fewest > Some(0), "{point}");
    }
    let targets = &scaling["targets"];
    assert!(
        targets["throughput_last_over_first"]["redlease"].is_number(),
        "{targets}"
    );
    assert_eq!(len(&targets["wait_bounds"]), Some(2));
    assert_eq!(len(&targets["commands_per_section"]), Some(2));

    let svg = std::fs::read_to_string(&svg_path)?;
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
    assert!(svg.trim_end().ends_with("</svg>"));
    for needle in ["redlease", "busy-retry", "sections/s", "longest wait"] {
        assert!(svg.contains(needle), "the plot lacks {needle:?}");
    }
    // Two series in each of the two charts (plus the legends' samples).
    assert!(svg.matches("<polyline").count() >= 4, "{svg}");
    Ok(())
}

/// `--processes 2` moves the contended group into 2 worker processes: one comparison of
/// redlease and busy-retry instead of the in-process scenarios; and the table says so.
#[test]
fn processes_spread_the_contended_workers() -> TestResult {
    let processes = [&["--only", "contended"], &TWO_PROCESSES[..]].concat();
    let report = bench_json(&[&processes[..], &["--workers", "3"]].concat())?;
    assert_eq!(len(&report["contended"]), Some(0));
    let p = &report["contended_processes"];
    assert_eq!(p["processes"], 2, "{p}");
    assert_eq!(p["contenders"], 3, "{p}");
    for side in ["redlease", "busy_retry"] {
        assert_eq!(len(&p[side]["per_task"]), Some(3), "{p}");
        assert_eq!(p[side]["counters_matched"], 5, "{p}");
    }
    assert!(report["scaling"].is_null());

    let text = bench_text(&[&processes[..], &["--workers", "2"]].concat())?;
    assert!(text.contains("2 workers over 2 processes"), "{text}");
    assert!(text.contains("every counter matches"), "{text}");

    help_names(&[
        "--processes",
        "--only scaling",
        "--plot",
        "--contenders",
        "--slice",
    ])?;
    let out = run(&["bench", "--plot", "x.svg", "--only", "shared"], 2)?;
    assert!(String::from_utf8(out.stderr)?.contains("add --only scaling"));
    Ok(())
}

/// Another client writing the counter while the sections run is what overlapping
/// sections look like: the multi-process run must report it and exit 1.
#[test]
fn a_counter_that_does_not_match_its_sections_fails_the_run() -> TestResult {
    let server = redlease_local::RedisServer::start()?;
    let mut child = redlease()
        .args(["bench", "--json", "--redis", &server.admin_url()])
        .args(["--only", "scaling", "--contenders", "2", "--processes", "2"])
        .args(["--slice", "200ms", "--pairs", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // The scaling point's counter, named after the bench's pid (see bench/processes.rs).
    let counter = format!("redlease-bench:{}:scaling-2:counter", child.id());
    let mut writes = 0u32;
    while child.try_wait()?.is_none() {
        server.query(&["INCR", counter.as_str()])?;
        writes += 1;
    }
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{writes} writes; stderr: {stderr}"
    );
    assert!(stderr.contains("correctness check(s) failed"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout)?;
    let failures = report["failures"].as_array().ok_or("no failures")?;
    assert!(
        failures.iter().any(|f| f
            .as_str()
            .is_some_and(|f| f.contains("sections overlapped"))),
        "{failures:?}"
    );
    Ok(())
}

/// `--link-delay 200us`: both sides of the uncontended comparison reach Redis through a
/// delay line of 200µs each way, so an acquire + release pair (two round trips) takes at
/// least 4 x 200µs on either side (a lower bound the delay line guarantees, not a speed
/// assertion), and the report says so in its header and its JSON.
#[test]
fn a_link_delay_puts_both_sides_behind_the_same_delay_line() -> TestResult {
    let delay_us = 200.0;
    let link = ["--only", "uncontended", "--link-delay", "200us"];
    let report = bench_json(&[&link[..], &["--duration", "500ms"]].concat())?;
    assert_eq!(report["link_delay_us"].as_f64(), Some(delay_us));
    let uncontended = report["uncontended"].as_array().ok_or("no uncontended")?;
    assert_eq!(uncontended.len(), 2);
    for side in uncontended {
        let p50 = side["latency"]["p50_us"].as_f64().ok_or("no p50")?;
        assert!(
            p50 >= 4.0 * delay_us,
            "p50 {p50}µs below 2 round trips: {side}"
        );
        assert!(side["ops"].as_u64() > Some(0), "{side}");
    }
    assert_eq!(len(&report["failures"]), Some(0));

    let text = bench_text(&[&link[..], &["--duration", "100ms"]].concat())?;
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains("link delay 200us each way"),
        "the header does not state the delay: {header}"
    );
    Ok(())
}

/// `--link-delay` puts a delay line in front of the private server; with `--redis` there
/// is none to put it in front of.
#[test]
fn a_link_delay_with_an_external_redis_is_refused() -> TestResult {
    let out = run(
        &[
            "bench",
            "--link-delay",
            "100us",
            "--redis",
            "redis://127.0.0.1:1",
        ],
        2,
    )?;
    assert!(String::from_utf8(out.stderr)?.contains("cannot be combined with --redis"));
    Ok(())
}
