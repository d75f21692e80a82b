//! A socket of the caller's spliced to a port of a sandbox (the agent's `Forward`): what the
//! server's port proxy hands over once it has read, checked and (for routing by path) rewritten
//! a connection's first request head. The bytes never pass through Python.

use std::os::fd::{FromRawFd, OwnedFd};

use pyo3::prelude::*;
use sandbox_proto as pb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::client::Client;
use crate::errors::{err, from_status, Kind};
use crate::runtime;

const CHUNK: usize = 256 << 10;

/// Opens the call to `port`; once the agent has connected, carries `head` and then everything
/// `fd` (a connected TCP socket, owned from here on) sends, and writes back everything the port
/// sends, until the port's side ends. Fails (closing `fd`) when the port cannot be reached.
pub fn splice(
    py: Python<'_>,
    mut client: Client,
    port: u16,
    fd: i32,
    head: Vec<u8>,
) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: the caller hands over an fd it owns and no longer uses (a dup of its socket).
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let std = std::net::TcpStream::from(owned);
    std.set_nonblocking(true)
        .map_err(|e| err(Kind::InvalidRequest, format!("the socket to splice: {e}")))?;
    runtime::awaitable(py, async move {
        let sock = tokio::net::TcpStream::from_std(std)
            .map_err(|e| err(Kind::InvalidRequest, format!("the socket to splice: {e}")))?;
        let _ = sock.set_nodelay(true);
        let (tx, rx) = mpsc::channel(4);
        // The channel is empty and has room: this cannot fail.
        let _ = tx.try_send(pb::ForwardInput {
            port: u32::from(port),
            data: head.into(),
            eof: false,
        });
        let mut answers = client
            .forward(ReceiverStream::new(rx))
            .await
            .map_err(from_status)?
            .into_inner();
        let (mut reader, mut writer) = sock.into_split();
        let upstream = tokio::spawn(async move {
            let mut buf = vec![0u8; CHUNK];
            loop {
                let (data, eof) = match reader.read(&mut buf).await {
                    Ok(0) | Err(_) => (Vec::new(), true),
                    Ok(n) => (buf[..n].to_vec(), false),
                };
                let msg = pb::ForwardInput {
                    port: 0,
                    data: data.into(),
                    eof,
                };
                if tx.send(msg).await.is_err() || eof {
                    return;
                }
            }
        });
        while let Ok(Some(out)) = answers.message().await {
            if writer.write_all(&out.data).await.is_err() {
                break;
            }
        }
        let _ = writer.shutdown().await;
        upstream.abort();
        Ok(())
    })
}
