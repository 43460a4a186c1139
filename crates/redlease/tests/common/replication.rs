//! Replication set up by hand between two test servers, as a failover (or a failover
//! endpoint's move) makes it.

use redlease_local::RedisServer;

/// `field` of `INFO replication` on `server`.
pub fn replication(server: &RedisServer, field: &str) -> String {
    let reply = server.query(&["INFO", "replication"]).unwrap();
    let text = reply.text().unwrap_or_default();
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Makes `replica` replicate `primary` and waits until its link is up.
pub async fn replicate(replica: &RedisServer, primary: &RedisServer) {
    if std::env::var_os(redlease_local::TEST_ACL_ENV).is_some() {
        for (name, value) in [
            ("masteruser", "admin"),
            ("masterauth", redlease_local::TEST_ADMIN_PASSWORD),
        ] {
            replica.query(&["CONFIG", "SET", name, value]).unwrap();
        }
    }
    let port = primary.port().to_string();
    replica
        .query(&["REPLICAOF", "127.0.0.1", port.as_str()])
        .unwrap();
    crate::common::eventually("the replica's link to its primary", || async {
        replication(replica, "master_link_status") == "up"
    })
    .await;
}
