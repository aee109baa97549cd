"""The executors' Arrow memory pool (spark_actors/server.MEMORY_POOL_CONF): the system allocator unless the
operator names another, and a pool pyarrow does not have is refused rather than silently replaced."""

from __future__ import annotations

import pytest

from autooptimize.config import Settings
from autooptimize.errors import ConfigError
from spark_actors.server import MEMORY_POOL_CONF, server_confs


def test_the_executors_allocate_from_the_system_pool_by_default(monkeypatch):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    assert server_confs(Settings())[MEMORY_POOL_CONF] == "system"


def test_the_environment_then_the_server_conf_choose_another(monkeypatch):
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")
    assert server_confs(Settings())[MEMORY_POOL_CONF] == "jemalloc"
    chosen = Settings(spark_server_conf={MEMORY_POOL_CONF: "mimalloc"})
    assert server_confs(chosen)[MEMORY_POOL_CONF] == "mimalloc"


@pytest.mark.parametrize(("env", "conf", "named"), [
    ("tcmalloc", None, "ARROW_DEFAULT_MEMORY_POOL='tcmalloc'"),
    (None, "jemallocc", f"{MEMORY_POOL_CONF}='jemallocc'"),
])
def test_a_pool_pyarrow_does_not_have_is_refused_naming_the_valid_ones(monkeypatch, env, conf, named):
    monkeypatch.delenv("ARROW_DEFAULT_MEMORY_POOL", raising=False)
    if env is not None:
        monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", env)
    settings = Settings(spark_server_conf={MEMORY_POOL_CONF: conf} if conf else {})
    with pytest.raises(ConfigError) as refused:
        server_confs(settings)
    assert named in str(refused.value)
    assert "valid: system, jemalloc, mimalloc" in str(refused.value)
