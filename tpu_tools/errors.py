"""Exception types, each meaning one thing, so the CLI and MCP layers can map them to exit codes / is_error."""

from __future__ import annotations


class MaxkernelError(Exception):
    """Base class."""


class UsageError(MaxkernelError):
    """The caller made a mistake: missing file, unknown task/target, bad argument (CLI exit 2)."""


class ReferenceLoadError(UsageError):
    """The reference module cannot be found, imported, or lacks the required names."""


class UnusableCaseError(UsageError):
    """An extra input case the reference itself cannot build or run: a verdict on the case, not the kernel."""


class ReferenceFailure(MaxkernelError):
    """The reference breaks on its own (import, create_inputs, jit, run): `reference_error`, never the kernel's."""

    def __init__(self, message: str, *, line: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.detail = detail


class CandidateLoadError(MaxkernelError):
    """The candidate file broke on import or lacks `workload` (a negative verdict, not a usage error)."""

    def __init__(self, message: str, *, line: int | None = None, detail: str = "") -> None:
        super().__init__(message)
        self.line = line
        self.detail = detail
