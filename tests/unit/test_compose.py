"""docker-compose.yml and the Dockerfile, checked without Docker.

The compose file is validated against the Compose specification's JSON schema (the copy that
check-jsonschema ships, so no network), then against the rules the schema cannot state: every
dependency waits for health or for a one-shot step to finish, no secret is written in the file or put
on a command line, ports are published on 127.0.0.1 only, third-party images are pinned. Where Docker
Compose is installed, ``docker compose config`` must accept the file too.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SECRETS = ("AO_DB_PASSWORD", "AO_REDIS_PASSWORD", "AO_SPARK_TOKEN", "AO_FLOWER_PASSWORD", "MINIO_ROOT_USER",
           "MINIO_ROOT_PASSWORD")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|AUTH|ACCESS_KEY", re.IGNORECASE)
REQUIRED = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+):\?[^}]*\}$")  # ${NAME:?message}: set, or compose stops
SERVICES = {"minio", "minio-init", "rest", "postgres", "redis", "migrate", "spark-master", "spark-worker",
            "spark-connect", "actor", "control",
            "listener", "dispatcher", "beat", "flower", "console", "demo"}
ONE_SHOT = {"minio-init", "migrate", "demo"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # resolves the anchors and << merges as compose does


def _strings(node: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every string in the file with its path (keys and list indexes), keys included as their own leaf."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield (*path, str(key)), str(key)
            yield from _strings(value, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _strings(value, (*path, str(i)))
    elif isinstance(node, str):
        yield path, node


def test_the_file_follows_the_compose_specification(compose):
    schema = json.loads((files("check_jsonschema.builtin_schemas.vendor") / "compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(compose)]
    assert errors == []


def test_the_lake_and_every_role_are_there(compose):
    assert set(compose["services"]) == SERVICES
    assert compose["services"]["demo"]["profiles"] == ["demo"]  # written on request, not at every `up`
    env = compose["services"]["listener"]["environment"]
    assert env["AO_CATALOG"] == "lake" and env["PYICEBERG_CATALOG__LAKE__URI"] == "http://rest:8181"
    assert env["PYICEBERG_CATALOG__LAKE__S3__ENDPOINT"] == "http://minio:9000"
    assert compose["services"]["minio-init"]["command"][-1] == "lake/warehouse"


def test_every_dependency_waits_for_health_or_completion(compose):
    services = compose["services"]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on needs the long form with a condition"
        for target, rule in depends.items():
            assert target in services, f"{name} depends on unknown {target}"
            condition = rule.get("condition")
            if condition == "service_healthy":
                check = services[target].get("healthcheck", {})
                assert check.get("test") and not check.get("disable"), f"{name} waits for {target}, which has no healthcheck"
            elif condition == "service_completed_successfully":
                assert target in ONE_SHOT and services[target].get("restart", "no") == "no", \
                    f"{name} waits for {target} to finish, but it is not a one-shot step"
            else:
                pytest.fail(f"{name} waits for {target} with {condition!r}, not for health or completion")
            assert not services[target].get("profiles") or service.get("profiles"), \
                f"{name} depends on {target}, which only runs under a profile"
    for name in ONE_SHOT:
        assert services[name].get("restart") == "no"
    # what the workers need, they wait for
    assert set(services["actor"]["depends_on"]) >= {"spark-connect", "redis", "rest", "migrate"}
    assert set(services["rest"]["depends_on"]) == {"minio-init"}
    assert set(services["demo"]["depends_on"]) >= {"actor", "control", "rest"}


def test_no_secret_is_written_in_the_file_or_put_on_a_command_line(compose):
    used: set[str] = set()
    for path, text in _strings(compose):
        for name in re.findall(r"\$\{([A-Z0-9_]+)", text):
            if name in SECRETS:
                used.add(name)
                # interpolated only into a container's environment, never a command, entrypoint or check
                assert "environment" in path, f"{'/'.join(path)} puts {name} outside an environment"
                assert re.search(rf"\$\{{{name}:\?", text), f"{'/'.join(path)}: {name} must be required, no default"
        if "environment" in path and path[-1] != "environment" and SECRET_NAME.search(path[-1]) \
                and path[-1] != text:
            assert REQUIRED.match(text), f"{'/'.join(path)} holds a secret literal; use ${{VAR:?…}}"
        for password in re.findall(r"://[^\s/@:]*:([^\s@]+)@", text):
            assert REQUIRED.match(password), f"{'/'.join(path)}: a URL's password must be ${{VAR:?…}}"
    assert used == set(SECRETS)
    raw = COMPOSE.read_text()
    assert "requirepass" not in raw and "redis-cli -a" not in raw  # the Redis password stays off ps


def test_ports_are_published_on_loopback_only(compose):
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond this host"


def test_third_party_images_are_pinned_and_mounted_files_exist(compose):
    for name, service in compose["services"].items():
        image = service.get("image", "")
        if "build" not in service:
            assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), \
                f"{name}: pin {image!r} to a version"
        for volume in service.get("volumes", []):
            source = str(volume).split(":", 1)[0]
            if source.startswith("./"):
                assert (REPO / source).is_file(), f"{name} mounts {source}, which is not in the repository"


def test_the_dockerfile_pins_bookworm_installs_java_17_and_gives_data_to_its_user():
    text = (REPO / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim-bookworm$", text, re.M)
    assert "openjdk-17-jre-headless" in text
    user = re.search(r"^USER (\S+)$", text, re.M)
    assert user and user.group(1) not in ("root", "0")
    assert re.search(rf"chown {user.group(1)}(:{user.group(1)})? /data", text)
    assert re.search(r"^ENV AO_HOME=/data", text, re.M)


def test_docker_compose_config_accepts_the_file_where_compose_is_installed(tmp_path):
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("Docker Compose is not installed here; the schema test stands in for it")
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(tmp_path), **{name: "x" * 16 for name in SECRETS}}
    done = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], cwd=REPO, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
