"""The documentation's examples, run as written: README.md and every page of docs/.

Users copy these commands and compare the output. Every `$ gpu-webhook check ...` or `$ gpu-webhook policy ...`
line in a code block of README.md or docs/*.md whose inputs are this repository's `examples/` (with the example
policies in `examples/policies/`) and `policies/` is run in a copy of those two directories, and its output
(stdout, then stderr) must be the lines that follow it in the block, up to the next `$ ` line; a following
`$ echo $?` gives the exit code. Trailing white space is ignored.

An example is left out when it cannot run here: it asks a server (`--server`), is part of a pipeline,
reads an input that is not shipped (`train.yaml`, `pol/`), elides its output (`...`), or shows files that
are not shipped (the lint errors of a hypothetical `policies/teams.yaml`). So that a
broken parser or a renamed file cannot quietly leave everything out, every output format of `check` and both
`policy` commands must have a runnable example.

README's `curl` examples are run against the real server (`gpu-webhook serve`, TLS, `make run`'s policies), with
its address and CA in place of `make run`'s; a `"patch"` shown shortened (`"W3sib3Ai..."`) must begin the real one.
Every page of docs/ starts with a title and a one-line purpose, and its links to files in the repository resolve.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
GPU_WEBHOOK = Path(sys.executable).parent / "gpu-webhook"
SHIPPED = ("examples", "policies")

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_VALUED = {"-n", "--namespace", "--policies", "-o", "--output", "--server", "--ca-file", "--timeout"}
_SHIPPED_FILE = re.compile(r"(?<![\w./-])(?:examples|policies)/(?:[\w.-]+/)*[\w.-]+\.(?:yaml|yml|json)\b")


@dataclass
class Example:
    page: str  # where it is shown: README.md, docs/cli.md, ...
    command: str  # as written after "$ "
    expected: list[str]  # the output lines shown under it
    exit_code: int | None = None  # from a following "$ echo $?"

    @property
    def argv(self) -> list[str]:
        """The arguments after `gpu-webhook`, without a `< FILE` redirection."""
        words = shlex.split(self.command)[1:]
        return words[: words.index("<")] if "<" in words else words

    @property
    def stdin_file(self) -> str | None:
        words = shlex.split(self.command)
        return words[words.index("<") + 1] if "<" in words else None

    @property
    def kind(self) -> str:
        """What the example shows: `check table`, `check yaml`, `check diff`, `policy lint`, ..."""
        args = self.argv
        if args[0] == "policy":
            return f"policy {args[1]}"
        if "--diff" in args:
            return "check diff"
        for flag in ("-o", "--output"):
            if flag in args:
                return f"check {args[args.index(flag) + 1]}"
        return "check table"

    def inputs(self) -> list[str]:
        """The files and directories the command reads: `< FILE`, check's PATHs, lint's DIR, `--policies DIR`."""
        command, *args = self.argv
        found = [self.stdin_file] if self.stdin_file else []
        if command == "policy" and args[0] == "lint":
            return found + args[1:]
        previous = ""
        for arg in args:
            if previous == "--policies" or (command == "check" and arg[0] != "-" and previous not in _VALUED):
                found.append(arg)
            previous = arg
        return found

    def why_not_runnable(self) -> str | None:
        """Why this example cannot run against the shipped files, or None when it can."""
        if "--server" in self.command:
            return "asks a running server"
        if re.search(r"[|&;]|\$\(", self.command):
            return "part of a pipeline"
        if any(line.strip() == "..." for line in self.expected):
            return "output elided"
        for path in self.inputs():
            if path.split("/")[0] not in SHIPPED:
                return f"reads {path}, which is not shipped"
        for named in _SHIPPED_FILE.findall("\n".join(self.expected)):
            if not (ROOT / named).exists():
                return f"shows {named}, which is not shipped"
        return None


def readme_examples(text: str, page: str = "README.md") -> list[Example]:
    """Every `$ gpu-webhook check|policy` command in a page's code blocks, with the output shown for it."""
    examples: list[Example] = []
    for block in _FENCE.findall(text):
        current: Example | None = None  # the example whose output lines come next
        last: Example | None = None  # the example that `$ echo $?` reports on
        for line in block.splitlines():
            if not line.startswith("$ "):
                if current is not None:
                    current.expected.append(line)
                elif last is not None and last.exit_code is None and line.strip().isdigit():
                    last.exit_code = int(line)
                continue
            command = line[2:].strip()
            current = Example(page, command, []) if re.match(r"gpu-webhook (check|policy)\b", command) else None
            if current is not None:
                examples.append(current)
            last = current or (last if command == "echo $?" else None)
    return examples


