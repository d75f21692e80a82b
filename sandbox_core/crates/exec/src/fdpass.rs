//! Passing a file descriptor to another process over a unix socket (SCM_RIGHTS): how a child
//! that made a namespace, or opened a connection where the sender cannot, hands it over.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One message of `msg` carrying `fd` (when it is one, not -1). Async-signal-safe (usable in a
/// forked child); errors are the caller's to see on the other end (nothing arrives).
///
/// # Safety
/// `sock` is an open unix socket; `fd` is -1 or an open fd.
pub unsafe fn send_with_fd(sock: libc::c_int, msg: &[u8], fd: libc::c_int) -> isize {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Room for one fd's control message, aligned for cmsghdr.
    let mut control = [0u64; 4];
    let mut hdr: libc::msghdr = std::mem::zeroed();
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if fd >= 0 {
        hdr.msg_control = control.as_mut_ptr().cast();
        hdr.msg_controllen = libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd);
    }
    libc::sendmsg(sock, &hdr, libc::MSG_NOSIGNAL)
}

/// One message into `buf` (its length, 0 at end of stream) and the fd it carried, if any
/// (close-on-exec).
pub fn recv_with_fd(sock: &OwnedFd, buf: &mut [u8]) -> std::io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the call.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&control);
    // SAFETY: recvmsg into the buffers above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fd = None;
    // SAFETY: walking the control messages the kernel filled in.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&hdr);
        if !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let raw = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
            fd = Some(OwnedFd::from_raw_fd(raw));
        }
    }
    Ok((n as usize, fd))
}

/// A connected pair of unix sockets of `kind` (SOCK_DGRAM, SOCK_SEQPACKET, ...), close-on-exec.
pub fn socket_pair(kind: libc::c_int) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair into a valid array.
    if unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}
