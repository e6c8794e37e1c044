"""Progress lines of the long commands (`progress.Progress`): one line a step, none when quiet."""

from __future__ import annotations

import io

from ge_python_backend.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_only_the_finished_steps_are_written() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.begin("model 1 of 2 'a': migrating")
    progress.done("model 1 of 2 'a': converted")
    progress.done("model 2 of 2 'b': copied")
    assert stream.getvalue() == "model 1 of 2 'a': converted\nmodel 2 of 2 'b': copied\n"


def test_on_a_terminal_a_step_under_way_is_replaced_by_its_result() -> None:
    stream = Terminal()
    progress = Progress(stream)
    progress.begin("trial 1 of 3: probing")
    progress.begin("trial 1 of 3: probing.")
    progress.done("trial 1 of 3: 900 rows/s")
    progress.done("confirmation: kept")
    assert stream.getvalue() == (
        "\r\x1b[Ktrial 1 of 3: probing\r\x1b[Ktrial 1 of 3: probing."
        "\r\x1b[Ktrial 1 of 3: 900 rows/s\nconfirmation: kept\n"
    )


def test_quiet_writes_nothing_even_on_a_terminal() -> None:
    stream = Terminal()
    progress = Progress(stream, quiet=True)
    progress.begin("under way")
    progress.done("done")
    assert stream.getvalue() == ""
