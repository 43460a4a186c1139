//! Dependency diet: the library builds one `rand` and one `getrandom` of its own choice,
//! the versions redis-rs already brings, so that applications compile them once. The only
//! other `getrandom` is the one `ring` needs under the `tls` feature (rustls' crypto).
#![allow(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

use std::process::Command;

/// `cargo tree` of the library's normal dependencies with `args`, one package a line.
fn tree(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--offline", "--locked", "-e", "normal"])
        .args(["-p", "redlease", "--prefix", "none", "--format", "{p}"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The versions of `krate` in the library's normal dependency tree, with `features`.
fn versions(krate: &str, features: &[&str]) -> Vec<String> {
    let mut found: Vec<String> = tree(features)
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(krate)).then(|| words.next().unwrap_or("").to_owned())
        })
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn one_rand_and_one_getrandom_without_tls() {
    let lean = [
        "--no-default-features",
        "--features",
        "macros,cluster,sentinel",
    ];
    for krate in ["rand", "getrandom"] {
        let found = versions(krate, &lean);
        assert_eq!(found.len(), 1, "{krate}: {found:?}");
    }
}

#[test]
fn with_tls_the_only_other_getrandom_is_rings() {
    let rand = versions("rand", &[]);
    assert_eq!(rand.len(), 1, "{rand:?}");
    let getrandom = versions("getrandom", &[]);
    assert!(getrandom.len() <= 2, "{getrandom:?}");
    if getrandom.len() == 2 {
        // The older one is reached through ring only.
        let older = format!("getrandom@{}", getrandom[0].trim_start_matches('v'));
        let users = tree(&["-i", &older, "--depth", "1"]);
        let users: Vec<&str> = users.lines().skip(1).collect();
        assert!(
            users.iter().all(|u| u.starts_with("ring ")),
            "{older} is used by {users:?}"
        );
    }
}
