"""A local stand-in for pip's get-pip.py bootstrap script, which ansible-test downloads from a host CI cannot reach.

ansible-test runs it inside each fresh sanity virtual environment as
``get_pip.py --disable-pip-version-check pip==X [setuptools==Y ...] [--no-setuptools] [--no-wheel]``.
It does what get-pip.py does with those arguments: puts a pip into the running
environment (here with the standard library's ensurepip) and then installs the
exact packages asked for, from the package index this machine reaches.
"""

import subprocess
import sys

# In a child process: ensurepip.bootstrap() would set PIP_CONFIG_FILE=/dev/null in this process's environment,
# and the pip below must read the machine's pip configuration (its index and CA bundle).
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet"] + args)
