"""Every role documents its variables: meta/argument_specs.yml and defaults/main.yml agree."""

import os
import re

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROLES = sorted(name for name in os.listdir(os.path.join(REPO, "roles")) if not name.startswith("."))


def load(role, *path):
    full = os.path.join(REPO, "roles", role, *path)
    if not os.path.exists(full):
        return None
    with open(full) as handle:
        return yaml.safe_load(handle) or {}


INVENTORY_DEFAULT = re.compile(r"^\{\{ (gpufleet_[a-z_]+) \| default\(([^()]+)\) \}\}$")


def documented_default(value, spec):
    """A number or boolean default taken from an inventory variable ("{{ gpufleet_x | default(5) }}") is documented as
    its fallback (5), which the docs schema (antsibull-docs) can read as the option's type, with the inventory variable
    named in the description. A string, list or dict default keeps the expression, which says where it comes from."""
    found = INVENTORY_DEFAULT.match(value) if isinstance(value, str) else None
    if not found or spec.get("type") not in ("int", "float", "bool"):
        return value
    description = " ".join(spec["description"]) if isinstance(spec["description"], list) else spec["description"]
    assert found.group(1) in description, "the description must name %s, where the default comes from" % found.group(1)
    return yaml.safe_load(found.group(2))


@pytest.mark.parametrize("role", ROLES)
def test_role_has_argument_specs(role):
    assert load(role, "meta", "argument_specs.yml") is not None, "%s has no meta/argument_specs.yml" % role


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_agree(role):
    defaults = load(role, "defaults", "main.yml") or {}
    specs = (load(role, "meta", "argument_specs.yml") or {}).get("argument_specs", {})
    options = {}
    for entry in specs.values():
        options.update(entry.get("options") or {})
    assert sorted(set(defaults) - set(options)) == [], "defaults without an argument spec"
    for name, spec in options.items():
        assert spec.get("description"), "%s: %s has no description" % (role, name)
        if name in defaults and defaults[name] is not None:
            assert spec.get("default") == documented_default(defaults[name], spec), "%s: %s default differs" % (
                role, name)
        if name not in defaults:
            assert "default" not in spec, "%s: %s has a spec default but no defaults/main.yml entry" % (role, name)
    prefix = role + "_"  # an internal role (_name) keeps its leading underscore: _name_*
    assert all(name.startswith(prefix) for name in defaults), "role variables must start with " + prefix


@pytest.mark.parametrize("role", ROLES)
def test_readme_documents_every_default(role):
    readme = os.path.join(REPO, "roles", role, "README.md")
    assert os.path.exists(readme), "%s has no README.md" % role
    text = open(readme).read()
    missing = [name for name in load(role, "defaults", "main.yml") or {} if "`%s`" % name not in text]
    assert missing == [], "%s README does not document %s" % (role, missing)


# Issue 26: the job role hands its phases' results from file to file only where one phase's output is the next one's
# input; each such fact is listed here with the files that share it, and a new one fails.
JOB_FACTS_ACROSS_FILES = {
    # The probe (preflight.yml) and the plan: every later phase reads them (through vars/main.yml's names).
    "__job_probe": None,
    "__job_plan": None,
    "__job_nodes": None,
    # The Slurm node table, read by slurm_preflight.yml (Slurm only), is what the plan's decision reads.
    "__job_slurm_nodes": {"train/preflight.yml", "train/slurm_preflight.yml"},
    # The image ID each node holds, found by the image phase, goes into the node's container (vars/main.yml).
    "__job_image_id": {"train/image.yml", "vars/main.yml"},
    # The launch's result: the log the wait fetches and what the report shows of a job not waited for.
    "__job_launch": {"train/launch_node.yml", "train/wait.yml"},
}


def test_the_job_roles_phases_share_no_fact_but_their_results():
    root = os.path.join(REPO, "roles", "job")
    users: dict = {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.endswith(".yml"):
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root).replace(os.sep, "/").replace("tasks/", "", 1)
                with open(path) as handle:
                    for fact in set(re.findall(r"\b__job_[a-z_]+\b", handle.read())):
                        users.setdefault(fact, set()).add(relative)
    across = {fact: files for fact, files in users.items() if len(files) > 1}
    assert set(across) <= set(JOB_FACTS_ACROSS_FILES), "a fact of the job role read outside the file that sets it: %s" % {
        fact: sorted(files) for fact, files in across.items() if fact not in JOB_FACTS_ACROSS_FILES}
    for fact, files in JOB_FACTS_ACROSS_FILES.items():
        assert files is None or across.get(fact, set()) <= files, (fact, across.get(fact))
    # The heartbeats' key, the forced stop's result and the submitted Slurm job stay in the file that makes them.
    for local in ("__job_gang_key", "__job_forced_stop", "__job_sbatch"):
        assert local in users and local not in across, (local, users.get(local))


