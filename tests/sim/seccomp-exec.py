#!/usr/bin/env python3
"""Run a program under a seccomp filter that answers the named syscalls
with an errno, the way a container's profile does (Docker's default answers
clone3 with ENOSYS and unshare/clone-with-namespaces with EPERM without
CAP_SYS_ADMIN). Used by the tests to simulate a container without Docker.

    seccomp-exec.py clone3=ENOSYS,unshare=EPERM -- PROGRAM [ARG...]
"""
import ctypes
import errno
import os
import platform
import sys

SYSCALLS = {
    "x86_64": {"clone3": 435, "unshare": 272, "setns": 308},
    "aarch64": {"clone3": 435, "unshare": 97, "setns": 268},
}
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}


class SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte),
                ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]


def main():
    spec, sep, *prog = sys.argv[1:]
    assert sep == "--" and prog, __doc__
    arch = platform.machine()
    rules = [(SYSCALLS[arch][name], getattr(errno, err))
             for name, err in (r.split("=") for r in spec.split(","))]
    ins = [(0x20, 0, 0, 4),                            # ld arch
           (0x15, 1, 0, AUDIT_ARCH[arch]),             # native? skip the allow
           (0x06, 0, 0, 0x7FFF0000),                   # other ABIs: allow
           (0x20, 0, 0, 0)]                            # ld nr
    for nr, err in rules:
        ins += [(0x15, 0, 1, nr), (0x06, 0, 0, 0x00050000 | err)]
    ins.append((0x06, 0, 0, 0x7FFF0000))
    arr = (SockFilter * len(ins))(*[SockFilter(*i) for i in ins])
    fprog = SockFprog(len(ins), arr)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit("prctl(PR_SET_NO_NEW_PRIVS): %s" % os.strerror(ctypes.get_errno()))
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        sys.exit("prctl(PR_SET_SECCOMP): %s" % os.strerror(ctypes.get_errno()))
    os.execvp(prog[0], prog)


main()
