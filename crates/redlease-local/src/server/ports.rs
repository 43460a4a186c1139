//! Loopback ports: a free one for a server, and the listener a proxy binds.

use std::net::{Ipv4Addr, TcpListener};

use super::acl::{TEST_ACL_PASSWORD, test_acl_wanted};

/// A loopback port that was free a moment ago.
pub fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Binds a free loopback port for a [`Proxy`](crate::Proxy) or [`DelayLine`](crate::DelayLine) in front of
/// `127.0.0.1:target_port`, and runs `accept(listener, target)` on a thread named
/// `NAME-PORT`: the port.
pub(crate) fn listen(
    name: &str,
    target_port: u16,
    accept: impl FnOnce(&TcpListener, std::net::SocketAddr) + Send + 'static,
) -> std::io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = listener.local_addr()?.port();
    let target = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, target_port));
    std::thread::Builder::new()
        .name(format!("{name}-{port}"))
        .spawn(move || accept(&listener, target))?;
    Ok(port)
}

/// The URL of a [`Proxy`](crate::Proxy) or [`DelayLine`](crate::DelayLine) listening on `port`: `redis://127.0.0.1:<port>`,
/// with the `redlease` user's credentials under [`TEST_ACL_ENV`](crate::TEST_ACL_ENV).
pub(crate) fn forwarded_url(port: u16) -> String {
    if test_acl_wanted() {
        format!("redis://redlease:{TEST_ACL_PASSWORD}@127.0.0.1:{port}")
    } else {
        format!("redis://127.0.0.1:{port}")
    }
}
