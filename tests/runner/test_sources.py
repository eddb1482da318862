"""Functions given by file or module: `FILE_OR_MODULE:NAME` picks one of several."""

from __future__ import annotations

from pathlib import Path

import pytest

from gymbus.functions import Agent, Model
from gymbus.functions.registry import REGISTRY
from gymbus.runner._sources import OwnFunctions, SourceError, absolute, function_in, function_names, selector

MODELS = """
from gymbus.functions import Model

def make(options):
    raise NotImplementedError

CAREFUL = Model(name="careful_policy", make=make)
BOLD = Model(name="bold_policy", make=make)
"""


def test_a_selector_is_a_source_and_a_name_and_nothing_else_is() -> None:
    assert selector("my_env/policies.py:careful") == ("my_env/policies.py", "careful")
    assert selector("my_pkg.policies:careful") == ("my_pkg.policies", "careful")
    assert selector("my_env/policies.py") == ("my_env/policies.py", None)
    assert selector("nemo-gym:mcqa") == ("nemo-gym:mcqa", None)  # a NeMo Gym server, not a selector
    assert selector("mcqa") == ("mcqa", None)
    assert absolute("policies.py:careful") == f"{Path('policies.py').resolve()}:careful"


def test_one_function_of_several_is_picked_by_name_and_a_worker_is_given_its_selector(tmp_path: Path) -> None:
    source = tmp_path / "two_policies.py"
    source.write_text(MODELS)
    try:
        with pytest.raises(SourceError, match=r"defines 2 models: careful_policy, bold_policy; pick one as"):
            function_in(str(source), Model)
        with pytest.raises(
            SourceError, match=r"defines no agent named 'careful_policy' \(it defines no agent\)"
        ):
            function_in(f"{source}:careful_policy", Agent)
        assert function_names([f"{source}:bold_policy"]) == ["bold_policy"]
        own = OwnFunctions()
        assert own.load(f"{source}:careful_policy", Model) == "careful_policy"
        assert own.for_worker(["careful_policy", "mcqa"]) == (f"{source}:careful_policy", "mcqa")
    finally:
        REGISTRY.remove(["careful_policy", "bold_policy"])
