//! A blocking `Read` over chunks a task sends: how a checkpoint's gRPC stream reaches `unpack`.

use std::io::{self, Read};

/// A `Read` of the chunks a channel brings (EOF when the sender is gone).
pub struct Chunks {
    rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    at: bytes::Bytes,
}

impl Chunks {
    pub fn new(rx: tokio::sync::mpsc::Receiver<bytes::Bytes>) -> Self {
        Chunks {
            rx,
            at: bytes::Bytes::new(),
        }
    }
}

impl Read for Chunks {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.at = b,
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.at.len());
        buf[..n].copy_from_slice(&self.at[..n]);
        let _ = self.at.split_to(n);
        Ok(n)
    }
}
