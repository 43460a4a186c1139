//! `redlease` with several `--redis` URLs: a quorum (Redlock) of independent redis-servers.

mod common;

use std::process::Command;

use common::{
    Job, MARKS_BODY, TestResult, check_marks, eventually, output, redlease, script, text, wait,
    wait_for_file,
};
use redlease_local::Nodes;

/// `redlease ARGS --redis URL1 --redis URL2 ... [-- CMD]`.
fn on_quorum(nodes: &Nodes, args: &[&str]) -> Command {
    let (head, tail) = match args.iter().position(|a| *a == "--") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    let mut cmd = redlease();
    cmd.args(head);
    for url in nodes.urls() {
        cmd.arg("--redis").arg(url);
    }
    cmd.args(tail);
    cmd
}

#[test]
fn runs_on_a_quorum_never_overlap() -> TestResult {
    let nodes = Nodes::start(3)?;
    let dir = tempfile::tempdir()?;
    let body = script(dir.path(), MARKS_BODY);
    let mut children = Vec::new();
    for _ in 0..3 {
        let mut cmd = on_quorum(
            &nodes,
            &[
                "run", "--key", "q", "--wait", "60s", "--", "sh", "-c", &body,
            ],
        );
        children.push(cmd.stdin(std::process::Stdio::null()).spawn()?);
    }
    for child in &mut children {
        assert!(wait(child).success());
    }
    check_marks(dir.path(), 3)?;
    Ok(())
}

#[test]
fn status_and_forced_release_speak_node_by_node_and_survive_a_node_down() -> TestResult {
    let mut nodes = Nodes::start(3)?;
    let dir = tempfile::tempdir()?;
    let body = script(
        dir.path(),
        "touch DIR/started; while :; do sleep 0.05; done",
    );
    let mut cmd = on_quorum(
        &nodes,
        &[
            "run", "--key", "job", "--ttl", "3s", "--", "sh", "-c", &body,
        ],
    );
    cmd.stdin(std::process::Stdio::null());
    let mut job = Job(cmd.spawn()?);
    wait_for_file(&dir.path().join("started"));

    // The run's acquisition returned at a majority, and its last node is granted in the
    // background: ask until every node shows the holder.
    let mut last = String::new();
    let status = eventually("every node to show the holder", || {
        let out = output(on_quorum(&nodes, &["status", "job"]));
        last = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{last}");
        (last.matches("held: holder ").count() == 3).then(|| last.clone())
    });
    assert!(
        status.starts_with("lock `job` (key redlease:job) on a quorum of 3 nodes: held"),
        "{status}"
    );

    // One node down: the others still answer, and say so.
    nodes.servers_mut()[2].kill();
    let out = output(on_quorum(&nodes, &["status", "--json", "job"]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json["held"], true, "{json}");
    assert_eq!(json["held_on"], 2, "{json}");
    assert!(json["nodes"][2]["error"].is_string(), "{json}");
    // Name and key once, above the nodes.
    assert_eq!(json["name"], "job", "{json}");
    assert!(
        json["nodes"][0].get("name").is_none() && json["nodes"][0].get("key").is_none(),
        "{json}"
    );
    assert!(out.stdout.is_ascii(), "{json}");

    let out = output(on_quorum(&nodes, &["release", "--force", "job"]));
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.starts_with("removed lock `job` (key redlease:job) from 2 of 3 nodes"),
        "{said}"
    );
    assert!(said.contains("unreachable"), "{said}");
    // The job finds its lease gone on the majority and is stopped.
    assert_eq!(job.wait().code(), Some(79));

    // Two nodes down: no majority can answer.
    nodes.servers_mut()[1].kill();
    for args in [
        &["status", "job"][..],
        &["run", "--key", "job", "--", "true"],
    ] {
        let out = output(on_quorum(&nodes, args));
        assert_eq!(
            out.status.code(),
            Some(69),
            "{args:?}: {}",
            text(&out.stderr)
        );
        let stderr = text(&out.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        assert!(last.starts_with("redlease: "), "{args:?}: {stderr}");
        if args[0] == "status" {
            assert!(
                last.contains("only 1 of the 2 nodes needed for a majority answered"),
                "{stderr}"
            );
        }
    }
    Ok(())
}
