"""`python -m ge_python_backend.devicehost --device N`: the device host without the CLI (what a
stub starts; a vendored runtime has the device host but not the tools)."""

import argparse
import sys

from ge_python_backend.devicehost.host import add_arguments, main

parser = argparse.ArgumentParser(
    prog="python -m ge_python_backend.devicehost",
    description="the device host of one NPU (ge-python-model device-host --help says more)",
)
add_arguments(parser)
sys.exit(main(parser.parse_args()))
