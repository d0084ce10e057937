#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-3.0-or-later
"""Distributed data-parallel training of a small classifier; it needs torch alone.

Launch it with gpufleet (``ansible-playbook playbooks/train.yml -i hosts.yml -e script=examples/train.py``)
or with torchrun directly. The data is made from the seed (10 classes of noisy 8x8 patterns, 1,797 samples
as in the classic digits set), so nothing is downloaded and every rank makes the same set; put your own data in
``datasets()``. It uses NCCL on CUDA and Gloo on the CPU, a DistributedSampler (with set_epoch),
prints the loss and accuracy of every epoch (averaged over all ranks), and global
rank 0 saves a checkpoint after every epoch.
"""

from __future__ import annotations

import argparse
import os
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
    parser.add_argument("--checkpoint-dir", default="checkpoints")
    parser.add_argument("--resume", action="store_true", help="continue from checkpoint-dir/last.pt if it exists")
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


def save_checkpoint(path: str, epoch: int, net: DistributedDataParallel, optimizer: torch.optim.Optimizer) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"epoch": epoch, "model": net.module.state_dict(), "optimizer": optimizer.state_dict()}, tmp)
    os.replace(tmp, path)  # a crash mid-save never leaves a half-written checkpoint


def leave_process_group() -> None:
    """End torch.distributed so that the process can exit safely on gloo.

    Gloo's worker thread releases a finished collective (and its tensors) a moment after wait() returned, and since
    torch 2.10 releasing a tensor that has a Python object needs the GIL. A process that exits at once may be
    finalizing by then, and aborts in that thread: SIGABRT, "terminate called without an active exception" in
    pt_gloo_runloop (a core dump's backtrace: ~AsyncAllreduceWork -> decref_pyobject -> gil_scoped_acquire ->
    PyThread_exit_thread). Seen in 2 of 23 runs of this script with 6 ranks on the 3-node test cluster, also with a
    barrier alone (the barrier's work holds the all_reduce's). So: every rank done, then the GIL released long
    enough for that thread to finish.
    """
    dist.barrier()
    dist.destroy_process_group()
    time.sleep(0.5)


def main() -> None:
    args = parse_args()
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

    first_epoch = 0
    if args.resume and os.path.exists(checkpoint):
        state = torch.load(checkpoint, map_location=device)
        net.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first_epoch = state["epoch"] + 1
        if rank == 0:
            print("resumed from %s at epoch %d" % (checkpoint, first_epoch), flush=True)

    accuracy = evaluate(net, test_loader, device)
    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        started = time.monotonic()
        loss_sum = samples = 0.0
        for inputs, targets in train_loader:
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = loss_fn(net(inputs), targets)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(targets)
            samples += len(targets)
        loss_sum, samples = global_sum([loss_sum, samples], device)
        accuracy = evaluate(net, test_loader, device)
        if rank == 0:
            save_checkpoint(checkpoint, epoch, net, optimizer)
            print(
                "epoch %d/%d loss %.4f test_accuracy %.4f (%.1fs)"
                % (epoch + 1, args.epochs, loss_sum / samples, accuracy, time.monotonic() - started),
                flush=True,
            )
    if rank == 0:
        print("final test_accuracy %.4f world_size %d" % (accuracy, world), flush=True)
    leave_process_group()


if __name__ == "__main__":
    main()
