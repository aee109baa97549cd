"""A TCP relay that counts the bytes it delivers to one process: what `/proc/<pid>/io` cannot show for
sockets (rchar counts read() and pread(), not recv(), which is how HTTP clients read).

    python -m tests.integration.socket_meter LISTEN_PORT UPSTREAM_PORT WATCHED_PID COUNTS_FILE

Every connection accepted on 127.0.0.1:LISTEN_PORT is relayed to 127.0.0.1:UPSTREAM_PORT. When a
connection opens, the relay finds the process that owns its client end (the socket's inode in
``/proc/net/tcp``, then that inode among WATCHED_PID's file descriptors); bytes sent to, and received
from, a client owned by WATCHED_PID are added up. COUNTS_FILE is rewritten with
``{"to_watched": n, "from_watched": n, "to_others": n, "connections": n}`` after every change, so a test
reads the figures while the relay runs. Used by the cluster tests: the S3 server's clients are the
worker (watched) and the Spark executors (others).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading


def _inode_of(local_port: int, remote_port: int) -> str | None:
    """The inode of the socket on 127.0.0.1:local_port connected to 127.0.0.1:remote_port."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == local_port and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                return inode
    return None


def _owned_by(pid: int, inode: str) -> bool:
    target = f"socket:[{inode}]"
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return True
            except OSError:
                continue
    except OSError:
        return False
    return False


class Meter:
    def __init__(self, listen: int, upstream: int, pid: int, counts: str) -> None:
        self.listen, self.upstream, self.pid, self.path = listen, upstream, pid, counts
        self.lock = threading.Lock()
        self.counts = {"to_watched": 0, "from_watched": 0, "to_others": 0, "connections": 0}
        self._save()

    def _save(self) -> None:
        partial = f"{self.path}.tmp"
        with open(partial, "w") as f:
            json.dump(self.counts, f)
        os.replace(partial, self.path)

    def _add(self, key: str, n: int) -> None:
        with self.lock:
            self.counts[key] += n
            self._save()

    def _pump(self, source: socket.socket, sink: socket.socket, key: str | None) -> None:
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if key is not None:  # counted before it is delivered: a reader who got it sees it counted
                    self._add(key, len(data))
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _serve(self, client: socket.socket, address: tuple[str, int]) -> None:
        inode = _inode_of(address[1], self.listen)
        watched = inode is not None and _owned_by(self.pid, inode)
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:  # the S3 server is not up yet: the client sees the connection close and retries
            client.close()
            return
        self._add("connections", 1)
        down = threading.Thread(target=self._pump, args=(upstream, client, "to_watched" if watched else "to_others"),
                                daemon=True)
        down.start()
        self._pump(client, upstream, "from_watched" if watched else None)
        down.join()
        client.close()
        upstream.close()

    def run(self) -> None:
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", self.listen))
        server.listen(128)
        while True:
            client, address = server.accept()
            threading.Thread(target=self._serve, args=(client, address), daemon=True).start()


if __name__ == "__main__":
    listen_port, upstream_port, watched_pid, counts_file = sys.argv[1:5]
    Meter(int(listen_port), int(upstream_port), int(watched_pid), counts_file).run()
