# SPDX-License-Identifier: GPL-3.0-or-later
"""`pip install .` installs the collection where ansible-core finds it with no configuration.

ansible-core looks for collections in an ``ansible_collections`` folder on its Python's ``sys.path`` too (the
``ansible`` package ships its collections that way), so the wheel puts this checkout's collection content at
``site-packages/ansible_collections/gpufleet/cluster/``. Then ``ansible-playbook gpufleet.cluster.train -i hosts.yml
-e script=train.py`` works from any folder. Everything else is in pyproject.toml.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

COLLECTION = "ansible_collections.gpufleet.cluster"
# The collection's content, as ansible-galaxy's tarball has it, less the tests and the developers' tooling.
FOLDERS = ["meta", "plugins", "roles", "playbooks", "inventories", "examples", "docs"]
FILES = ["galaxy.yml", "README.md", "LICENSE", "CHANGELOG.rst"]


def packages() -> dict[str, list[str]]:
    """Every folder of the content as a package, with every file in it as its data."""
    found = {COLLECTION: [name for name in FILES if os.path.exists(name)]}
    for top in FOLDERS:
        for folder, folders, files in os.walk(top):
            folders[:] = sorted(name for name in folders if name != "__pycache__")
            found[COLLECTION + "." + folder.replace(os.sep, ".")] = sorted(
                name for name in files if not name.endswith(".pyc"))
    return found


class BuildContent(build_py):
    """Builds the content alone: this file sits in the collection's root folder but is not part of it."""

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        return [found for found in super().find_package_modules(package, package_dir)
                if not (package == COLLECTION and found[1] == "setup")]


CONTENT = packages()
setup(
    cmdclass={"build_py": BuildContent},
    packages=sorted(CONTENT),
    package_dir={COLLECTION: "."},
    package_data=CONTENT,
    include_package_data=False,
)
