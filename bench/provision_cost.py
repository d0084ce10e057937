#!/usr/bin/env python3
"""Provision cost: what provision.yml costs the controller on a cluster that is already right, and on fresh nodes,
against a baseline commit measured in the same run.

    make bench-provision            # or: .venv/bin/python bench/provision_cost.py [--sizes 8] [--runs 2]
                                    #     [--baseline REF] [--fresh 4] [--profile] [--setting ANSIBLE_X=V]

For each node count N, on a fresh cluster of N plain container nodes started from the provisioned image (as
bench/scale.py's P3), one provision.yml brings the cluster right, then re-runs are timed:

- wall time of the re-run, its changed count (0 expected);
- the controller's CPU seconds (ansible-playbook's whole process tree, os.wait4's rusage) per node;
- task results per node (ok + skipped + failed of PLAY RECAP, the median over the nodes): what the re-run costs
  the controller scales with it.

With --baseline REF, the checkout of REF (git archive, its own ansible.cfg and collection link) runs the same
measurements on the same cluster, the runs alternating (baseline, this checkout, ...), and the figures are printed
side by side. --setting measures this checkout again with an Ansible setting given as its environment variable
(e.g. ANSIBLE_INTERNAL_POLL_INTERVAL=0.01). With --fresh N, fresh clusters of N nodes of the base image (nothing
provisioned) get their first provision.yml, one cluster per checkout: that a first provision is not slower.
--profile adds one untimed re-run of each checkout with the per-task profile (bench/callback_plugins/task_profile.py)
and prints its task results per role.

Writes logs/bench/provision_cost.json. A figure, not a test: it fails only when a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path[:0] = [HERE, os.path.join(REPO, "tests", "cluster"), os.path.join(REPO, "collections")]

# A checkout to measure: its root folder, and Ansible settings given as environment variables.
Checkout = tuple


def checkout(ref: str, state: str) -> str:
    """The files of commit ref under state/baseline-<ref> (git archive: its playbooks, roles, plugins, ansible.cfg and
    the collection's link back to its root)."""
    root = os.path.join(state, "baseline-" + ref.replace("/", "_"))
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    archive = subprocess.run(["git", "-C", REPO, "archive", ref], capture_output=True, check=True)  # noqa: S603,S607
    subprocess.run(["tar", "-x", "-C", root], input=archive.stdout, check=True)  # noqa: S603,S607
    return root


def tasks_per_node(recap: dict[str, dict[str, int]]) -> float:
    """The median over the nodes of their task results (ok counts changed ones; skips and failures count too)."""
    counts = [host.get("ok", 0) + host.get("skipped", 0) + host.get("failed", 0) for host in recap.values()]
    return statistics.median(counts) if counts else 0.0


def provision(bench: Any, this: Checkout = (REPO, {}), profile: str | None = None) -> Any:
    root, settings = this
    done = bench.playbook("provision.yml", root=root, profile=profile, settings=settings)
    if done.rc != 0:
        raise SystemExit("provision.yml (%s %s) failed:\n%s" % (root, settings, done.out[-4000:]))
    return done


def figures(done: Any, count: int) -> dict:
    return {"seconds": round(done.seconds, 2), "changed": done.changed(), "cpu_s": round(done.cpu_s, 2),
            "cpu_s_per_node": round(done.cpu_s / count, 3), "tasks_per_node": tasks_per_node(done.recap),
            "peak_rss_mb": round(done.peak_rss_mb, 1)}


def median_of(runs: list[dict]) -> dict:
    keys = ("seconds", "changed", "cpu_s", "cpu_s_per_node", "tasks_per_node", "peak_rss_mb")
    return dict({key: statistics.median(run[key] for run in runs) for key in keys}, runs=runs)


def by_role(profile_path: str) -> dict[str, int]:
    """Task results per role (the task name's "role : " prefix; pre_tasks and plays' own tasks under "play")."""
    with open(profile_path) as handle:
        tasks = json.load(handle)["tasks"]
    roles: dict[str, int] = {}
    for task in tasks:
        name = task["name"].split(" : ", 1)[0] if " : " in task["name"] else "play"
        roles[name] = roles.get(name, 0) + task["hosts"]
    return dict(sorted(roles.items(), key=lambda item: -item[1]))


def rerun(bench: Any, runs: int, checkouts: dict[str, Checkout], profile_dir: str | None = None) -> dict:
    """provision.yml of each checkout once to bring the cluster right, then `runs` timed re-runs of each,
    alternating. Returns label -> {first, rerun (medians and runs), by_role}."""
    count = len(bench.nodes)
    result: dict = {}
    for label, this in checkouts.items():
        first = provision(bench, this)
        result[label] = {"first": figures(first, count), "reruns": []}
        print("  N=%-2d %-8s bring right: %.1f s (changed %d)" % (count, label, first.seconds, first.changed()),
              flush=True)
    for run in range(runs):
        for label, this in checkouts.items():
            done = figures(provision(bench, this), count)
            result[label]["reruns"].append(done)
            print("  N=%-2d %-8s re-run %d: %.1f s, changed=%d, %.2f CPU s per node, %.0f task results per node"
                  % (count, label, run + 1, done["seconds"], done["changed"], done["cpu_s_per_node"],
                     done["tasks_per_node"]), flush=True)
    for label, this in checkouts.items():
        result[label]["rerun"] = median_of(result[label].pop("reruns"))
        if profile_dir:
            # One more re-run with the task profile, not timed: the profile's callback costs CPU too.
            profile = os.path.join(profile_dir, "%s-%d.json" % (label, count))
            provision(bench, this, profile)
            result[label]["by_role"] = by_role(profile)
    return result


def fresh_first(state: str, count: int, checkouts: dict[str, Checkout]) -> dict:
    """The first provision.yml of count fresh base-image nodes, for each checkout (a fresh cluster each)."""
    import scale  # pylint: disable=import-outside-toplevel
    import testbed  # pylint: disable=import-outside-toplevel
    result = {}
    for label, this in checkouts.items():
        where = os.path.join(state, "fresh-%s-%d" % (label.replace("/", "_"), count))
        bench = scale.Bench(where, testbed.up(where, count, plain=True))
        done = provision(bench, this)
        result[label] = figures(done, count)
        print("  fresh N=%d %-8s first provision: %.1f s, changed=%d, %.2f CPU s per node" % (
            count, label, done.seconds, done.changed(), done.cpu_s / count), flush=True)
        testbed.down()
    return result


def table(rows: list[dict]) -> str:
    head = "| nodes | checkout | re-run wall | changed | controller CPU per node | task results per node |"
    lines = [head, "|" + " --- |" * (head.count("|") - 1)]
    for row in rows:
        for label, measured in row["checkouts"].items():
            again = measured["rerun"]
            lines.append("| %d | %s | %.1f s | %d | %.2f s | %.0f |" % (
                row["nodes"], label, again["seconds"], again["changed"], again["cpu_s_per_node"],
                again["tasks_per_node"]))
    return "\n".join(lines)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8", type=lambda text: [int(n) for n in text.split(",")])
    parser.add_argument("--runs", type=int, default=2, help="timed re-runs of each checkout per size")
    parser.add_argument("--baseline", help="a commit to measure beside this checkout, in the same run")
    parser.add_argument("--fresh", type=int, default=0, help="first provision of this many fresh nodes (0: none)")
    parser.add_argument("--profile", action="store_true",
                        help="one untimed re-run with the task profile; print its task results per role")
    parser.add_argument("--setting", action="append", default=[], metavar="ANSIBLE_X=VALUE",
                        help="also measure this checkout with an Ansible setting (an environment variable)")
    parser.add_argument("--state", default=os.path.join(REPO, ".cache", "bench-provision"))
    parser.add_argument("--json", default=os.path.join(REPO, "logs", "bench", "provision_cost.json"))
    return parser.parse_args()


def main() -> int:
    import scale  # pylint: disable=import-outside-toplevel
    import testbed  # pylint: disable=import-outside-toplevel
    args = arguments()
    state = os.path.abspath(args.state)
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(state)
    testbed.prepare()
    checkouts: dict[str, Checkout] = {}
    if args.baseline:
        checkouts[args.baseline] = (checkout(args.baseline, state), {})
    checkouts["this"] = (REPO, {})
    for setting in args.setting:
        checkouts["this+" + setting] = (REPO, dict([setting.split("=", 1)]))
    profiles = os.path.join(state, "profiles") if args.profile else None
    if profiles:
        os.makedirs(profiles)
    result: dict = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "machine": scale.machine(),
                    "commit": git_head(), "baseline": args.baseline, "rows": []}
    try:
        image = scale.provisioned_image(state)
        for count in args.sizes:
            bench_dir = tempfile.mkdtemp(dir=state, prefix="bench-%d-" % count)
            print("N=%d: starting %d nodes" % (count, count), flush=True)
            bench = scale.cluster(os.path.join(state, "n%d" % count), count, image, bench_dir)
            result["rows"].append({"nodes": count, "checkouts": rerun(bench, args.runs, checkouts, profiles)})
            testbed.down()
        if args.fresh:
            firsts = {label: this for label, this in checkouts.items() if not this[1]}
            result["fresh"] = {"nodes": args.fresh, "checkouts": fresh_first(state, args.fresh, firsts)}
    finally:
        testbed.down()
    scale.write_json(args.json, result)
    print("\n" + table(result["rows"]))
    for row in result["rows"]:
        for label, measured in row["checkouts"].items():
            if "by_role" in measured:
                print("task results at %d nodes, %s, by role: %s" % (row["nodes"], label,
                                                                     json.dumps(measured["by_role"])))
    print("\nwrote %s" % args.json)
    return 0


def git_head() -> str:
    done = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],  # noqa: S603,S607
                          capture_output=True, text=True, check=False)
    return done.stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
