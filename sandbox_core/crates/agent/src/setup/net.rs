//! Brings up `lo` in a fresh network namespace so programs can talk to themselves over localhost;
//! nothing else exists in that namespace, so there is no way out.

use super::SetupError;

pub fn loopback_up() -> Result<(), SetupError> {
    // SAFETY: plain socket/ioctl calls on a zeroed ifreq with a NUL-terminated name.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(SetupError::Loopback(std::io::Error::last_os_error()));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo\0".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut rc = libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &mut req);
        if rc == 0 {
            req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &req);
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(SetupError::Loopback(err));
        }
    }
    Ok(())
}

/// Adds `ip`/32 to `lo` (as its alias `lo:{n}`), so that a server of this namespace can listen
/// on an address the outside's configuration names (a pod's nameserver).
pub fn add_loopback_address(ip: std::net::Ipv4Addr, n: usize) -> std::io::Result<()> {
    let label = format!("lo:{n}");
    if label.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    let sockaddr = |addr: std::net::Ipv4Addr| {
        // SAFETY: an all-zero sockaddr_in is valid; the fields are set below.
        let mut sin: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_addr.s_addr = u32::from(addr).to_be();
        sin
    };
    // SAFETY: plain socket/ioctl calls on a zeroed ifreq with a NUL-terminated name and a
    // sockaddr_in copied into its address union (which is at least that large).
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in label.bytes().enumerate() {
            req.ifr_name[i] = b as libc::c_char;
        }
        let mut rc = 0;
        for (op, addr) in [
            (libc::SIOCSIFADDR, ip),
            (libc::SIOCSIFNETMASK, std::net::Ipv4Addr::BROADCAST),
        ] {
            let sin = sockaddr(addr);
            std::ptr::copy_nonoverlapping(
                (&sin as *const libc::sockaddr_in).cast::<u8>(),
                (&mut req.ifr_ifru as *mut libc::__c_anonymous_ifr_ifru).cast::<u8>(),
                std::mem::size_of::<libc::sockaddr_in>(),
            );
            rc = libc::ioctl(fd, op as _, &req);
            if rc != 0 {
                break;
            }
        }
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            return Err(err);
        }
    }
    Ok(())
}

/// Names the sandbox in a uts namespace of its own (made here: whoever started the agent may
/// have shared theirs, and the name must never be set on the host).
pub fn set_hostname(name: &str) -> Result<(), SetupError> {
    // SAFETY: unshare of this process's uts namespace; sethostname with a pointer/length pair of
    // a live string.
    if unsafe { libc::unshare(libc::CLONE_NEWUTS) } != 0
        || unsafe { libc::sethostname(name.as_ptr() as *const libc::c_char, name.len()) } != 0
    {
        return Err(SetupError::Hostname(std::io::Error::last_os_error()));
    }
    Ok(())
}
