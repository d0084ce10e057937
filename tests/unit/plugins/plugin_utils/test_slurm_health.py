"""Slurm's HealthCheckProgram (slurm_health.py) as the slurm role writes it to a node: one file (node_program.py),
run here by a separate python3 with nothing of the collection on its path, as slurmd runs it.

Its nvidia-smi is the test cluster's stand-in (tests/cluster/scripts/nvidia_smi_standin.py: nvidia-smi's formats, a
state file's values); its scontrol a stand-in that records what it is asked to do and answers `show node` with the
real capture of a Slurm 22.05 node (tests/fixtures/slurm/scontrol_show_node.txt), with State and Reason made drained
where a case needs it (hand-made: the Reason and its "[user@time]" as `scontrol show node` prints them, Slurm's
doc/man/man1/scontrol.1). What this does not check: slurmd running it (tests/cluster/test_slurm.py does)."""

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.cluster.plugins.plugin_utils._control import node_program, slurm_health

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "..", "..", "fixtures")
STANDIN = os.path.join(HERE, "..", "..", "..", "cluster", "scripts", "nvidia_smi_standin.py")
ECC = "gpufleet health: GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors since the driver loaded"


def node9(state="IDLE", reason=""):
    """node9's line of the real `scontrol --oneliner show node`, in this state and with this reason."""
    with open(os.path.join(FIXTURES, "slurm", "scontrol_show_node.txt")) as handle:
        line = next(line for line in handle if line.startswith("NodeName=node9 ")).rstrip("\n")
    line = line.replace("State=IDLE", "State=%s" % state)
    return line + (" Reason=%s [root@2026-11-28T03:01:12]" % reason if reason else "")


@pytest.fixture
def node(tmp_path):
    """A node's bin folder (nvidia-smi and scontrol stand-ins), its settings and the program, as the role writes them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, STANDIN))
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho \"$@\" >> %s/scontrol.calls\nif [ \"$1\" = --oneliner ]; then cat %s/shown; fi\n"
        % (tmp_path, tmp_path))
    for name in ("nvidia-smi", "scontrol"):
        os.chmod(bin_dir / name, 0o755)
    (tmp_path / "kmsg").write_text("")
    settings = {"slurm_node": "node9", "kernel_log": str(tmp_path / "kmsg"), "sys_root": str(tmp_path / "sys"),
                "state_dir": str(tmp_path / "state"), "log": str(tmp_path / "health-check.log"), "env_files": []}
    (tmp_path / "health-check.json").write_text(json.dumps(settings))
    program = tmp_path / "gpufleet-health-check"
    # -IS: no site-packages, no PYTHONPATH, no user site: nothing of Ansible or the collection can be imported.
    program.write_text(node_program.source(slurm_health, python="%s -IS" % sys.executable))
    os.chmod(program, 0o755)

    def run(gpus, shown):
        (tmp_path / "gpus.json").write_text(json.dumps(gpus))
        (tmp_path / "shown").write_text(shown + "\n")
        calls = tmp_path / "scontrol.calls"
        if calls.exists():
            calls.unlink()
        env = {"PATH": "%s:/usr/bin:/bin" % bin_dir, "GPUFLEET_STANDIN_GPUS": str(tmp_path / "gpus.json")}
        done = subprocess.run([str(program), "--config", str(tmp_path / "health-check.json")], cwd="/", env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        asked = calls.read_text().splitlines() if calls.exists() else []
        return done, [line for line in asked if not line.startswith("--oneliner")]

    run.log = tmp_path / "health-check.log"
    return run


def test_a_gpu_with_uncorrectable_ecc_drains_the_node_with_the_fault_as_reason(node):
    done, asked = node({"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}, node9())
    assert done.returncode == 0, done.stderr
    assert asked == ["update NodeName=node9 State=DRAIN Reason=%s" % ECC]
    assert "node9: drained: %s" % ECC in done.stdout
    assert "refuse node9 GPU 1 (0000:19:00.0): 2 uncorrectable ECC errors" in node.log.read_text()


def test_a_node_it_drained_is_resumed_once_it_passes_and_left_alone_while_it_still_fails(node):
    done, asked = node({"gpus": [{}, {}]}, node9("IDLE+DRAIN", ECC))
    assert done.returncode == 0 and asked == ["update NodeName=node9 State=RESUME"], done.stdout + done.stderr
    done, asked = node({"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}, node9("IDLE+DRAIN", ECC))
    assert asked == [] and "already drained" in done.stdout


@pytest.mark.parametrize("reason", ["replacing DIMM 4", "gpufleet: GPU 1 (0000:19:00.0): XID 79, GPU has fallen off "
                                                       "the bus"])
def test_a_node_drained_for_another_reason_is_never_resumed_or_redrained(node, reason):
    """An operator's drain, and train.yml's (whose undrain is the operator's), are not this program's."""
    for gpus in ({"gpus": [{}, {}]}, {"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}):
        done, asked = node(gpus, node9("IDLE+DRAIN", reason))
        assert done.returncode == 0 and asked == [], done.stdout


def test_a_healthy_node_and_a_gpu_held_by_a_job_pass_and_nothing_is_asked_of_slurm(node):
    held = {"gpus": [{}, {}], "processes": [{"gpu": 0, "pid": os.getpid(), "name": "python3", "memory": 1024}]}
    done, asked = node(held, node9("ALLOCATED"))
    assert done.returncode == 0 and asked == [] and done.stdout.split(": ", 1)[1].strip() == "passed", done.stdout


def test_settings_it_cannot_read_exit_non_zero_naming_the_file(tmp_path):
    program = tmp_path / "program"
    program.write_text(node_program.source(slurm_health, python=sys.executable))
    done = subprocess.run([sys.executable, "-IS", str(program), "--config", str(tmp_path / "none.json")], cwd="/",
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "cannot read %s" % (tmp_path / "none.json") in done.stderr


def test_the_program_carries_the_gates_own_modules_and_nothing_of_ansible():
    names = [module.__name__.rsplit(".", 1)[-1] for module in node_program.modules(slurm_health)]
    assert names[-1] == "slurm_health" and {"gpu_gate", "port_health", "gpu_health", "netinfo"} <= set(names)
    assert names.index("gpu_health") < names.index("gpu_gate") < names.index("port_health")
    with pytest.raises(node_program.ProgramError, match="imports ansible.plugins.action: a node program runs without"):
        from ansible_collections.gpufleet.cluster.plugins.action import job_nodes
        node_program.modules(job_nodes)


def test_a_scontrol_that_cannot_run_is_said_and_the_program_still_exits_0(node, tmp_path):
    """slurmd may hold a node back from registering until the program exits 0: a Slurm client it cannot run is said
    in its log, not turned into a failure."""
    os.remove(tmp_path / "bin" / "scontrol")
    done, asked = node({"gpus": [{}, {"ecc.errors.uncorrected.volatile.total": 2}]}, node9())
    assert done.returncode == 0 and asked == []
    said = node.log.read_text()
    assert "node9: could not drain (" in said and ("): %s\n" % ECC) in said, said
