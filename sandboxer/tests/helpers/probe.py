"""Live-test probe: runs each requested operation and prints one JSON line per operation.

argv[1] is a JSON list of [op, arg...]. Each line printed is
{"op": ..., "args": [...], "ok": bool, "err": "ENOENT" | null, "out": "..."}.
"out" carries what was read, so a protected marker that leaks shows up in the output.
Deliberately plain: it must run as any user, inside or outside the sandbox.
"""
import ctypes
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import termios


def read(path):
    with open(path, "rb") as f:
        return f.read(4096).decode("utf-8", "replace")


def write_with(path, flags, data):
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    return ""


def write(path):
    return write_with(path, os.O_WRONLY | os.O_APPEND, b"written-by-probe\n")


def create(path):
    return write_with(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, b"created-by-probe\n")


def delete(path):
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)
    else:
        os.unlink(path)
    return ""


def symlink_read(target, link):
    os.symlink(target, link)
    return read(link)


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    finally:
        s.close()
    return ""


def connect_abstract(name):
    return connect("\0" + name)


def ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    PTRACE_ATTACH, PTRACE_DETACH = 16, 17
    if libc.ptrace(PTRACE_ATTACH, int(pid), None, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    os.waitpid(int(pid), 0)
    libc.ptrace(PTRACE_DETACH, int(pid), None, None)
    return ""


def tty_write(path):
    """Writes to another terminal, opened as the shell there would not notice."""
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
    try:
        os.write(fd, b"written-by-probe\n")
    finally:
        os.close(fd)
    return ""


def new_pty():
    """A pty of one's own, used both ways: what the CLIs' terminal tools need."""
    import pty
    m, s = pty.openpty()
    os.write(s, b"x")
    got = os.read(m, 1)
    os.close(m)
    os.close(s)
    if got != b"x":
        raise OSError("the new pty does not pass data")
    return ""


def exchange(a, b):
    """Swaps two entries atomically (renameat2 RENAME_EXCHANGE): replacing a folder by a
    look-alike in one step."""
    libc = ctypes.CDLL(None, use_errno=True)
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    return ""


def tiocsti(fd):
    fcntl.ioctl(int(fd), termios.TIOCSTI, b"#")
    return ""


OPS = {
    "read": read,
    "write": write,
    "create": create,
    "mkdir": lambda p: os.mkdir(p) or "",
    "chmod": lambda p, mode: os.chmod(p, int(mode, 8)) or "",
    "setxattr": lambda p: os.setxattr(p, "user.probe", b"1", follow_symlinks=False) or "",
    "truncate": lambda p: os.truncate(p, 0) or "",
    "list": lambda p: "\n".join(sorted(os.listdir(p))),
    "delete": delete,
    "rename": lambda a, b: os.rename(a, b) or "",
    "exchange": exchange,
    "link": lambda a, b: os.link(a, b) or "",
    "symlink-read": symlink_read,
    "connect": connect,
    "connect-abstract": connect_abstract,
    "kill": lambda pid, sig: os.kill(int(pid), int(sig)) or "",
    "ptrace": ptrace,
    "proc-root": lambda pid: "\n".join(sorted(os.listdir("/proc/%s/root" % pid))),
    "proc-environ": lambda pid: read("/proc/%s/environ" % pid),
    "tiocsti": tiocsti,
    "tty-write": tty_write,
    "new-pty": new_pty,
    "open-tty": lambda: os.close(os.open("/dev/tty", os.O_RDWR)) or "",
    "getpid": lambda: str(os.getpid()),
}


def main():
    for spec in json.loads(sys.argv[1]):
        op, args = spec[0], spec[1:]
        line = {"op": op, "args": args, "ok": True, "err": None, "out": ""}
        try:
            line["out"] = OPS[op](*args)
        except OSError as e:
            line["ok"] = False
            line["err"] = errno.errorcode.get(e.errno, str(e.errno))
        print(json.dumps(line), flush=True)


main()
