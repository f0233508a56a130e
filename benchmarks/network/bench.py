"""The networked transport on loopback, in one run: round trips, epoch time, PSI throughput.

1. **Round trip** of a 4 KB, 64 KB and 1 MB message (median over ``--repeats``), mutual TLS on
   127.0.0.1, the server in another process:
   - *bare gRPC echo*: a unary ``bytes -> bytes`` echo with the same TLS credentials: the floor;
   - *channel*: :class:`~verticalfs.transport.grpc.GrpcChannel` to a
     :class:`~verticalfs.transport.grpc.PartyServer` that echoes (streamed in chunks, sender
     metadata, certificate-name and peer checks): aim within 1.5x of the echo;
   - *channel + serde*: the same through a node, an encoded ``Embeddings`` message each way
     (what a method's message costs).
2. **Seconds per epoch** of ``vfl`` on phishing with 4 parties: in-process, and with every party
   in its own process over gRPC with mutual TLS (the label holder in this one), the parties asked
   one after another (``fan_out="sequential"``, as before issue 38) and all at once
   (``"concurrent"``, the default), each as a ratio to the in-process epoch (goal: <= 1.5x), plus
   the ledger bytes and the bytes on the wire (TCP payload of the label holder's links: framing
   and TLS on top of the ledger's figure).
3. **PSI throughput**: ECDH-PSI (openmined-psi) of 100,000 x 100,000 and 1,000,000 x 1,000,000 ids
   (half of them shared), the party in its own process: seconds, ids per second, bytes.

Usage::

    .venv/bin/python benchmarks/network/bench.py [--data-dir DIR] [--repeats 200] [--epochs 3]
        [--psi 100000,1000000] [--parts rtt,epoch,psi] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

SIZES = (4 << 10, 64 << 10, 1 << 20)


# ------------------------------------------------------------------------------------ child processes
class _Echo:
    name = "echo"

    def receive(self, sender: str, data: bytes) -> bytes:
        return data


def _echo_main(certs: str, conn) -> None:
    import grpc

    from verticalfs.transport.grpc import PartyServer, TLSFiles
    from verticalfs.transport.grpc.channel import CHANNEL_OPTIONS

    tls = TLSFiles.in_folder(certs, "party1")
    server = PartyServer(_Echo(), "127.0.0.1:0", tls=tls, peers={"active"}).start()
    bare = grpc.server(__import__("concurrent.futures").futures.ThreadPoolExecutor(4), options=list(CHANNEL_OPTIONS))
    handler = grpc.unary_unary_rpc_method_handler(lambda req, ctx: req)
    bare.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {"Echo": handler}),))
    ca, cert, key = tls.read()
    port = bare.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)], root_certificates=ca,
                                                                             require_client_auth=True))
    bare.start()
    conn.send((server.address, f"127.0.0.1:{port}"))
    conn.recv()
    server.stop()
    bare.stop(0)


class _EchoRole:
    """A node handler that answers an Embeddings message with one of the same size."""

    def __call__(self, sender, msg, at, node):
        return msg


def _node_echo_main(certs: str, conn) -> None:
    from verticalfs.transport.grpc import GrpcChannel, PartyServer, TLSFiles
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node

    tls = TLSFiles.in_folder(certs, "party1")
    node = Node("party1", GrpcChannel("party1", {}, tls=tls), Ledger(), _EchoRole())
    server = PartyServer(node, "127.0.0.1:0", tls=tls, peers={"active"}).start()
    conn.send(server.address)
    conn.recv()
    server.stop()


def _party_main(party_data, ids, certs: str, conn) -> None:
    import torch

    from verticalfs.methods.registry import party_roles
    from verticalfs.party import PartyRuntime
    from verticalfs.transport.grpc import TLSFiles
    from verticalfs.transport.grpc.party import NetworkedParty

    torch.set_num_threads(1)
    tls = TLSFiles.in_folder(certs, party_data.name)
    party = NetworkedParty(PartyRuntime(party_data, ids=ids, role_for=party_roles()), "127.0.0.1:0", tls=tls)
    conn.send(party.server.address)
    party.set_addresses(conn.recv())
    party.start()
    conn.send("ready")
    conn.recv()
    party.stop()


# ------------------------------------------------------------------------------------------ parts
def round_trips(certs: Path, repeats: int) -> list[dict]:
    import grpc

    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles
    from verticalfs.transport.grpc.channel import CHANNEL_OPTIONS
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.messages import At, Embeddings
    from verticalfs.transport.node import Node

    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_echo_main, args=(str(certs), there), daemon=True)
    proc.start()
    ours, bare_addr = here.recv()
    here2, there2 = ctx.Pipe()
    proc2 = ctx.Process(target=_node_echo_main, args=(str(certs), there2), daemon=True)
    proc2.start()
    node_addr = here2.recv()
    tls = TLSFiles.in_folder(certs, LABEL_HOLDER)
    channel = GrpcChannel(LABEL_HOLDER, {"party1": ours}, tls=tls)
    node_channel = GrpcChannel(LABEL_HOLDER, {"party1": node_addr}, tls=tls)
    node = Node(LABEL_HOLDER, node_channel, Ledger())
    ca, cert, key = tls.read()
    creds = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    bare_ch = grpc.secure_channel(bare_addr, creds, options=[*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", "party1")])
    echo = bare_ch.unary_unary("/bench.Echo/Echo")
    rows = []
    at = At("train", 0, 0)
    for size in SIZES:
        data = os.urandom(size)
        msg = Embeddings(np.frombuffer(os.urandom(size), dtype=np.float32).reshape(-1, 8).copy())
        times = {"echo": [], "channel": [], "serde": []}
        for _ in range(5):  # warm-up
            echo(data)
            channel.call(LABEL_HOLDER, "party1", data)
            node.request("party1", msg, at)
        for _ in range(repeats):  # interleaved: the same machine load for all three
            t = time.perf_counter()
            assert len(echo(data)) == size
            times["echo"].append(time.perf_counter() - t)
            t = time.perf_counter()
            assert len(channel.call(LABEL_HOLDER, "party1", data)) == size
            times["channel"].append(time.perf_counter() - t)
            t = time.perf_counter()
            node.request("party1", msg, at)
            times["serde"].append(time.perf_counter() - t)
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append({"bytes": size, **{f"{k}_ms": v for k, v in med.items()},
                     "ratio": med["channel"] / med["echo"], "ratio_serde": med["serde"] / med["echo"]})
    channel.close()
    node_channel.close()
    bare_ch.close()
    here.send("stop")
    here2.send("stop")
    proc.join(10)
    proc2.join(10)
    return rows


class Parties:
    """Each party of ``data`` in its own spawned process (``ids`` per party for PSI)."""

    def __init__(self, data, certs: Path, ids=None):
        ctx = mp.get_context("spawn")
        self.procs, self.conns = {}, {}
        for p in data.parties:
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_party_main, args=(p, None if ids is None else ids[p.name], str(certs), there),
                               daemon=True)
            proc.start()
            self.procs[p.name], self.conns[p.name] = proc, here
        self.addresses = {n: c.recv() for n, c in self.conns.items()}
        for c in self.conns.values():
            c.send(self.addresses)
        for c in self.conns.values():
            assert c.recv() == "ready"

    def stop(self):
        for c in self.conns.values():
            c.send("stop")
        for p in self.procs.values():
            p.join(10)


def epoch_times(data_dir, certs: Path, epochs: int, rounds: int = 3) -> dict:
    import verticalfs
    from verticalfs.federation import Federation
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles

    data = verticalfs.build_data("phishing", parties=4, seed=0, data_dir=data_dir)
    params = {"epochs": epochs}
    parties = Parties(data, certs)
    times: dict[str, list[float]] = {"in_process": [], "sequential": [], "concurrent": []}
    try:
        # interleaved rounds (in-process, sequential, concurrent; the same party processes): a shared
        # machine's load changes within a minute, so each figure is a median over rounds; round 0
        # warms up (the parties' first messages import and build their roles) and is not counted
        for k in range(rounds + 1):
            local = verticalfs.run("vfl", data, seed=0, params=params)
            if k:
                times["in_process"].append(local.timings["seconds_per_epoch"])
            for mode in ("sequential", "concurrent"):
                channel = GrpcChannel(LABEL_HOLDER, parties.addresses, tls=TLSFiles.in_folder(certs, LABEL_HOLDER),
                                      fan_out=mode)
                net = verticalfs.run("vfl", data, seed=0, params=params,
                                     federation=Federation(data.labels, channel, data.party_names))
                channel.close()
                assert net.metrics == local.metrics, f"networked ({mode}) and in-process vfl differ"
                if k:
                    times[mode].append(net.timings["seconds_per_epoch"])
    finally:
        parties.stop()
    med = {m: statistics.median(v) for m, v in times.items()}
    return {"rows": data.n_samples("train"), "in_process": med["in_process"], "sequential": med["sequential"],
            "networked": med["concurrent"], "ledger": net.communication["total_bytes"], "times": times,
            "wire": net.communication.get("wire_bytes"), "messages": net.communication["messages"]}


def psi_throughput(n: int, certs: Path) -> dict:
    from types import SimpleNamespace

    from verticalfs.names import LABEL_HOLDER
    from verticalfs.psi import intersect
    from verticalfs.transport.grpc import GrpcChannel, TLSFiles
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.node import Node, PartyProxy

    holder = [f"id{i}" for i in range(n)]
    theirs = [f"id{i}" for i in range(n // 2, n + n // 2)]
    fake = SimpleNamespace(parties=[SimpleNamespace(name="party1", feature_names=[], X={}, sources=None)])
    parties = Parties(fake, certs, ids={"party1": theirs})
    try:
        channel = GrpcChannel(LABEL_HOLDER, parties.addresses, tls=TLSFiles.in_folder(certs, LABEL_HOLDER))
        ledger = Ledger()
        node = Node(LABEL_HOLDER, channel, ledger)
        channel.wait_ready(["party1"])
        t = time.perf_counter()
        common = intersect([PartyProxy(node, "party1")], holder)
        dt = time.perf_counter() - t
        channel.close()
    finally:
        parties.stop()
    assert len(common) == n - n // 2
    return {"n": n, "seconds": dt, "ids_per_second": 2 * n / dt, "bytes": ledger.total_bytes,
            "intersection": len(common)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default=os.environ.get("VERTICALFS_DATA"))
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the epoch comparison (medians)")
    ap.add_argument("--psi", default="100000,1000000")
    ap.add_argument("--parts", default="rtt,epoch,psi", help="which parts to run (comma-separated)")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    import torch

    from verticalfs.names import LABEL_HOLDER
    from verticalfs.transport.grpc import make_certs

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        certs = Path(tmp)
        make_certs([LABEL_HOLDER, "party1", "party2", "party3", "party4"], certs)
        if "rtt" in parts:
            print(f"round trip, mutual TLS on 127.0.0.1, median of {args.repeats} (ms)")
            print(f"{'message':>9} {'bare echo':>10} {'channel':>9} {'ratio':>6} {'+serde':>8} {'ratio':>6}")
            for r in round_trips(certs, args.repeats):
                print(f"{r['bytes'] // 1024:>6} KB {r['echo_ms']:>10.3f} {r['channel_ms']:>9.3f} {r['ratio']:>6.2f} "
                      f"{r['serde_ms']:>8.3f} {r['ratio_serde']:>6.2f}")
        if "epoch" in parts:
            e = epoch_times(args.data_dir, certs, args.epochs, args.rounds)
            print(f"\nvfl on phishing, 4 parties, {e['rows']} training rows, {args.epochs} epochs (seconds per epoch, "
                  f"median of {args.rounds} interleaved rounds; ratio = networked / in-process, goal <= 1.5)")
            print(f"  in-process {e['in_process']:.3f}")
            print(f"  networked, parties asked one after another (fan_out=sequential) {e['sequential']:.3f}   ratio "
                  f"{e['sequential'] / e['in_process']:.2f}")
            print(f"  networked, parties asked at once (fan_out=concurrent)           {e['networked']:.3f}   ratio "
                  f"{e['networked'] / e['in_process']:.2f}   (goal <= 1.50)")
            wire = "n/a" if e["wire"] is None else f"{e['wire'] / 1e6:.2f} MB ({e['wire'] / e['ledger']:.3f}x the ledger)"
            print(f"  ledger {e['ledger'] / 1e6:.2f} MB in {e['messages']} messages; on the wire {wire}")
            print("  per round: " + "; ".join(f"{k} " + " ".join(f"{t:.3f}" for t in v) for k, v in e["times"].items()))
            best = {k: min(v) for k, v in e["times"].items()}
            print(f"  best of {args.rounds}: in-process {best['in_process']:.3f}, sequential {best['sequential']:.3f} "
                  f"(ratio {best['sequential'] / best['in_process']:.2f}), concurrent {best['concurrent']:.3f} "
                  f"(ratio {best['concurrent'] / best['in_process']:.2f})")
            print(f"  load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if "psi" in parts:
            print("\nPSI (ECDH, openmined-psi), half of the ids shared, the party in its own process")
        for n in (int(x) for x in args.psi.split(",") if x and "psi" in parts):
            p = psi_throughput(n, certs)
            print(f"  {n:>9,} x {n:>9,} ids: {p['seconds']:7.2f} s, {p['ids_per_second']:,.0f} ids/s, "
                  f"{p['bytes'] / 1e6:.1f} MB, intersection {p['intersection']:,}")


if __name__ == "__main__":
    main()
