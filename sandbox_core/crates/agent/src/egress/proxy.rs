//! The sandbox's egress proxy: an HTTP proxy on the sandbox's own loopback (`PROXY_ADDR`), the
//! only way out of a sandbox with an allow-list. Programs find it through the usual variables
//! (`http_proxy`, `https_proxy`, ... in every program's environment), which pip, git, curl, apt
//! and Python's urllib honour.
//!
//! `CONNECT host:port` opens a tunnel (HTTPS, or anything else over TCP); a request in absolute
//! form (`GET http://host:port/path`) is sent on in origin form with `Connection: close`. Each
//! destination is checked against the policy here and again by the helper, which opens the
//! connection outside the sandbox. A refusal is `403` with the reason; a destination that does
//! not answer is `502`. Every decision is counted (`Counters`, reported by Info).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::helper::{Helper, Reply};
use super::names::Names;
use super::policy::{Policy, Verdict};

/// Where the proxy listens inside the sandbox.
pub const PROXY_ADDR: &str = "127.0.0.1:3128";
const MAX_HEAD: usize = 16 << 10;

#[derive(Default)]
pub struct Counters {
    pub allowed: AtomicU64,
    pub refused: AtomicU64,
}

pub struct Proxy {
    /// The policy now: replaced whole by `set_policy` (a connection is judged by the one in
    /// force when it is opened).
    pub policy: RwLock<Arc<Policy>>,
    pub helper: Helper,
    pub counters: Arc<Counters>,
    /// The allowed names programs looked up, and their forwarders (`names`).
    pub names: Names,
}

/// A destination opened for a program, or why not.
pub enum Opened {
    Connected(TcpStream),
    /// The policy refuses it (counted).
    Refused(String),
    /// It does not answer, or cannot be resolved.
    Failed(String),
}

impl Proxy {
    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the policy: the helper's first (it opens every connection), then the agent's,
    /// so that once this returns no new connection is opened under the old one.
    pub async fn set_policy(&self, policy: Policy) -> Result<(), String> {
        self.helper.set_policy(&policy).await?;
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        Ok(())
    }

    /// Opens `host:port` for a program: checked against the policy here and by the helper,
    /// which connects outside; every decision counted.
    pub(super) async fn open(&self, host: &str, port: u16) -> Opened {
        if self.policy().check(host, port) == Verdict::Refused {
            self.counters.refused.fetch_add(1, Ordering::Relaxed);
            return Opened::Refused(format!(
                "{host}:{port} is refused by the sandbox's egress policy"
            ));
        }
        match self.helper.connect(host, port).await {
            Reply::Connected(s) => {
                self.counters.allowed.fetch_add(1, Ordering::Relaxed);
                match s
                    .set_nonblocking(true)
                    .and_then(|()| TcpStream::from_std(s))
                {
                    Ok(s) => Opened::Connected(s),
                    Err(e) => Opened::Failed(format!("egress socket: {e}")),
                }
            }
            Reply::Refused(why) => {
                self.counters.refused.fetch_add(1, Ordering::Relaxed);
                Opened::Refused(why)
            }
            Reply::Failed(why) => Opened::Failed(why),
        }
    }

    /// Accepts connections until the runtime ends.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let client = accept(&listener).await;
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.handle(client).await;
            });
        }
    }

    async fn handle(&self, mut client: TcpStream) -> std::io::Result<()> {
        let mut head = Vec::with_capacity(1024);
        let mut buf = [0u8; 4096];
        let end = loop {
            let n = client.read(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
            head.extend_from_slice(&buf[..n]);
            if let Some(i) = find(&head, b"\r\n\r\n") {
                break i + 4;
            }
            if head.len() > MAX_HEAD {
                return answer(&mut client, 431, "request head too large").await;
            }
        };
        let rest = head.split_off(end);
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or("");
        let mut parts = request_line.split_whitespace();
        let (method, target, version) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or("HTTP/1.1"),
        );
        let (host, port, path) =
            if method.eq_ignore_ascii_case("CONNECT") {
                match split_host_port(target, 443) {
                    Some((h, p)) => (h, p, None),
                    None => return answer(&mut client, 400, "CONNECT needs host:port").await,
                }
            } else {
                match absolute(target) {
                    Some((h, p, path)) => (h, p, Some(path)),
                    None => return answer(
                        &mut client,
                        400,
                        "this is the sandbox's egress proxy: ask for http://host/path or CONNECT",
                    )
                    .await,
                }
            };
        let mut upstream = match self.open(&host, port).await {
            Opened::Connected(s) => s,
            Opened::Refused(why) => return answer(&mut client, 403, &why).await,
            Opened::Failed(why) => return answer(&mut client, 502, &why).await,
        };
        match path {
            None => {
                client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await?;
            }
            Some(path) => {
                let mut out = format!("{method} {path} {version}\r\n");
                for line in lines.filter(|l| !l.is_empty()) {
                    let name = line.split(':').next().unwrap_or("").trim();
                    if [
                        "proxy-connection",
                        "proxy-authorization",
                        "connection",
                        "keep-alive",
                    ]
                    .iter()
                    .any(|h| name.eq_ignore_ascii_case(h))
                    {
                        continue;
                    }
                    out.push_str(line);
                    out.push_str("\r\n");
                }
                out.push_str("Connection: close\r\n\r\n");
                upstream.write_all(out.as_bytes()).await?;
            }
        }
        if !rest.is_empty() {
            upstream.write_all(&rest).await?;
        }
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
        Ok(())
    }
}

/// The next connection to `listener` (the proxy's or a name's forwarder's).
pub(super) async fn accept(listener: &TcpListener) -> TcpStream {
    loop {
        match listener.accept().await {
            Ok((client, _)) => return client,
            // Out of fds or memory: let the connections being served finish first.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
        }
    }
}

async fn answer(client: &mut TcpStream, code: u16, why: &str) -> std::io::Result<()> {
    let reason = match code {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        _ => "Bad Gateway",
    };
    let body = format!("{why}\n");
    let msg = format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(msg.as_bytes()).await?;
    client.shutdown().await
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `host:port` (or `[v6]:port`, or a bare host with `default` as its port).
fn split_host_port(s: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if tail.is_empty() => default,
            None => return None,
        };
        return Some((format!("[{h}]"), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h.to_string(), p.parse().ok()?)),
        None if !s.is_empty() => Some((s.to_string(), default)),
        _ => None,
    }
}

/// `http://host[:port]/path?query` -> (host, port, "/path?query").
fn absolute(target: &str) -> Option<(String, u16, String)> {
    let rest = target.strip_prefix("http://").or_else(|| {
        target
            .get(..7)
            .filter(|p| p.eq_ignore_ascii_case("http://"))
            .map(|_| &target[7..])
    })?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let authority = authority.rsplit('@').next()?;
    let (host, port) = split_host_port(authority, 80)?;
    Some((host, port, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(
            split_host_port("pypi.org:443", 443),
            Some(("pypi.org".into(), 443))
        );
        assert_eq!(
            split_host_port("[::1]:8080", 443),
            Some(("[::1]".into(), 8080))
        );
        assert_eq!(
            split_host_port("pypi.org", 443),
            Some(("pypi.org".into(), 443))
        );
        assert_eq!(split_host_port("a:b", 443), None);
        assert_eq!(
            absolute("http://127.0.0.2:8000/simple/x/?q=1"),
            Some(("127.0.0.2".into(), 8000, "/simple/x/?q=1".into()))
        );
        assert_eq!(
            absolute("http://example.com"),
            Some(("example.com".into(), 80, "/".into()))
        );
        assert_eq!(absolute("/relative"), None);
    }
}
