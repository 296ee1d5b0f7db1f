"""Shapes of several writers on one sink (one ``transactionalIdPrefix``).

* ``app-writes``: ``df.write`` jobs with ``txnAppId``/``txnVersion`` (Delta Lake's names):
  one or two apps, each writing its versions in order (two apps at once); a version whose
  job failed is run again by its user (up to three times), and one in three that
  succeeded is run again all the same: a run of a version already written adds nothing.
  A version's rows are visible exactly once if one of its runs succeeded, all or none.
* ``two-streams``: two streaming queries (two checkpoints) on one prefix, started a few
  seconds apart. They share the stream's transactional ids, which the sink does not
  support; it must notice and stop one loudly (a TransactionError naming both queries)
  instead of losing or duplicating anything silently. A query that finished shows all of
  its output exactly once; a query that stopped loudly shows none of its output twice.
"""

from __future__ import annotations

import random
from typing import Callable

from tests.simulation.invariants import Oracle
from tests.simulation.scenario import Scenario, epochs
from tests.simulation.sinks import KafkaSink
from tests.simulation.spark_jobs import BatchJob, loud_partial
from tests.simulation.spark_shapes import StreamQuery
from tests.simulation.world import World

RUNS_PER_VERSION = 3
CONFLICT = "both write with this sink's transactional ids"


def _app_writes(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    sink = KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    epochs(w, rng)
    apps = [f"app{a}" for a in range(rng.randint(1, 2))]
    versions = {app: [[(p, o) for p in range(rng.randint(1, 2)) for o in range(rng.randint(1, 3))]
                      for _ in range(rng.randint(1, 3))] for app in apps}
    tasks = {app: rng.randint(1, 2) for app in apps}
    runs: dict[str, list[BatchJob]] = {}  # label (app.vN) -> its runs
    written = {app: 0 for app in apps}     # versions the app's user got through

    def user(app: str) -> None:
        for version in range(written[app], len(versions[app])):
            label = f"{app}.v{version}"
            mine = runs.setdefault(label, [])
            for attempt in range(RUNS_PER_VERSION):
                job = BatchJob(w, oracle, f"{label}.run{len(mine)}", sink, versions[app][version], tasks[app], label,
                               options={"txnAppId": app, "txnVersion": str(version)})
                mine.append(job)
                job.supervise()
                if job.outcome == "ok" and (attempt or w.sched.rng().random() >= 1 / 3):
                    break
            if mine[-1].outcome != "ok" and all(j.outcome != "ok" for j in mine):
                return  # versions go in order: a user does not go on past a version that keeps failing
            written[app] = version + 1

    def main() -> None:
        users = [w.sched.spawn(f"{app}.user", lambda app=app: user(app), "user") for app in apps]
        w.sched.wait_until(lambda: all(u.done for u in users))
        # After the faults, each user goes on from the version it stopped at: a decided
        # version is finished by running it again (what the failed run's error says to do).
        w.plan.budget = len(w.plan.injected)
        for app in apps:
            user(app)
        for label, jobs in runs.items():
            if not any(j.outcome == "ok" for j in jobs) and not any(loud_partial(j.outcome)
                                                                    for j in jobs):
                oracle.fail("stuck", f"{label} failed on every run, also after the faults: {jobs[-1].outcome}")

    def finals() -> None:
        visible = sink.visible(w, oracle)
        expected = {label: jobs[0].values() for label, jobs in runs.items()}
        complete = {label: any(j.outcome == "ok" for j in jobs) for label, jobs in runs.items()}
        oracle.check_outputs(visible, expected, complete)
        shown = {v for values in visible.values() for v in values}
        for label, jobs in runs.items():
            if not any(loud_partial(j.outcome) for j in jobs):
                oracle.check_atomic(label, jobs[0].values(), shown)
        oracle.check_decided()

    def outcome() -> str:
        missing = sum(len(v) for v in versions.values()) - sum(any(j.outcome == "ok" for j in jobs)
                                                               for jobs in runs.values())
        return f"{missing} version(s) not written" if missing else "all written"

    return Scenario(main, finals, outcome=outcome)


def _two_streams(w: World, oracle: Oracle, rng: random.Random) -> Scenario:
    sink = KafkaSink(out_partitions=rng.randint(1, 2))
    sink.setup(w, oracle)
    epochs(w, rng)
    counts = [rng.randint(1, 5) for _ in range(rng.randint(1, 2))]
    queries = [StreamQuery(w, oracle, f"q{i}", sink, counts, rng.randint(1, 3), check_leftovers=False)
               for i in range(2)]
    starts = [0.0, rng.uniform(0.0, 20.0)]

    def main() -> None:
        users = []
        for q, start in zip(queries, starts, strict=True):
            def run(q: StreamQuery = q, start: float = start) -> None:
                w.sched.sleep(start)
                q.supervise()

            users.append(w.sched.spawn(f"{q.name}.user", run, "user"))
        w.sched.wait_until(lambda: all(u.done for u in users))

    def finals() -> None:
        visible = sink.visible(w, oracle)
        oracle.check_outputs(visible, {q.label: q.expected() for q in queries},
                             {q.label: q.outcome == "finished" for q in queries})
        ids = {q.query_id for q in queries}
        for q in queries:
            if q.outcome == "stuck":
                oracle.fail("stuck", f"{q.name} failed on each of its restarts; last errors: {q.errors[-2:]}")
            if q.outcome != "loud":
                continue
            # Its decisions were made beside another query's on the same ids: what they lost
            # is what the loud stop announces.
            oracle.excused_queries.add(q.query_id)
            conflict = [e for e in q.errors if CONFLICT in e]
            if conflict and not all(i in conflict[-1] for i in ids):
                oracle.fail("unnamed-conflict", f"{q.name} stopped on a conflict that does not name both queries: "
                                                f"{conflict[-1]}")
        oracle.check_decided()

    return Scenario(main, finals, outcome=lambda: "/".join(q.outcome for q in queries))


WRITE_SHAPES: dict[str, Callable[[World, Oracle, random.Random], Scenario]] = {
    "app-writes": _app_writes,
    "two-streams": _two_streams,
}
