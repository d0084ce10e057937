"""The port check of a launch on loopback: listeners on 127.0.0.1 and 127.0.0.2 (two "nodes" of this machine), probes
between them, a port with no listener, a listener that starts late, the quit and a port that is taken.

Checked: what each step reports and that the port is free again after the quit. Not checked here: packets dropped
by a firewall (tests/cluster/test_ports.py drops them with iptables in a node's network namespace)."""

import json
import os
import socket
import threading
import time

from ansible_collections.gpufleet.cluster.plugins.module_utils._job import port_check

TOKEN = "run-1234"


def free_port() -> int:
    """A port number free for TCP and UDP on both loopback addresses at this moment."""
    while True:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()
        try:
            for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
                for address in ("127.0.0.1", "127.0.0.2"):
                    with socket.socket(socket.AF_INET, kind) as sock:
                        sock.bind((address, port))
            return port
        except OSError:
            continue


class Listener(threading.Thread):
    def __init__(self, host: str, address: str, port: int, tcp: bool, delay: float = 0.0, lifetime: float = 20.0):
        super().__init__(daemon=True)
        self.args = (host, address, port, tcp, TOKEN, lifetime)
        self.delay = delay
        self.result = None

    def run(self) -> None:
        time.sleep(self.delay)
        self.result = port_check.listen(*self.args)


def end(listener: Listener, host: str, address: str, port: int) -> dict:
    ended = port_check.quit_listener(host, address, port, TOKEN)
    listener.join(5)
    assert not listener.is_alive()
    return ended


def bound(address: str, port: int) -> bool:
    for kind in (socket.SOCK_DGRAM, socket.SOCK_STREAM):
        with socket.socket(socket.AF_INET, kind) as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return True
    return False


def test_two_nodes_answer_each_other_and_the_master_accepts_tcp_then_the_port_is_free():
    port = free_port()
    master, other = Listener("node0", "127.0.0.1", port, True), Listener("node1", "127.0.0.2", port, False)
    master.start()
    other.start()
    from_other = port_check.probe("node1", [("node0", "127.0.0.1")], port, TOKEN, ("node0", "127.0.0.1"), 3)
    from_master = port_check.probe("node0", [("node1", "127.0.0.2")], port, TOKEN, None, 3)
    assert from_other["udp_unanswered"] == [] and from_other["tcp_error"] == "" and from_other["tcp_checked"]
    assert from_master["udp_unanswered"] == [] and not from_master["tcp_checked"]
    assert from_other["seconds"] < 2 and from_master["seconds"] < 2
    assert end(master, "node0", "127.0.0.1", port) == {"listener_ended": True}
    assert end(other, "node1", "127.0.0.2", port) == {"listener_ended": True}
    assert master.result["heard"] == ["node1"] and master.result["quit"] is True
    assert other.result["heard"] == ["node0"]
    assert len(master.result["tcp_from"]) == 1  # the probe's one connection (its source address is the kernel's)
    assert not bound("127.0.0.1", port) and not bound("127.0.0.2", port)
    assert not os.path.exists(port_check.quit_path("node0", port, TOKEN))


def test_a_node_that_never_listens_is_named_after_the_timeout_and_a_refused_tcp_port_says_so():
    port = free_port()
    started = time.monotonic()
    found = port_check.probe("node1", [("node0", "127.0.0.1")], port, TOKEN, ("node0", "127.0.0.1"), 1.0)
    assert found["udp_unanswered"] == ["node0"]
    assert found["tcp_error"].startswith("ECONNREFUSED")
    assert 0.9 <= time.monotonic() - started < 3


def test_a_listener_that_starts_after_the_probe_is_still_reached_over_udp_and_tcp():
    port = free_port()
    late = Listener("node0", "127.0.0.1", port, True, delay=0.7)
    late.start()
    found = port_check.probe("node1", [("node0", "127.0.0.1")], port, TOKEN, ("node0", "127.0.0.1"), 3)
    end(late, "node0", "127.0.0.1", port)
    assert found["udp_unanswered"] == [] and found["tcp_error"] == ""
    assert found["seconds"] >= 0.6


def test_an_answer_of_another_launch_is_not_taken_for_this_ones():
    port = free_port()
    stranger = threading.Thread(target=port_check.listen, args=("node0", "127.0.0.1", port, False, "other-run", 2.0),
                                daemon=True)
    stranger.start()
    found = port_check.probe("node1", [("node0", "127.0.0.1")], port, TOKEN, None, 0.8)
    assert found["udp_unanswered"] == ["node0"]
    stranger.join(5)


def test_a_port_taken_on_the_node_is_reported_by_its_listener():
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", port))
        result = port_check.listen("node0", "127.0.0.1", port, True, TOKEN, 5)
    assert "Address already in use" in result["udp_error"]
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", port))
        taken.listen(1)
        result = port_check.listen("node0", "127.0.0.1", port, True, TOKEN, 0.3)
    assert result["udp_error"] == "" and "Address already in use" in result["tcp_error"]


def test_the_quit_file_ends_a_listener_whose_quit_datagram_is_lost():
    """A firewall that drops the port on loopback too drops the quit datagram: the file still ends the listener."""
    port = free_port()
    listener = Listener("node0", "127.0.0.1", port, False)
    listener.start()
    time.sleep(0.3)
    started = time.monotonic()
    with open(port_check.quit_path("node0", port, TOKEN), "w"):
        pass
    listener.join(5)
    assert not listener.is_alive() and listener.result["quit"] is True
    assert time.monotonic() - started < 1
    assert not os.path.exists(port_check.quit_path("node0", port, TOKEN))


def test_a_quit_with_no_listener_says_so_and_leaves_no_file():
    port = free_port()
    assert port_check.quit_listener("node0", "127.0.0.1", port, TOKEN, wait_s=0.3) == {"listener_ended": False}
    assert not os.path.exists(port_check.quit_path("node0", port, TOKEN))


def test_a_listener_ends_by_itself_at_the_end_of_its_lifetime():
    port = free_port()
    result = port_check.listen("node0", "127.0.0.1", port, True, TOKEN, 0.4)
    assert result["quit"] is False and result["heard"] == []
    assert not bound("127.0.0.1", port)


def test_the_quit_reads_the_listeners_report_from_its_async_results_file_and_removes_it(tmp_path):
    """One round trip ends the listener and returns what it heard: async_wrapper writes {"started": ...} first and
    the module's result last (atomically); the quit waits for the result, returns it and removes the file."""
    port = free_port()
    results = tmp_path / "j123.456"
    results.write_text('{"started": true, "finished": false, "ansible_job_id": "j123.456"}')
    listener = Listener("node0", "127.0.0.1", port, False)
    listener.start()
    time.sleep(0.3)

    def write_result_when_done():
        listener.join(5)
        time.sleep(0.2)  # the wrapper writes a moment after the module exits
        results.write_text(json.dumps(listener.result))

    writer = threading.Thread(target=write_result_when_done, daemon=True)
    writer.start()
    ended = port_check.quit_listener("node0", "127.0.0.1", port, TOKEN, results_file=str(results))
    writer.join(5)
    assert ended["listener_ended"] is True
    assert ended["listener"]["host"] == "node0" and ended["listener"]["quit"] is True
    assert not results.exists()


def test_a_results_file_never_completed_gives_an_empty_report():
    assert port_check.read_async_result("/no/such/results", 0.1) == {}
