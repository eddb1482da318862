"""The registry: built-in functions and the user's own, found by name from one place."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymbus.functions import Agent, Environment, VerifyResult, environments
from gymbus.functions.environments import AGENT_ENTRY_POINTS, ENVIRONMENT_ENTRY_POINTS
from gymbus.functions.models import MODELS as BUILTIN_MODELS
from gymbus.functions.registry import AGENTS, ENVIRONMENTS, MODELS, FunctionClash, Registry, find, names

ENVIRONMENT_MODULES = sorted(
    module.name for module in pkgutil.iter_modules(environments.__path__) if not module.name.startswith("_")
)


async def _verify(request: object, session: object) -> VerifyResult:
    return VerifyResult(reward=1.0)


def _env(name: str, *agents: str) -> Environment:
    return Environment(name=name, verify=_verify, agents=agents)


@pytest.fixture
def registry() -> Registry:
    return Registry(group="gymbus.functions.tests-none")  # no installed package declares this group


def test_the_builtin_entry_points_are_the_modules_and_what_they_declare() -> None:
    assert sorted(ENVIRONMENT_ENTRY_POINTS) == ENVIRONMENT_MODULES
    listed = {
        env: sorted(a for a, at in AGENT_ENTRY_POINTS.items() if at == ENVIRONMENT_ENTRY_POINTS[env])
        for env in ENVIRONMENT_MODULES
    }
    assert listed == {env: sorted(ENVIRONMENTS[env].agents) for env in ENVIRONMENT_MODULES}
    assert all(AGENTS[name].name == name for name in AGENT_ENTRY_POINTS)
    assert {name: MODELS[name] for name in BUILTIN_MODELS} == BUILTIN_MODELS


def test_the_tables_hold_each_kind_and_names_holds_them_all() -> None:
    assert set(ENVIRONMENT_MODULES) <= set(ENVIRONMENTS)
    assert "mcqa_simple_agent" in AGENTS and "mcqa_simple_agent" not in ENVIRONMENTS
    assert {"offline", "openai", "vllm"} <= set(MODELS)
    assert set(names()) == {*ENVIRONMENTS, *AGENTS, *MODELS}
    assert find("mcqa_simple_agent") is AGENTS["mcqa_simple_agent"]  # one object per name


def test_an_unknown_name_suggests_the_closest(registry: Registry) -> None:
    with pytest.raises(KeyError, match="did you mean mcqa"):
        registry.find("mcq")


def test_added_functions_are_found_with_their_environments_agents(registry: Registry) -> None:
    added = registry.add([_env("tally", "tally_simple_agent")], "tests")
    assert added == ["tally", "tally_simple_agent"]
    agent = registry.find("tally_simple_agent")
    assert isinstance(agent, Agent) and agent.environment == "tally"
    assert registry.source("tally") == "tests" and registry.source("mcqa") == "GymBus's built-ins"
    registry.remove(added)
    assert registry.get("tally") is None


def test_a_name_two_sources_define_is_an_error_naming_both(registry: Registry) -> None:
    registry.add([_env("tally")], "file a.py")
    with pytest.raises(FunctionClash, match="'tally' is defined twice: by file a.py and by file b.py"):
        registry.add([_env("tally")], "file b.py")
    with pytest.raises(
        FunctionClash, match="'mcqa' is defined twice: by GymBus's built-ins and by file c.py"
    ):
        registry.add([_env("mcqa")], "file c.py")
    with pytest.raises(FunctionClash, match="'mcqa_simple_agent'"):
        registry.add([_env("other", "mcqa_simple_agent")], "file d.py")


def test_an_agent_of_its_own_takes_the_place_of_the_default_one(registry: Registry) -> None:
    async def run(row: bytes, calls: object, max_steps: int) -> bytes:
        return row

    own = Agent(name="tally_agent", rollout=run, environment="tally")  # type: ignore[arg-type]
    registry.add([_env("tally", "tally_agent"), own], "tests")
    assert registry.find("tally_agent") is own


@pytest.fixture
def module_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    for name in [name for name in sys.modules if name.startswith(("lone_env", "pkg_env"))]:
        del sys.modules[name]
    while str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


ENV_FILE = """
from gymbus.functions import Environment, VerifyResult

