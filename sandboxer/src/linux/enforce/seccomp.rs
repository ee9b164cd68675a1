//! The command's seccomp filter: every `connect(2)` goes to the socket broker (`broker.rs`);
//! what could reach a pathname Unix socket without `connect` is refused.
//!
//! Classic BPF sees the system call number and its six argument registers, never memory: it
//! cannot read a `sockaddr`, nor tell which family an existing socket has. So:
//!
//! - `connect` returns `SECCOMP_RET_USER_NOTIF` for every socket: the broker reads the address
//!   and the socket and performs the connect itself (never `SECCOMP_USER_NOTIF_FLAG_CONTINUE`,
//!   which would let the kernel re-read an address the process may have rewritten).
//! - `socket` and `socketpair` with `AF_UNIX` and type `SOCK_DGRAM` or `SOCK_RAW` (the kernel
//!   makes the latter a datagram socket) fail with `EACCES`: an unconnected datagram socket
//!   reaches any pathname socket by `sendto`/`sendmsg` with a destination, and a connected one
//!   still may name another; `sendmsg`'s destination lies in memory, out of BPF's sight.
//!   Stream and seqpacket sockets send only to their peer (a destination is refused or
//!   ignored), so they stay allowed.
//! - `io_uring_setup`, `io_uring_enter` and `io_uring_register` fail with `ENOSYS`: an
//!   `IORING_OP_CONNECT` is performed by the kernel without passing through this filter.
//! - On x86-64, the x32 system call numbers fail with `ENOSYS` (they would name `connect`
//!   under another number), and i386 calls (`int 0x80`) get the same rules under their own
//!   numbers, with `socketcall` (which multiplexes `connect` behind a pointer) failing with
//!   `ENOSYS`. Any other architecture's calls fail with `ENOSYS`.

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::error::{EnforceError, Layer};

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
/// BPF_LD | BPF_W | BPF_ABS (0x00 | 0x00 | 0x20).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;

// Offsets into `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of argument `i` (little-endian; `int` arguments live there).
const fn arg_lo(i: u32) -> u32 {
    16 + 8 * i
}

const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xC000_00B7;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
/// `SOCK_TYPE_MASK`: the type without `SOCK_NONBLOCK` / `SOCK_CLOEXEC`.
const SOCK_TYPE_MASK: u32 = 0xf;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_NOTIFY: u32 = libc::SECCOMP_RET_USER_NOTIF;
const fn ret_errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// One architecture's system call numbers the filter looks at.
#[derive(Clone, Copy, Debug)]
pub(super) struct Calls {
    pub arch: u32,
    pub connect: u32,
    pub socket: u32,
    pub socketpair: u32,
    pub io_uring: [u32; 3],
    /// `socketcall`, where the architecture has it.
    pub socketcall: Option<u32>,
}

#[cfg(target_arch = "x86_64")]
const NATIVE: Calls = Calls {
    arch: AUDIT_ARCH_X86_64,
    connect: 42,
    socket: 41,
    socketpair: 53,
    io_uring: [425, 426, 427],
    socketcall: None,
};
#[cfg(target_arch = "aarch64")]
const NATIVE: Calls = Calls {
    arch: AUDIT_ARCH_AARCH64,
    connect: 203,
    socket: 198,
    socketpair: 199,
    io_uring: [425, 426, 427],
    socketcall: None,
};
/// i386 calls made by a 64-bit x86 process (`int 0x80`) or a 32-bit program.
const I386: Calls = Calls {
    arch: AUDIT_ARCH_I386,
    connect: 362,
    socket: 359,
    socketpair: 360,
    io_uring: [425, 426, 427],
    socketcall: Some(102),
};
#[cfg(target_arch = "x86_64")]
const COMPAT: Option<Calls> = Some(I386);
#[cfg(target_arch = "aarch64")]
const COMPAT: Option<Calls> = None;
#[cfg(not(target_arch = "x86_64"))]
const _: Calls = I386;
#[cfg(not(target_arch = "aarch64"))]
const _: u32 = AUDIT_ARCH_AARCH64;

fn stmt(code: u16, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter { code, jt, jf, k }
}

/// The rules for one architecture's numbers; the number is loaded first.
fn rules(c: &Calls, x32_bit: bool, out: &mut Vec<libc::sock_filter>) {
    let enosys = ret_errno(libc::ENOSYS);
    out.push(stmt(BPF_LD_W_ABS, NR));
    if x32_bit {
        out.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
        out.push(stmt(BPF_RET_K, enosys));
    }
    out.push(jump(BPF_JMP_JEQ_K, c.connect, 0, 1));
    out.push(stmt(BPF_RET_K, RET_NOTIFY));
    for nr in c.io_uring.into_iter().chain(c.socketcall) {
        out.push(jump(BPF_JMP_JEQ_K, nr, 0, 1));
        out.push(stmt(BPF_RET_K, enosys));
    }
    // socket(domain, type, ...) and socketpair(domain, type, ...): same argument places.
    out.push(jump(BPF_JMP_JEQ_K, c.socket, 1, 0));
    out.push(jump(BPF_JMP_JEQ_K, c.socketpair, 0, 7));
    out.push(stmt(BPF_LD_W_ABS, arg_lo(0)));
    out.push(jump(BPF_JMP_JEQ_K, libc::AF_UNIX as u32, 0, 5));
    out.push(stmt(BPF_LD_W_ABS, arg_lo(1)));
    out.push(stmt(BPF_ALU_AND_K, SOCK_TYPE_MASK));
    out.push(jump(BPF_JMP_JEQ_K, libc::SOCK_DGRAM as u32, 1, 0));
    out.push(jump(BPF_JMP_JEQ_K, libc::SOCK_RAW as u32, 0, 1));
    out.push(stmt(BPF_RET_K, ret_errno(libc::EACCES)));
    out.push(stmt(BPF_RET_K, RET_ALLOW));
}

