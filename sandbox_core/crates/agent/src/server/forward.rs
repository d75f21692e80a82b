//! `Forward`: one TCP connection to a port of the sandbox's own loopback, carried over the
//! call both ways. The agent lives in the sandbox's network namespace (its programs' `lo`), so
//! the connection reaches exactly what a program listens on there; nothing is published on the
//! host. Bytes are copied as they come, in chunks of at most `CHUNK`, with no buffering beyond
//! one chunk each way.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use sandbox_proto as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tonic::{Status, Streaming};

const CHUNK: usize = 256 << 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections carried at once; one more is RESOURCE_EXHAUSTED.
pub const MAX_FORWARDS: usize = 4096;

/// Opens the port the first message names and starts the two copies; the answers go to `tx`.
pub async fn start(
    permits: Arc<Semaphore>,
    mut input: Streaming<pb::ForwardInput>,
    tx: mpsc::Sender<Result<pb::ForwardOutput, Status>>,
) -> Result<(), Status> {
    let permit = permits.try_acquire_owned().map_err(|_| {
        Status::resource_exhausted(format!(
            "at most {MAX_FORWARDS} forwarded connections at once"
        ))
    })?;
    let first = input
        .message()
        .await?
        .ok_or_else(|| Status::invalid_argument("the first message must name the port"))?;
    let port = u16::try_from(first.port)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| {
            Status::invalid_argument(format!("port must be 1..65535, got {}", first.port))
        })?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            return Err(Status::not_found(format!(
                "nothing answers on port {port} of the sandbox: {e}"
            )))
        }
        Err(_) => {
            return Err(Status::not_found(format!(
                "port {port} of the sandbox does not answer"
            )))
        }
    };
    let _ = stream.set_nodelay(true);
    let (mut reader, mut writer) = stream.into_split();
    if !first.data.is_empty() {
        writer.write_all(&first.data).await.map_err(gone)?;
    }
    let eof = first.eof;
    tokio::spawn(async move {
        let _permit = permit;
        let upstream = async move {
            if eof {
                let _ = writer.shutdown().await;
                return;
            }
            while let Ok(Some(m)) = input.message().await {
                if !m.data.is_empty() && writer.write_all(&m.data).await.is_err() {
                    return;
                }
                if m.eof {
                    break;
                }
            }
            // The caller is done sending (or gone): the port sees end of file.
            let _ = writer.shutdown().await;
        };
        let downstream = async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let out = pb::ForwardOutput {
                            data: buf[..n].to_vec().into(),
                        };
                        if tx.send(Ok(out)).await.is_err() {
                            return;
                        }
                    }
                }
            }
        };
        // The call ends when the port's side ends; the caller's side may end first (a request
        // sent whole, the answer still coming).
        let up = tokio::spawn(upstream);
        downstream.await;
        up.abort();
    });
    Ok(())
}

fn gone(e: std::io::Error) -> Status {
    Status::not_found(format!("the port closed the connection: {e}"))
}
