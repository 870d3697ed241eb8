"""Containment helpers (platforms/contain.py)."""

from __future__ import annotations

import pytest

from flashbuild.platforms import contain


def test_offline_env_points_every_proxy_at_a_closed_port() -> None:
    env = contain.offline_env({"PATH": "/bin", "no_proxy": "*", "HTTPS_PROXY": "http://p:1"})
    assert env["PATH"] == "/bin"
    assert "no_proxy" not in env
    assert all(env[name] == contain.CLOSED_PROXY for name in contain.PROXY_VARIABLES)
    assert env["PIP_NO_INDEX"] == "1"
    # With a network namespace the proxies stay as they were (the hook reports real hosts).
    assert contain.offline_env({"HTTPS_PROXY": "http://p:1"}, proxies=False)["HTTPS_PROXY"] \
        == "http://p:1"


def test_a_refused_namespace_falls_back_to_no_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    contain.linux_containment.cache_clear()
    monkeypatch.setattr(contain, "_works", lambda prefix: False)
    try:
        fallback = contain.linux_containment()
    finally:
        contain.linux_containment.cache_clear()
    assert not fallback.namespaces
    assert fallback.argv(["cmake", "."]) == ["cmake", "."]
