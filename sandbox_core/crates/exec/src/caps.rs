//! The agent's own ids and capabilities: whether it may give programs other ids, and how an agent
//! that is root of a user-namespaced pod moves to an id no program has while keeping what it
//! needs of root (`keep_capabilities_as`).

use crate::error::SetupError;

const CAP_SETGID: u32 = 6;
const CAP_SETUID: u32 = 7;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

fn capget() -> std::io::Result<[Data; 2]> {
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget of this thread into a header and two data structs, as version 3 wants.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(data)
}

fn capset(data: &[Data; 2]) -> std::io::Result<()> {
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: capset of this thread from a header and two data structs, as version 3 wants.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn effective(cap: u32) -> bool {
    capget().is_ok_and(|d| d[(cap / 32) as usize].effective & (1 << (cap % 32)) != 0)
}

/// Whether this process may give its programs other ids: it is root, or it kept the capabilities
/// to set ids (`keep_capabilities_as`).
pub fn may_set_ids() -> bool {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    euid == 0 || (effective(CAP_SETUID) && effective(CAP_SETGID))
}

/// Makes this process (which must have one thread, and be root) `uid`/`gid` everywhere, with no
/// supplementary groups, keeping every capability it has. Programs it starts in their own user
/// namespace get that namespace's full set there and nothing over this one, as always.
pub fn keep_capabilities_as(uid: u32, gid: u32) -> Result<(), SetupError> {
    let err =
        |what: &'static str| move |source: std::io::Error| SetupError::UserNs { what, source };
    let kept = capget().map_err(err("capget"))?;
    // SAFETY: plain syscalls of a single-threaded process; the keep-caps flag is cleared again by
    // the kernel at the next execve, and by setns into a user namespace.
    unsafe {
        if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 {
            return Err(err("keep capabilities")(std::io::Error::last_os_error()));
        }
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setresgid(gid, gid, gid) != 0
            || libc::setresuid(uid, uid, uid) != 0
        {
            return Err(err("agent ids")(std::io::Error::last_os_error()));
        }
        libc::prctl(libc::PR_SET_KEEPCAPS, 0, 0, 0, 0);
    }
    // The permitted set survived the change; the effective one is raised from it again.
    let mut data = capget().map_err(err("capget"))?;
    for (d, k) in data.iter_mut().zip(kept) {
        d.effective = k.effective & d.permitted;
    }
    capset(&data).map_err(err("capset"))
}
