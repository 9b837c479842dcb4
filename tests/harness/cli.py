"""What a failed command must print: exactly one stderr line, no traceback, a non-zero exit."""

from __future__ import annotations


def one_error_line(rc: int | None, err: str) -> str:
    """The single non-blank stderr line of a command that failed with ``rc`` (asserted non-zero)."""
    assert rc not in (0, None), f"exit {rc}; stderr: {err[-500:]}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    return lines[0]


def one_line_from(main, capsys, argv: list[str]) -> str:
    """Run a command's ``main(argv)`` in-process: exit status 1 and exactly one stderr line; that line."""
    rc = main(argv)
    assert rc == 1, f"exit {rc}"
    return one_error_line(rc, capsys.readouterr().err)
