"""Whether a rendezvous endpoint's host is this machine, as the machine that must host the
run's store there has to know.

torch decides it from the host name alone (`_matches_machine_hostname`: the name, its
resolved addresses, loopback), and misses an address of a network card the host name does not
resolve to (`hostname -I`'s first one, the usual way a launch script spells node 0): such a
node 0 hosted no store, so the other machines never met it, and a program already holding
the port there was joined as if it were the store. An address this machine can bind to is
its own, whatever the host name resolves to.
"""

from __future__ import annotations

import socket


def torch_sees_as_this_machine(host: str) -> bool:
    """Whether torch's own rendezvous takes `host` for this machine (and so hosts there)."""
    from torch.distributed.elastic.rendezvous.utils import _matches_machine_hostname

    return bool(_matches_machine_hostname(host))


def names_this_machine(host: str) -> bool:
    """Whether `host` names this machine: torch's check, or an address it resolves to that a
    socket here can bind."""
    return torch_sees_as_this_machine(host) or _bindable(host)


def _bindable(host: str) -> bool:
    try:
        found = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        addresses = {str(info[4][0]) for info in found}
    except (OSError, UnicodeError):
        return False
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return True
    return False
