//! `list` through Sentinel (`redis+sentinel://` or `rediss+sentinel://`): the names live on
//! the primary the sentinels name, so that primary is scanned; a sentinel's `SENTINEL
//! GET-MASTER-ADDR-BY-NAME` names it. (What is listed is then read through the library's
//! client, which follows the primary a majority of the sentinels name.)

use anyhow::Context as _;

use crate::connect::{Node, RedisArgs};

/// The parts of a Sentinel URL `SCHEME+sentinel://[CREDS@]HOST:PORT[,...]/MASTER[/DB]`.
#[derive(Debug, PartialEq, Eq)]
struct SentinelUrl<'a> {
    /// `redis` or `rediss`: the sentinels' and the primary's scheme.
    scheme: &'a str,
    /// `user:password@` (or empty): the primary's credentials.
    creds: &'a str,
    /// The sentinels' `host:port`.
    sentinels: Vec<&'a str>,
    /// The master name the sentinels monitor the primary under.
    master: &'a str,
    /// `/DB` (or empty): the primary's database.
    db: String,
}

impl<'a> SentinelUrl<'a> {
    /// The parts of `url`; `None` when it is no Sentinel URL (or names no sentinel or
    /// master: the library's client has refused it before `list` gets here).
    fn parse(url: &'a str) -> Option<Self> {
        let (scheme, rest) = url.split_once("://")?;
        let scheme = scheme.strip_suffix("+sentinel")?;
        let (creds, rest) = match rest.rfind('@') {
            Some(at) => rest.split_at(at + 1),
            None => ("", rest),
        };
        let (hosts, path) = rest.split_once('/')?;
        let mut path = path.split('/');
        let master = path.next().filter(|m| !m.is_empty())?;
        let db = path
            .next()
            .filter(|d| !d.is_empty())
            .map_or_else(String::new, |d| format!("/{d}"));
        let sentinels: Vec<&str> = hosts.split(',').filter(|h| !h.is_empty()).collect();
        (!sentinels.is_empty()).then_some(Self {
            scheme,
            creds,
            sentinels,
            master,
            db,
        })
    }

    /// The URL of the primary at `host:port`, with the URL's credentials and database.
    fn primary(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!("{}://{}{host}:{port}{}", self.scheme, self.creds, self.db)
    }
}

/// The primary the sentinels of `url` name (asked in turn), with a connection; `None`
/// when `url` is no Sentinel URL.
pub(super) async fn primary(redis: &RedisArgs, url: &str) -> Option<anyhow::Result<Vec<Node>>> {
    let parsed = SentinelUrl::parse(url)?;
    let mut last = None;
    for sentinel in &parsed.sentinels {
        match named_primary(
            redis,
            &format!("{}://{sentinel}", parsed.scheme),
            parsed.master,
        )
        .await
        {
            Ok((host, port)) => {
                return Some(Ok(vec![redis.node(&parsed.primary(&host, port)).await]));
            }
            Err(e) => last = Some(e),
        }
    }
    Some(Err(last.unwrap_or_else(|| {
        anyhow::anyhow!("no sentinel in the Sentinel URL")
    })))
}

/// The `host` and `port` of the primary that the sentinel at `url` names for `master`.
async fn named_primary(
    redis: &RedisArgs,
    url: &str,
    master: &str,
) -> anyhow::Result<(String, u16)> {
    let mut conn = redis.raw_to(url).await?;
    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(master)
        .query_async(&mut conn)
        .await
        .with_context(|| {
            format!(
                "asking a sentinel for the primary of `{master}` (SENTINEL GET-MASTER-ADDR-BY-NAME)"
            )
        })?;
    addr.with_context(|| {
        format!(
            "the sentinel at {} knows no master `{master}`",
            redlease::diagnostics::redact_url(url)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::SentinelUrl;

    #[test]
    fn sentinel_urls_name_the_sentinels_and_the_primary_is_given_the_credentials() {
        let url = SentinelUrl::parse("rediss+sentinel://app:pw@s1:26380,s2:26380/main/2");
        let url = url.as_ref();
        assert_eq!(
            url.map(|u| u.sentinels.clone()),
            Some(vec!["s1:26380", "s2:26380"])
        );
        assert_eq!(url.map(|u| u.master), Some("main"));
        assert_eq!(
            url.map(|u| u.primary("10.0.0.3", 6380)).as_deref(),
            Some("rediss://app:pw@10.0.0.3:6380/2")
        );
        let plain = SentinelUrl::parse("redis+sentinel://s1:26379/main");
        assert_eq!(
            plain.map(|u| u.primary("::1", 6379)).as_deref(),
            Some("redis://[::1]:6379")
        );
        assert_eq!(SentinelUrl::parse("redis://h:6379"), None);
        assert_eq!(SentinelUrl::parse("redis+cluster://h:7000"), None);
        assert_eq!(SentinelUrl::parse("redis+sentinel://s1:26379"), None);
    }
}