/// The whole program for this machine's architecture.
pub(super) fn program() -> Vec<libc::sock_filter> {
    program_for(&NATIVE, COMPAT.as_ref())
}

fn program_for(native: &Calls, compat: Option<&Calls>) -> Vec<libc::sock_filter> {
    let mut native_rules = Vec::new();
    rules(native, native.arch == AUDIT_ARCH_X86_64, &mut native_rules);
    let mut compat_rules = Vec::new();
    if let Some(c) = compat {
        rules(c, false, &mut compat_rules);
    }
    let mut out = vec![stmt(BPF_LD_W_ABS, ARCH)];
    // arch == native: fall into the native rules; else skip them.
    out.push(jump(
        BPF_JMP_JEQ_K,
        native.arch,
        0,
        u8::try_from(native_rules.len()).expect("short program"),
    ));
    out.extend(native_rules);
    if let Some(c) = compat {
        out.push(jump(
            BPF_JMP_JEQ_K,
            c.arch,
            0,
            u8::try_from(compat_rules.len()).expect("short program"),
        ));
        out.extend(compat_rules);
    }
    out.push(stmt(BPF_RET_K, ret_errno(libc::ENOSYS)));
    out
}

/// Installs the filter on the calling thread (`no_new_privs` must be set) and returns the
/// listener the broker reads notifications from (close-on-exec, as the kernel makes it).
pub(super) fn install() -> Result<OwnedFd, EnforceError> {
    let filter = program();
    let prog = libc::sock_fprog {
        len: u16::try_from(filter.len()).expect("short program"),
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, alive for the call; the kernel copies it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &raw const prog,
        )
    };
    if fd < 0 {
        return Err(EnforceError::os(
            Layer::SocketBroker,
            "installing the seccomp filter for connect(2) (SECCOMP_FILTER_FLAG_NEW_LISTENER)",
            Errno::last(),
        ));
    }
    // SAFETY: a new descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the few instructions the program uses.
    fn run(prog: &[libc::sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let ins = prog[pc];
            pc += 1;
            match ins.code {
                BPF_LD_W_ABS => {
                    let k = ins.k as usize;
                    acc = u32::from_le_bytes(data[k..k + 4].try_into().unwrap());
                }
                BPF_ALU_AND_K => acc &= ins.k,
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K => {
                    let hit = if ins.code == BPF_JMP_JEQ_K {
                        acc == ins.k
                    } else {
                        acc >= ins.k
                    };
                    pc += usize::from(if hit { ins.jt } else { ins.jf });
                }
                BPF_RET_K => return ins.k,
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    const X86: Calls = Calls {
        arch: AUDIT_ARCH_X86_64,
        connect: 42,
        socket: 41,
        socketpair: 53,
        io_uring: [425, 426, 427],
        socketcall: None,
    };

    #[test]
    fn decides_each_class() {
        let p = program_for(&X86, Some(&I386));
        let x = |nr, args| run(&p, AUDIT_ARCH_X86_64, nr, args);
        let eacces = ret_errno(libc::EACCES);
        let enosys = ret_errno(libc::ENOSYS);
        assert_eq!(x(42, [3, 0, 0, 0, 0, 0]), RET_NOTIFY);
        assert_eq!(x(0, [0; 6]), RET_ALLOW);
        for nr in [425, 426, 427] {
            assert_eq!(x(nr, [0; 6]), enosys);
        }
        let unix = libc::AF_UNIX as u64;
        let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u64;
        for nr in [41, 53] {
            assert_eq!(x(nr, [unix, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]), eacces);
            assert_eq!(
                x(nr, [unix, libc::SOCK_DGRAM as u64 | flags, 0, 0, 0, 0]),
                eacces
            );
            assert_eq!(x(nr, [unix, libc::SOCK_RAW as u64, 0, 0, 0, 0]), eacces);
            assert_eq!(
                x(nr, [unix, libc::SOCK_STREAM as u64 | flags, 0, 0, 0, 0]),
                RET_ALLOW
            );
            assert_eq!(
                x(nr, [unix, libc::SOCK_SEQPACKET as u64, 0, 0, 0, 0]),
                RET_ALLOW
            );
            let inet = libc::AF_INET as u64;
            assert_eq!(
                x(nr, [inet, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]),
                RET_ALLOW
            );
            // The upper half of an int argument is ignored, as the kernel does.
            assert_eq!(
                x(nr, [unix | 1 << 32, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]),
                eacces
            );
        }
        assert_eq!(x(X32_SYSCALL_BIT | 42, [0; 6]), enosys);
        let i = |nr, args| run(&p, AUDIT_ARCH_I386, nr, args);
        assert_eq!(i(362, [0; 6]), RET_NOTIFY);
        assert_eq!(i(102, [3, 0, 0, 0, 0, 0]), enosys);
        assert_eq!(i(359, [unix, libc::SOCK_DGRAM as u64, 0, 0, 0, 0]), eacces);
        assert_eq!(i(42, [0; 6]), RET_ALLOW);
        assert_eq!(run(&p, 0x1234, 42, [0; 6]), enosys);
    }

    #[test]
    fn the_native_program_is_what_the_kernel_gets() {
        let p = program();
        assert_eq!(run(&p, NATIVE.arch, NATIVE.connect, [0; 6]), RET_NOTIFY);
    }
}
