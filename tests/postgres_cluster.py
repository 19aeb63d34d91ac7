"""A throwaway PostgreSQL cluster from the machine's own server binaries (tests and perf scripts share it)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NoPostgres(RuntimeError):
    """This machine has no PostgreSQL server binaries."""


class Cluster:
    """A cluster in ``base`` from the server binaries in ``bin_dir``, on 127.0.0.1:``port``; ``url``: a SQLAlchemy URL
    without a database name. It can be stopped and started again (a server that restarts under its clients)."""

    def __init__(self, bin_dir: Path, base: Path, port: int) -> None:
        self.bin_dir, self.base, self.port = bin_dir, base, port
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{port}"
        self.data = base / "data"
        self._as_user = ["su", "postgres", "-c"] if os.geteuid() == 0 else ["sh", "-c"]   # initdb refuses root

    def _run(self, command: str) -> None:
        subprocess.run([*self._as_user, f"{self.bin_dir}/{command}"], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (f"-c listen_addresses=127.0.0.1 -c port={self.port} -c max_connections=300 "
                   f"-c unix_socket_directories={self.base} -c fsync=off")
        self._run(f"pg_ctl -D {self.data} -o '{options}' -l {self.base}/log -w start")

    def stop(self, how: str = "fast") -> None:
        """Stop the server: ``fast`` ends every session (a restart), ``immediate`` as a crash does."""
        self._run(f"pg_ctl -D {self.data} -m {how} stop")


@contextmanager
def cluster() -> Iterator[Cluster]:
    """A running cluster on 127.0.0.1 and a free port in a private folder; stopped and removed on exit, whatever
    happened. As root, the server runs as ``postgres``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or ([shutil.which("initdb")] if shutil.which("initdb") else [])
    if not found:
        raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    base = Path(tempfile.mkdtemp(prefix="tuner-postgres-"))        # outside root-only folders: postgres must reach it
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = Cluster(Path(found[-1]).parent, base, port)
    try:
        server._run(f"initdb -D {server.data} -A trust -U postgres")
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.SubprocessError):
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)


def create_database(server: str, name: str) -> str:
    """A new database ``name`` on ``server`` (a cluster's URL); its URL."""
    import psycopg

    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
