//! `list` over a Redis Cluster (`redis+cluster://` or `rediss+cluster://`): the names
//! live on every primary, so each primary is scanned; a seed's `CLUSTER NODES` names them.

use anyhow::Context as _;

use crate::connect::{Node, RedisArgs};

/// The primaries of the Cluster of `url` (its seeds tried in turn), each with a
/// connection; `None` when `url` is no Cluster URL.
pub(super) async fn primaries(redis: &RedisArgs, url: &str) -> Option<anyhow::Result<Vec<Node>>> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.strip_suffix("+cluster")?;
    let rest = rest.trim_end_matches('/');
    let (creds, hosts) = match rest.rfind('@') {
        Some(at) => rest.split_at(at + 1),
        None => ("", rest),
    };
    let url_of = |host: &str| format!("{scheme}://{creds}{host}");
    let mut last = None;
    for seed in hosts.split(',').filter(|h| !h.is_empty()) {
        match named_primaries(redis, &url_of(seed)).await {
            Ok(found) => {
                let urls: Vec<String> = found.iter().map(|host| url_of(host)).collect();
                let nodes = futures_util::future::join_all(urls.iter().map(|u| redis.node(u)));
                return Some(Ok(nodes.await));
            }
            Err(e) => last = Some(e),
        }
    }
    Some(Err(last.unwrap_or_else(|| {
        anyhow::anyhow!("no seed node in the Cluster URL")
    })))
}

/// The `host:port` of every primary that the seed at `url` knows (`CLUSTER NODES`).
async fn named_primaries(redis: &RedisArgs, url: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = redis.raw_to(url).await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .context("asking a seed node for the Cluster's primaries (CLUSTER NODES)")?;
    Ok(primaries_in(&nodes))
}

/// The `host:port` of the primaries in a `CLUSTER NODES` reply: lines `id ip:port@cport
/// flags ...`, flags with `master` and without `fail`.
fn primaries_in(nodes: &str) -> Vec<String> {
    nodes
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = fields.nth(1)?;
            let flags = fields.next()?;
            let primary = flags.split(',').any(|f| f == "master")
                && !flags.split(',').any(|f| f.starts_with("fail"));
            let host = address.split(['@', ',']).next()?;
            (primary && !host.starts_with(':')).then(|| host.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::primaries_in;

    #[test]
    fn primaries_are_read_from_cluster_nodes() {
        let reply = "\
a 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7001@17001,host-b master - 0 0 2 connected 5461-10922
c 127.0.0.1:7002@17002 slave a 0 0 1 connected
d 127.0.0.1:7003@17003 master,fail - 0 0 3 connected
e :0@0 master,noaddr - 0 0 0 disconnected
";
        assert_eq!(primaries_in(reply), ["127.0.0.1:7000", "127.0.0.1:7001"]);
    }
}
