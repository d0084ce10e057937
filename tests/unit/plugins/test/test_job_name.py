"""The job_name Jinja test applies the modules' own job-name rule."""

import pytest

from ansible_collections.gpufleet.cluster.plugins.test import job_name as plugin

job_name = plugin.job_name


@pytest.mark.parametrize("name", ["train", "llama-ft.v2", "a_b", "9lives", "x" * 63])
def test_valid_names(name):
    assert job_name(name) is True


@pytest.mark.parametrize("name", ["a/b", "a b", "", "../x", ".hidden", "-x", "x" * 64, None, 5])
def test_invalid_names(name):
    assert job_name(name) is False


def test_registered_as_job_name():
    assert plugin.TestModule().tests()["job_name"] is job_name
