"""The ``refset`` command: its arguments parsed, the command run, and what it raises turned into one
line on stderr and an exit status: 0 ok, 1 invalid input (or a failed read), 2 usage.

Each command is a module of this package (``info``, ``validate``, ``ls``, ``cat``, ``convert``,
``scan``, ``combine``, ``demo``) over the library; the parser is :mod:`refset.cli.parser`, what the
commands share :mod:`refset.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from refset.cli.common import (
    EXIT_INVALID,
    EXIT_OK,
    EXIT_USAGE,
    NotInstalled,
    UsageError,
    _check_args,
    _remote,
)
from refset.cli.parser import build_parser

__all__ = ["build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``refset`` with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    a = parser.parse_args(argv)
    from refset.errors import (
        InvalidOption,
        InvalidReferences,
        ReferenceNotReachable,
        RefsetError,
        Unsupported,
    )

    try:
        _check_args(a)
        status = int(a.func(a))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except BrokenPipeError:  # the reader left (`refset ls ... | head`): what it wanted was written
        _silence_stdout()
        return EXIT_OK
    except (UsageError, InvalidOption) as e:
        sys.stderr.write(f"refset {a.command}: error: {e}\n")
        return EXIT_USAGE
    except (InvalidReferences, Unsupported) as e:
        text = str(e)  # one problem on the same line, several below it
        sys.stderr.write(f"refset {a.command}: invalid input:" + ("\n" if "\n" in text else " ") + text + "\n")
        return EXIT_INVALID
    except NotInstalled as e:
        sys.stderr.write(f"refset {a.command}: {e}\n")
        return EXIT_INVALID
    except FileNotFoundError as e:
        sys.stderr.write(f"refset {a.command}: not found: {e}\n")
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except Exception as e:
        if os.environ.get("REFSET_DEBUG") == "1":  # every line below, with its traceback
            import traceback

            traceback.print_exc()
        if _is_access_error(e):
            sys.stderr.write(f"refset {a.command}: {_access_message(a, e)}\n")
        elif isinstance(e, ReferenceNotReachable | RefsetError):
            sys.stderr.write(f"refset {a.command}: {e}\n")
        elif isinstance(e, OSError):  # named after what was read, unless the message names it
            subject = _subject(a)
            said = _one_line(e)
            sys.stderr.write(f"refset {a.command}: " + ("" if subject in said else f"{subject}: ") + said + "\n")
        elif isinstance(e, KeyError):
            sys.stderr.write(f"refset {a.command}: no such key: {e}\n")
        else:  # a failure nothing above foresaw: one line; the traceback with REFSET_DEBUG=1
            sys.stderr.write(f"refset {a.command}: error: {type(e).__name__}: {_one_line(e)}\n")
        return EXIT_INVALID


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or "(no message)"


def _is_access_error(e: BaseException) -> bool:
    """Credentials missing or refused, an endpoint unreachable: botocore's errors, or the
    PermissionError s3fs turns a refusal into."""
    root = type(e).__module__.split(".")[0]
    return root in ("botocore", "aiobotocore") or (isinstance(e, PermissionError) and "s3://" in str(e))


def _subject(a: argparse.Namespace) -> str:
    """The input a command reads first (its set, IN, or first FILE/INPUT)."""
    return next((v if isinstance(v, str) else v[0] for v in (
        getattr(a, n, None) for n in ("refs", "input", "files", "inputs")) if v), "?")


def _access_message(a: argparse.Namespace, e: BaseException) -> str:
    """One line: what was being read (or written), why it failed, and the options that give
    credentials."""
    subject = _subject(a)
    said = _one_line(e)
    out = getattr(a, "output", None)
    verb = "read"
    if isinstance(out, str) and _remote(out) and (
            (a.command in ("scan", "convert") and not _remote(subject))  # they read no remote data
            or (urlsplit(out).netloc and urlsplit(out).netloc in said)):
        where, flag, verb = out, "--storage-options", "write"
    elif _remote(subject):
        where, flag = subject, "--storage-options"
    else:  # a local set: the data files it points into
        where = f"the data files {subject} points into"
        flag = "--remote-options" if hasattr(a, "remote_options") else "--storage-options"
    if re.search(r"credential|access ?denied|forbidden|signature|permission", type(e).__name__ + said, re.I):
        hint = (f"public S3 data: {flag} '{{\"anon\": true}}' or FSSPEC_S3_ANON=true; else AWS credentials "
                "(environment or profile)")
    else:
        hint = f"check the endpoint or network; fsspec options go in {flag}"
    return f"cannot {verb} {where}: {said} ({hint})"


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's last flush cannot fail again."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError):  # stdout without a file descriptor (captured in tests)
        pass
