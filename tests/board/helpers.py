"""Results folders for the board's tests, made by the library itself (real runs, a real comparison)
and event streams written with :class:`~verticalfs.events.Emitter` and
:class:`~verticalfs.events.EventLog`, as a run started with ``--events`` writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: markup a hostile results folder may hold in any name: were it run, it would set window.__pwned
XSS = '<img src=x onerror="window.__pwned=1">'
XSS_SCRIPT = "</script><script>window.__pwned=2</script>"


def real_run(out: Path, method: str = "vfl", **params: Any) -> Path:
    import verticalfs

    data = verticalfs.build_data("breast_cancer", parties=2, noise=0.5, seed=0)
    res = verticalfs.run(method, data, seed=0, params={"epochs": 2, "batch_size": 64, **params})
    res.config["cli"] = {"method": method, "dataset": "breast_cancer", "parties": 2, "noise": "0.5", "seed": 0,
                         "epochs": 2, "param": ["batch_size=64"]}
    return res.save(out)


def real_compare(out: Path) -> Path:
    from verticalfs.compare import compare, write_compare

    summary = compare("breast_cancer", ["vfl", "feast"], parties=2, noise=0.5, seeds=[0, 1], epochs=2,
                      common_params={"batch_size": 64}, out_dir=out)
    write_compare(summary, out)
    return out


def injected(result: Path, out: Path) -> Path:
    """``result`` with markup in its method, a parameter, a party and a column name."""
    d = json.loads(result.read_text())
    d["method"] = f"vfl{XSS}"
    d["config"]["hidden_note"] = XSS_SCRIPT
    party = next(iter(d["selection"]["parties"]))
    d["selection"]["parties"][party]["columns"][0]["column"] = XSS
    d["selection"]["parties"][party]["columns"][1]["column"] = XSS_SCRIPT
    d["warnings"] = [f"a warning {XSS}"]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(d))
    return out


class LiveRun:
    """A run's events, written one at a time as a run would (a phase, epochs, the end)."""

    def __init__(self, path: Path, *, method: str = "vfl", parties: tuple[str, ...] = ("bank", "telecom")) -> None:
        from verticalfs import __version__
        from verticalfs.events import Emitter, EventLog

        self.log = EventLog(path)
        self.em = Emitter([self.log])
        self.parties = parties
        self.sent = 0
        self.em.emit("run_start", method=method, dataset="breast_cancer", parties=list(parties), seed=0,
                     params={"epochs": 5}, command=["verticalfs", "run", "-m", method, "-d", "breast_cancer",
                                                    "--events", path.name],
                     policies={p: {"release_columns": False, "min_key_bits": 2048} for p in parties},
                     version=__version__)

    def phase(self, name: str, seconds: float = 0.5, per_party: int = 1000) -> None:
        self.em.emit("phase", name=name, state="start", bytes_total=self.sent)
        self.sent += per_party * len(self.parties)
        self.em.emit("phase", name=name, state="end", seconds=seconds, bytes_total=self.sent,
                     bytes_by_party={p: per_party * (k + 1) for k, p in enumerate(self.parties)})

    def epoch(self, index: int, accuracy: float) -> None:
        self.sent += 5000
        self.em.emit("epoch", phase="train", index=index, total=5, metrics={"accuracy": accuracy,
                                                                            "val_accuracy": accuracy - 0.01},
                     train_loss=1 / index, bytes=self.sent, bytes_total=self.sent, seconds=float(index))

    def selection(self) -> None:
        self.em.emit("selection", parties={p: {"kept": [f"{p}_a", "plan=gold"], "n_kept": 2, "n_features": 4}
                                           for p in self.parties})

    def end(self, accuracy: float) -> None:
        self.em.emit("run_end", status="ok", metrics={"accuracy": accuracy}, bytes_total=self.sent, seconds=3.0)
        self.log.close()
