//! A minimal RESP2 client: one command per fresh connection, whole reply parsed.
//!
//! Enough to set up clusters and sentinels (nested arrays, bulk strings); not meant for
//! speed, and never used by redlease itself.

use std::borrow::Cow;
use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

/// How long a request may wait for the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a request may wait for its reply (`MIGRATE` of a full slot included).
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One parsed RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Reply {
    /// A simple string, such as `OK` from `+OK`.
    Status(String),
    /// An error reply, such as `MOVED 3999 127.0.0.1:6381` (without the leading `-`).
    Error(String),
    /// An integer reply.
    Integer(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A null bulk string or null array.
    Nil,
    /// An array of replies.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or bulk reply (bulk bytes decoded lossily).
    pub fn text(&self) -> Option<Cow<'_, str>> {
        match self {
            Self::Status(s) => Some(Cow::Borrowed(s)),
            Self::Bulk(b) => Some(String::from_utf8_lossy(b)),
            _ => None,
        }
    }

    /// The value of an integer reply, or of a status or bulk reply holding a number.
    pub fn integer(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => self.text()?.parse().ok(),
        }
    }

    /// The elements of an array reply.
    pub fn array(&self) -> Option<&[Reply]> {
        match self {
            Self::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The value for `field` in a flat `[field, value, field, value, ...]` array, as
    /// `SENTINEL REPLICAS` returns for each replica.
    pub fn field(&self, field: &str) -> Option<Cow<'_, str>> {
        let items = self.array()?;
        items
            .chunks_exact(2)
            .find(|pair| pair[0].text().is_some_and(|name| name == field))
            .and_then(|pair| pair[1].text())
    }
}

impl Reply {
    /// The first line of this reply in RESP, e.g. `+OK`, `:1` or `$5` (the header of a
    /// bulk string), as [`RedisServer::command`](crate::RedisServer::command) returns it.
    pub(crate) fn first_line(&self) -> String {
        match self {
            Self::Status(s) => format!("+{s}"),
            Self::Error(e) => format!("-{e}"),
            Self::Integer(i) => format!(":{i}"),
            Self::Bulk(b) => format!("${}", b.len()),
            Self::Nil => "$-1".to_owned(),
            Self::Array(items) => format!("*{}", items.len()),
        }
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(s) => write!(f, "+{s}"),
            Self::Error(e) => write!(f, "-{e}"),
            Self::Integer(i) => write!(f, ":{i}"),
            Self::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Self::Nil => f.write_str("nil"),
            Self::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

/// Where the set-up commands of [`request`] go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Control {
    /// `127.0.0.1:PORT`, in plain text.
    Tcp(u16),
    /// A Unix socket: the control channel of a server whose TCP port speaks TLS only.
    Unix(PathBuf),
}

/// Sends `args` as one command to `to` over a fresh connection and reads the whole reply.
/// An error reply is `Ok(Reply::Error(..))`; only I/O and protocol trouble is an `Err`.
pub(crate) fn request<A: AsRef<[u8]>>(
    to: &Control,
    auth: Option<(&str, &str)>,
    args: &[A],
) -> io::Result<Reply> {
    match to {
        Control::Tcp(port) => {
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, *port));
            let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
            stream.set_read_timeout(Some(READ_TIMEOUT))?;
            exchange(stream, auth, args)
        }
        Control::Unix(path) => {
            let stream = UnixStream::connect(path)?;
            stream.set_read_timeout(Some(READ_TIMEOUT))?;
            exchange(stream, auth, args)
        }
    }
}

/// Sends `args` (after an `AUTH` when `auth` is given) on `stream` and reads the reply.
fn exchange<S: Read + Write, A: AsRef<[u8]>>(
    mut stream: S,
    auth: Option<(&str, &str)>,
    args: &[A],
) -> io::Result<Reply> {
    let mut req = Vec::new();
    if let Some((user, password)) = auth {
        encode(&mut req, &["AUTH", user, password]);
    }
    encode(&mut req, args);
    stream.write_all(&req)?;
    let mut reader = BufReader::new(stream);
    if auth.is_some() {
        // A refused AUTH makes the command's reply NOAUTH, which says enough.
        read_reply(&mut reader)?;
    }
    read_reply(&mut reader)
}

/// Appends `args` as one RESP command to `req`.
pub(crate) fn encode<A: AsRef<[u8]>>(req: &mut Vec<u8>, args: &[A]) {
    req.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        let arg = arg.as_ref();
        req.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        req.extend_from_slice(arg);
        req.extend_from_slice(b"\r\n");
    }
}

pub(crate) fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed before the reply",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).unwrap_or(("", ""));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("bad RESP: {line}")))
    };
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Integer(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Nil,
            Ok(len) => {
                let mut buf = vec![0; len + 2];
                reader.read_exact(&mut buf)?;
                buf.truncate(len);
                Reply::Bulk(buf)
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Nil,
            Ok(len) => Reply::Array(
                (0..len)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<_>>()?,
            ),
        },
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("bad RESP: {line}"),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nested_replies() -> io::Result<()> {
        let raw = b"*3\r\n$2\r\nip\r\n*2\r\n:7\r\n$-1\r\n+OK\r\n";
        let reply = read_reply(&mut &raw[..])?;
        assert_eq!(
            reply,
            Reply::Array(vec![
                Reply::Bulk(b"ip".to_vec()),
                Reply::Array(vec![Reply::Integer(7), Reply::Nil]),
                Reply::Status("OK".into()),
            ])
        );
        let flat =
            read_reply(&mut &b"*4\r\n$4\r\nname\r\n$1\r\na\r\n$4\r\nport\r\n$2\r\n12\r\n"[..])?;
        assert_eq!(flat.field("port").as_deref(), Some("12"));
        assert_eq!(flat.field("ip"), None);
        Ok(())
    }
}
