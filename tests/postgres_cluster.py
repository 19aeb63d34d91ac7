"""A throwaway PostgreSQL cluster from the machine's own server binaries (tests and perf scripts share it)."""

from __future__ import annotations

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


@contextmanager
def cluster() -> Iterator[str]:
    """A cluster on 127.0.0.1 and a free port in a private folder, as a SQLAlchemy URL without a database name;
    stopped and removed on exit, whatever happened. initdb refuses root, so as root it runs as ``postgres``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or ([shutil.which("initdb")] if shutil.which("initdb") else [])
    if not found:
        raise NoPostgres("no PostgreSQL server binaries (initdb, pg_ctl) on this machine")
    bin_dir = Path(found[-1]).parent
    base = Path(tempfile.mkdtemp(prefix="tuner-postgres-"))        # outside root-only folders: postgres must reach it
    as_user = ["su", "postgres", "-c"] if os.geteuid() == 0 else ["sh", "-c"]
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    data = base / "data"
    try:
        subprocess.run([*as_user, f"{bin_dir}/initdb -D {data} -A trust -U postgres"], check=True, capture_output=True, timeout=120)
        options = f"-c listen_addresses=127.0.0.1 -c port={port} -c max_connections=300 -c unix_socket_directories={base} -c fsync=off"
        subprocess.run([*as_user, f"{bin_dir}/pg_ctl -D {data} -o '{options}' -l {base}/log -w start"], check=True, capture_output=True,
                       timeout=120)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run([*as_user, f"{bin_dir}/pg_ctl -D {data} -m immediate stop"], capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


def create_database(server: str, name: str) -> str:
    """A new database ``name`` on ``server``; its URL."""
    import psycopg

    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/postgres", autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def drop_database(server: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{server.replace('postgresql+psycopg', 'postgresql')}/postgres", autocommit=True) as connection:
        connection.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
