"""The product's wheel holds the product: no tooling, tests or benchmarks, and its command
is the product's own."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_the_product_only(tmp_path):
    # Built from a copy of the checkout's files: setuptools builds in the source tree.
    source = tmp_path / "source"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
                           str(source)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = tmp_path.glob("kafka_eos_ds-*.whl")
    import kafka_eos_ds  # the one version string, which the wheel takes
    assert wheel.name.startswith(f"kafka_eos_ds-{kafka_eos_ds.__version__}-"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert {"kafka_eos_ds", "pyspark_kafka_eos.py", "pyspark_kafka_eos_file.py"} <= tops
    assert not tops & {"kafka_eos_tools", "tests", "integration", "scripts", "docs"}, sorted(tops)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    parsed = configparser.ConfigParser()
    parsed.read_string(zipfile.ZipFile(wheel).read(entry_points).decode())
    assert dict(parsed["console_scripts"]) == {"kafka-eos": "kafka_eos_ds.cli:main"}
