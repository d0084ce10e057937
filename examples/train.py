#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Distributed data-parallel training of a small classifier; it needs torch alone.

Launch it with gpufleet (``ansible-playbook playbooks/train.yml -i hosts.yml -e script=examples/train.py``)
or with torchrun directly. The data is made from the seed (10 classes of noisy 8x8 patterns, 1,797 samples
as in the classic digits set), so nothing is downloaded and every rank makes the same set; put your own data in
``datasets()``. It uses NCCL on CUDA and Gloo on the CPU, a DistributedSampler (with set_epoch),
prints the loss and accuracy of every epoch (averaged over all ranks), and saves a checkpoint every
``--checkpoint-every`` steps and after every epoch.

Checkpoints go to ``GPUFLEET_CHECKPOINT_DIR`` (gpufleet sets it to ``<job folder>/checkpoints`` on each node; set
it in the job's env to a shared file system instead), one per node (its local rank 0 writes it), so that a node
that replaced a lost one gets the state from a node that kept it. When gpufleet launches the job again after a
failure (``GPUFLEET_ATTEMPT`` > 1), or with ``--resume``, every rank resumes from the newest checkpoint any node
holds, at the step it was saved.

When gpufleet stops the job (stop.yml, Ctrl-C, another node's failure before a restart, a hang, a maintenance), each
rank first finds the file ``GPUFLEET_STOP_FILE`` names (why, and the seconds it has before SIGKILL), then gets
SIGTERM. This script takes either as "save now": at the end of each step the ranks agree whether any of them has
heard it (one number, all-reduced: the nodes are told a moment apart, and a rank that left on its own would leave
the others in that step's collective), and when one has, each node's local rank 0 saves a checkpoint of that step,
and the ranks end. A rank stuck in a collective cannot reach the end of its step; SIGKILL ends it after
the grace period (``-e stop_grace_s=``), and the newest checkpoint of any node is used. Launch again with
``--resume`` after a stop (a restart resumes by itself).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GPUFLEET_CHECKPOINT_DIR", "checkpoints"))
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints (0: per epoch)")
    parser.add_argument("--step-s", type=float, default=0.0, help="seconds each step takes at least (demos)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint (also when "
                        "GPUFLEET_ATTEMPT > 1: a restart)")
    return parser.parse_args()


def datasets(seed: int, samples: int = 1797, classes: int = 10) -> tuple[TensorDataset, TensorDataset]:
    """A train and a test split (80/20) of noisy copies of one random 8x8 pattern per class, values in [0, 1]."""
    generator = torch.Generator().manual_seed(seed)
    patterns = torch.rand(classes, 64, generator=generator)
    labels = torch.arange(samples) % classes
    noise = 0.35 * torch.randn(samples, 64, generator=generator)
    features = (patterns[labels] + noise).clamp(0.0, 1.0)
    order = torch.randperm(samples, generator=generator)
    split = samples * 4 // 5
    train, test = order[:split], order[split:]
    return TensorDataset(features[train], labels[train]), TensorDataset(features[test], labels[test])


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def global_sum(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def evaluate(net: nn.Module, loader: DataLoader, device: torch.device) -> float:
    net.eval()
    correct = total = 0
    with torch.no_grad():
        for inputs, targets in loader:
            outputs = net(inputs.to(device))
            correct += int((outputs.argmax(1) == targets.to(device)).sum())
            total += len(targets)
    correct, total = global_sum([correct, total], device)
    net.train()
    return correct / total


def save_checkpoint(path: str, step: int, epoch: int, net: DistributedDataParallel,
                    optimizer: torch.optim.Optimizer) -> None:
    """The training state after step (in epoch), written whole or not at all."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"step": step, "epoch": epoch, "model": net.module.state_dict(), "optimizer": optimizer.state_dict()},
               tmp)
    os.replace(tmp, path)  # a crash mid-save never leaves a half-written checkpoint


def newest_checkpoint(path: str, device: torch.device) -> dict | None:
    """The newest checkpoint any node holds, the same on every rank: the ranks agree on the newest step, and the
    lowest rank that holds it sends it to all (a node that replaced a lost one has none of its own)."""
    mine = torch.load(path, map_location="cpu") if os.path.exists(path) else None
    step = mine["step"] if mine else -1
    newest = torch.tensor([step], dtype=torch.int64, device=device)
    dist.all_reduce(newest, op=dist.ReduceOp.MAX)
    if int(newest) < 0:
        return None
    holder = torch.tensor([dist.get_rank() if step == int(newest) else dist.get_world_size()], device=device)
    dist.all_reduce(holder, op=dist.ReduceOp.MIN)
    box = [mine if dist.get_rank() == int(holder) else None]
    dist.broadcast_object_list(box, src=int(holder), device=device)
    return box[0]


def leave_process_group(device: torch.device) -> None:
    """End torch.distributed so that the process can exit safely on gloo.

    Gloo's worker thread releases a finished collective (and its tensors) a moment after wait() returned, and since
    torch 2.10 releasing a tensor that has a Python object needs the GIL. A process that exits at once may be
    finalizing by then, and aborts in that thread: SIGABRT, "terminate called without an active exception" in
    pt_gloo_runloop (a core dump's backtrace: ~AsyncAllreduceWork -> decref_pyobject -> gil_scoped_acquire ->
    PyThread_exit_thread). Seen in 2 of 23 runs of this script with 6 ranks on the 3-node test cluster, also with a
    barrier alone (the barrier's work holds the all_reduce's). So: every rank done, then the GIL released long
    enough for that thread to finish. On NCCL the barrier names this rank's GPU: torch 2.11 otherwise warns
    "barrier(): using the device under current context", the last line of every rank's log on a lent H200.
    """
    if device.type == "cuda":
        dist.barrier(device_ids=[device.index])
    else:
        dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.5)


class StopNotice:
    """gpufleet's stop notice, or SIGTERM from anyone: the run is to save and end. Needs nothing of gpufleet."""

    def __init__(self) -> None:
        self.path = os.environ.get("GPUFLEET_STOP_FILE", "")
        self.signalled = False
        signal.signal(signal.SIGTERM, self._on_sigterm)  # the default action would end the rank before it saves

    def _on_sigterm(self, _signum: int, _frame: object) -> None:
        self.signalled = True

    def heard(self) -> str | None:
        """Why the run must stop, or None while it need not."""
        if self.path and os.path.exists(self.path):
            try:
                with open(self.path, encoding="utf-8") as handle:
                    return str(json.load(handle).get("reason") or "stop notice")
            except (OSError, ValueError):
                return "stop notice"
        return "SIGTERM" if self.signalled else None

    def agreed(self, device: torch.device) -> str | None:
        """Why the run stops, once any rank has heard it: every rank stops at the same step. A rank whose own node's
        notice has not come yet waits a moment for it, for the reason (the nodes' supervisors write theirs a moment
        apart)."""
        why = self.heard()
        flag = torch.tensor([0.0 if why is None else 1.0], device=device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        if flag.item() == 0.0:
            return None
        deadline = time.monotonic() + 2.0
        while why is None and time.monotonic() < deadline:
            time.sleep(0.05)
            why = self.heard()
        return why or "another rank heard the stop"


def main() -> None:
    args = parse_args()
    stop = StopNotice()
    use_cuda = torch.cuda.is_available()
    backend = "nccl" if use_cuda else "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if use_cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        "rank %d of world size %d on %s (node_rank %s, local_rank %d), backend %s"
        % (rank, world, socket.gethostname(), os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "?")),
           local_rank, backend),
        flush=True,
    )

    torch.manual_seed(args.seed)
    train_set, test_set = datasets(args.seed)
    sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)
    test_loader = DataLoader(
        test_set, batch_size=256, sampler=DistributedSampler(test_set, num_replicas=world, rank=rank, shuffle=False)
    )
    net = DistributedDataParallel(model().to(device), device_ids=[local_rank] if use_cuda else None)
    optimizer = torch.optim.Adam(net.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    checkpoint = os.path.join(args.checkpoint_dir, "last.pt")
    saves = local_rank == 0  # one checkpoint per node

    step = first_epoch = skip = 0
    if args.resume or int(os.environ.get("GPUFLEET_ATTEMPT", "1")) > 1:
        state = newest_checkpoint(checkpoint, device)
        if state is not None:
            net.module.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            step, first_epoch = state["step"], state["epoch"]
            skip = step - first_epoch * len(train_loader)  # the steps of that epoch already done
            if rank == 0:
                print("rank 0 resumes from step %d (epoch %d) of %s" % (step, first_epoch + 1, checkpoint), flush=True)

    accuracy = evaluate(net, test_loader, device)
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        started = time.monotonic()
        loss_sum = samples = 0.0
        for batch, (inputs, targets) in enumerate(train_loader):
            if epoch == first_epoch and batch < skip:
                continue  # the same order as before the restart (set_epoch), so these were trained on
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = loss_fn(net(inputs), targets)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(targets)
            samples += len(targets)
            step += 1
            time.sleep(args.step_s)
            if saves and args.checkpoint_every and step % args.checkpoint_every == 0:
                save_checkpoint(checkpoint, step, epoch, net, optimizer)
            why = stop.agreed(device)
            if why is not None:
                if saves:
                    save_checkpoint(checkpoint, step, epoch, net, optimizer)
                    print("rank %d saved step %d before the stop: %s" % (rank, step, why), flush=True)
                time.sleep(0.5)  # Gloo's thread lets go of the last collective first (see leave_process_group)
                return
        loss_sum, samples = global_sum([loss_sum, samples], device)
        accuracy = evaluate(net, test_loader, device)
        if saves:
            save_checkpoint(checkpoint, step, epoch + 1, net, optimizer)
        if rank == 0:
            print(
                "epoch %d/%d step %d loss %.4f test_accuracy %.4f (%.1fs)"
                % (epoch + 1, args.epochs, step, loss_sum / max(samples, 1), accuracy, time.monotonic() - started),
                flush=True,
            )
    if rank == 0:
        print("final test_accuracy %.4f world_size %d" % (accuracy, world), flush=True)
    leave_process_group(device)


if __name__ == "__main__":
    main()
