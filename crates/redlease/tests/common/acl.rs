//! The least-privilege ACL of `docs/SECURITY.md`, on servers whose `default` user is off.

use redlease_local::{RedisServer, ServerOptions};

/// The `redlease` user's password in these tests.
pub const PASSWORD: &str = "lease-pw-7f3a9c";
/// The `admin` user's password (all commands, all keys), for the tests' own connections.
pub const ADMIN_PASSWORD: &str = "admin-pw-91c2d4";

/// The least-privilege rules of the `redlease` user (after `on >password`): exactly the
/// ACL line of `docs/SECURITY.md`.
pub const RULES: &[&str] = redlease_local::REDLEASE_ACL_RULES;

/// `redis-server` options: `default` off, an `admin` for the tests' own connections, and a
/// `redlease` user with `rules`.
pub fn options(rules: &[&str]) -> ServerOptions {
    let mut options = ServerOptions::default();
    for arg in [
        "--user",
        "default",
        "off",
        "--user",
        "admin",
        "on",
        &format!(">{ADMIN_PASSWORD}"),
        "~*",
        "&*",
        "+@all",
        "--user",
        "redlease",
        "on",
        &format!(">{PASSWORD}"),
    ] {
        options = options.arg(arg);
    }
    // To see which test needs a rule: REDLEASE_TEST_ACL_DROP='+lrem' cargo test --test acl
    let dropped = std::env::var("REDLEASE_TEST_ACL_DROP").unwrap_or_default();
    for rule in rules.iter().filter(|r| **r != dropped) {
        options = options.arg(*rule);
    }
    options
}

/// `RULES` without `rule`.
pub fn without(rule: &str) -> Vec<&'static str> {
    let rules: Vec<_> = RULES.iter().copied().filter(|r| *r != rule).collect();
    assert_eq!(rules.len(), RULES.len() - 1, "no rule `{rule}`");
    rules
}

pub fn acl_server(rules: &[&str]) -> RedisServer {
    RedisServer::start_with(options(rules))
        .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"))
}

pub fn url(server: &RedisServer) -> String {
    format!("redis://redlease:{PASSWORD}@127.0.0.1:{}", server.port())
}

pub fn admin_url(server: &RedisServer) -> String {
    format!("redis://admin:{ADMIN_PASSWORD}@127.0.0.1:{}", server.port())
}

pub async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(admin_url(server))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
