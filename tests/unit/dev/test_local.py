"""Fast tests of aggregator.dev.local: no Java process is started and nothing is downloaded."""

from __future__ import annotations

import io
import shutil
import socket
import stat
import tarfile
from pathlib import Path

import pytest

from aggregator.core.exceptions import AggregatorError, DynamoDBLocalError
from aggregator.dev import local
from aggregator.dev.local import (
    DynamoDBLocal,
    default_install_dir,
    ensure_installed,
    find_free_port,
)

REAL_WHICH = shutil.which


def fake_which(monkeypatch: pytest.MonkeyPatch, **tools: str | None) -> None:
    """Make shutil.which (as seen by aggregator.dev.local) answer ``tools[name]``."""

    def which(name: str, *args: object, **kwargs: object) -> str | None:
        if name in tools:
            return tools[name]
        return REAL_WHICH(name)

    monkeypatch.setattr(local.shutil, "which", which)


def fake_installed(install_dir: Path, version: str = local.DEFAULT_VERSION) -> Path:
    emulator = install_dir / f"amplify-dynamodb-simulator-{version}"
    (emulator / "DynamoDBLocal_lib").mkdir(parents=True)
    (emulator / "DynamoDBLocal.jar").write_bytes(b"PK")
    return emulator


def make_tarball(path: Path, extra: dict[str, bytes] | None = None) -> Path:
    members = {
        "package/package.json": b"{}",
        "package/index.js": b"",
        "package/emulator/DynamoDBLocal.jar": b"PK-jar",
        "package/emulator/DynamoDBLocal_lib/libsqlite4java-linux-amd64.so": b"\x7fELF",
        **(extra or {}),
    }
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))
    return path


def write_fake_npm(directory: Path, body: str) -> str:
    script = directory / "npm"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_error_is_an_aggregator_error() -> None:
    assert issubclass(DynamoDBLocalError, AggregatorError)


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_which(monkeypatch, java=None)
    with pytest.raises(DynamoDBLocalError) as info:
        ensure_installed(tmp_path)
    message = str(info.value)
    assert "Java 17 or newer" in message
    assert "apt-get install openjdk-17-jre-headless" in message
    assert "https://adoptium.net" in message
    assert list(tmp_path.iterdir()) == []  # nothing downloaded without java


def test_missing_java_also_stops_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_installed(tmp_path)
    fake_which(monkeypatch, java=None)
    ddb = DynamoDBLocal(install_dir=tmp_path)
    with pytest.raises(DynamoDBLocalError, match="openjdk-17-jre-headless"):
        ddb.start()
    assert not ddb.is_running


def test_missing_npm_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_which(monkeypatch, java="/usr/bin/java", npm=None)
    with pytest.raises(DynamoDBLocalError) as info:
        ensure_installed(tmp_path / "empty")
    message = str(info.value)
    assert "Node.js with npm" in message
    assert "apt-get install nodejs npm" in message
    # the staging folder of the failed attempt is gone
    assert [p.name for p in (tmp_path / "empty").iterdir()] == []


def test_npm_not_needed_when_already_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    emulator = fake_installed(tmp_path)
    fake_which(monkeypatch, java="/usr/bin/java", npm=None)
    assert ensure_installed(tmp_path) == emulator
    assert ensure_installed(tmp_path) == emulator


