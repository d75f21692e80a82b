//! The sha256 of a stream, taken as it passes: one read (`unpack`'s stream, bounded) or written
//! (`pack`'s tar and its gzip).

use std::io::{self, Read, Write};

use sha2::{Digest, Sha256};

/// `sha256:<hex>`, as registries and image configs name blobs.
pub fn named(sha: Sha256) -> String {
    format!("sha256:{}", hex(sha))
}

pub fn hex(sha: Sha256) -> String {
    sha.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Hashes and counts what is read through it, up to `max` bytes.
pub struct HashingReader<R> {
    inner: R,
    pub sha: Sha256,
    pub bytes: u64,
    pub max: u64,
}

impl<R> HashingReader<R> {
    pub fn new(inner: R, max: u64) -> Self {
        HashingReader {
            inner,
            sha: Sha256::new(),
            bytes: 0,
            max,
        }
    }

    /// The error of a stream past its bound.
    pub fn passed(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "the checkpoint passed its bound of {} bytes of changes",
                self.max
            ),
        )
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        if self.bytes > self.max {
            return Err(self.passed());
        }
        Ok(n)
    }
}

/// Hashes and counts what is written through it.
pub struct HashingWriter<W> {
    inner: W,
    sha: Sha256,
    bytes: u64,
}

impl<W> HashingWriter<W> {
    pub fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            sha: Sha256::new(),
            bytes: 0,
        }
    }

    /// The writer, the hash of what went through and its length.
    pub fn finish(self) -> (W, Sha256, u64) {
        (self.inner, self.sha, self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}
