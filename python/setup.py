"""`pip install ./python`: the ringmaster package, with its gRPC stubs generated first.

The stubs (ringmaster/_proto) are generated from ../proto/ringmaster/v1 by generate_stubs.sh, which
does nothing when they are up to date (tools/setup already ran it).
"""

import os
import subprocess

from setuptools import setup

here = os.path.dirname(os.path.abspath(__file__))
subprocess.run([os.path.join(here, "generate_stubs.sh")], check=True)
setup()
