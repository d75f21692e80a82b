//! The kill handle of one exec: everything that must die when the exec ends or is cancelled.
//!
//! Three nets, widest first: the cgroup (catches every descendant, including ones that called
//! `setsid`), the process group (all of the program's descendants that did not leave it), and,
//! without a cgroup, a walk of /proc for descendants of the main process (catches `setsid`
//! grandchildren while the main process is alive; after it exits they are reparented to the agent
//! and only the cgroup could still tell whose they were).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::cgroup::ExecCgroup;
use crate::reaper::Reaper;

pub(crate) struct Tree {
    pid: libc::pid_t,
    reaper: &'static Reaper,
    cgroup: Option<Arc<ExecCgroup>>,
    /// Set once the supervisor has finished: the pids are no longer ours to signal.
    finished: AtomicBool,
    /// `Command::keep_descendants`: once the main process has exited, what is left is not killed.
    keep_descendants: bool,
    main_exited: AtomicBool,
}

impl Tree {
    pub(crate) fn new(
        pid: libc::pid_t,
        reaper: &'static Reaper,
        cgroup: Option<Arc<ExecCgroup>>,
        keep_descendants: bool,
    ) -> Tree {
        Tree {
            pid,
            reaper,
            cgroup,
            finished: AtomicBool::new(false),
            keep_descendants,
            main_exited: AtomicBool::new(false),
        }
    }

    pub(crate) fn keeps_descendants(&self) -> bool {
        self.keep_descendants
    }

    /// The main process was reaped. With `keep_descendants`, `kill` does nothing from now on: the
    /// processes it left behind (often still in its process group) are no longer the exec's.
    pub(crate) fn main_exited(&self) {
        self.main_exited.store(true, Ordering::Release);
    }

    fn released(&self) -> bool {
        self.finished.load(Ordering::Acquire)
            || (self.keep_descendants && self.main_exited.load(Ordering::Acquire))
    }

    pub(crate) fn pid(&self) -> libc::pid_t {
        self.pid
    }

    pub(crate) fn reaper(&self) -> &'static Reaper {
        self.reaper
    }

    pub(crate) fn cgroup(&self) -> Option<&Arc<ExecCgroup>> {
        self.cgroup.as_ref()
    }

    pub(crate) fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// Signals the program's process group (while the main process is not yet reaped).
    pub(crate) fn signal(&self, sig: libc::c_int) -> io::Result<()> {
        if self.finished.load(Ordering::Acquire) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        self.reaper.signal_group(self.pid, sig)
    }

    /// SIGKILLs the whole tree now. Idempotent, cheap enough for `Drop`.
    pub(crate) fn kill(&self) {
        if self.released() {
            return;
        }
        // Without a cgroup, list descendants before killing anything: once their parent dies they
        // are reparented to the agent and no longer recognisable as part of this tree (which also
        // makes the walk pointless once the main process has been reaped).
        let orphans_to_be = if self.cgroup.is_none() && self.reaper.is_registered(self.pid) {
            descendants(self.pid)
        } else {
            Vec::new()
        };
        let _ = self.reaper.signal_group(self.pid, libc::SIGKILL);
        // The main process may have left its group (setpgid); it is still ours until reaped.
        let _ = self.reaper.signal_pid(self.pid, libc::SIGKILL);
        match &self.cgroup {
            Some(cg) => cg.kill(),
            None => {
                for pid in orphans_to_be {
                    // SAFETY: plain syscall. Without a cgroup a pid read from /proc can be recycled
                    // before the kill; that window is the documented weakness of this fallback.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
}

/// Descendants of `root` (not `root` itself), from the ppid field of /proc/<pid>/stat.
pub(crate) fn descendants(root: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children: HashMap<libc::pid_t, Vec<libc::pid_t>> = HashMap::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<libc::pid_t>().ok())
        else {
            continue;
        };
        if let Some(ppid) = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .as_deref()
            .and_then(parse_ppid)
        {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(kids) = children.get(&p) {
            for &k in kids {
                if !out.contains(&k) {
                    out.push(k);
                    stack.push(k);
                }
            }
        }
    }
    out
}

/// The ppid in /proc/<pid>/stat: "pid (comm) state ppid ...", where comm may contain anything,
/// so parse from the last ')'.
fn parse_ppid(stat: &str) -> Option<libc::pid_t> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut it = rest.split_whitespace();
    let _state = it.next()?;
    it.next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ppid_with_odd_comm() {
        assert_eq!(parse_ppid("123 (a) b) c) S 45 123 123 0"), Some(45));
        assert_eq!(parse_ppid("1 (init) S 0 1 1"), Some(0));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn finds_own_threads_parent() {
        // pid 1's descendants include this test process.
        let me = std::process::id() as libc::pid_t;
        assert!(descendants(1).contains(&me));
    }
}