def test_npm_failure_carries_stderr_tail(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = write_fake_npm(
        bin_dir, "echo 'npm error code E404' >&2\necho 'npm error 404 nope' >&2\nexit 1\n"
    )
    fake_which(monkeypatch, java="/usr/bin/java", npm=npm)
    with pytest.raises(DynamoDBLocalError) as info:
        ensure_installed(tmp_path / "install")
    assert "exit code 1" in str(info.value)
    assert "npm error 404 nope" in str(info.value)
    assert not (tmp_path / "install" / "amplify-dynamodb-simulator-2.9.30").exists()


def test_install_via_npm_pack_extracts_only_the_emulator(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tarball = make_tarball(tmp_path / "source.tgz")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # npm pack writes <name>-<version>.tgz into its cwd; record the arguments it got.
    npm = write_fake_npm(
        bin_dir,
        f'echo "$@" > "{tmp_path}/args"\n'
        f'cp "{tarball}" amplify-dynamodb-simulator-2.9.30.tgz\n'
        "echo amplify-dynamodb-simulator-2.9.30.tgz\n",
    )
    fake_which(monkeypatch, java="/usr/bin/java", npm=npm)
    install_dir = tmp_path / "install"

    emulator = ensure_installed(install_dir)

    assert emulator == install_dir / "amplify-dynamodb-simulator-2.9.30"
    assert (emulator / "DynamoDBLocal.jar").read_bytes() == b"PK-jar"
    assert (emulator / "DynamoDBLocal_lib" / "libsqlite4java-linux-amd64.so").is_file()
    assert not (emulator / "index.js").exists()
    assert [p.name for p in install_dir.iterdir()] == [emulator.name]  # tarball, staging gone
    assert (tmp_path / "args").read_text().split()[:2] == [
        "pack",
        "amplify-dynamodb-simulator@2.9.30",
    ]
    # idempotent: a second call does not run npm again
    (tmp_path / "args").unlink()
    assert ensure_installed(install_dir) == emulator
    assert not (tmp_path / "args").exists()


def test_seeded_tarball_is_used_without_npm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    make_tarball(tmp_path / "amplify-dynamodb-simulator-2.9.30.tgz")
    fake_which(monkeypatch, java="/usr/bin/java", npm=None)
    emulator = ensure_installed(tmp_path)
    assert (emulator / "DynamoDBLocal.jar").is_file()
    assert not (tmp_path / "amplify-dynamodb-simulator-2.9.30.tgz").exists()


def test_truncated_seeded_tarball_falls_back_to_npm(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    good = make_tarball(tmp_path / "good.tgz")
    install_dir = tmp_path / "install"
    install_dir.mkdir()
    (install_dir / "amplify-dynamodb-simulator-2.9.30.tgz").write_bytes(good.read_bytes()[:40])
    fake_which(monkeypatch, java="/usr/bin/java", npm=None)
    with pytest.raises(DynamoDBLocalError, match=r"Node\.js with npm"):
        ensure_installed(install_dir)
    assert not (install_dir / "amplify-dynamodb-simulator-2.9.30.tgz").exists()


def test_unsafe_member_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    make_tarball(
        tmp_path / "amplify-dynamodb-simulator-2.9.30.tgz",
        extra={"package/emulator/../../../evil.txt": b"boom"},
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    npm = write_fake_npm(bin_dir, "echo 'npm error offline' >&2\nexit 1\n")
    fake_which(monkeypatch, java="/usr/bin/java", npm=npm)
    with pytest.raises(DynamoDBLocalError):
        ensure_installed(tmp_path)
    assert not (tmp_path.parent / "evil.txt").exists()
    assert not (tmp_path / "evil.txt").exists()


def test_tarball_without_jar_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with tarfile.open(tmp_path / "empty.tgz", "w:gz") as archive:
        info = tarfile.TarInfo("package/package.json")
        archive.addfile(info, io.BytesIO(b""))
    assert (tmp_path / "empty.tgz").is_file()
    with pytest.raises(DynamoDBLocalError, match=r"DynamoDBLocal\.jar"):
        local._extract_emulator(tmp_path / "empty.tgz", tmp_path / "staging")


def test_invalid_version_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_which(monkeypatch, java="/usr/bin/java")
    with pytest.raises(DynamoDBLocalError, match="invalid"):
        ensure_installed(tmp_path, version="../../etc")


def test_default_install_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGGREGATOR_DYNAMODB_LOCAL_DIR", str(tmp_path / "ddb"))
    assert default_install_dir() == tmp_path / "ddb"


def test_default_install_dir_falls_back_to_cwd_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AGGREGATOR_DYNAMODB_LOCAL_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_install_dir() == tmp_path / ".cache" / "dynamodb-local"
    monkeypatch.setenv("AGGREGATOR_DYNAMODB_LOCAL_DIR", "")
    assert default_install_dir() == tmp_path / ".cache" / "dynamodb-local"


def test_instance_uses_default_install_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGGREGATOR_DYNAMODB_LOCAL_DIR", str(tmp_path))
    assert DynamoDBLocal().install_dir == tmp_path
    assert DynamoDBLocal(install_dir=tmp_path / "x").install_dir == tmp_path / "x"


def test_find_free_port_is_bindable() -> None:
    port = find_free_port()
    assert 0 < port < 65536
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))


def test_requested_port_in_use_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_installed(tmp_path)
    fake_which(monkeypatch, java="/usr/bin/java")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        ddb = DynamoDBLocal(port=port, install_dir=tmp_path)
        with pytest.raises(DynamoDBLocalError, match="already in use"):
            ddb.start()
    assert not ddb.is_running


def test_not_started_instance(tmp_path: Path) -> None:
    ddb = DynamoDBLocal(install_dir=tmp_path)
    assert ddb.port is None
    assert not ddb.is_running
    with pytest.raises(DynamoDBLocalError, match="not running"):
        _ = ddb.endpoint_url
    with pytest.raises(DynamoDBLocalError, match="not running"):
        ddb.client()
    ddb.stop()
    ddb.stop()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"port": 0}, "port"), ({"port": 70000}, "port"), ({"startup_timeout": 0}, "startup")],
)
def test_invalid_arguments(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DynamoDBLocal(**kwargs)  # type: ignore[arg-type]


def test_command_line(tmp_path: Path) -> None:
    emulator = tmp_path / "emu"
    cmd = DynamoDBLocal()._command("java", emulator, tmp_path, 8123)
    assert cmd[:4] == [
        "java",
        f"-Djava.library.path={emulator / 'DynamoDBLocal_lib'}",
        "-jar",
        str(emulator / "DynamoDBLocal.jar"),
    ]
    assert cmd[cmd.index("-port") + 1] == "8123"
    assert {"-inMemory", "-sharedDb", "-disableTelemetry"} <= set(cmd)
    on_disk = DynamoDBLocal(in_memory=False, shared_db=False)._command(
        "java", emulator, tmp_path, 8123
    )
    assert "-inMemory" not in on_disk and "-sharedDb" not in on_disk
    assert on_disk[on_disk.index("-dbPath") + 1] == str(tmp_path / "data")
    # JVM options go to java, before -jar (after it they would be the server's own arguments)
    tuned = DynamoDBLocal(jvm_options=["-XX:TieredStopAtLevel=1", "-Xmx1g"])._command(
        "java", emulator, tmp_path, 8123
    )
    assert tuned[:3] == ["java", "-XX:TieredStopAtLevel=1", "-Xmx1g"]
    assert tuned.index("-Xmx1g") < tuned.index("-jar")