def _page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


EXAMPLES = [e for path in PAGES for e in readme_examples(path.read_text(encoding="utf-8"), _page_name(path))]
RUNNABLE = [e for e in EXAMPLES if e.why_not_runnable() is None]


def test_every_output_format_and_policy_command_has_a_runnable_example():
    left_out = "\n".join(f"  {e.command}: {e.why_not_runnable()}" for e in EXAMPLES if e not in RUNNABLE)
    covered = {e.kind for e in RUNNABLE}
    wanted = {"check table", "check yaml", "check json", "check diff", "policy lint", "policy explain"}
    assert wanted <= covered, f"no runnable README example for {sorted(wanted - covered)}; left out:\n{left_out}"


def test_a_file_shown_in_an_output_is_named_by_its_whole_path():
    """examples/policies/mig.yaml is shipped; reading it as policies/mig.yaml would quietly skip the example."""
    shown = "batch-mig  (examples/policies/mig.yaml#0)\ndefault (policies/default.yaml#0) pol/policies/x.yaml"
    assert _SHIPPED_FILE.findall(shown) == ["examples/policies/mig.yaml", "policies/default.yaml"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of examples/ and policies/, so that the commands print the same relative paths as README."""
    directory = tmp_path_factory.mktemp("readme")
    for name in SHIPPED:
        shutil.copytree(ROOT / name, directory / name)
    return directory


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


@pytest.mark.parametrize("example", RUNNABLE, ids=[f"{e.page}: {e.command}" for e in RUNNABLE])
def test_readme_example_prints_what_readme_shows(example: Example, workdir: Path):
    env = {k: v for k, v in os.environ.items() if k != "GPU_ADMISSION_POLICIES"}
    env["NO_COLOR"] = "1"
    stdin = (workdir / example.stdin_file).read_text() if example.stdin_file else None
    run = subprocess.run(
        [str(GPU_WEBHOOK), *example.argv],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=workdir,
        env=env,
        timeout=60,
    )
    actual = _lines(run.stdout + run.stderr)
    expected = _lines("\n".join(example.expected))
    diff = "\n".join(difflib.unified_diff(expected, actual, example.page, "actual output", lineterm=""))
    assert actual == expected, f"{example.page}'s example `$ {example.command}` is stale:\n{diff}"
    if example.exit_code is not None:
        said = f"`$ {example.command}` exited {run.returncode}; {example.page} says {example.exit_code}"
        assert run.returncode == example.exit_code, said


def test_readme_and_docs_show_examples():
    pages = {e.page for e in RUNNABLE}
    assert "README.md" in pages, "README.md has no runnable `gpu-webhook check` example"
    assert len(PAGES) > 1, "docs/ has no pages"


# --- README's curl examples, against the real server --------------------------------------------------------

_DEV_URL, _DEV_CA = "https://127.0.0.1:8443", "certs/dev/ca.crt"  # what `make run` serves and prints
_SHORTENED_PATCH = re.compile(r'"patch": "([A-Za-z0-9+/=]+)\.\.\."')


@dataclass
class CurlExample:
    command: str
    expected: str


def curl_examples(text: str) -> list[CurlExample]:
    """Each `$ curl ...` line in a code block, with the one line shown under it."""
    found = []
    for block in _FENCE.findall(text):
        lines = block.splitlines()
        for line, following in zip(lines, [*lines[1:], ""], strict=True):
            if line.startswith("$ curl "):
                found.append(CurlExample(line[2:], following))
    return found


CURLS = curl_examples(README.read_text(encoding="utf-8"))


def test_readme_posts_a_review_file_that_is_shipped():
    posts = [c for c in CURLS if "/mutate" in c.command]
    assert posts, "README.md shows no `curl` to /mutate"
    for example in posts:
        data = re.search(r"--data @(\S+)", example.command)
        assert data and (ROOT / data[1]).is_file(), f"README.md's `{example.command}` posts a file that is not shipped"


@pytest.fixture(scope="module")
def dev_server(start_server):
    """What `make run` serves: the example policies (the built-in defaults elsewhere), on a free port with a
    test CA."""
    return start_server(policies_dir=ROOT / "examples" / "policies")


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
@pytest.mark.parametrize("example", CURLS, ids=[c.command for c in CURLS])
def test_readme_curl_prints_what_readme_shows(example: CurlExample, dev_server):
    server = dev_server
    command = example.command.replace(_DEV_URL, server.url).replace(_DEV_CA, str(server.ca_file))
    run = subprocess.run(shlex.split(command), capture_output=True, text=True, cwd=ROOT, timeout=30)
    assert run.returncode == 0, f"`{example.command}` failed: {run.stderr}"
    actual = run.stdout.strip()
    shortened = _SHORTENED_PATCH.search(example.expected)
    if shortened:
        patch = re.search(r'"patch": "([A-Za-z0-9+/=]+)"', actual)
        assert patch and patch[1].startswith(shortened[1]), f"the patch is not the one shown:\n{actual}"
        actual = actual.replace(patch[0], shortened[0])
    assert actual == example.expected.strip(), f"README.md's `{example.command}` is stale:\n{actual}"


# --- the pages themselves -------------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES[1:], ids=[_page_name(p) for p in PAGES[1:]])
def test_every_docs_page_starts_with_its_title_and_a_one_line_purpose(page: Path):
    lines = page.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# "), f"{_page_name(page)} does not start with a title"
    purpose = lines[2] if len(lines) > 2 else ""
    assert purpose.startswith("*") and purpose.endswith("*"), f"{_page_name(page)}: no one-line purpose under the title"


@pytest.mark.parametrize("page", PAGES, ids=[_page_name(p) for p in PAGES])
def test_links_to_repository_files_resolve(page: Path):
    text = page.read_text(encoding="utf-8")
    broken = [target for target in _LINK.findall(text) if "://" not in target and not (page.parent / target).exists()]
    assert not broken, f"{_page_name(page)} links to files that do not exist: {broken}"


_ANCHORED_LINK = re.compile(r"\]\(([^)#\s]*)#([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(line.lstrip("#")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("page", PAGES, ids=[_page_name(p) for p in PAGES])
def test_links_to_headings_resolve(page: Path):
    text = page.read_text(encoding="utf-8")
    broken = []
    for target, anchor in _ANCHORED_LINK.findall(text):
        linked = (page.parent / target) if target else page
        if "://" in target or linked.suffix != ".md" or not linked.exists():
            continue
        if anchor not in _anchors(linked):
            broken.append(f"{target}#{anchor}")
    assert not broken, f"{_page_name(page)} links to headings that do not exist: {broken}"


# --- README's policy examples load -----------------------------------------------------------------------------

_YAML_FENCE = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def policy_examples(text: str) -> list[str]:
    """README's policy examples as whole files: a block that shows only `spec:` gets a policy's header."""
    found = []
    for i, block in enumerate(_YAML_FENCE.findall(text)):
        if block.startswith("spec:"):
            block = f"apiVersion: gpu-admission.io/v1\nkind: GPUPolicy\nmetadata:\n  name: example-{i}\n{block}"
        if "kind: GPUPolicy" in block:
            found.append(block)
    return found


POLICIES = policy_examples(README.read_text(encoding="utf-8"))


def test_readme_shows_a_policy_for_every_sharing_mode():
    modes = {re.search(r"mode: ([\w-]+)", p)[1] for p in POLICIES}  # type: ignore[index]
    assert modes == {"exclusive", "time-slicing", "mps", "mig", "memory"}


@pytest.mark.parametrize("policy", POLICIES, ids=[re.search(r"mode: ([\w-]+)", p)[1] for p in POLICIES])  # type: ignore[index]
def test_readme_policy_examples_load(policy: str):
    from webhook.admission.policy.loader import parse_policy_sources

    parse_policy_sources({"README.md": policy})  # raises PolicyLoadError with every problem, one line each


_HISTORY = re.compile(r"\bissue \d+|\bwork items?\b|\bsessions?\b|\b(?:this|last|the) release\b|\bcut\b", re.IGNORECASE)


@pytest.mark.parametrize("page", PAGES, ids=[_page_name(p) for p in PAGES])
def test_pages_describe_the_code_not_its_history(page: Path):
    prose = _FENCE.sub("", page.read_text(encoding="utf-8"))
    found = sorted({m[0] for m in _HISTORY.finditer(prose)})
    assert not found, f"{_page_name(page)} speaks of work items or releases a reader cannot see: {found}"


def test_the_readme_stays_short():
    """README is the front page: one policy per sharing mode, the rest in docs/policies.md; 300 lines at most."""
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 300
