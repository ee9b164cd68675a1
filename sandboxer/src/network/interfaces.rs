//! The machine's interface addresses, by `getifaddrs(3)` (Linux and macOS alike), and
//! [`AddressWatch`], which reads them again only when they change.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Every IPv4 and IPv6 address of every interface, up or not.
pub fn addresses() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned, not yet freed; `ifa_addr`
        // is null or points to a sockaddr of the family it names.
        unsafe {
            let addr = (*cur).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(addr as *const libc::sockaddr_in);
                        out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                            sin.sin_addr.s_addr,
                        ))));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// The machine's addresses, read again only when they have changed: a netlink socket
/// subscribed to every address added or removed (IPv4 and IPv6) is made before the first
/// read, and each [`AddressWatch::current`] drains it. The kernel queues the notice before
/// the change's own system call returns, so an address added before a decision is in the
/// set that decision gets, as strictly as a read at every decision. Where the subscription
/// cannot be made (not Linux, a kernel that refuses it), every call reads them anew.
pub struct AddressWatch {
    state: std::sync::Mutex<Watched>,
}

struct Watched {
    #[cfg(target_os = "linux")]
    notices: Option<std::os::fd::OwnedFd>,
    current: std::sync::Arc<super::OwnAddresses>,
}

impl AddressWatch {
    pub fn new() -> io::Result<AddressWatch> {
        #[cfg(target_os = "linux")]
        let notices = subscribe().ok();
        let current = std::sync::Arc::new(super::OwnAddresses::new(addresses()?));
        Ok(AddressWatch {
            state: std::sync::Mutex::new(Watched {
                #[cfg(target_os = "linux")]
                notices,
                current,
            }),
        })
    }

    /// The machine's addresses as they are now.
    pub fn current(&self) -> io::Result<std::sync::Arc<super::OwnAddresses>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        #[cfg(target_os = "linux")]
        let changed = match &state.notices {
            Some(fd) => drain(fd),
            None => true,
        };
        #[cfg(not(target_os = "linux"))]
        let changed = true;
        if changed {
            state.current = std::sync::Arc::new(super::OwnAddresses::new(addresses()?));
        }
        Ok(state.current.clone())
    }
}

/// A netlink socket that receives a notice for every address added or removed.
#[cfg(target_os = "linux")]
fn subscribe() -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain socket; owned below.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just made, owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid sockaddr_nl.
    let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    addr.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
    // SAFETY: `addr` is a sockaddr_nl of the size given.
    let r = unsafe {
        libc::bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            (&addr as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Reads every notice queued; whether there was any (a queue that overflowed, or any other
/// error, counts as a change: the addresses are read again).
#[cfg(target_os = "linux")]
fn drain(fd: &std::os::fd::OwnedFd) -> bool {
    let mut buf = [0u8; 8192];
    let mut changed = false;
    loop {
        // SAFETY: recv writes at most `buf.len()` bytes into `buf`.
        let n = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(fd),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n > 0 {
            changed = true;
            continue;
        }
        match io::Error::last_os_error().raw_os_error() {
            _ if n == 0 => return true,
            Some(libc::EAGAIN) => return changed,
            Some(libc::EINTR) => continue,
            // ENOBUFS: notices were lost; keep draining, the read that follows is whole.
            Some(libc::ENOBUFS) => changed = true,
            _ => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An address added is among the watch's at once, with no read in between; checked in a
    /// network namespace of this test thread's own, where only root may add one.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_address_added_is_seen_at_once() {
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: adding an address needs root");
            return;
        }
        std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let watch = AddressWatch::new().unwrap();
            assert!(
                watch.state.lock().unwrap().notices.is_some(),
                "not subscribed"
            );
            let added: IpAddr = Ipv4Addr::new(10, 77, 66, 55).into();
            // Control: not there before.
            assert!(!watch.current().unwrap().contains(added));
            add_alias("lo:9", Ipv4Addr::new(10, 77, 66, 55));
            assert!(watch.current().unwrap().contains(added));
            assert_eq!(
                super::super::classify(added, &watch.current().unwrap()),
                super::super::AddressClass::Own
            );
        })
        .join()
        .unwrap();
    }

    /// `ifconfig lo:9 ADDR`: a second address on `lo`, by the old ioctl (no `ip` needed).
    #[cfg(target_os = "linux")]
    fn add_alias(label: &str, addr: Ipv4Addr) {
        // SAFETY: a socket for the ioctl, closed below; `req` lives across the call.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let mut req: libc::ifreq = std::mem::zeroed();
            for (dst, src) in req.ifr_name.iter_mut().zip(label.bytes().chain([0])) {
                *dst = src as libc::c_char;
            }
            let sin = &mut *(&mut req.ifr_ifru as *mut _ as *mut libc::sockaddr_in);
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_addr.s_addr = u32::from(addr).to_be();
            let r = libc::ioctl(fd, libc::SIOCSIFADDR, &req);
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            assert_eq!(r, 0, "SIOCSIFADDR {label}: {e}");
        }
    }

    #[test]
    fn loopback_is_among_this_machines_addresses() {
        let all = super::addresses().unwrap();
        assert!(all.iter().any(|a| a.is_loopback()), "{all:?}");
    }
}
