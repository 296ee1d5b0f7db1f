"""Driver-step micro-benchmark: the Kafka sink's commit-log work per micro-batch, without
Spark, against one broker.

Each batch runs the log work of the sink's two driver steps on a fresh
:class:`~kafka_eos_ds.kafka_sink.decision_log.KafkaDecisionLog` each, as ``kafka_sink`` does:

* planner check: ensure the topic, fence the decision writer, read the writer's latest
  decision twice and the sink's latest stream decision (``committer.recover``'s reads);
* commit: ensure the topic, fence the writer, two reads, write the decision.

It reports medians and p90 per step and the Kafka clients built per batch (consumers,
producers, admins). ``--compare A B`` starts one embedded broker and runs the bench from
two source trees in alternating child processes (A, B, A, B, ...), each on its own topic,
with the machine's load beside each figure::

    python -m bench.driver_steps --compare /tmp/before $PWD --batches 40 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.9 * (len(ordered) - 1))))]


def run(bootstrap: str, batches: int) -> dict[str, Any]:
    from kafka_eos_ds.kafka_sink import commit_log, decision_log
    from kafka_eos_ds.twophase.protocol import DECIDED, DONE, Decision

    built = {"consumer": 0, "producer": 0, "admin": 0}

    class Counting(commit_log.LogClients):
        def admin(self, conf: Any) -> Any:
            built["admin"] += 1
            return super().admin(conf)

        def producer(self, conf: Any) -> Any:
            built["producer"] += 1
            return super().producer(conf)

        def consumer(self, conf: Any) -> Any:
            built["consumer"] += 1
            return super().consumer(conf)

    conf = {"bootstrap.servers": bootstrap}
    topic = f"bench-log-{uuid.uuid4().hex[:8]}"
    prefix = "bench"
    key = f"q:{uuid.uuid4()}"

    def step(reads: int, decide: int | None) -> float:
        began = time.perf_counter()
        log = decision_log.KafkaDecisionLog(conf, topic, prefix, clients=Counting())
        try:
            log.ensure_topic()
            log.fence_writers()
            for _ in range(reads):
                log.latest(key)
            if reads == 3:
                log.latest_of("q")
            if decide is not None:
                log.write(key, Decision(key[2:], decide, DECIDED))
                log.write(key, Decision(key[2:], decide, DONE))
        finally:
            log.close()
        return (time.perf_counter() - began) * 1000

    step(1, 0)  # create the topic, warm the process (not timed)
    planner: list[float] = []
    commit: list[float] = []
    before = dict(built)
    for batch in range(1, batches + 1):
        planner.append(step(2, None))
        commit.append(step(2, batch))
    per_batch = {k: (built[k] - before[k]) / batches for k in built}
    return {"planner_ms": planner, "commit_ms": commit, "clients_per_batch": per_batch}


def summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in ("planner_ms", "commit_ms"):
        values = [v for r in results for v in r[name]]
        out[name] = {"median": round(statistics.median(values), 1), "p90": round(_p90(values), 1), "n": len(values)}
    out["clients_per_batch"] = results[-1]["clients_per_batch"]
    out["load"] = [r["load"] for r in results]
    return out


def compare(trees: list[str], batches: int, rounds: int, given: str | None = None) -> dict[str, Any]:
    from bench.cluster import bench_kafka

    results: dict[str, list[dict[str, Any]]] = {t: [] for t in trees}
    with bench_kafka(given) as (bootstrap, _):
        for _ in range(rounds):
            for tree in trees:
                env = dict(os.environ, PYTHONPATH=tree)
                load = os.getloadavg()[0]
                child = subprocess.run(
                    [sys.executable, "-c",
                     "import json,sys; from bench.driver_steps import run; "
                     f"print(json.dumps(run({bootstrap!r}, {batches})))"],
                    env=env, capture_output=True, text=True, timeout=600, cwd=tree, check=True)
                result = json.loads(child.stdout.strip().splitlines()[-1])
                result["load"] = round(load, 2)
                results[tree].append(result)
    return {tree: summary(rs) for tree, rs in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="a broker to use (default: an embedded one)")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the trees (with --compare)")
    parser.add_argument("--compare", nargs="+", metavar="TREE", help="source trees to run alternately")
    args = parser.parse_args()
    if args.compare:
        print(json.dumps(compare(args.compare, args.batches, args.rounds, args.bootstrap), indent=1))
        return
    from bench.cluster import bench_kafka

    with bench_kafka(args.bootstrap) as (bootstrap, _):
        result = run(bootstrap, args.batches)
        result["load"] = round(os.getloadavg()[0], 2)
        print(json.dumps(summary([result]), indent=1))


if __name__ == "__main__":
    main()
