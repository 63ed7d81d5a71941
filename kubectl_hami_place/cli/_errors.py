"""The CLI's own errors and its exit codes: one place decides what number the shell sees."""

from __future__ import annotations

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_BLOCKED = 4
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure to report as `error: <cause>; <what to do>` lines with an exit code."""

    exit_code = EXIT_ERROR

    def __init__(self, cause: str, hint: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.hint = hint

    def lines(self) -> list[str]:
        """The lines to print after `error: `."""
        return [f"{self.cause}; {self.hint}" if self.hint else self.cause]


class UsageProblem(CliError):
    """The command line itself is wrong: a bad flag value, a malformed selector or card reference."""

    exit_code = EXIT_USAGE


class Refused(CliError):
    """The request is well-formed but the cluster's state says it cannot work; one line per reason."""

    exit_code = EXIT_REFUSED

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(reasons[0] if reasons else "refused")
        self.reasons = reasons

    def lines(self) -> list[str]:
        """One line per failing check."""
        return list(self.reasons)
