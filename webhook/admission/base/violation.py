"""One reason to refuse an object, in the two lengths its readers need.

`line` is the whole sentence: container, resource as written, value, rule and what to do instead. It is what
a denial carries (kubectl prints it after `denied the request:`), what the CLI prints and what the log keeps.
`short` says the same in a form that fits an admission warning (the API server's advice is 120 characters,
the `gpu-admission: ` prefix included): what is wrong and what to do, never cut in the middle of its advice.
"""

from __future__ import annotations

from dataclasses import dataclass

WARNING_PREFIX = "gpu-admission: "
WARNING_LIMIT = 120  # the API server's advice for one warning; review.limit_warnings holds every warning to it
SHORT_LIMIT = WARNING_LIMIT - len(WARNING_PREFIX)


def cut(text: str, limit: int = WARNING_LIMIT, mark: str = "...") -> str:
    """`text` as it is when it fits in `limit` characters, else its start and `mark` in exactly `limit`: the
    one way a warning, a short form, a value or a name in a message is shortened."""
    return text if len(text) <= limit else text[: limit - len(mark)] + mark


@dataclass(frozen=True, slots=True)
class Violation:
    line: str  # the whole sentence
    short: str  # at most SHORT_LIMIT characters

    def __str__(self) -> str:
        return self.line


@dataclass(frozen=True, slots=True)
class Refusal(Violation):
    """A violation that the API server's own validation refuses too, whatever the policy's enforcement."""


APISERVER_TOO = "the API server refuses it anyway"
