"""Where the database is, and how each driver wants its URL spelled.

helix_dbos talks to one PostgreSQL through three clients: psycopg (migrations, LISTEN),
SQLAlchemy with the psycopg dialect (the store), and DBOS (its system database). This
module turns "whatever the user gave us" into the form each one accepts, and, when the
user gave nothing, starts an embedded PostgreSQL (pgserver) so a laptop needs no setup.
"""

from __future__ import annotations

import os
import re
import threading
import warnings
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

DATABASE_URL_ENV = "HELIX_DATABASE_URL"
DATA_DIR_ENV = "HELIX_DATA_DIR"
DEFAULT_DATA_DIR = Path(".helix") / "pgdata"
DEFAULT_CONNECT_TIMEOUT = 10

# Schemes we accept, mapped to nothing: the rest of the URL is kept byte for byte, so
# unix-socket `?host=/path` parameters and percent-encoded passwords survive untouched.
_POSTGRES_SCHEMES = frozenset(
    {"postgresql", "postgres", "postgresql+psycopg", "postgresql+psycopg2"}
)

# One pgserver handle per resolved data dir, so repeated calls in a process share it.
_EMBEDDED_SERVERS: dict[Path, Any] = {}
_EMBEDDED_LOCK = threading.Lock()


class DatabaseConfigError(RuntimeError):
    """The database URL is unusable, or no database can be found or started."""


def resolve_database_url(
    database_url: str | None = None, *, data_dir: str | os.PathLike[str] | None = None
) -> str:
    """Explicit URL, else $HELIX_DATABASE_URL, else an embedded server (started if needed)."""
    if database_url:
        return database_url
    from_env = os.environ.get(DATABASE_URL_ENV)
    if from_env:
        return from_env
    return embedded_database_url(data_dir)


def embedded_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The pgdata folder: argument, else $HELIX_DATA_DIR, else ./.helix/pgdata (absolute)."""
    chosen = data_dir or os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR
    return Path(chosen).expanduser().resolve()


def embedded_database_url(data_dir: str | os.PathLike[str] | None = None) -> str:
    """Start or reuse the embedded PostgreSQL in `data_dir` and return its libpq URL.

    The server is started with cleanup_mode=None so it outlives this process: a relaunched
    process (e.g. after a crash) finds the same server and the same data. pgserver reuses a
    server already running on the folder, whichever process started it.
    """
    path = embedded_data_dir(data_dir)
    try:
        with warnings.catch_warnings():
            # platformdirs warns on import when XDG_RUNTIME_DIR is unset (containers, CI).
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
            import pgserver  # noqa: PLC0415 - lazy: optional extra `embedded`, only without a URL
    except ImportError as exc:
        raise DatabaseConfigError(
            "No database configured and the embedded PostgreSQL is not installed: "
            "run `pip install 'helix-dbos[embedded]'` or set "
            f"{DATABASE_URL_ENV}=postgresql://user:pass@host:5432/dbname"
        ) from exc

    with _EMBEDDED_LOCK:
        server = _EMBEDDED_SERVERS.get(path)
        if server is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            server = pgserver.get_server(path, cleanup_mode=None)  # type: ignore[attr-defined]  # pgserver does not list it in __all__
            _EMBEDDED_SERVERS[path] = server
        elif not server.get_postmaster_info().is_running():
            # Someone stopped it under us (pg_ctl stop, reboot of a long-lived process):
            # start it again under pgserver's cross-process lock, as its constructor does.
            with server._lock:
                server.ensure_postgres_running()
        return str(server.get_uri())


def _split_scheme(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in _POSTGRES_SCHEMES:
        raise DatabaseConfigError(
            f"Not a PostgreSQL URL (expected postgresql://...): {redact_url(url)}"
        )
    return scheme.lower(), rest


def sqlalchemy_url(url: str) -> str:
    """The URL for SQLAlchemy's psycopg 3 dialect (sync and async engines alike)."""
    _, rest = _split_scheme(url)
    return f"postgresql+psycopg://{rest}"


def libpq_url(url: str) -> str:
    """The plain postgresql:// URL libpq understands: psycopg.connect, DBOS, psql."""
    _, rest = _split_scheme(url)
    return f"postgresql://{rest}"


def database_name(url: str) -> str | None:
    """The dbname a URL points at (None if it leaves libpq to default it to the user)."""
    dbname = conninfo_to_dict(libpq_url(url)).get("dbname")
    return str(dbname) if dbname else None


def with_database(url: str, dbname: str) -> str:
    """The same server URL pointing at another database (keeps scheme, auth and query)."""
    scheme, rest = _split_scheme(url)
    head, qmark, query = rest.partition("?")
    netloc = head.split("/", 1)[0]
    return f"{scheme}://{netloc}/{dbname}{qmark}{query}"


# `password=...` and `sslpassword=...` in a query string or a key=value conninfo; a
# quoted conninfo value may hold spaces and escaped quotes.
_PASSWORD_PARAM = re.compile(r"(\b\w*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&#]+)", re.IGNORECASE)
_NETLOC = re.compile(r"[^/?#]*")


def redact_url(url: str) -> str:
    """The URL (or key=value conninfo) with every password replaced by ***: the URL's
    userinfo, `?password=` / `sslpassword=` parameters, `password=` pairs. An empty
    password stays empty, so `***` always means one was set."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _PASSWORD_PARAM.sub(r"\1***", url)
    netloc = _NETLOC.match(rest)
    head = netloc.group() if netloc else ""
    tail = rest[len(head) :]
    userinfo, at, hostport = head.rpartition("@")
    if at and ":" in userinfo:
        user, _, password = userinfo.partition(":")
        if password:
            head = f"{user}:***@{hostport}"
    tail = _PASSWORD_PARAM.sub(r"\1***", tail)
    return f"{scheme}://{head}{tail}"


def redact_secrets(text: str, url: str) -> str:
    """`text` (an error message, say) with the URL's password masked wherever it shows."""
    try:
        password = conninfo_to_dict(libpq_url(url) if "://" in url else url).get("password")
    except Exception:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return _PASSWORD_PARAM.sub(r"\1***", text)


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    """psycopg.connect on any accepted URL form, with a connect timeout unless the URL sets one."""
    conninfo = libpq_url(url)
    if "connect_timeout" not in conninfo_to_dict(conninfo):
        kwargs.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT)
    # No server-side prepared statements: these connections run a few statements each
    # (the heartbeat one a small UPDATE a second), and through a transaction pooler a
    # statement prepared on one server connection is missing on the next.
    kwargs.setdefault("prepare_threshold", None)
    return psycopg.connect(conninfo, **kwargs)


def ensure_database_exists(url: str, *, maintenance_db: str = "postgres") -> bool:
    """Create the URL's database if missing; True if this call created it.

    Lets `HELIX_DATABASE_URL=postgresql://.../helix_dev` work against a bare server.
    Safe under concurrency: losing the CREATE DATABASE race counts as "exists".
    """
    dbname = database_name(url)
    if not dbname:
        return False
    try:
        admin = connect(url, dbname=maintenance_db, autocommit=True)
    except psycopg.OperationalError:
        # No maintenance db (or no right to it): fine if the target is reachable already.
        try:
            connect(url).close()
        except psycopg.OperationalError:
            pass
        else:
            return False
        raise
    with admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if exists:
            return False
        try:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
            return False
        return True
