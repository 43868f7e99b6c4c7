"""Which processes of this machine listen on a TCP port, read from /proc (Linux).

A machine of a run across several that hosts the rendezvous store (`--node-rank 0`, its
`--rdzv-endpoint` one of its own addresses) and found the port held joined whatever held it
as a client: another program there left it waiting past its join timeout, with no word, and
a SIGTERM took a minute to act. The port may be held by the run itself, though: its other
"nodes" started on the same machine (how a run across machines is tried out on one), the
first of which hosts the store. What holds it tells the two apart.
"""

from __future__ import annotations

import os

_LISTEN = "0A"  # the state column of /proc/net/tcp for a listening socket


def listeners(port: int) -> list[bytes] | None:
    """The command lines (NUL-separated, as /proc gives them) of this user's processes that
    listen on TCP `port`; None when /proc cannot say (not Linux), and a socket of a process
    that is another user's is not listed."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    found = []
    for pid in (entry for entry in _entries("/proc") if entry.isdigit()):
        fds = f"/proc/{pid}/fd"
        if not any(_link(f"{fds}/{fd}") in inodes for fd in _entries(fds)):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                found.append(handle.read())
        except OSError:  # gone meanwhile
            continue
    return found


def _listening_inodes(port: int) -> set[str] | None:
    inodes: set[str] = set()
    read = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        read = True
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == _LISTEN and int(local.rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    return inodes if read else None


def _entries(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _link(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""
