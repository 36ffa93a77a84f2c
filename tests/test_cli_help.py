"""Every gpu-webhook command's --help: every option explained, and one example that the parser accepts."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from webhook.cli.main import build_parser, main
from webhook.cli.options import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent


def commands(parser: argparse.ArgumentParser, name: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                yield from commands(subparser, f"{name} {sub}".strip())


COMMANDS = dict(commands(build_parser()))


def test_every_command_has_an_example_and_every_example_a_command() -> None:
    assert set(COMMANDS) == set(EXAMPLES)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_has_help_text(command: str) -> None:
    undocumented = [
        action.option_strings or [action.dest]
        for action in COMMANDS[command]._actions
        if action.help is None and not isinstance(action, argparse._SubParsersAction)
    ]
    assert undocumented == [], f"gpu-webhook {command}: add help= to {undocumented}"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_ends_with_one_example_that_parses_as_that_command(command: str) -> None:
    text = COMMANDS[command].format_help()
    assert text.endswith(f"\nexample: {EXAMPLES[command]}\n")  # one line, as it is pasted into a shell
    assert text.count("example: ") == 1
    example = shlex.split(EXAMPLES[command].split(" > ")[0])
    assert example[0] == "gpu-webhook"
    args = build_parser().parse_args(example[1:])
    if command:  # the example runs this command (the bare program's example runs one of them)
        assert example[1 : 1 + len(command.split())] == command.split()
    assert getattr(args, "handler", None) is not None


def test_policy_lint_takes_policies_dir_like_check_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    directory = str(ROOT / "policies")
    assert main(["policy", "lint", "--policies", directory]) == 0
    with_flag = capsys.readouterr().out
    assert main(["policy", "lint", directory]) == 0  # the positional form keeps working
    assert capsys.readouterr().out == with_flag
    assert main(["policy", "lint", directory, "--policies", directory]) == 0  # the same one twice is fine
    capsys.readouterr()
    assert main(["policy", "lint", directory, "--policies", "other"]) == 2
    assert capsys.readouterr().err == (
        f"gpu-webhook policy lint: two directories given ({directory} and --policies other); give one\n"
    )


def test_policy_schema_prints_the_schema_file() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "policy", "schema"], capture_output=True, text=True, check=True
    )
    assert result.stdout == (ROOT / "schema" / "gpu-policy.schema.json").read_text()
