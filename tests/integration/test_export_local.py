"""playbooks/export.yml through ansible-playbook on the embedded local inventory: the file written once (a second
run changes nothing, check mode writes nothing), and formats or inputs it cannot carry refused naming them."""

import yaml


def test_export_writes_once_and_check_mode_writes_nothing(local):
    dest = local.root / "train.sbatch"
    check = local.playbook("export.yml", "-e", "script=train.py", "-e", "format=sbatch", "-e", "dest=%s" % dest,
                           "--check", "--diff")
    assert check.rc == 0 and not dest.exists(), check.out[-2000:]
    assert "#SBATCH --nodes=2" in check.out  # the diff shows what would be written
    first = local.playbook("export.yml", "-e", "script=train.py", "-e", "format=sbatch", "-e", "dest=%s" % dest)
    assert first.rc == 0 and "changed=1" in first.out, first.out[-2000:]
    assert dest.read_text().startswith("#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --nodes=2\n")
    again = local.playbook("export.yml", "-e", "script=train.py", "-e", "format=sbatch", "-e", "dest=%s" % dest)
    assert again.rc == 0 and "changed=0" in again.out, again.out[-2000:]


def test_a_trainjob_carries_the_inventory_s_node_count_and_the_image(local):
    dest = local.root / "train-trainjob.yaml"
    run = local.playbook("export.yml", "-e", "script=/workspace/train.py", "-e", "format=trainjob",
                         "-e", "image=registry.example/train:1", "-e", "gpus_per_node=4", "-e", "dest=%s" % dest)
    assert run.rc == 0, run.out[-2000:]
    trainer = yaml.safe_load(dest.read_text())["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (2, 4, "registry.example/train:1")
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 4}}


def test_what_export_cannot_write_is_refused_naming_it(local):
    cases = {
        ("-e", "format=helm"): "format: 'helm' is not one of sbatch, trainjob, pytorchjob, mpijob",
        ("-e", "format=pytorchjob"): "image: format=pytorchjob needs the container image to train in",
        ("-e", "format=sbatch", "-e", "launcher=mpirun"):
            "launcher: format=sbatch starts the ranks with torchrun or none, not mpirun",
    }
    for args, message in cases.items():
        run = local.playbook("export.yml", "-e", "script=train.py", "-e", "dest=%s" % (local.root / "out"), *args)
        assert run.rc != 0 and message in run.out, (args, run.out[-2000:])
    assert not (local.root / "out").exists()
