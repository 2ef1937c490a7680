"""Named network namespaces without forking: a thin shell over unshare/setns.

A namespace is created by unsharing the *calling thread's* network namespace,
bind-mounting it at /run/netns/NAME (so `ip netns` sees it) and switching the
thread back. A netlink socket opened while inside stays bound to that namespace,
so one pyroute2 ``IPRoute`` per namespace configures it from this process.
This is ~1 ms per namespace, against ~50 ms for a Mininet shell per node.

All those IPRoutes share one asyncio event loop (``open_iproute``): pyroute2 gives
each its own otherwise, an epoll and a wake-up pipe beside the netlink socket, and
4 descriptors per namespace put a 2,048-host fabric over a 20,000-file limit. The
loop runs in whichever thread calls an IPRoute, one at a time: they are for the
thread that built the fabric, not for background threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import tempfile
import threading
import time
from collections.abc import Iterator

from pyroute2 import IPRoute

from core import safefile
from core.errors import CapabilityError

NETNS_DIR = "/run/netns"
_CLONE_NEWNS = 0x00020000
_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)
_netns_dir_shared = False
_netlink_loop: asyncio.AbstractEventLoop | None = None


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


@contextlib.contextmanager
def in_netns(path: str) -> Iterator[None]:
    """Run the body with this thread inside the namespace at ``path``.

    Sockets opened in the body stay in that namespace after the switch back.
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(path, os.O_RDONLY)
    try:
        _check(_libc.setns(target, _CLONE_NEWNET), f"setns {path}")
        try:
            yield
        finally:
            _check(_libc.setns(home, _CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(target)
        os.close(home)


def open_iproute() -> IPRoute:
    """An IPRoute bound to the calling thread's namespace, on the process's shared loop."""
    global _netlink_loop
    if _netlink_loop is None or _netlink_loop.is_closed():
        _netlink_loop = asyncio.new_event_loop()
    return IPRoute(use_event_loop=_netlink_loop)


def write_sysctl(key: str, value: str | int) -> None:
    """Write a net.* sysctl of the namespace the calling thread is in."""
    with open("/proc/sys/" + key.replace(".", "/"), "w") as f:  # safefile: ok - procfs
        f.write(str(value))


def _ensure_shared_netns_dir() -> None:
    """Make /run/netns a shared mount of itself, as `ip netns add` does.

    If it is a plain directory, the first `ip netns add` (by anyone) bind-mounts
    it over itself and so hides every namespace mount made before, which could
    then be neither seen nor removed. Doing the same first avoids that.
    """
    global _netns_dir_shared
    if _netns_dir_shared:  # once per process: a mount syscall per namespace adds up
        return
    os.makedirs(NETNS_DIR, exist_ok=True)
    flags = _MS_SHARED | _MS_REC
    # EINVAL: not a mount point yet, so bind-mount it over itself first.
    if (_libc.mount(b"none", NETNS_DIR.encode(), b"none", flags, None) != 0
            and ctypes.get_errno() == errno.EINVAL):
        _check(_libc.mount(NETNS_DIR.encode(), NETNS_DIR.encode(), b"none",
                           _MS_BIND | _MS_REC, None), f"bind mount {NETNS_DIR}")
        _check(_libc.mount(b"none", NETNS_DIR.encode(), b"none", flags, None),
               f"make {NETNS_DIR} shared")
    _netns_dir_shared = True


def create_netns(name: str, sysctls: dict[str, str | int] | None = None) -> IPRoute:
    """Create /run/netns/NAME, apply ``sysctls`` inside it and return an IPRoute bound to it.

    Raises FileExistsError if the name is taken: we never adopt a namespace we did
    not create.
    """
    _ensure_shared_netns_dir()
    path = netns_path(name)
    safefile.create_empty(path)
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        except OSError as e:
            os.unlink(path)
            raise CapabilityError(f"cannot create a network namespace: {e}") from e
        try:
            src = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
            _check(_libc.mount(src, path.encode(), b"none", _MS_BIND, None), f"bind mount {path}")
            for key, value in (sysctls or {}).items():
                write_sysctl(key, value)
            ipr = open_iproute()
            ipr.link("set", index=1, state="up")  # loopback
        except BaseException:
            _libc.umount2(path.encode(), _MNT_DETACH)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        finally:
            _check(_libc.setns(home, _CLONE_NEWNET), "setns back to the original namespace")
    finally:
        os.close(home)
    return ipr


def netns_inode(path: str) -> int:
    return os.stat(path).st_ino


def netns_pids(path: str) -> list[int]:
    """Processes whose network namespace is the one mounted at ``path``."""
    try:
        ino = netns_inode(path)
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == ino:
                pids.append(int(entry))
        except (FileNotFoundError, PermissionError, ProcessLookupError):
            continue
    return pids


def delete_netns(name: str) -> bool:
    """Kill what runs inside /run/netns/NAME, then unmount and remove it.

    The kernel frees the namespace (and the veths in it) once nothing refers to it.
    Returns False if it did not exist.
    """
    path = netns_path(name)
    if not os.path.exists(path):
        return False
    for pid in netns_pids(path):
        if pid != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
    if _libc.umount2(path.encode(), _MNT_DETACH) != 0 and ctypes.get_errno() not in (
        errno.EINVAL, errno.ENOENT
    ):
        raise OSError(ctypes.get_errno(), f"umount {path}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


def write_netns_sysfs(files: dict[str, dict[str, str]]) -> None:
    """Write sysfs attributes of namespaces: ``files[netns path][path under /sys]`` =
    the text. sysfs shows the network namespace of whoever mounted it, so a
    short-lived thread unshares its mount namespace (made private: nothing reaches
    the machine's), and for each namespace enters it, mounts a sysfs on a scratch
    directory, writes and unmounts. FileNotFoundError for a missing attribute."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _write_sysfs(files)
        except BaseException as e:  # re-raised in the caller's thread
            errors.append(e)

    thread = threading.Thread(target=run, name="netns-sysfs")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def _write_sysfs(files: dict[str, dict[str, str]]) -> None:
    _check(_libc.unshare(_CLONE_NEWNS), "unshare mount namespace")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make mounts private")
    scratch = tempfile.mkdtemp(prefix="fabemu-sysfs-")
    try:
        for ns, writes in files.items():
            fd = os.open(ns, os.O_RDONLY)
            try:
                _check(_libc.setns(fd, _CLONE_NEWNET), f"setns {ns}")
            finally:
                os.close(fd)
            _check(_libc.mount(b"sysfs", scratch.encode(), b"sysfs", 0, None), "mount sysfs")
            try:
                for rel, text in writes.items():
                    path = os.path.join(scratch, rel)
                    if not os.path.exists(path):
                        raise FileNotFoundError(errno.ENOENT, "no such sysfs attribute",
                                                "/sys/" + rel)
                    with open(path, "w") as f:  # safefile: ok - sysfs we mounted
                        f.write(text)
            finally:
                _check(_libc.umount2(scratch.encode(), _MNT_DETACH), "umount sysfs")
    finally:
        os.rmdir(scratch)


def netns_teardown_running() -> bool:
    """A kernel worker is tearing down network namespaces now (its name shows the
    workqueue it runs, with '+' while it works: kworker/u4:1+netns)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                if "+netns" in f.read():
                    return True
        except OSError:  # the process ended meanwhile
            continue
    return False


def wait_for_quiet_kernel(timeout_s: float = 60.0) -> float:
    """Wait (at most ``timeout_s``) until the kernel has finished tearing down the
    namespaces of earlier fabrics: three samples 50 ms apart without it at work; returns
    the seconds waited. The teardown holds the rtnl lock and a CPU for ms at a time,
    which a timing-judged run started meanwhile would measure as its own stalls."""
    start = time.monotonic()
    deadline = start + timeout_s
    quiet = 0
    while quiet < 3 and time.monotonic() < deadline:
        quiet = 0 if netns_teardown_running() else quiet + 1
        time.sleep(0.05)
    return time.monotonic() - start


def list_netns(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []
