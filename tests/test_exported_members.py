"""Each package's public surface is exactly its `__all__`; everything else is private."""

from __future__ import annotations

import inspect
from types import ModuleType

import pytest

from gymbus import bus
from gymbus import functions
from gymbus import runner
from gymbus import schemas


@pytest.mark.parametrize("package", [schemas, bus, functions, runner], ids=lambda p: p.__name__)
def test_public_names_are_exactly_all(package: ModuleType) -> None:
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and (not inspect.ismodule(value) or name in package.__all__)
    }
    assert set(package.__all__) == public
    assert len(package.__all__) == len(set(package.__all__))
