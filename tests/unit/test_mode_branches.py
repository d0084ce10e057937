"""Issue 26: the difference between ssh and Slurm, and between the host and a container image, lives in the
scheduler and runtime strategies; the rest of the code asks them instead of testing the mode itself.

What this checks: every line of plugins/, roles/job/ and playbooks/ (comments left out) that tests which scheduler
or runtime a job uses (the patterns below), outside the strategies' own files, is one of the places listed here;
a new one fails the test with its file and line. What it does not check: a branch written in a way the patterns
do not catch (they are read against the code's own idioms: a scheduler name compared, ``_job_slurm``, the
submitted Slurm job's id, ``_job_container``, ``container`` and ``container_engine`` tests).
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]

SLURM_BRANCH = re.compile(
    r"""(==|!=)\s*['"]slurm['"]|['"]slurm['"]\s*(==|!=)|\b_job_slurm\b|_job_slurm_job_id\s*!="""
    r"""|\bif\b.*\bslurm(_job_id|_node)?\b['"]?\)?\s*(is|:|and|or|$)|\bif\s+(not\s+)?slurm\b""")
CONTAINER_BRANCH = re.compile(
    r"""\bif\s+(not\s+)?_job_container\b|_job_container\s+is\s+(not\s+)?none|\bif\s+(not\s+)?\(?container\b"""
    r"""|\bif\b.*container_(engine|image)\b|\bcontainer\s+and\b|\bnot\s+container\b|\(container\s+or\b"""
    r"""|when:.*_job_container""")

# The strategies: what differs between the modes is written here, and only here.
SLURM_STRATEGY = {
    "plugins/module_utils/_runtime/schedulers.py", "plugins/module_utils/_runtime/slurm_jobs.py", "plugins/plugin_utils/_control/slurm_batch.py",
    "plugins/filter/slurm_job.py", "roles/job/tasks/train/launch_slurm.yml", "roles/job/tasks/train/slurm_preflight.yml",
    "roles/job/tasks/train/slurm_drain.yml",
}
CONTAINER_STRATEGY = {
    "plugins/module_utils/_runtime/runtimes.py", "plugins/module_utils/_runtime/containers.py",
    "plugins/plugin_utils/_control/container_images.py", "plugins/filter/container_image.py",
    "roles/job/tasks/train/image.yml",
}

# The places left, each with why. The target is at most 3 places for each mode: Slurm's two (node_plan's
# line is a message inside the block the strategy opens); containers' two.
SLURM_PLACES = {
    # The Slurm node table is read before the plan decides (a task of the role, so it shows in the play).
    "roles/job/tasks/train/preflight.yml",
    # The controller's light status poll settles Slurm's state when the node's status script read it.
    "plugins/plugin_utils/_control/job_poll.py",
    # Inside the block that the scheduler strategy's allocates_nodes opens (the message of a missing answer).
    "plugins/plugin_utils/_control/node_plan.py",
}
CONTAINER_PLACES = {
    # The image phase runs only for a job in an image (one skipped line otherwise).
    "roles/job/tasks/train.yml",
    # Not the runtime: export writes the image into the exported job (formats that need one refuse without).
    "plugins/plugin_utils/_export/job.py",
}


def branches(pattern: re.Pattern, strategy: set[str]) -> dict[str, list[str]]:
    """The lines matching the pattern outside the strategy's files, by file (relative to the collection)."""
    found: dict[str, list[str]] = {}
    paths = [*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/job/**/*.yml"), *ROOT.glob("playbooks/*.yml")]
    for path in sorted(paths):
        name = path.relative_to(ROOT).as_posix()
        if name in strategy:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip().startswith("#") and pattern.search(line):
                found.setdefault(name, []).append("%d: %s" % (number, line.strip()))
    return found


def test_the_patterns_catch_the_branches_they_are_for():
    for line in ('if spec.get("scheduler") == "slurm":', "  when: _job_plan.scheduler == 'slurm'",
                 "  when: _job_slurm", "  when: _job_slurm_job_id != '0'"):
        assert SLURM_BRANCH.search(line), line
    for line in ("  when: _job_container is not none", 'x: "{{ a if _job_container else omit }}"',
                 "    if not container and probe.get('launcher_missing'):", 'if params["container_engine"]:'):
        assert CONTAINER_BRANCH.search(line), line
    assert not SLURM_BRANCH.search("scheduler = schedulers.scheduler_of(plan.get('scheduler'))")
    assert not CONTAINER_BRANCH.search("runtime = runtime_of(spec)")


def test_slurm_is_tested_only_in_the_scheduler_strategy_and_the_places_listed():
    found = branches(SLURM_BRANCH, SLURM_STRATEGY)
    assert set(found) <= SLURM_PLACES, "a new Slurm branch outside schedulers.py and its files: %s" % {
        name: lines for name, lines in found.items() if name not in SLURM_PLACES}
    # The role's own task that names Slurm outside its launch file: the node-table read (a failed launch's cancel is
    # launch_slurm.yml's own rescue).
    assert [name for name in found if name.startswith("roles/")] == ["roles/job/tasks/train/preflight.yml"], found


def test_a_container_is_tested_only_in_the_runtime_strategy_and_the_places_listed():
    found = branches(CONTAINER_BRANCH, CONTAINER_STRATEGY)
    assert set(found) <= CONTAINER_PLACES, "a new container branch outside runtimes.py and its files: %s" % {
        name: lines for name, lines in found.items() if name not in CONTAINER_PLACES}
    # node_plan asks the runtime (runs_node_python), the supervisor, the status and the stop ask runtime_of(), the
    # probe asks runtime_for() what to probe; the planner asks container_images.job_container() whether there is an
    # image, and the role hands the probe the plan's image_lookup and the launch node_container()'s result.
    for asks in ("plugins/plugin_utils/_control/node_plan.py", "plugins/module_utils/_runtime/supervisor.py",
                 "plugins/module_utils/_job/jobs.py", "plugins/module_utils/_runtime/attempt.py", "plugins/modules/node_probe.py",
                 "plugins/action/job_plan.py", "roles/job/tasks/train/preflight.yml",
                 "roles/job/tasks/train/launch_node.yml", "roles/job/vars/main.yml"):
        assert asks not in found, found[asks]
