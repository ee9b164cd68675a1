"""Operations on the kernel's global state and shared objects, for tests/linux_kernel.rs.

Usage:
  kernel_probe.py OPS_JSON                 run the operations, print a JSON list of results
  kernel_probe.py --with-keys DESC -- CMD  join a new session keyring, add a user key DESC to
                                           it and to the user keyring, run CMD, remove the keys

Each result is "ok" (or a value) or the errno name; nothing here decides a verdict.
"""

import ctypes
import errno
import json
import os
import platform
import subprocess
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]

NR = {
    "x86_64": {"add_key": 248, "keyctl": 250},
    "aarch64": {"add_key": 217, "keyctl": 219},
}[platform.machine()]
KEYCTL_JOIN_SESSION_KEYRING = 1
KEYCTL_INVALIDATE = 21
KEYCTL_SEARCH = 10
RINGS = {"session": -3, "user": -4}


def last_errno():
    e = ctypes.get_errno()
    return errno.errorcode.get(e, str(e))


def os_errno(e):
    return errno.errorcode.get(e.errno, str(e.errno))


def write_back(path):
    """Writes a file's current content back to it (harmless for a sysctl)."""
    try:
        with open(path, "rb") as f:
            current = f.read()
    except OSError as e:
        return "read:" + os_errno(e)
    return write_bytes(path, current)


def open_wronly(path):
    """Opens for writing and closes without writing a byte."""
    try:
        os.close(os.open(path, os.O_WRONLY))
        return "ok"
    except OSError as e:
        return os_errno(e)


def write(path, text):
    return write_bytes(path, text.encode())


def write_bytes(path, data):
    """Opens for writing (no create, no truncate) and writes `data`: "ok" or the errno."""
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as e:
        return os_errno(e)
    try:
        os.write(fd, data)
        return "ok"
    except OSError as e:
        return os_errno(e)
    finally:
        os.close(fd)


def mount_flags(path):
    try:
        return "ro" if os.statvfs(path).f_flag & os.ST_RDONLY else "rw"
    except OSError as e:
        return os_errno(e)


def shmat(shmid):
    addr = libc.shmat(int(shmid), None, 0)
    if addr is None or addr == ctypes.c_void_p(-1).value:
        return last_errno()
    libc.shmdt(addr)
    return "ok"


def key_search(ring, desc):
    ret = libc.syscall(
        NR["keyctl"], KEYCTL_SEARCH, RINGS[ring], b"user", desc.encode(), 0
    )
    return "found" if ret >= 0 else last_errno()


def exists(path):
    try:
        os.stat(path)
        return "yes"
    except OSError as e:
        return os_errno(e)


def open_read(path):
    try:
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        return "open"
    except OSError as e:
        return os_errno(e)


OPS = {
    "open-read": open_read,
    "write-back": write_back,
    "open-wronly": open_wronly,
    "write": write,
    "mount-flags": mount_flags,
    "shmat": shmat,
    "key-search": key_search,
    "exists": exists,
}


def with_keys(desc, command):
    if libc.syscall(NR["keyctl"], KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        sys.exit("joining a session keyring: " + last_errno())
    added = []
    for ring in ("session", "user"):
        payload = b"secret"
        key = libc.syscall(
            NR["add_key"], b"user", desc.encode(), payload, len(payload), RINGS[ring]
        )
        if key < 0:
            sys.exit("adding a key to the %s keyring: %s" % (ring, last_errno()))
        added.append(key)
    try:
        return subprocess.call(command)
    finally:
        for key in added:
            libc.syscall(NR["keyctl"], KEYCTL_INVALIDATE, key)


def main():
    if sys.argv[1] == "--with-keys":
        assert sys.argv[3] == "--"
        sys.exit(with_keys(sys.argv[2], sys.argv[4:]))
    ops = json.loads(sys.argv[1])
    print(json.dumps([OPS[op[0]](*op[1:]) for op in ops]))


main()