async def verify(request, session):
    return VerifyResult(reward=0.5)

ENVIRONMENT = Environment(name="{name}", verify=verify, agents=("{name}_simple_agent",))
"""


def test_a_file_is_loaded_with_its_functions_once(registry: Registry, module_dir: Path) -> None:
    path = module_dir / "lone_env.py"
    path.write_text(ENV_FILE.format(name="lone"))
    assert registry.load(str(path)) == ["lone", "lone_simple_agent"]
    assert registry.load(str(path)) == ["lone", "lone_simple_agent"]  # a second load is the first
    assert registry.source("lone") == f"file {path}"


def test_a_file_in_a_package_is_imported_as_the_packages_module(registry: Registry, module_dir: Path) -> None:
    package = module_dir / "pkg_env"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "rules.py").write_text("REWARD = 0.25\n")
    (package / "env.py").write_text(ENV_FILE.format(name="packaged") + "\nfrom .rules import REWARD\n")
    assert registry.load(str(package / "env.py")) == ["packaged", "packaged_simple_agent"]
    assert sys.modules["pkg_env.env"].REWARD == 0.25
    assert registry.load("pkg_env.env") == ["packaged", "packaged_simple_agent"]  # by module path: the same


def test_a_file_without_functions_is_refused(registry: Registry, module_dir: Path) -> None:
    path = module_dir / "lone_env_empty.py"
    path.write_text("x = 1\n")
    with pytest.raises(ValueError, match="defines no Environment, Agent or Model"):
        registry.load(str(path))


def _imported_after(code: str) -> set[str]:
    """The modules of GymBus's environments and models a fresh interpreter has imported after `code`."""
    code = textwrap.dedent(code) + textwrap.dedent("""
        import json, sys
        prefixes = ("gymbus.functions.environments.", "gymbus.functions.models")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(prefixes))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


def test_listing_names_imports_no_function() -> None:
    imported = _imported_after("""
        from gymbus.functions.registry import AGENTS, ENVIRONMENTS, MODELS, names
        assert len(names()) > 20 and "mcqa" in ENVIRONMENTS and "mcqa" not in AGENTS
        assert "mcqa_simple_agent" in list(AGENTS) and "offline" in list(MODELS)
    """)
    assert imported == set()


def test_a_process_imports_only_the_environment_it_looks_up() -> None:
    imported = _imported_after("""
        from gymbus.functions.registry import find
        find("mcqa_simple_agent"); find("example_single_tool_call"); find("offline")
    """)
    environments = {
        name.split(".")[3] for name in imported if name.startswith("gymbus.functions.environments.")
    }
    assert environments & set(ENVIRONMENT_MODULES) == {"mcqa", "example_single_tool_call"}
    assert (
        "gymbus.functions.models.offline" in imported
        and "gymbus.functions.models.openai_model" not in imported
    )


def _distribution(site: Path, name: str, group: str, entries: dict[str, str]) -> None:
    """An installed distribution as importlib.metadata reads one: a .dist-info folder on sys.path."""
    info = site / f"{name}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
    )


def test_entry_points_are_loaded_a_broken_one_named_and_a_clash_refused(
    module_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    group = "gymbus.functions.tests-entry-points"
    (module_dir / "lone_env_installed.py").write_text(ENV_FILE.format(name="installed_one"))
    (module_dir / "lone_env_twin.py").write_text(ENV_FILE.format(name="installed_one"))
    _distribution(module_dir, "good_pkg", group, {"good": "lone_env_installed", "bad": "lone_env_missing"})
    sys.path.insert(0, str(module_dir))
    registry = Registry(group=group)
    assert registry.source("installed_one_simple_agent") == (
        "entry point good = lone_env_installed (package good_pkg)"
    )
    assert "entry point bad = lone_env_missing (package good_pkg) failed to load" in caplog.text
    with pytest.raises(KeyError, match="bad = lone_env_missing .* failed to load: ModuleNotFoundError"):
        registry.find("nothing_here")
    _distribution(module_dir, "twin_pkg", group, {"twin": "lone_env_twin"})
    with pytest.raises(
        FunctionClash, match="'installed_one' is defined twice: by entry point .* and by entry point"
    ):
        Registry(group=group).find("mcqa")
