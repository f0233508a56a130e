"""The deployment file: who takes part, where each listens, which file each holds, the TLS material.

One TOML file, the same on every host (each host needs only its own data file and keys)::

    label_party = "bank"            # its file holds the label; it runs `verticalfs run --config`
    label_column = "default"
    id_column = "customer_id"
    certs = "certs"                 # ca.pem, <party>.pem, <party>.key (relative to this file)

    [parties.bank]                  # the label party: its other columns are a feature block
    address = "bank.example.org:7001"
    file = "data/bank.csv"

    [parties.telecom]
    address = "telecom.example.org:7001"
    listen = "0.0.0.0:7001"         # optional: where to bind (default: the address)
    file = "data/telecom.csv"
    categorical = ["plan"]          # or "auto"

Optional top-level keys: ``task``, ``na_values``, ``delimiter``, ``encoding``, ``scaling``,
``impute``, ``test_size``, ``val_size``, ``connect_timeout`` (seconds), ``checkpoints`` (a folder:
each party keeps its checkpoints in ``<folder>/<party>``), ``insecure`` (no TLS; local experiments
only). Party order is the order of the feature blocks. Every problem is reported with the file, the
key and the fix before anything connects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from verticalfs.exceptions import ConfigError
from verticalfs.names import LABEL_HOLDER

_TOP = {"label_party", "label_column", "id_column", "certs", "parties", "task", "na_values", "delimiter", "encoding",
        "scaling", "impute", "test_size", "val_size", "connect_timeout", "checkpoints", "insecure"}
_PARTY = {"address", "listen", "file", "categorical", "certs"}


@dataclass
class PartyEntry:
    """One party of a deployment."""

    name: str
    address: str
    file: Path
    listen: str
    categorical: list[str] | str = field(default_factory=list)
    certs: Path | None = None


@dataclass
class Deployment:
    """A parsed deployment file (see the module docstring)."""

    path: Path
    label_party: str
    label_column: str
    id_column: str
    parties: dict[str, PartyEntry]
    certs: Path | None
    insecure: bool = False
    task: str | None = None
    na_values: list[str] | None = None
    delimiter: str = ","
    encoding: str = "utf-8"
    scaling: str = "minmax"
    impute: str = "none"
    test_size: float = 0.2
    val_size: float = 0.1
    connect_timeout: float = 10.0
    checkpoints: Path | None = None

    # ----------------------------------------------------------------- reading
    @classmethod
    def load(cls, path: str | Path, *, insecure: bool = False) -> Deployment:
        """Read and check ``path``; ``insecure=True`` overrides the file (``--insecure``)."""
        path = Path(path)
        try:
            conf = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise ConfigError(f"deployment file {str(path)!r} does not exist") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"deployment file {str(path)!r} is not valid TOML: {exc}") from None
        if insecure:
            conf = {**conf, "insecure": True}
        return cls.from_dict(conf, path)

    @classmethod
    def from_dict(cls, conf: dict[str, Any], path: str | Path = "deployment.toml") -> Deployment:
        path = Path(path)
        where = f"deployment file {str(path)!r}"
        base = path.parent

        def rel(p) -> Path:
            q = Path(str(p)).expanduser()
            return q if q.is_absolute() else base / q

        unknown = sorted(set(conf) - _TOP)
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {unknown}; keys are {sorted(_TOP)}")
        for k in ("label_party", "label_column", "parties"):
            if k not in conf:
                raise ConfigError(f"{where}: missing {k!r} (see `verticalfs party serve --help` for an example)")
        parties_conf = conf["parties"]
        if not isinstance(parties_conf, dict) or not parties_conf:
            raise ConfigError(f"{where}: [parties.<name>] tables are missing; give one per party with address and file")
        parties: dict[str, PartyEntry] = {}
        for name, p in parties_conf.items():
            if name == LABEL_HOLDER:
                raise ConfigError(f"{where}: party name {LABEL_HOLDER!r} is reserved for the label holder's role; "
                                  "name the party after its organisation")
            if not isinstance(p, dict):
                raise ConfigError(f"{where}: [parties.{name}] must be a table with address and file")
            bad = sorted(set(p) - _PARTY)
            if bad:
                raise ConfigError(f"{where}: [parties.{name}] has unknown key(s) {bad}; keys are {sorted(_PARTY)}")
            for k in ("address", "file"):
                if k not in p:
                    raise ConfigError(f"{where}: [parties.{name}] needs {k!r}")
            addr = str(p["address"])
            _check_address(addr, f"{where}: [parties.{name}] address")
            listen = str(p.get("listen", addr))
            _check_address(listen, f"{where}: [parties.{name}] listen")
            cat = p.get("categorical", [])
            if isinstance(cat, str) and cat != "auto":
                raise ConfigError(f"{where}: [parties.{name}] categorical must be a list of columns or \"auto\"")
            parties[name] = PartyEntry(name=name, address=addr, listen=listen, file=rel(p["file"]),
                                       categorical=cat if isinstance(cat, str) else [str(c) for c in cat],
                                       certs=rel(p["certs"]) if "certs" in p else None)
        label_party = str(conf["label_party"])
        if label_party not in parties:
            raise ConfigError(f"{where}: label_party {label_party!r} is not among the parties {list(parties)}")
        addrs = [e.address for e in parties.values()]
        if len(set(addrs)) != len(addrs):
            raise ConfigError(f"{where}: two parties share an address ({addrs}); each party listens on its own")
        insecure = bool(conf.get("insecure", False))
        certs = rel(conf["certs"]) if "certs" in conf else None
        if certs is None and not insecure and any(e.certs is None for e in parties.values()):
            raise ConfigError(f"{where}: no TLS material: set certs = \"certs\" (a folder made by `verticalfs certs "
                              "make`), or insecure = true for a local experiment")
        na = conf.get("na_values")
        if isinstance(na, str):
            na = [v.strip() for v in na.split(",")]
        out = cls(path=path, label_party=label_party, label_column=str(conf["label_column"]),
                  id_column=str(conf.get("id_column", "id")), parties=parties, certs=certs, insecure=insecure,
                  task=conf.get("task"), na_values=na, delimiter=str(conf.get("delimiter", ",")),
                  encoding=str(conf.get("encoding", "utf-8")), scaling=str(conf.get("scaling", "minmax")),
                  impute=str(conf.get("impute", "none")), test_size=float(conf.get("test_size", 0.2)),
                  val_size=float(conf.get("val_size", 0.1)),
                  connect_timeout=float(conf.get("connect_timeout", 10.0)),
                  checkpoints=rel(conf["checkpoints"]) if "checkpoints" in conf else None)
        out._check(where)
        return out

    def _check(self, where: str) -> None:
        from verticalfs.data.vertical import IMPUTATIONS, SCALINGS

        if self.scaling not in SCALINGS:
            raise ConfigError(f"{where}: scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.impute not in IMPUTATIONS or self.impute == "auto":
            raise ConfigError(f"{where}: impute must be one of {[i for i in IMPUTATIONS if i != 'auto']}, "
                              f"got {self.impute!r}")
        for k in ("test_size", "val_size"):
            v = getattr(self, k)
            if not 0.0 <= v < 1.0:
                raise ConfigError(f"{where}: {k} must be in [0, 1), got {v}")
        if not self.connect_timeout > 0:
            raise ConfigError(f"{where}: connect_timeout must be > 0 seconds, got {self.connect_timeout}")
        if self.label_column == self.id_column:
            raise ConfigError(f"{where}: label_column and id_column are both {self.label_column!r}")

    # ------------------------------------------------------------------- views
    def party(self, name: str) -> PartyEntry:
        try:
            return self.parties[name]
        except KeyError:
            raise ConfigError(f"deployment file {str(self.path)!r} has no party {name!r}; its parties are "
                              f"{list(self.parties)}") from None

    @property
    def addresses(self) -> dict[str, str]:
        return {n: e.address for n, e in self.parties.items()}

    def tls(self, name: str):
        """The TLS material of identity ``name`` (a party, or the label holder's role ``active``)."""
        if self.insecure:
            return None
        from verticalfs.transport.grpc.tls import TLSFiles

        entry = self.parties.get(name) if name != LABEL_HOLDER else self.parties[self.label_party]
        folder = entry.certs if entry is not None and entry.certs is not None else self.certs
        return TLSFiles.in_folder(folder, name)

    def checkpoint_dir(self, name: str) -> Path | None:
        return None if self.checkpoints is None else self.checkpoints / name


def _check_address(addr: str, where: str) -> None:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{where} {addr!r} is not host:port (e.g. \"10.0.0.2:7001\")")
