//! Search: the lines that contain a text in the files under a path (`grep -rnIF`): files that
//! look binary are skipped, a line is searched in its first `MAX_LINE` bytes.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use sandbox_proto as pb;

use super::walk::{Next, Walk};
use super::{absolute, io};
use crate::error::AgentError;
use crate::paths::{open_beneath, open_root, Roots};

/// Most matches one search answers.
pub const MAX_MATCHES: usize = 100_000;
/// Bytes of a line kept in a match.
const SHOWN: usize = 4096;
/// Bytes of one line searched; the rest of a longer line is skipped.
const MAX_LINE: usize = 1 << 20;
/// A file with a NUL in its first bytes is binary, as grep -I takes it.
const SNIFF: usize = 8192;
const MAX_DEPTH: u32 = 4096;

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.len() <= hay.len() && hay.windows(needle.len()).any(|w| w == needle)
}

/// Matches of one open file, appended to `out`.
fn scan(
    file: std::fs::File,
    path: &str,
    text: &[u8],
    out: &mut Vec<pb::FileMatch>,
) -> Result<(), AgentError> {
    let mut file = file;
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut skipping = false; // in the part of a line past MAX_LINE
    let mut first = true;
    let mut buf = vec![0u8; 64 << 10];
    let push = |line: &[u8], number: u64, out: &mut Vec<pb::FileMatch>| {
        if contains(line, text) {
            if out.len() == MAX_MATCHES {
                return Err(AgentError::TooLarge(format!(
                    "more than {MAX_MATCHES} lines match: search a smaller tree"
                )));
            }
            let shown = &line[..line.len().min(SHOWN)];
            out.push(pb::FileMatch {
                path: path.to_string(),
                line: number,
                content: String::from_utf8_lossy(shown).into_owned(),
            });
        }
        Ok(())
    };
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Ok(()), // unreadable: no match, as grep goes on
        };
        let mut chunk = &buf[..n];
        if first {
            first = false;
            if chunk[..chunk.len().min(SNIFF)].contains(&0) {
                return Ok(());
            }
        }
        while !chunk.is_empty() {
            match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    if !skipping {
                        line.extend_from_slice(&chunk[..i]);
                    }
                    number += 1;
                    if !skipping || !line.is_empty() {
                        push(&line, number, out)?;
                    }
                    line.clear();
                    skipping = false;
                    chunk = &chunk[i + 1..];
                }
                None => {
                    if !skipping {
                        let room = MAX_LINE - line.len();
                        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
                        if line.len() == MAX_LINE {
                            // The searched part of an overlong line ends here.
                            number += 1;
                            push(&line, number, out)?;
                            line.clear();
                            skipping = true;
                        }
                    }
                    chunk = &[];
                }
            }
        }
    }
    if !line.is_empty() {
        number += 1;
        push(&line, number, out)?;
    }
    Ok(())
}

fn open_file(dir: &OwnedFd, name: &Path) -> Option<std::fs::File> {
    let fd = open_beneath(
        dir,
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .ok()?;
    let file = std::fs::File::from(fd);
    file.metadata().ok()?.is_file().then_some(file)
}

pub fn search(
    roots: &Roots,
    path: &str,
    text: &str,
    cancel: &AtomicBool,
) -> Result<Vec<pb::FileMatch>, AgentError> {
    if text.is_empty() {
        return Err(AgentError::Invalid(
            "the text to search for is required".into(),
        ));
    }
    let r = roots.resolve(path)?;
    let root = open_root(&r.root)?;
    let base = absolute(&r.root, &r.rel);
    let mut out = Vec::new();
    let Ok(dir) = open_beneath(&root, &r.rel, libc::O_RDONLY | libc::O_DIRECTORY, 0) else {
        // One file (a symlink to one, followed beneath the root, as grep follows its arguments).
        let fd = open_beneath(
            &root,
            &r.rel,
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
            0,
        )
        .map_err(io(format!("open {path}")))?;
        let file = std::fs::File::from(fd);
        if file.metadata().map(|m| m.is_file()).unwrap_or(false) {
            scan(file, &base, text.as_bytes(), &mut out)?;
        }
        return Ok(out);
    };
    let walk = Walk {
        cancel,
        max_depth: MAX_DEPTH,
    };
    walk.run(&dir, &mut |e| {
        if e.meta.is_file() {
            if let Some(file) = open_file(e.dir, Path::new(&e.name)) {
                let shown = absolute(Path::new(&base), &e.rel);
                scan(file, &shown, text.as_bytes(), &mut out)?;
            }
        }
        Ok(Next::Go)
    })?;
    Ok(out)
}
