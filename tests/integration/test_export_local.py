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
        ("-e", "format=pytorchjob"): "container_image: format=pytorchjob needs the container image to train in",
        ("-e", "format=trainjob", "-e", "container_image=img", "-e", "max_restarts=1"):
            "max_restarts: 1 cannot be carried by format=trainjob",
        ("-e", "format=sbatch", "-e", "dest=%s" % "/nonexistent-gpufleet/x.sbatch"):
            "dest: /nonexistent-gpufleet/x.sbatch is in the folder /nonexistent-gpufleet, which does not exist",
        ("-e", "format=sbatch", "-e", "launcher=mpirun"):
            "launcher: format=sbatch starts the ranks with torchrun or none, not mpirun",
    }
    for args, message in cases.items():
        run = local.playbook("export.yml", "-e", "script=train.py", "-e", "dest=%s" % (local.root / "out"), *args)
        # (a later -e dest wins over the first)
        assert run.rc != 0 and message in run.out, (args, run.out[-2000:])
    assert not (local.root / "out").exists()


def test_the_same_container_image_as_train_yml_and_a_folder_as_dest(local):
    """-e container_image (train.yml's name) is the image; a folder as dest gets the default file name in it; a
    PyTorchJob with max_restarts warns how its operator restarts."""
    folder = local.root / "manifests"
    folder.mkdir()
    run = local.playbook("export.yml", "-e", "script=/workspace/train.py", "-e", "format=pytorchjob",
                         "-e", "container_image=registry.example/train:2", "-e", "max_restarts=1",
                         "-e", "dest=%s" % folder)
    assert run.rc == 0, run.out[-2000:]
    written = folder / "train-pytorchjob.yaml"
    master = yaml.safe_load(written.read_text())["spec"]["pytorchReplicaSpecs"]["Master"]
    assert master["template"]["spec"]["containers"][0]["image"] == "registry.example/train:2"
    assert "max_restarts=1 with format=pytorchjob restarts each failed pod in place" in " ".join(run.out.split())


def test_the_inventorys_launcher_is_the_exported_jobs_as_it_is_train_ymls(local):
    """gpufleet_launcher set for the nodes chooses the exported job's launcher, as it does train.yml's; -e launcher
    still wins over it."""
    dest = local.root / "train-mpijob.yaml"
    common = ("export.yml", "-e", "script=/workspace/train.py", "-e", "format=mpijob",
              "-e", "container_image=registry.example/train:3", "-e", "dest=%s" % dest)
    run = local.playbook(*common, "-e", "gpufleet_launcher=horovodrun")
    assert run.rc == 0, run.out[-2000:]
    launcher = yaml.safe_load(dest.read_text())["spec"]["mpiReplicaSpecs"]["Launcher"]
    assert "exec horovodrun -np 2 " in launcher["template"]["spec"]["containers"][0]["command"][2]
    run = local.playbook(*common, "-e", "gpufleet_launcher=horovodrun", "-e", "launcher=mpirun")
    assert run.rc == 0, run.out[-2000:]
    launcher = yaml.safe_load(dest.read_text())["spec"]["mpiReplicaSpecs"]["Launcher"]
    script = launcher["template"]["spec"]["containers"][0]["command"][2]
    assert "exec mpirun " in script and "horovodrun" not in script
    # The same inventory launcher that format=sbatch cannot carry is refused naming it, as -e launcher would be.
    run = local.playbook("export.yml", "-e", "script=train.py", "-e", "format=sbatch", "-e", "gpufleet_launcher=mpirun",
                         "-e", "dest=%s" % (local.root / "out.sbatch"))
    assert run.rc != 0 and "launcher: format=sbatch starts the ranks with torchrun or none, not mpirun" in run.out, \
        run.out[-2000:]
