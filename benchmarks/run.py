"""`make bench`: every benchmark in one run; writes BENCHMARKS.md and benchmarks/results/.

`scenarios` measures (raw JSON per run and `all.json` with everything in benchmarks/results/),
`analysis` derives the figures, `report` makes the report of them as data (`report.json`: the
summary table, then each section's text and tables) and the plots, and BENCHMARKS.md is rendered
from `report.json` through the template `BENCHMARKS.md.j2`.

    python benchmarks/run.py [--output BENCHMARKS.md] [--quick]
    python benchmarks/run.py --from-json benchmarks/results/all.json   # measure nothing
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import report
import scenarios
from scenarios import HERE, ROOT, Plan, say

RESULTS = HERE / "results"
QUICK = Plan(rounds=1, seconds=1.0, warmup=5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--quick", action="store_true", help="1 round of 1 s (a smoke test)")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="FILE",
        help="measure nothing: write the report and plots from a saved run's all.json",
    )
    parser.add_argument(
        "--rewrite",
        dest="from_json",
        action="store_const",
        const=RESULTS / "all.json",
        help="the same as --from-json benchmarks/results/all.json",
    )
    parser.add_argument(
        "--only",
        choices=scenarios.ONLY_SCENARIOS,
        help="measure only this section; the others are kept from benchmarks/results/all.json",
    )
    args = parser.parse_args()
    plan = QUICK if args.quick else Plan()
    if args.from_json:
        data = json.loads(args.from_json.read_text())
    elif args.only:
        data = json.loads((RESULTS / "all.json").read_text())
        data[args.only] = scenarios.measure_only(args.only, plan, RESULTS)
        (RESULTS / "all.json").write_text(json.dumps(data, indent=1))
    else:
        data = scenarios.measure(plan, RESULTS)
    report.draw(data, RESULTS)
    document = report.document(data)
    (RESULTS / "report.json").write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    args.output.write_text(report.render_markdown(document))
    say(f"wrote {args.output} and {RESULTS}/ ({data['elapsed_s'] / 60:.1f} min of measuring)")


if __name__ == "__main__":
    main()
