"""``python -m tests.simulation``: explore schedules of the sink's protocol.

Examples::

    python -m tests.simulation --schedules 500 --seed 1
    python -m tests.simulation --schedules 200 --shape stream --shape batch
    python -m tests.simulation --replay stream 1234 --faults 'crash:0@q.r0#12@fault:driver-after-decision'
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict

from tests.simulation.explorer import Result, fault_spec, known, parse_faults, run_one, shrink
from tests.simulation.shapes import KNOWN_DEFECTS, SHAPES


def _report(result: Result, trace_lines: int) -> None:
    print(f"\n=== {result.shape} seed {result.seed}: {len(result.faults)} fault(s), {result.steps} steps, "
          f"outcome {result.outcome}")
    for v in result.violations:
        mark = "  (known defect)" if known(result.shape, v) else ""
        print(f"  VIOLATION {v}{mark}")
    for f in result.faults:
        print(f"  fault: {f}")
    print(f"  replay: python -m tests.simulation --replay {result.shape} {result.seed} "
          f"--faults '{fault_spec(result.faults)}'")
    trace = result.trace if trace_lines <= 0 else result.trace[-trace_lines:]
    print(f"  trace ({len(trace)} of {len(result.trace)} lines):")
    for line in trace:
        print("    " + line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedules", type=int, default=100, help="schedules per shape (default 100)")
    ap.add_argument("--seed", type=int, default=1, help="first seed (default 1); schedule i uses seed + i")
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES), help="shape(s) to run (default: all)")
    ap.add_argument("--rate", type=float, default=0.02, help="fault probability per step (default 0.02)")
    ap.add_argument("--budget", type=int, default=4, help="faults per schedule at most (default 4)")
    ap.add_argument("--no-shrink", action="store_true", help="report failing schedules as found")
    ap.add_argument("--trace-lines", type=int, default=120, help="trace lines to print (0: all)")
    ap.add_argument("--replay", nargs=2, metavar=("SHAPE", "SEED"),
                    help="replay one schedule (SHAPE may be directed:NAME)")
    ap.add_argument("--faults", default="", help="with --replay: the schedule's faults (as printed)")
    args = ap.parse_args(argv)

    if args.replay:
        shape, seed = args.replay[0], int(args.replay[1])
        result = run_one(shape, seed, parse_faults(args.faults))
        _report(result, args.trace_lines)
        return 1 if result.violations else 0

    shapes = args.shape or sorted(SHAPES)
    started = time.perf_counter()
    stats: dict[str, Counter] = defaultdict(Counter)
    first: dict[tuple[str, str], Result] = {}  # the first schedule breaking each (shape, rule)
    for shape in shapes:
        for i in range(args.schedules):
            seed = args.seed + i
            result = run_one(shape, seed, rate=args.rate, budget=args.budget)
            s = stats[shape]
            s["schedules"] += 1
            s["steps"] += result.steps
            s["faults"] += len(result.faults)
            for f in result.faults:
                s[f"fault:{f.kind}"] += 1
            s[f"outcome:{result.outcome.split(':')[0]}"] += 1
            for rule in sorted(result.rules):
                s[f"violation:{rule}"] += 1
                first.setdefault((shape, rule), result)
    elapsed = time.perf_counter() - started

    print(f"{sum(s['schedules'] for s in stats.values())} schedules in {elapsed:.1f}s "
          f"(seeds {args.seed}..{args.seed + args.schedules - 1})")
    for shape in shapes:
        s = stats[shape]
        kinds = ", ".join(f"{k[6:]} {v}" for k, v in sorted(s.items()) if k.startswith("fault:"))
        outcomes = ", ".join(f"{k[8:]} {v}" for k, v in sorted(s.items()) if k.startswith("outcome:"))
        violations = ", ".join(f"{k[10:]} {v}" for k, v in sorted(s.items()) if k.startswith("violation:")) or "none"
        print(f"  {shape:<18} {s['schedules']} schedules, {s['steps']} steps, {s['faults']} faults injected "
              f"({kinds}); outcomes: {outcomes}; violations: {violations}")
    unknown = 0
    reported: set[tuple[str, int]] = set()
    for (shape, rule), result in sorted(first.items(), key=lambda kv: (kv[0][0], kv[1].seed, kv[0][1])):
        is_known = rule in KNOWN_DEFECTS.get(shape, (set(), ""))[0]
        unknown += not is_known
        if (shape, result.seed) in reported:
            continue
        reported.add((shape, result.seed))
        rules = {r for (sh, r), res in first.items() if sh == shape and res.seed == result.seed}
        if not args.no_shrink:
            result = shrink(result, rules)
        _report(result, args.trace_lines)
    return 1 if unknown else 0


if __name__ == "__main__":
    sys.exit(main())
