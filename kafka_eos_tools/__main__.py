"""``python -m kafka_eos_tools``: the tooling's commands (broker, demo, audit) beside the
product's (transactions). The tooling is used from a checkout; the product's wheel does
not contain it."""

import sys

from kafka_eos_tools.cli import main

sys.exit(main())
