//! A stack for a child cloned with `CLONE_VM`: it runs in its parent's memory, on a stack of its
//! own, until it execs (the reaper's vfork-style spawns; the local launcher's child).

use std::io;

/// An mmap'd stack with a PROT_NONE guard page below it (a stack overflow faults the child).
pub struct ChildStack {
    base: usize,
    len: usize,
}

impl ChildStack {
    const SIZE: usize = 256 << 10;
    const GUARD: usize = 4096;

    pub fn new() -> io::Result<ChildStack> {
        let len = Self::SIZE + Self::GUARD;
        // SAFETY: anonymous private mapping; checked for failure below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the lowest page of the mapping just created. Best effort: without a guard page
        // the child (which only makes a handful of shallow calls) is still well within bounds.
        unsafe { libc::mprotect(p, Self::GUARD, libc::PROT_NONE) };
        Ok(ChildStack {
            base: p as usize,
            len,
        })
    }

    /// Highest address (the stack grows down), 16-byte aligned.
    pub fn top(&self) -> *mut libc::c_void {
        ((self.base + self.len) & !15) as *mut libc::c_void
    }
}

impl Drop for ChildStack {
    /// The owner keeps the stack until its child has exec'd or died.
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}
