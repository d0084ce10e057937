"""missing_packages: the install tasks of the roles skip what package_facts found."""

from ansible_collections.gpufleet.cluster.plugins.filter.missing_packages import missing_packages

FACTS = {"packages": {"openmpi-bin": [{"version": "4.1.4-3"}], "make": [{"version": "4.3-4.1"}], "g++": []}}


def test_only_what_is_not_installed_is_missing_in_order():
    assert missing_packages(["libopenmpi-dev", "openmpi-bin", "g++", "make"], FACTS) == ["libopenmpi-dev", "g++"]
    assert missing_packages(["openmpi-bin", "make"], FACTS) == []


def test_without_gathered_packages_everything_is_missing():
    """A role run on its own (no package_facts): its install task runs as it always did."""
    assert missing_packages(["make"], {"os_family": "Debian"}) == ["make"]
    assert missing_packages(["make"], {}) == ["make"]
    assert missing_packages("openssh-client", None) == ["openssh-client"]
