"""The crash tests' faults read from a file, one run after another in one driver, and the
choice of which runs may share that driver (kafka_eos_tools.faults, integration.warm_driver)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from integration.warm_driver import runs_warm
from kafka_eos_ds.twophase import faults
from kafka_eos_tools import faults as injection


@pytest.fixture
def fault_file(monkeypatch, tmp_path):
    """A hooked process whose faults come from a file, as the warm driver's workers."""
    for name in (injection.ENV, injection.GATE_ENV, injection.COUNTS_ENV):
        monkeypatch.delenv(name, raising=False)
    path = str(tmp_path / "faults.json")
    monkeypatch.setenv(injection.FILE_ENV, path)
    faults.install(injection.inject)
    yield path
    faults.install(None)


def test_each_run_gets_the_faults_of_the_file_as_it_is_at_each_check(fault_file):
    faults.check("commit-raise", batch=1)               # no file yet: no fault
    injection.write_file(fault_file, "commit-raise@1")
    with pytest.raises(injection.InjectedFault):
        faults.check("commit-raise", batch=1)
    injection.write_file(fault_file, None)              # the next run: no fault
    faults.check("commit-raise", batch=1)
    injection.write_file(fault_file, "task-before-precommit@2#1:raise")
    faults.check("commit-raise", batch=1)
    with pytest.raises(injection.InjectedFault):
        faults.check("task-before-precommit", batch=2, partition=1, attempt=0)


def test_an_unchanged_file_is_not_read_again(fault_file, monkeypatch):
    injection.write_file(fault_file, "driver-after-decision@7:raise")
    reads = []
    load = injection.json.load
    monkeypatch.setattr(injection.json, "load", lambda f: reads.append(1) or load(f))
    for _ in range(5):
        faults.check("driver-after-decision", batch=1)
    assert len(reads) <= 1
    injection.write_file(fault_file, "driver-after-decision@1:raise")
    with pytest.raises(injection.InjectedFault):
        faults.check("driver-after-decision", batch=1)
    assert len(reads) <= 2


def test_the_nth_match_counts_per_run_in_the_files_directory(fault_file, tmp_path):
    for run in ("run-1", "run-2"):  # each run counts afresh, in its own directory
        injection.write_file(fault_file, "commit-raise@1*2", counts=str(tmp_path / run))
        faults.check("commit-raise", batch=1)
        with pytest.raises(injection.InjectedFault):
            faults.check("commit-raise", batch=1)
        faults.check("commit-raise", batch=1)


def test_the_gate_is_the_one_the_file_names(fault_file, tmp_path, monkeypatch):
    gate = tmp_path / "gate"
    injection.write_file(fault_file, "driver-after-reading-decision:gate", gate=str(gate))
    monkeypatch.setattr(injection, "GATE_WAIT_S", 0.2)  # nobody opens it: the point gives up
    with pytest.raises(injection.InjectedFault, match="not opened"):
        faults.check("driver-after-reading-decision")
    assert gate.read_text() == "driver-after-reading-decision"


def test_the_file_environment_names_the_hook_and_the_file():
    assert injection.file_environment("/tmp/f.json") == {
        "KAFKA_EOS_FAULT_FILE": "/tmp/f.json", "KAFKA_EOS_FAULT_HOOK": "kafka_eos_tools.faults:inject"}


def test_a_process_started_with_the_hook_may_import_the_tooling_first(tmp_path):
    """The warm driver's process has the hook in its environment and imports this module
    before the product; the product's import then loads the hook from it, half imported."""
    env = {**os.environ, **injection.file_environment(str(tmp_path / "faults.json"))}
    code = ("import kafka_eos_tools.faults as tooling\n"
            "from kafka_eos_ds.twophase import faults\n"
            "assert faults._hook is tooling.inject, faults._hook\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("spec", [
    "driver-before-decision@1",                      # kill by default: the JVM's process group
    "driver-after-first-commit@1:kill",
    "driver-after-done@1:exit",
    "driver-after-all-commits@1*2",
    "commit-raise@1,driver-after-decision@3",         # one killing item is enough
    "driver-after-decision@x",                        # does not parse: the safe side
])
def test_a_fault_that_can_end_the_driver_needs_a_driver_of_its_own(spec):
    assert injection.kills_driver(spec)
    assert not runs_warm(spec)


@pytest.mark.parametrize("spec", [
    None,
    "",
    "task-before-precommit@3#0!0",                    # kills a task's Python worker only
    "task-after-precommit@14#1!0:exit",
    "commit-raise@1",                                 # raises by default
    "commit-raise:kill",                              # not a driver-* point: this worker only
    "driver-after-first-commit@1:raise",
    "driver-before-decision@1:sleep30",
    "driver-after-reading-decision:gate",
    "commit-raise@1,driver-after-reading-decision@1:gate",
])
def test_a_fault_that_leaves_the_driver_running_may_share_one(spec):
    assert not injection.kills_driver(spec)
    assert runs_warm(spec)
    assert runs_warm(spec, ["--foreach-batch", "--file-path", "/tmp/out", "--txn-app-id", "app"])


@pytest.mark.parametrize("job_args", [["--jars", "/x.jar"], ["--jars=/x.jar"], ["--master", "local[1]"]])
def test_a_run_that_needs_its_own_session_gets_its_own_driver(job_args):
    assert not runs_warm(None, job_args)
