"""PSI once, concurrently: the label holder's private set intersection with two parties, one after the
other, at once, and from the cache (issue 38, item 5).

Two ``verticalfs party serve`` processes with mutual TLS on 127.0.0.1, each holding ``--ids`` ids of
which three quarters are the label holder's; the label holder is this process. Printed, all from one
run: PSI seconds party after party, with both parties at once, and when each party's result comes
from the label holder's cache (only the digests of the parties' ids cross), with the ratios.

    python benchmarks/network/psi_once.py --ids 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# the deployment set-up of serve.py beside this script (run as a script, its folder is on sys.path)
from serve import start, stop, write_deployment


def _site(root: Path, n: int) -> Path:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(0)
    parties = ("bank", "telecom", "insurer")
    for k, p in enumerate(parties):
        ids = [f"c{i:09d}" for i in range(k * n // 4, k * n // 4 + n)]
        df = pd.DataFrame({"customer_id": ids, f"{p}_x": rng.normal(size=n)})
        if p == "bank":
            df["default"] = rng.integers(0, 2, size=n)
        df.to_csv(root / f"{p}.csv", index=False)
    return write_deployment(root, parties)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ids", type=int, default=20_000, help="ids per party (and at the label holder)")
    args = ap.parse_args()
    from verticalfs.deploy.config import Deployment
    from verticalfs.federation import Federation
    from verticalfs.names import LABEL_HOLDER
    from verticalfs.psi import PsiCache, intersect_all
    from verticalfs.transport.grpc import GrpcChannel

    with tempfile.TemporaryDirectory() as tmp:
        conf = _site(Path(tmp), args.ids)
        dep = Deployment.load(conf)
        procs = []
        try:
            for p in ("telecom", "insurer"):
                procs.append(start([sys.executable, "-m", "verticalfs", "party", "serve", "--config", str(conf),
                                    "--name", p], Path(tmp), "serves"))
            channel = GrpcChannel(LABEL_HOLDER, dep.addresses, tls=dep.tls(LABEL_HOLDER), session="psi-bench")
            fed = Federation(None, channel, ["telecom", "insurer"])
            proxies = [fed.proxy(p) for p in ("telecom", "insurer")]
            channel.wait_ready(["telecom", "insurer"])
            import pandas as pd

            ids = pd.read_csv(Path(tmp) / "bank.csv", dtype={"customer_id": str})["customer_id"].to_numpy()
            seq = intersect_all(proxies, ids, concurrent=False)
            both = intersect_all(proxies, ids, concurrent=True)
            cache = PsiCache(Path(tmp) / "state")
            fill = intersect_all(proxies, ids, cache=cache)
            t = time.perf_counter()
            hit = intersect_all(proxies, ids, cache=cache)
            hit_s = time.perf_counter() - t
            assert seq.ids == both.ids == fill.ids == hit.ids and hit.cached == ["telecom", "insurer"]
            channel.close()
        finally:
            for p in procs:
                stop(p)
    print(f"PSI of the label holder's {args.ids:,} ids with 2 parties of {args.ids:,} ids each (party processes, "
          f"mutual TLS on 127.0.0.1); intersection {len(hit.ids):,}")
    print(f"  party after party       {seq.seconds:8.2f} s")
    print(f"  both parties at once    {both.seconds:8.2f} s   {seq.seconds / both.seconds:5.2f}x faster")
    print(f"  at once, cache filled   {fill.seconds:8.2f} s")
    print(f"  from the cache          {hit_s:8.3f} s   {seq.seconds / hit_s:5.0f}x faster (only the digests cross)")


if __name__ == "__main__":
    main()
