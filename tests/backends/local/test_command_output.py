"""A command's output read as it comes (``logfiles.output``, used by the release command
and by builds): nothing it writes just before it exits is lost."""

from __future__ import annotations

import subprocess
import time

from shipway.backends.local import logfiles


class ExitsWhenAsked(subprocess.Popen[bytes]):
    """A real process whose first ``poll()`` returns only once it has exited: what the
    scheduler does to a reader when the process writes its last line and exits right
    after a read that found nothing."""

    asked = False

    def poll(self) -> int | None:
        if not self.asked:
            self.asked = True
            self.wait()
        return super().poll()


def test_the_lines_written_just_before_the_exit_are_read() -> None:
    proc = ExitsWhenAsked(
        ["sh", "-c", "sleep 0.3; echo 'the error, then exit'; exit 3"],
        stdout=subprocess.PIPE,
    )
    got = list(logfiles.lines(logfiles.output(proc, time.monotonic() + 60)))
    assert got == [b"the error, then exit"]
    assert proc.returncode == 3


def test_output_ends_at_the_deadline_with_the_command_still_running() -> None:
    proc = subprocess.Popen(["sh", "-c", "echo started; exec sleep 600"], stdout=subprocess.PIPE)
    try:
        got = list(logfiles.lines(logfiles.output(proc, time.monotonic() + 1)))
        assert got == [b"started"]
        assert proc.poll() is None
    finally:
        proc.kill()
        proc.wait()


def test_lines_keep_a_last_line_without_its_newline() -> None:
    chunks = [b"one\ntw", b"o\n", b"", b"three"]
    assert list(logfiles.lines(chunks)) == [b"one", b"two", b"three"]
