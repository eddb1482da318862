"""TRL's weight sync must reach every server the policy generates on, or training refuses."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gymbus.runner.training._rollouts import check_weight_sync


def args(**settings: object) -> SimpleNamespace:
    base = {
        "use_vllm": True,
        "vllm_mode": "server",
        "vllm_server_base_url": None,
        "vllm_server_host": "0.0.0.0",
        "vllm_server_port": 8000,
    }
    return SimpleNamespace(**{**base, **settings})


def test_the_server_the_policy_uses_is_accepted_with_or_without_v1() -> None:
    servers = {"policy": {"http://gpu1:8000/v1"}}
    assert check_weight_sync(args(vllm_server_base_url="http://gpu1:8000/"), servers)
    assert check_weight_sync(args(vllm_server_base_url="http://gpu1:8000/v1"), servers)


def test_another_server_is_refused_naming_both() -> None:
    with pytest.raises(
        ValueError, match=r"syncs its weights to http://0.0.0.0:8000 .* generates on http://gpu1:8000"
    ):
        check_weight_sync(args(), {"policy": {"http://gpu1:8000/v1"}})


def test_a_policy_on_several_servers_is_refused_naming_the_ones_the_sync_misses() -> None:
    servers = {"policy": {"http://gpu1:8000/v1", "http://gpu2:8000/v1"}}
    with pytest.raises(
        ValueError, match=r"reaches one server \(http://gpu1:8000\).* also generates on http://gpu2:8000"
    ):
        check_weight_sync(args(vllm_server_base_url="http://gpu1:8000"), servers)


def test_a_policy_with_no_inference_server_is_refused() -> None:
    with pytest.raises(ValueError, match="generates on no inference server"):
        check_weight_sync(args(), {"policy": set()})


def test_colocated_vllm_is_refused() -> None:
    with pytest.raises(ValueError, match="vllm_mode='colocate'"):
        check_weight_sync(args(vllm_mode="colocate"), {"policy": {"http://gpu1:8000/v1"}})


def test_without_vllm_there_is_no_sync_to_check() -> None:
    assert check_weight_sync(args(use_vllm=False), {"policy": {"http://a/v1", "http://b/v1"}})


def test_unknown_servers_are_checked_again_later() -> None:
    assert not check_weight_sync(args(), {})
