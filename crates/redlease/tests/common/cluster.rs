//! A private Redis Cluster and a client of it, for the Cluster tests.

use redlease::Client;
use redlease_local::Cluster;

use super::bounded;

/// A 6-node cluster (3 primaries, 3 replicas) on free loopback ports.
pub fn cluster() -> Cluster {
    Cluster::start().unwrap_or_else(|e| panic!("cannot start a cluster: {e}"))
}

/// A client of `cluster`, connected through all its nodes as seeds.
pub async fn connect(cluster: &Cluster) -> Client {
    bounded("connect", Client::cluster(cluster.urls()))
        .await
        .unwrap()
}
