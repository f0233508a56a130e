"""One real party process (``spawn``), mutual TLS over gRPC on 127.0.0.1, this process the label
holder, after the split-learning set-up (Join):

- bad EmbedRequest fields are a ProtocolError naming the field at the caller (issue 37: ``epoch=-5``
  was ``INTERNAL ValueError``, ``batch=10**9`` an empty result);
- its memory after a flood of requests (issue 37: after a 10 s flood a party stayed at 930 MiB from
  567): the party's resident memory (``VmRSS``) is read, four threads send it whole-split and
  mini-batch embedding requests with arbitrary rounds for at most a few seconds and a bounded
  number of requests; a second after the flood its memory must be within 64 MiB of its start.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

import verticalfs  # noqa: E402
from verticalfs.data.table import Table  # noqa: E402
from verticalfs.exceptions import ProtocolError  # noqa: E402
from verticalfs.federation import Federation  # noqa: E402
from verticalfs.names import LABEL_HOLDER  # noqa: E402
from verticalfs.training import SplitTrainer, TrainConfig  # noqa: E402
from verticalfs.transport.grpc import GrpcChannel, TLSFiles, make_certs  # noqa: E402
from verticalfs.transport.messages import At, Embeddings, EmbedRequest, Hello, HelloRequest  # noqa: E402

pytestmark = pytest.mark.slow
MiB = 1 << 20
SLACK = 64 * MiB
FLOOD_SECONDS = 4.0
MAX_REQUESTS = 200


def rss(pid: int) -> int:
    """Resident memory of process ``pid`` in bytes (``/proc/<pid>/status``, ``VmRSS``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


def _party_main(party_data, certs, conn) -> None:  # runs in a child process
    import torch

    from verticalfs.party import PartyRuntime
    from verticalfs.transport.grpc.party import NetworkedParty

    torch.set_num_threads(1)
    party = NetworkedParty(PartyRuntime(party_data), "127.0.0.1:0", tls=TLSFiles.in_folder(certs, party_data.name))
    conn.send(party.server.address)
    party.set_addresses(conn.recv())
    party.start()
    conn.send("ready")
    conn.recv()  # any message: stop
    party.stop()


def _data():
    """20,000 rows of 40 columns for one party: a whole split's forward pass allocates tens of MiB."""
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(20_000, 40)), columns=[f"x{i}" for i in range(40)])
    y = (X["x0"] + rng.normal(size=len(X)) > 0).to_numpy(np.int64)
    return verticalfs.build_data(Table("flood", X, y, "binary"), parties=1, seed=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(party process, its proxy)``: one party serving the split-learning role of ``vfl``."""
    certs = tmp_path_factory.mktemp("certs")
    data = _data()
    party = data.parties[0]
    make_certs([LABEL_HOLDER, party.name], certs)
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=_party_main, args=(party, str(certs), there), daemon=True)
    proc.start()
    channel = None
    try:
        address = here.recv()
        here.send({party.name: address})
        assert here.recv() == "ready"
        channel = GrpcChannel(LABEL_HOLDER, {party.name: address}, tls=TLSFiles.in_folder(certs, LABEL_HOLDER))
        fed = Federation(data.labels, channel, data.party_names)
        trainer = SplitTrainer(fed, "vfl", TrainConfig(epochs=1, batch_size=64, hidden=(256,)), seed=0)
        trainer.setup()
        yield proc, fed.proxy(party.name)
    finally:
        if channel is not None:
            channel.close()
        if proc.is_alive():
            here.send("stop")
            proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()


@pytest.mark.parametrize("req,match", [
    (EmbedRequest("train", -5, 0, True), r"EmbedRequest\.epoch = -5; valid: 0 <= epoch"),
    (EmbedRequest("train", 0, 10**9, True),
     r"EmbedRequest\.batch = 1000000000; valid: -1 .* 0 <= batch < \d+ \(\d+ rows of 'train' in batches of 64\)"),
])
def test_bad_requests_are_protocol_errors_over_grpc(served, req, match):
    _, proxy = served
    with pytest.raises(ProtocolError, match=match):
        proxy.request(req, At("train"), expect=Embeddings)


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/status"), reason="reads /proc")
def test_a_party_returns_to_its_memory_after_a_request_flood(served):
    proc, proxy = served
    # the model, a whole split's forward pass and gRPC's buffers once, as a run's set-up would
    proxy.request(EmbedRequest("train", 0, -1, False), At("eval"), expect=Embeddings)
    time.sleep(1.0)
    start = rss(proc.pid)

    stop_at = time.perf_counter() + FLOOD_SECONDS
    sent = []
    errors = []

    def flood(k: int) -> None:
        rng = np.random.default_rng(k)
        while time.perf_counter() < stop_at and len(sent) < MAX_REQUESTS:
            rnd = int(rng.integers(1 << 31))
            kind = int(rng.integers(4))
            try:
                if kind == 0:
                    proxy.request(EmbedRequest("train", 0, -1, False), At("eval", rnd), expect=Embeddings)
                elif kind == 1:
                    proxy.request(EmbedRequest("test", 0, -1, True), At("eval", rnd), expect=Embeddings)
                elif kind == 2:
                    proxy.request(EmbedRequest("train", 0, int(rng.integers(10)), True), At("train", rnd),
                                  expect=Embeddings)
                else:
                    proxy.request(HelloRequest(), At("setup", rnd), expect=Hello)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            sent.append(kind)

    threads = [threading.Thread(target=flood, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    peak = start
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        peak = max(peak, rss(proc.pid))
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(sent) >= 40, f"only {len(sent)} requests were answered"
    time.sleep(1.0)
    after = rss(proc.pid)
    assert after - start <= SLACK, (
        f"party memory {start / MiB:.0f} MiB before {len(sent)} requests, {peak / MiB:.0f} MiB at the peak, "
        f"{after / MiB:.0f} MiB a second after (more than 64 MiB above its start)")
