"""Stream timelines of a `Session` at pipeline depth 1 and 2 under the emulator's timing model.

`record` runs batches through a session in this process with the emulator's engine trace on and
returns when each engine (copy in, execute, copy out) was busy; `draw` puts the runs one above the
other, one bar per batch on each engine, colored by batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ge_python_backend.emulator import timing
from ge_python_backend.runtime import Session

ENGINES = (("h2d", "copy in"), ("execute", "execute"), ("d2h", "copy out"))


def record(om: Path, depth: int, batches: int, rows: int, spec: str) -> list[dict[str, Any]]:
    """Run `batches` batches of `rows` rows; per engine span {engine, batch, start, end} in ms."""
    feeds = [
        {"x": np.random.default_rng(k).standard_normal((rows, 64)).astype(np.float32)}
        for k in range(batches)
    ]
    timing.set_timing(spec)
    try:
        with Session(om, runtime="emulator", pipeline_depth=depth) as session:
            session.infer(feeds[0])  # warm
            timing.start_trace()
            if depth == 1:
                for batch in feeds:
                    session.infer(batch)
            else:
                pending = [session.infer_async(batch) for batch in feeds]
                for p in pending:
                    p.result()
            spans = timing.stop_trace()
    finally:
        timing.set_timing(None)
    origin = min(start for _, _, start, _ in spans)
    seen: dict[str, int] = {}
    result = []
    for _, engine, start, end in spans:  # each engine serves the batches in submission order
        batch = seen.get(engine, 0)
        seen[engine] = batch + 1
        result.append(
            {
                "engine": engine,
                "batch": batch,
                "start_ms": (start - origin) * 1e3,
                "end_ms": (end - origin) * 1e3,
            }
        )
    return result


def draw(runs: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    """One panel per run (label -> spans), engines as rows, a bar per batch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    end = max(span["end_ms"] for spans in runs.values() for span in spans)
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(11, 1.6 + 1.3 * len(runs)), sharex=True, constrained_layout=True
    )
    colors = plt.get_cmap("tab10")
    for axis, (label, spans) in zip(np.atleast_1d(axes), runs.items()):
        for row, (engine, _) in enumerate(ENGINES):
            for span in (s for s in spans if s["engine"] == engine):
                width = span["end_ms"] - span["start_ms"]
                axis.broken_barh(
                    [(span["start_ms"], width)],
                    (row - 0.4, 0.8),
                    facecolors=colors(span["batch"] % 10),
                    edgecolor="black",
                    linewidth=0.5,
                )
                axis.text(
                    span["start_ms"] + width / 2, row, str(span["batch"]), ha="center", va="center"
                )
        axis.set_yticks(range(len(ENGINES)), [name for _, name in ENGINES])
        axis.set_ylim(len(ENGINES) - 0.5, -0.5)
        axis.set_xlim(0, end * 1.02)
        last = max(s["end_ms"] for s in spans)
        axis.set_title(f"{label}: {last:.1f} ms", loc="left", fontsize=10)
    np.atleast_1d(axes)[-1].set_xlabel("ms since the first copy (bar label: batch number)")
    fig.suptitle(title)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
