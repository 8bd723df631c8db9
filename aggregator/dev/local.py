"""Install and run AWS's own DynamoDB Local for development and tests.

DynamoDB Local (the Java emulator published by AWS) is taken from the npm package
``amplify-dynamodb-simulator``, which ships the unmodified ``DynamoDBLocal.jar`` and its
``DynamoDBLocal_lib/`` folder (including the sqlite4java native libraries). Only
``npm pack`` is used to download it: nothing is installed into a ``node_modules`` tree and
no package scripts run. The tarball is unpacked with the standard library and deleted.

Typical use::

    from aggregator.dev.local import DynamoDBLocal

    with DynamoDBLocal() as ddb:
        client = ddb.client()
        client.list_tables()

Notes
-----
Version 2.9.30 of the npm package bundles DynamoDB Local 1.25.1. The server is always
started with ``-sharedDb`` unless asked otherwise, so every access key and region sees the
same tables, and with ``-disableTelemetry``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import boto3
from botocore.config import Config

from aggregator.core.exceptions import DynamoDBLocalError

__all__ = [
    "DEFAULT_VERSION",
    "DynamoDBLocal",
    "DynamoDBLocalError",
    "default_install_dir",
    "ensure_installed",
    "find_free_port",
]

DEFAULT_VERSION = "2.9.30"
"""Version of the npm package ``amplify-dynamodb-simulator`` (bundles DynamoDB Local 1.25.1)."""

INSTALL_DIR_ENV = "AGGREGATOR_DYNAMODB_LOCAL_DIR"
"""Environment variable that overrides :func:`default_install_dir`."""

NPM_PACKAGE = "amplify-dynamodb-simulator"
JAR_NAME = "DynamoDBLocal.jar"
LIB_DIR_NAME = "DynamoDBLocal_lib"
HOST = "127.0.0.1"
REGION = "us-east-1"
ACCESS_KEY = "local"
SECRET_KEY = "local"

NPM_TIMEOUT = 600.0
"""Seconds ``npm pack`` may take before the install is abandoned."""
POLL_INTERVAL = 0.05
"""Seconds between two readiness probes while the server starts."""
STOP_TIMEOUT = 10.0
"""Seconds to wait after SIGTERM before the server is killed."""
LOG_MAX_AGE = 86400.0
"""Seconds after which server logs of earlier runs are deleted (at the next start)."""
LOG_TAIL_LINES = 30
"""Number of log lines quoted in error messages."""
SHORT_LIVED_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)
"""JVM options for a server that lives seconds to minutes (the test suite's): the C1 compiler only.
Tiered compilation's C2 compiles cost CPU a short run never earns back; on a two-day flights
replay (about 3,600 writes, 25 s) C1 alone took the server's CPU time from 21.5 to 12.1 s at the
same wall-clock time."""
STALE_STAGING_AGE = 3600.0
"""Seconds after which a leftover staging folder of a crashed install is removed."""

JAVA_MISSING = (
    "DynamoDB Local needs Java 17 or newer on PATH: install it with "
    "`apt-get install openjdk-17-jre-headless` (Debian/Ubuntu) or from https://adoptium.net"
)
NPM_MISSING = (
    "Downloading DynamoDB Local needs Node.js with npm on PATH: install it with "
    "`apt-get install nodejs npm` (Debian/Ubuntu) or from https://nodejs.org"
)

_EMULATOR_PREFIX = "package/emulator/"
_STAGING_PREFIX = ".staging-"
_VERSION_RE = re.compile(r"^[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]+)?$")


def default_install_dir() -> Path:
    """Return the folder DynamoDB Local is installed into by default.

    Returns
    -------
    pathlib.Path
        The value of the environment variable ``AGGREGATOR_DYNAMODB_LOCAL_DIR`` when it is
        set and not empty (``~`` expanded), else ``Path.cwd() / ".cache" / "dynamodb-local"``
        (git-ignored in this repository). The folder need not exist.
    """
    value = os.environ.get(INSTALL_DIR_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return Path.cwd() / ".cache" / "dynamodb-local"


def find_free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    The port is found by binding a socket to ``127.0.0.1:0`` and closing it again, so
    another process may take it before the caller does.

    Returns
    -------
    int
        A port number in 1..65535.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _require_java() -> str:
    java = shutil.which("java")
    if java is None:
        raise DynamoDBLocalError(JAVA_MISSING)
    return java


def _require_npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise DynamoDBLocalError(NPM_MISSING)
    return npm


def _emulator_dir(install_dir: Path, version: str) -> Path:
    return install_dir / f"{NPM_PACKAGE}-{version}"


def _is_complete(emulator_dir: Path) -> bool:
    return (emulator_dir / JAR_NAME).is_file() and (emulator_dir / LIB_DIR_NAME).is_dir()


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _remove_stale_staging(install_dir: Path) -> None:
    now = time.time()
    for entry in install_dir.glob(f"{_STAGING_PREFIX}*"):
        with contextlib.suppress(OSError):
            if entry.is_dir() and now - entry.stat().st_mtime > STALE_STAGING_AGE:
                shutil.rmtree(entry, ignore_errors=True)


def _npm_pack(npm: str, version: str, dest: Path) -> Path:
    """Download the package tarball into ``dest`` and return its path."""
    env = dict(os.environ)
    env.update(
        npm_config_update_notifier="false",
        npm_config_fund="false",
        npm_config_audit="false",
        npm_config_loglevel="error",
    )
    spec = f"{NPM_PACKAGE}@{version}"
    try:
        result = subprocess.run(
            [npm, "pack", spec, "--ignore-scripts"],
            cwd=dest,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=NPM_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DynamoDBLocalError(
            f"`npm pack {spec}` did not finish within {NPM_TIMEOUT:.0f} s"
        ) from exc
    except OSError as exc:
        raise DynamoDBLocalError(f"could not run npm ({npm}): {exc}") from exc
    if result.returncode != 0:
        detail = _tail(result.stderr or result.stdout or "(no output)", 20)
        raise DynamoDBLocalError(
            f"`npm pack {spec}` failed with exit code {result.returncode}:\n{detail}"
        )
    tarballs = sorted(dest.glob("*.tgz"))
    if not tarballs:
        raise DynamoDBLocalError(f"`npm pack {spec}` succeeded but wrote no .tgz file into {dest}")
    return tarballs[0]


def _check_member(member: tarfile.TarInfo) -> None:
    """Reject unsafe members when ``tarfile`` has no extraction filters (Python < 3.11.4)."""
    parts = Path(member.name).parts
    if member.name.startswith(("/", "\\")) or ".." in parts:
        raise DynamoDBLocalError(f"unsafe path in DynamoDB Local tarball: {member.name!r}")
    if not (member.isfile() or member.isdir()):
        raise DynamoDBLocalError(
            f"unexpected member type in DynamoDB Local tarball: {member.name!r}"
        )


def _extract_emulator(tarball: Path, staging: Path) -> Path:
    """Extract the ``package/emulator/`` members of ``tarball`` below ``staging``."""
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            members = [m for m in archive.getmembers() if m.name.startswith(_EMULATOR_PREFIX)]
            if hasattr(tarfile, "data_filter"):
                archive.extractall(staging, members=members, filter="data")
            else:  # pragma: no cover - Python 3.11.0 to 3.11.3
                for member in members:
                    _check_member(member)
                archive.extractall(staging, members=members)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise DynamoDBLocalError(f"could not extract {tarball}: {exc}") from exc
    emulator = staging / "package" / "emulator"
    if not _is_complete(emulator):
        raise DynamoDBLocalError(
            f"{tarball} does not contain {_EMULATOR_PREFIX}{JAR_NAME} and {LIB_DIR_NAME}/"
        )
    return emulator


def ensure_installed(install_dir: Path | None = None, *, version: str = DEFAULT_VERSION) -> Path:
    """Make sure DynamoDB Local is unpacked in ``install_dir`` and return its folder.

    Idempotent and safe to call from several processes at once: when
    ``<install_dir>/amplify-dynamodb-simulator-<version>/DynamoDBLocal.jar`` exists nothing
    is downloaded. Otherwise the npm package is fetched with ``npm pack`` (about 56 MB,
    no dependencies, no scripts), only its ``package/emulator/`` members are extracted
    (with ``tarfile``'s ``"data"`` filter) into a staging folder, which is then renamed
    into place, so a half-finished install is never used. The tarball is deleted
    afterwards. A tarball ``amplify-dynamodb-simulator-<version>.tgz`` already lying in
    ``install_dir`` is used instead of downloading (and deleted once extracted).

    Parameters
    ----------
    install_dir : pathlib.Path, optional
        Folder to install into; created when missing. Defaults to
        :func:`default_install_dir`.
    version : str, optional
        Version of the npm package ``amplify-dynamodb-simulator``, e.g. ``"2.9.30"``.

    Returns
    -------
    pathlib.Path
        The emulator folder (absolute), containing ``DynamoDBLocal.jar`` and
        ``DynamoDBLocal_lib/``.

    Raises
    ------
    DynamoDBLocalError
        If ``java`` is not on PATH; if a download is needed and ``npm`` is not on PATH;
        if ``npm pack`` fails or times out (message carries the tail of npm's stderr);
        if the tarball cannot be extracted or lacks the jar; if ``version`` is malformed.
    """
    if not _VERSION_RE.match(version):
        raise DynamoDBLocalError(f"invalid {NPM_PACKAGE} version: {version!r}")
    _require_java()
    install_dir = (
        Path(install_dir) if install_dir is not None else default_install_dir()
    ).absolute()
    final = _emulator_dir(install_dir, version)
    if _is_complete(final):
        return final

    try:
        install_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DynamoDBLocalError(f"cannot create install folder {install_dir}: {exc}") from exc
    _remove_stale_staging(install_dir)
    staging = Path(tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=install_dir))
    try:
        emulator: Path | None = None
        seeded = install_dir / f"{NPM_PACKAGE}-{version}.tgz"
        if seeded.is_file():
            try:
                emulator = _extract_emulator(seeded, staging)
            except DynamoDBLocalError:
                emulator = None  # truncated or foreign file: download a fresh copy
            with contextlib.suppress(OSError):
                seeded.unlink()  # extracted, or unusable: either way no longer needed
        if emulator is None:
            npm = _require_npm()
            download = staging / "download"
            download.mkdir()
            tarball = _npm_pack(npm, version, download)
            emulator = _extract_emulator(tarball, staging)
            tarball.unlink()

        if _is_complete(final):  # another process finished first
            return final
        if final.exists():  # leftover without the jar: not from this code, but replace it
            shutil.rmtree(final, ignore_errors=True)
        try:
            os.rename(emulator, final)
        except OSError as exc:
            if _is_complete(final):  # lost a race against another process
                return final
            raise DynamoDBLocalError(f"could not move DynamoDB Local into {final}: {exc}") from exc
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _remove_old_logs(log_dir: Path) -> None:
    now = time.time()
    for entry in log_dir.glob("dynamodb-local-*.log"):
        with contextlib.suppress(OSError):
            if now - entry.stat().st_mtime > LOG_MAX_AGE:
                entry.unlink()


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _port_answers(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Ask Linux to send SIGTERM to the server when the Python process that started it dies
    (``prctl(PR_SET_PDEATHSIG)``), so a killed test run or ``aggregator local`` leaves no Java
    process behind; ``atexit`` alone does not run on SIGTERM or SIGKILL."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except OSError:
        pass


class DynamoDBLocal:
    """A DynamoDB Local server in a child ``java`` process, listening on 127.0.0.1.

    Use it as a context manager, or call :meth:`start` and :meth:`stop`. The process is
    also stopped at interpreter exit if :meth:`stop` was never called.

    Parameters
    ----------
    port : int, optional
        TCP port to listen on. When omitted a free port is picked at :meth:`start`.
    install_dir : pathlib.Path, optional
        Where DynamoDB Local is (or gets) installed; defaults to
        :func:`default_install_dir`. The server log is written to
        ``<install_dir>/logs/dynamodb-local-<port>.log`` (logs older than a day are
        pruned at each start; a temporary file is used if that folder is not writable).
    in_memory : bool, optional
        ``True`` (default) runs with ``-inMemory``: all data is lost on :meth:`stop`.
        ``False`` stores tables in ``<install_dir>/data/``.
    startup_timeout : float, optional
        Seconds to wait for the server to answer a ``ListTables`` call. Default 60.
    shared_db : bool, optional
        ``True`` (default) passes ``-sharedDb`` so all credentials and regions share one
        database; ``False`` gives every access key / region pair its own tables.
    jvm_options : sequence of str, optional
        Options for the ``java`` command, placed before ``-jar`` (for example
        :data:`SHORT_LIVED_JVM_OPTIONS`). Default: none, the JVM's own defaults.

    Examples
    --------
    >>> with DynamoDBLocal() as ddb:  # doctest: +SKIP
    ...     ddb.client().list_tables()["TableNames"]
    []
    """

    def __init__(
        self,
        *,
        port: int | None = None,
        install_dir: Path | None = None,
        in_memory: bool = True,
        startup_timeout: float = 60.0,
        shared_db: bool = True,
        jvm_options: Sequence[str] = (),
    ) -> None:
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"port must be in 1..65535, got {port}")
        if startup_timeout <= 0:
            raise ValueError(f"startup_timeout must be positive seconds, got {startup_timeout}")
        self._requested_port = port
        self._install_dir = Path(install_dir) if install_dir is not None else None
        self.in_memory = in_memory
        self.startup_timeout = float(startup_timeout)
        self.shared_db = shared_db
        self.jvm_options = tuple(jvm_options)
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        self._log_path: Path | None = None
        self._lock = threading.RLock()
        self._session: boto3.session.Session | None = None

    # ------------------------------------------------------------------ properties

    @property
    def install_dir(self) -> Path:
        """pathlib.Path: The install folder (explicit, or :func:`default_install_dir`)."""
        return self._install_dir if self._install_dir is not None else default_install_dir()

    @property
    def port(self) -> int | None:
        """int or None: The port the server listens on; ``None`` before :meth:`start`."""
        return self._port

    @property
    def is_running(self) -> bool:
        """bool: Whether the ``java`` child process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path | None:
        """pathlib.Path or None: The server log file of the last start, if any."""
        return self._log_path

    @property
    def endpoint_url(self) -> str:
        """str: ``"http://127.0.0.1:<port>"``.

        Raises
        ------
        DynamoDBLocalError
            If the server has not been started (or was stopped).
        """
        if self._process is None or self._port is None:
            raise DynamoDBLocalError("DynamoDB Local is not running: call start() first")
        return f"http://{HOST}:{self._port}"

    # ------------------------------------------------------------------ clients

    def client(self, service: str = "dynamodb") -> Any:
        """Return a boto3 client bound to this server.

        Parameters
        ----------
        service : str, optional
            boto3 service name: ``"dynamodb"`` (default) or ``"dynamodbstreams"``.

        Returns
        -------
        botocore.client.BaseClient
            A client with region ``us-east-1``, dummy credentials ``local``/``local``,
            5 s connect timeout, 30 s read timeout and up to 5 attempts ("standard" retries).

        Raises
        ------
        DynamoDBLocalError
            If the server is not running.
        """
        return self._make_client(
            service,
            Config(
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
            ),
        )

    def _make_client(self, service: str, config: Config) -> Any:
        # One session for the server's clients: a session loads the service models (about 90 ms
        # of CPU per client otherwise) once. A session is not thread-safe, so clients are
        # made under the lock; the clients themselves are.
        with self._lock:
            if self._session is None:
                self._session = boto3.session.Session(
                    aws_access_key_id=ACCESS_KEY,
                    aws_secret_access_key=SECRET_KEY,
                    region_name=REGION,
                )
            # boto3-stubs' overloads take only literal service names; the client is Any here
            return self._session.client(  # type: ignore[call-overload]
                service, endpoint_url=self.endpoint_url, config=config
            )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        """Install DynamoDB Local if needed, start it, and wait until it answers.

        Ready means the port accepts connections and a ``ListTables`` call succeeds;
        this is probed every 0.2 s for at most ``startup_timeout`` seconds. Calling
        ``start`` on a running instance does nothing.

        Returns
        -------
        DynamoDBLocal
            ``self``, for chaining.

        Raises
        ------
        DynamoDBLocalError
            If ``java`` or (for a first install) ``npm`` is missing or the install fails
            (see :func:`ensure_installed`); if the requested port is already in use; if
            the process exits early or is not ready within ``startup_timeout`` seconds
            (message quotes the last lines of the server log).
        """
        with self._lock:
            if self.is_running:
                return self
            if self._process is not None:  # died on its own since the last start
                self.stop()
            install_dir = self.install_dir.absolute()  # java runs with cwd=install_dir
            emulator = ensure_installed(install_dir)
            java = _require_java()
            if self._requested_port is not None:
                if not _port_is_free(self._requested_port):
                    raise DynamoDBLocalError(
                        f"port {self._requested_port} on {HOST} is already in use"
                    )
                self._launch(java, emulator, install_dir, self._requested_port)
                return self
            # A free port picked here can be taken before java binds it: retry a few times.
            for attempt in range(3):
                try:
                    self._launch(java, emulator, install_dir, find_free_port())
                except DynamoDBLocalError as exc:
                    if attempt < 2 and "Address already in use" in str(exc):
                        continue
                    raise
                return self
            raise AssertionError("unreachable")  # pragma: no cover

    def _command(self, java: str, emulator: Path, install_dir: Path, port: int) -> list[str]:
        command = [
            java,
            *self.jvm_options,
            f"-Djava.library.path={emulator / LIB_DIR_NAME}",
            "-jar",
            str(emulator / JAR_NAME),
            "-port",
            str(port),
            # Accepted by the bundled 1.25.1 jar (it rejects unknown options and exits).
            "-disableTelemetry",
        ]
        if self.in_memory:
            command.append("-inMemory")
        else:
            data_dir = install_dir / "data"
            data_dir.mkdir(parents=True, exist_ok=True)
            command += ["-dbPath", str(data_dir)]
        if self.shared_db:
            command.append("-sharedDb")
        return command

    def _launch(self, java: str, emulator: Path, install_dir: Path, port: int) -> None:
        command = self._command(java, emulator, install_dir, port)
        try:
            log_dir = install_dir / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            _remove_old_logs(log_dir)
            log_path = log_dir / f"dynamodb-local-{port}.log"
            log_file: IO[bytes] = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        except OSError:
            log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
                prefix=f"dynamodb-local-{port}-", suffix=".log", delete=False
            )
            log_path = Path(log_file.name)
        env = dict(os.environ)
        env["DDB_LOCAL_TELEMETRY"] = "0"
        try:
            # cwd: DynamoDB Local writes dynamodb-local-metadata.json into its working dir.
            process = subprocess.Popen(
                command,
                cwd=install_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        except OSError as exc:
            log_file.close()
            raise DynamoDBLocalError(f"could not run {command[0]}: {exc}") from exc
        self._process = process
        self._log_file = log_file
        self._log_path = log_path
        self._port = port
        atexit.register(self.stop)
        try:
            self._wait_until_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_until_ready(self) -> None:
        assert self._process is not None and self._port is not None
        probe = self._make_client(
            "dynamodb",
            Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=2),
        )
        started = time.monotonic()
        deadline = started + self.startup_timeout
        last_error = "no answer on the port yet"
        while True:
            code = self._process.poll()
            if code is not None:
                raise DynamoDBLocalError(
                    f"DynamoDB Local exited with code {code} while starting on port "
                    f"{self._port}; last lines of {self._log_path}:\n{self._read_log_tail()}"
                )
            if _port_answers(self._port):
                try:
                    probe.list_tables(Limit=1)
                except Exception as exc:  # any failure means "not ready yet"
                    last_error = f"ListTables failed: {exc}"
                else:
                    return
            if time.monotonic() >= deadline:
                raise DynamoDBLocalError(
                    f"DynamoDB Local was not ready on port {self._port} within "
                    f"{self.startup_timeout:g} s ({last_error}); last lines of "
                    f"{self._log_path}:\n{self._read_log_tail()}"
                )
            time.sleep(POLL_INTERVAL)

    def _read_log_tail(self) -> str:
        if self._log_file is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log_file.flush()
        if self._log_path is None:
            return "(no log)"
        try:
            text = self._log_path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return _tail(text) or "(log is empty)"

    def stop(self) -> None:
        """Stop the server: SIGTERM, wait up to 10 s, then SIGKILL.

        Idempotent; safe to call before :meth:`start`, twice, or at interpreter exit.
        In-memory data is lost. The log file is kept.
        """
        with self._lock:
            atexit.unregister(self.stop)
            process, self._process = self._process, None
            log_file, self._log_file = self._log_file, None
            try:
                if process is not None and process.poll() is None:
                    process.terminate()
                    try:
                        process.wait(timeout=STOP_TIMEOUT)
                    except subprocess.TimeoutExpired:
                        process.kill()
                        process.wait()
            finally:
                if log_file is not None:
                    log_file.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"DynamoDBLocal(port={self._port}, {state}, install_dir={str(self.install_dir)!r})"
