#!/usr/bin/env bash
# ansible-test sanity on the collection's plugins. ansible-test needs the collection at
# .../ansible_collections/gpufleet/cluster, so the files git knows of are copied there first.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)

# ansible-test bootstraps pip in its sanity environments with a script it downloads from a host this machine
# cannot reach; where no copy is cached, use the local stand-in that does the same (see get_pip_standin.py).
pip_version=$(python3 -c 'import re, ansible_test, os; print(re.search(r"pip=.([0-9.]+).", open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()).group(1))')
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -s "$cache" ]; then
    mkdir -p "$(dirname "$cache")"
    cp "$repo/tests/sanity/get_pip_standin.py" "$cache"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/gpufleet/cluster"
mkdir -p "$dest"
cd "$repo"
git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' | tar --null -T - -cf - | tar -C "$dest" -xf -
cd "$dest"
git init -q && git add -A   # ansible-test lists a collection's files through git
python_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
exec ansible-test sanity --color no --python "$python_version" "${@:-plugins/}"
