"""The docs: the site builds with warnings as errors, and every command the README and the
docs pages show is one that works as written.

Each fenced shell block (`bash`, `sh`, `shell`; the `$ ` lines of a `console` block) is read
as the shell reads it: continued lines joined, comments dropped, split at `&&`, `;`, `|` and
`&`, leading `NAME=value` assignments skipped. Then:

- a `gym-runner ...` command is parsed by the real command line (its options, values and
  subcommands) with every command's function taken out, so nothing runs; an unknown
  command or option, a bad value or a missing required option fails;
- `python -m MODULE` names a module that exists (vLLM's server, which runs in vLLM's own
  environment, must be the one `tests/vllm_server.py` starts); so does every
  `python -m MODULE` code span in the prose;
- the script `python`, `sh` or `node` runs, and every path under one of the repository's
  folders, exists;
- `pip install` names only extras that pyproject.toml defines.

A `gym-runner` line in a `text` block (a synopsis, with `[--option VALUE]` placeholders), and
a `gym-runner ...` code span in the prose, must name a real command, and every option it
shows must be one of that command's. Commands that
other tests run (the README's two commands, the training page's CPU training command in
tests/integration/test_trainer.py) are also parsed here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
FOLDERS = (
    "examples/",
    "scripts/",
    "deploy/",
    "bench/",
    "tests/",
    "docs/",
    "schemas/",
    "functions/",
    "bus/",
    "runner/",
)
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")"}
REDIRECTS = {">", ">>", "<", ">&", "<&", "2>", "&>"}
VLLM_SERVER = REPO / "tests" / "vllm_server.py"


@dataclass(frozen=True)
class Command:
    """One command as a reader would type it: where it is, its fence's language, its words."""

    where: str  # file:line of the command's first line
    language: str
    text: str

    def segments(self) -> list[list[str]]:
        """The simple commands of the line, each without its leading NAME=value words."""
        lexer = shlex.shlex(self.text, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        parts: list[list[str]] = [[]]
        for token in lexer:
            if token in OPERATORS:
                parts.append([])
            else:
                parts[-1].append(token)
        simple = []
        for words in parts:
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words = words[1:]
            if words:
                cut = next((i for i, word in enumerate(words) if word in REDIRECTS), len(words))
                simple.append(words[:cut])
        return simple


def fenced_commands(path: Path) -> list[Command]:
    """Every command line in the fenced code blocks of a Markdown file."""
    found: list[Command] = []
    lines = path.read_text().splitlines()
    fence: str | None = None
    language = ""
    pending: list[str] = []
    start = 0
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is None:
            opened = re.match(r"^(```+|~~~+)\s*([\w+-]*)", stripped)
            if opened:
                fence, language = opened.group(1), opened.group(2).lower()
            continue
        if stripped.startswith(fence):
            fence = None
            continue
        if language == "console":
            if not stripped.startswith("$ "):
                continue
            stripped = stripped[2:]
        if not pending:
            start = number
        pending.append(stripped.removesuffix("\\").strip())
        if not stripped.endswith("\\"):
            text = " ".join(pending)
            pending = []
            if text and not text.startswith("#"):
                found.append(Command(f"{path.relative_to(REPO)}:{start}", language, text))
    return found


def inline_commands(path: Path) -> list[Command]:
    """Every `gym-runner ...` and `python -m ...` code span of a Markdown file's prose."""
    text = path.read_text()
    prose = re.sub(
        r"^\s*(```+|~~~+).*?^\s*\1", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S | re.M
    )
    found = []
    for span in re.finditer(r"`([^`]+)`", prose):
        words = " ".join(span.group(1).split())
        if words.startswith(("gym-runner ", "python -m ")):
            line = prose.count("\n", 0, span.start()) + 1
            found.append(Command(f"{path.relative_to(REPO)}:{line}", "inline", words))
    return found


COMMANDS = [command for page in PAGES for command in (*fenced_commands(page), *inline_commands(page))]
SHELL_COMMANDS = [command for command in COMMANDS if command.language in SHELL]
SYNOPSES = [
    command
    for command in COMMANDS
    if command.language not in SHELL and command.text.startswith("gym-runner ")
]
MODULES_IN_PROSE = [
    command for command in COMMANDS if command.language == "inline" and command.text.startswith("python -m ")
]


def _words(program: str, command: Command) -> list[list[str]]:
    """The argument lists of every simple command of `command` that runs `program`."""
    return [words[1:] for words in command.segments() if Path(words[0]).name == program]


def _with(program: str) -> list[Any]:
    return [pytest.param(command, id=command.where) for command in SHELL_COMMANDS if _words(program, command)]


def _cli() -> Any:
    """gym-runner's real command line, with every command's function taken out."""
    import typer.main

    from gymbus.runner.cli import app

    root = typer.main.get_command(app)
    stack = [root]
    while stack:
        command = stack.pop()
        command.callback = None
        stack.extend(getattr(command, "commands", {}).values())
    return root


def parse(args: list[str]) -> tuple[int, str]:
    """How gym-runner's command line takes `args`: its exit status (2: bad usage) and what it said."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
        try:
            _cli().main(args, prog_name="gym-runner", standalone_mode=True)
        except SystemExit as exit:
            return int(exit.code or 0), said.getvalue()
    return 0, said.getvalue()


def test_the_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    if importlib.util.find_spec("material") is None:
        message = "mkdocs-material is not installed (pip install -e '.[test]')"
        if os.environ.get("CI"):
            pytest.fail(f"CI builds the docs: {message}")
        pytest.skip(message)
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for page in (REPO / "docs").rglob("*.md"):
        name = page.relative_to(REPO / "docs").with_suffix("")
        built = site / (name.parent if name.name == "index" else name) / "index.html"
        assert built.exists(), f"{page} was not built"


def test_the_commands_are_found_and_a_wrong_one_is_refused() -> None:
    """The checks below see the docs' commands, and the parser refuses what it should."""
    programs = {Path(words[0]).name for command in SHELL_COMMANDS for words in command.segments()}
    assert {"gym-runner", "python", "sh", "pip"} <= programs
    assert len(_with("gym-runner")) >= 30 and len(SYNOPSES) >= 8
    assert parse(["collect", "-i", "a.jsonl", "-o", "b.jsonl"])[0] == 0
    assert parse(["collect", "-i", "a.jsonl", "-o", "b.jsonl", "--no-such-option"])[0] == 2
    assert parse(["no-such-command"])[0] == 2
    assert parse(["view", "out.jsonl", "--port", "eighty"])[0] == 2


@pytest.mark.parametrize("command", _with("gym-runner"))
def test_every_gym_runner_command_is_one_the_command_line_takes(command: Command) -> None:
    for args in _words("gym-runner", command):
        status, said = parse(args)
        assert status == 0, f"{command.where}: gym-runner {shlex.join(args)}\n{said}"


@pytest.mark.parametrize("synopsis", [pytest.param(c, id=c.where) for c in SYNOPSES])
def test_every_synopsis_names_a_command_and_its_options(synopsis: Command) -> None:
    shown = synopsis.text.split("  #")[0].split()[1:]
    command = _cli()
    options = _option_names(command)
    while shown and shown[0] in getattr(command, "commands", {}):
        command = command.commands[shown.pop(0)]
        options |= _option_names(command)
    named = re.findall(r"(?<![\w.-])(--?[A-Za-z][\w-]*)", " ".join(shown))
    unknown = [name for name in named if name not in options]
    assert unknown == [], f"{synopsis.where}: {command.name} has no {unknown}"


def _option_names(command: Any) -> set[str]:
    return {"--help"} | {name for param in command.params for name in (*param.opts, *param.secondary_opts)}


@pytest.mark.parametrize("command", _with("python") + _with("python3") + [
    pytest.param(c, id=c.where) for c in MODULES_IN_PROSE
])  # fmt: skip
def test_every_python_command_names_a_module_or_script_that_exists(command: Command) -> None:
    for words in command.segments():
        if Path(words[0]).name not in ("python", "python3"):
            continue
        if words[1:2] == ["-c"]:
            continue
        if words[1:2] == ["-m"]:
            _assert_module(words[2], command.where)
        else:
            script = next(word for word in words[1:] if not word.startswith("-"))
            assert (REPO / script).is_file(), f"{command.where}: no {script}"


def _assert_module(module: str, where: str) -> None:
    """`module` is importable here, or is vLLM's server, which runs in vLLM's own environment:
    then it must be the module the tests start (`tests/vllm_server.py`)."""
    if module.startswith("vllm."):
        assert f'"{module}"' in VLLM_SERVER.read_text(), f"{where}: the tests start no {module}"
    else:
        assert importlib.util.find_spec(module) is not None, f"{where}: no module {module}"


@pytest.mark.parametrize("command", [pytest.param(c, id=c.where) for c in SHELL_COMMANDS])
def test_every_script_and_repository_path_exists(command: Command) -> None:
    for words in command.segments():
        program = Path(words[0]).name
        if program in ("sh", "bash", "node"):
            assert (REPO / words[1]).is_file(), f"{command.where}: no {words[1]}"
        if program == "cd":
            assert (REPO / words[1]).is_dir(), f"{command.where}: no folder {words[1]}"
        for word in words:
            path = word.split("=")[0]  # prepare's DATA.jsonl=AGENT
            if path.startswith(FOLDERS):
                assert (REPO / path).exists(), f"{command.where}: no {path}"


@pytest.mark.parametrize("command", _with("nats-server"))
def test_every_nats_server_pings_as_the_embedded_one(command: Command) -> None:
    """A nats-server the docs start reads a configuration that drops a frozen worker within
    seconds, as the embedded server does (tests/test_deploy.py checks deploy/nats.conf's
    pings against it; `gym-runner secure init` writes them from it): with nats-server's
    defaults a frozen worker keeps its share of the calls for minutes."""
    page = (REPO / command.where.split(":")[0]).read_text()
    for args in _words("nats-server", command):
        assert "-c" in args, f"{command.where}: nats-server without a configuration pings every 2 minutes"
        config = args[args.index("-c") + 1]
        written = config.endswith("/nats.conf") and f"--out {config.removesuffix('/nats.conf')}" in page
        assert config == "deploy/nats.conf" or written, (
            f"{command.where}: {config} is no configuration we check"
        )


@pytest.mark.parametrize("command", _with("pip"))
def test_every_pip_install_names_extras_that_exist(command: Command) -> None:
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    for args in _words("pip", command):
        assert args[0] == "install", f"{command.where}: pip {args[0]}"
        for word in args[1:]:
            named = re.fullmatch(r"(?:\.|gymbus)\[([\w,-]+)\]", word)
            if named:
                unknown = set(named.group(1).split(",")) - extras
                assert unknown == set(), f"{command.where}: pyproject.toml has no extra {unknown}"


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    tests = [c.text for c in fenced_commands(REPO / "README.md") if c.text.endswith("-m pytest")]
    assert len(tests) == 1
    assert (REPO / ".ci" / "run").read_text().splitlines()[-1] == tests[0]


def test_the_readmes_links_reach_docs_pages_and_their_headings() -> None:
    import markdown

    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#([^)]+))?\)", text)
    assert len(links) >= 10
    for target, anchor in links:
        page = REPO / target
        assert page.is_file(), f"README.md links to {target}, which does not exist"
        if anchor:
            assert anchor in _anchors(markdown.Markdown(extensions=["toc"]), page), f"{target}#{anchor}"


def _anchors(renderer: Any, page: Path) -> set[str]:
    renderer.convert(page.read_text())
    found: set[str] = set()
    stack = list(renderer.toc_tokens)
    while stack:
        token = stack.pop()
        found.add(token["id"])
        stack.extend(token["children"])
    return found


def test_every_ack_wait_the_docs_give_is_the_default() -> None:
    from gymbus.schemas import DEFAULT_TIMEOUTS

    given = {
        page.name: re.findall(r"`serve --ack-wait`, ([\d.]+) s", " ".join(page.read_text().split()))
        for page in PAGES
    }
    assert given["protocol.md"] and given["reliability.md"], given
    for page, seconds in given.items():
        assert all(float(one) == DEFAULT_TIMEOUTS.ack_wait for one in seconds), (page, seconds)


def test_the_readme_says_how_gym_runner_gets_on_path_before_using_it_bare() -> None:
    text = (REPO / "README.md").read_text()
    on_path = text.index(". .venv/bin/activate")
    bare = [c for c in fenced_commands(REPO / "README.md") if c.text.split()[0] == "gym-runner"]
    assert bare, "the README shows no bare gym-runner command"
    for command in bare:
        line = int(command.where.rsplit(":", 1)[1])
        assert len(text[:on_path].splitlines()) < line, f"{command.where} before the README says how"


def test_the_site_builds_with_mkdocs_material_alone() -> None:
    installs = [c.text for c in fenced_commands(REPO / "README.md") if "mkdocs-material" in c.text]
    assert installs == [".venv/bin/pip install mkdocs-material"]
    config = (REPO / "mkdocs.yml").read_text()
    assert "\nplugins:" not in config  # a plugin would be another package to install
    extensions = re.findall(r"^  - ([\w.]+)", config.split("markdown_extensions:")[1].split("\n\n")[0], re.M)
    assert extensions and all(
        name.split(".")[0] in ("admonition", "attr_list", "tables", "toc", "pymdownx") for name in extensions
    ), extensions  # Markdown's own, and mkdocs-material's pymdownx


def test_nemo_gyms_commands_each_have_their_gym_runner_command() -> None:
    rows = [
        line for line in (REPO / "docs" / "commands.md").read_text().splitlines() if line.startswith("| `ng_")
    ]
    mapped = {re.match(r"\| `(ng_\w+)", row).group(1): row for row in rows}  # type: ignore[union-attr]
    for legacy in ("ng_run", "ng_collect_rollouts", "ng_prepare_data", "ng_viewer", "ng_status"):
        assert "`gym-runner " in mapped.get(legacy, ""), f"docs/commands.md maps no {legacy}"
    collect = mapped["ng_collect_rollouts"]
    for key, option in (("agent_name", "--agent"), ("input_jsonl_fpath", "-i"), ("output_jsonl_fpath", "-o"),
                        ("limit", "--limit"), ("num_repeats", "--num-repeats"),
                        ("num_samples_in_parallel", "--concurrency")):  # fmt: skip
        assert f"+{key}=" in collect and f" {option} " in collect, key


def _help_examples() -> list[Any]:
    """Every `gym-runner ...` line of every command's --help (continued lines joined)."""
    import typer.main

    from gymbus.runner.cli import app

    found, stack = [], [typer.main.get_command(app)]
    while stack:
        command = stack.pop()
        stack.extend(getattr(command, "commands", {}).values())
        pending = ""
        for line in (command.help or "").splitlines():
            text = line.strip()
            if pending or text.startswith("gym-runner "):
                pending += text.removesuffix("\\").strip() + " "
                if not text.endswith("\\"):
                    found.append(pytest.param(pending.strip(), id=f"{command.name}: {pending[:60]}"))
                    pending = ""
    return found


def test_the_help_examples_are_found() -> None:
    assert len(_help_examples()) >= 15


@pytest.mark.parametrize("example", _help_examples())
def test_every_help_example_is_one_the_command_line_takes(example: str) -> None:
    command = Command("--help", "bash", example)
    for args in _words("gym-runner", command):
        status, said = parse(args)
        assert status == 0, f"gym-runner {shlex.join(args)}\n{said}"
        for word in args:
            path = word.split("=")[0]
            if path.startswith(FOLDERS):
                assert (REPO / path).exists(), f"{example}: no {path}"


def _option(args: list[str], *names: str) -> str | None:
    return next((args[i + 1] for i, word in enumerate(args[:-1]) if word in names), None)


def test_every_verify_example_reads_rollouts_a_documented_collect_writes() -> None:
    """A reader who follows the docs has the file a `verify` example reads: some `collect`
    in the docs wrote it (its rollouts, or the materialized inputs beside them)."""
    written: set[str] = set()
    for command in SHELL_COMMANDS:
        for args in _words("gym-runner", command):
            output = _option(args, "-o", "--output")
            if args[:1] == ["collect"] and output:
                written |= {output, output.removesuffix(".jsonl") + "_materialized_inputs.jsonl"}
    read = [
        (command.where, path)
        for command in SHELL_COMMANDS
        for args in _words("gym-runner", command)
        if args[:1] == ["verify"]
        for path in (_option(args, "-i", "--input"), _option(args, "--inputs"))
        if path is not None and path.startswith("results/")
    ]
    assert read, "no verify example read results/ to check"
    assert [(where, path) for where, path in read if path not in written] == []


def test_every_wait_for_a_server_gives_up() -> None:
    """A `until curl ...` loop waits forever for a server that never starts (a wrong model
    path): every one the docs show runs under `timeout`."""
    loops = [command for command in SHELL_COMMANDS if "until " in command.text]
    assert loops, "no wait loop in the docs to check"
    assert [c.where for c in loops if not c.text.startswith("timeout ")] == []


def test_every_node_example_installs_its_npm_package_first() -> None:
    """`node examples/node/...` needs the `nats` npm package (`npm ci` there, which
    scripts/install-node.sh runs): a page that runs it shows that step before it."""
    runs = [command for command in SHELL_COMMANDS if _words("node", command)]
    assert runs, "no node example in the docs to check"
    for run in runs:
        page, line = run.where.rsplit(":", 1)
        before = [c.text for c in SHELL_COMMANDS if c.where.rsplit(":", 1)[0] == page and
                  int(c.where.rsplit(":", 1)[1]) < int(line)]  # fmt: skip
        assert any("install-node.sh" in text or "npm ci" in text for text in before), run.where