def test_provision_checks_the_spec_of_every_role_it_imports_and_imports_none_unchecked():
    """provision.yml imports its roles without validating their argument specs (rolespec_validate: false), because
    its pre_tasks check them all at once (_provision_roles): a role imported but missing from that list would run
    unchecked. The list and the imports must name the same roles, in the same order."""
    with open(os.path.join(REPO, "playbooks", "provision.yml")) as handle:
        plays = yaml.safe_load(handle)
    play = next(play for play in plays if play.get("name") == "Provision gpu_nodes")
    imports = [task["ansible.builtin.import_role"] for task in play["tasks"] if "ansible.builtin.import_role" in task]
    imported = [role["name"].rpartition(".")[2] for role in imports]
    unchecked = [role["name"] for role in imports if role.get("rolespec_validate") is not False]
    assert imported and imported == play["vars"]["_provision_roles"], (imported, play["vars"]["_provision_roles"])
    assert not unchecked, "imported with their own validation again: %s" % unchecked
    for role in imported:
        assert load(role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"], role


def test_provision_skips_only_roles_its_one_read_covers_and_each_of_them_whole():
    """provision.yml's one read of each node after Fabric Manager and IMEX covers _provision_read_roles, in the play's order
    (gpufleet.cluster.settled_roles skips a prefix of that list, so the order is the run's); each role names what the
    read asks for it (_<role>_ahead) and how it is found settled (_<role>_settled) in its vars. A covered role's tasks
    in main.yml that do the role's work are all behind the one check of _gpufleet_settled: a task of its own reads
    or changes left outside would run on a node the read found right, or change a node the read said was right.
    Outside may stay only checks of the role's inputs (assert), views of them (import_tasks of checks), messages
    (debug) and nvidia_repo's variables (its entry point variables, which has no task)."""
    with open(os.path.join(REPO, "playbooks", "provision.yml")) as handle:
        plays = yaml.safe_load(handle)
    play = next(play for play in plays if play.get("name") == "Provision gpu_nodes")
    imported = play["vars"]["_provision_roles"]
    covered = play["vars"]["_provision_read_roles"]
    # nvidia_repo is read for cuda_toolkit and nccl, which include it: it comes right before the first of them.
    in_play = [role for role in covered if role != "nvidia_repo"]
    assert in_play == [role for role in imported if role in in_play], (covered, imported)
    assert covered.index("nvidia_repo") == covered.index("cuda_toolkit") - 1, covered
    assert imported.index(in_play[0]) == imported.index("nvidia_imex") + 1, "the read is after Fabric Manager and IMEX"
    assert imported.index("nvidia_imex") == imported.index("nvidia_fabricmanager") + 1
    names = [task.get("name", "") for task in play["tasks"]]
    read = names.index("Read what the roles below would change on each node, at once")
    assert names.index("Fabric Manager on NVSwitch and NVLink 5 systems") < names.index(
        "IMEX on multi-node NVLink trays (GB200/GB300 NVL)") < read < names.index(
        "GPUDirect RDMA (nvidia-peermem) where there is InfiniBand"), names
    for role in covered:
        variables = load(role, "vars", "main.yml")
        assert "_%s_ahead" % role in variables and "_%s_settled" % role in variables, role
        if role == "nvidia_repo":
            continue
        gate = "'%s' not in _gpufleet_settled | default([])" % role
        tasks = load(role, "tasks", "main.yml")
        gated = [task for task in tasks if gate in str(task.get("when", ""))]
        assert gated, "%s: no task checks %s" % (role, gate)
        for task in tasks:
            outside = task not in gated
            assert not outside or "ansible.builtin.assert" in task or "ansible.builtin.debug" in task or task.get(
                "ansible.builtin.import_tasks") in ("preflight.yml", "verify.yml") or task.get(
                "ansible.builtin.import_role", {}).get("tasks_from") == "variables", (role, task.get("name"))
    # The entry point cuda_toolkit, nccl and nccl_tests import for nvidia_repo's variables has no task.
    assert not load("nvidia_repo", "tasks", "variables.yml")
