"""missing_packages: the install tasks of the roles skip what provision.yml's package read found installed."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.cluster.plugins.filter.missing_packages import missing_packages

INSTALLED = {"openmpi-bin": [{"version": "4.1.4-3"}], "make": [{"version": "4.3-4.1"}], "g++": []}


def test_only_what_is_not_installed_is_missing_in_order():
    assert missing_packages(["libopenmpi-dev", "openmpi-bin", "g++", "make"], INSTALLED) == ["libopenmpi-dev", "g++"]
    assert missing_packages(["openmpi-bin", "make"], INSTALLED) == []


def test_without_a_package_read_everything_is_missing():
    """A role run on its own (provision.yml's read not there): its install task runs as it always did."""
    assert missing_packages(["make"], None) == ["make"]
    assert missing_packages("openssh-client", None) == ["openssh-client"]
    assert missing_packages(["make"], {}) == ["make"]


def test_unread_none_says_nothing_is_missing_where_the_packages_were_not_read():
    """A role that reads its packages itself: without provision.yml's read it reads (nothing known missing); with it,
    the read answers as without the option."""
    assert missing_packages(["libnccl2", "libnccl-dev"], None, unread="none") == []
    assert missing_packages(["libopenmpi-dev", "make"], INSTALLED, unread="none") == ["libopenmpi-dev"]


def test_an_unknown_unread_is_refused():
    with pytest.raises(AnsibleFilterError, match="unread='some'"):
        missing_packages(["make"], None, unread="some")
