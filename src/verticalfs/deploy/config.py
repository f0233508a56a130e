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

    [parties.telecom.policy]        # optional: what telecom agrees to do (safe defaults)
    release_columns = false
    min_key_bits = 3072

Every key, its type and default: ``docs/reference/configuration.md`` (generated from
:class:`verticalfs.configuration.DeploymentFile`, which reads the file: wrong types, unknown keys and
out-of-range values are one-line errors naming the file and the key). Party order is the order of
the feature blocks. Every problem is reported with the file, the key and the fix before anything
connects.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verticalfs.configuration import DeploymentFile, PartyPolicy, read_deployment, split_address, validate
from verticalfs.exceptions import ConfigError
from verticalfs.names import LABEL_HOLDER

if TYPE_CHECKING:
    from verticalfs.transport.grpc.channel import GrpcChannel
    from verticalfs.transport.grpc.tls import TLSFiles


def _resolve(host: str, port: int) -> set[tuple[str, int]]:
    """The (IP address, port) pairs ``host:port`` reaches; ``{(host, port)}`` if it does not resolve
    here (a name only the other hosts know is compared by its name)."""
    h = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        infos = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return {(h.lower(), port)}
    return {(str(info[4][0]), port) for info in infos}


def check_addresses(parties: dict[str, PartyEntry], where: str) -> None:
    """Every party reachable at an address of its own (issue 53): port 0 in ``address`` or
    ``listen`` is refused (the system would pick any free port, which no other party can know: a
    party announced itself at ``127.0.0.1:0``), and two parties whose addresses resolve to the same
    host and port (``localhost:7001`` and ``127.0.0.1:7001``) are refused like the same address
    twice. Names are resolved on this host; a name that does not resolve here is compared as
    written."""
    for name, e in parties.items():
        for key, value in (("address", e.address), ("listen", e.listen)):
            if split_address(value)[1] == 0:
                raise ConfigError(f"{where}: parties.{name}.{key} = {value!r} has port 0, which lets the system pick "
                                  "any free port: no other party could know which to reach; give a fixed port "
                                  "(e.g. 7001)")
    seen: dict[tuple[str, int], tuple[str, str]] = {}
    for name, e in parties.items():
        for ep in sorted(_resolve(*split_address(e.address))):
            other = seen.get(ep)
            if other is not None and other[0] != name:
                raise ConfigError(f"{where}: parties {other[0]!r} ({other[1]!r}) and {name!r} ({e.address!r}) are "
                                  f"the same host and port ({ep[0]}:{ep[1]}); each party listens on its own port")
            seen[ep] = (name, e.address)


@dataclass
class PartyEntry:
    """One party of a deployment."""

    name: str
    address: str
    file: Path
    listen: str
    categorical: list[str] | str = field(default_factory=list)
    certs: Path | None = None
    datetime: str = "refuse"  # its date and time columns: refuse, drop or derive
    policy: PartyPolicy = field(default_factory=lambda: PartyPolicy.model_validate({}))
    predict_file: Path | None = None  # the rows it scores with a saved model (default: file)
    engine: str = "local"  # where it reads, prepares and PSI-blinds its table (verticalfs.engine)
    ray_address: str | None = None  # its Ray cluster, with engine "ray"
    table: str | None = None  # where the ray engine reads its table, when not ``file`` (a URI)
    work_dir: Path | None = None  # its working folder for a table read in pieces (shared with its Ray workers)


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
    call_timeout: float = 30.0
    setup_timeout: float | None = 1800.0
    retries: int = 3
    rejoin_window: float = 60.0
    fan_out: str = "concurrent"
    checkpoints: Path | None = None
    psi_engine: str = "auto"
    max_file_mb: float = 1024.0
    max_bytes: int = 1 << 30  # max_file_mb in bytes: the largest party file that is read
    stream_above_mb: float = 256.0

    # ----------------------------------------------------------------- reading
    @classmethod
    def load(cls, path: str | Path, *, insecure: bool = False) -> Deployment:
        """Read and check ``path``; ``insecure=True`` overrides the file (``--insecure``)."""
        conf = read_deployment(path, overrides={"insecure": True} if insecure else None)
        return cls.from_file(conf, path)

    @classmethod
    def from_dict(cls, conf: dict[str, Any], path: str | Path = "deployment.toml") -> Deployment:
        """As :meth:`load`, from the file's table (paths relative to ``path``'s folder)."""
        return cls.from_file(validate(DeploymentFile, conf, f"deployment file {str(path)!r}"), path)

    @classmethod
    def from_file(cls, conf: DeploymentFile, path: str | Path) -> Deployment:
        """The checked schema values plus what spans keys (the label party, addresses, TLS)."""
        path = Path(path)
        where = f"deployment file {str(path)!r}"
        base = path.parent

        def rel(p: Path) -> Path:  # (a path of the file: relative to it)
            q = p.expanduser()
            return q if q.is_absolute() else base / q

        parties: dict[str, PartyEntry] = {}
        for name, p in conf.parties.items():
            if name == LABEL_HOLDER:
                raise ConfigError(f"{where}: party name {LABEL_HOLDER!r} is reserved for the label holder's role; "
                                  "name the party after its organisation")
            model_dir = rel(p.policy.model_dir) if p.policy.model_dir is not None else base / "models" / name
            parties[name] = PartyEntry(name=name, address=p.address, listen=p.listen or p.address,
                                       file=rel(p.file), categorical=p.categorical if isinstance(p.categorical, str)
                                       else list(p.categorical), certs=None if p.certs is None else rel(p.certs),
                                       policy=p.policy.model_copy(update={"model_dir": model_dir}),
                                       predict_file=None if p.predict_file is None else rel(p.predict_file),
                                       engine=p.engine, ray_address=p.ray_address,
                                       work_dir=None if p.work_dir is None else rel(p.work_dir),
                                       table=p.table if p.table is None or "://" in p.table
                                       else str(rel(Path(p.table))),
                                       datetime=p.datetime)
        if conf.label_party not in parties:
            raise ConfigError(f"{where}: label_party {conf.label_party!r} is not among the parties {list(parties)}")
        addrs = [e.address for e in parties.values()]
        if len(set(addrs)) != len(addrs):
            raise ConfigError(f"{where}: two parties share an address ({addrs}); each party listens on its own")
        check_addresses(parties, where)
        certs = None if conf.certs is None else rel(conf.certs)
        if certs is None and not conf.insecure and any(e.certs is None for e in parties.values()):
            raise ConfigError(f"{where}: no TLS material: set certs = \"certs\" (a folder made by `verticalfs certs "
                              "make`), or insecure = true for a local experiment")
        na = conf.na_values
        if isinstance(na, str):
            na = [v.strip() for v in na.split(",")]
        out = cls(path=path, label_party=conf.label_party, label_column=conf.label_column,
                  id_column=conf.id_column, parties=parties, certs=certs, insecure=conf.insecure,
                  task=conf.task, na_values=None if na is None else list(na), delimiter=conf.delimiter,
                  encoding=conf.encoding, scaling=conf.scaling, impute=conf.impute, test_size=conf.test_size,
                  val_size=conf.val_size, connect_timeout=conf.connect_timeout, call_timeout=conf.call_timeout,
                  setup_timeout=conf.setup_timeout,
                  retries=conf.retries, rejoin_window=conf.rejoin_window, fan_out=conf.fan_out,
                  checkpoints=None if conf.checkpoints is None else rel(conf.checkpoints),
                  max_file_mb=conf.max_file_mb, max_bytes=conf.max_file_bytes,
                  psi_engine=conf.psi_engine, stream_above_mb=conf.stream_above_mb)
        out._check(where)
        return out

    def _check(self, where: str) -> None:
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

    def tls(self, name: str) -> TLSFiles | None:
        """The TLS material of identity ``name`` (a party, or the label holder's role ``active``)."""
        if self.insecure:
            return None
        from verticalfs.transport.grpc.tls import TLSFiles

        entry = self.parties.get(name) if name != LABEL_HOLDER else self.parties[self.label_party]
        folder = entry.certs if entry is not None and entry.certs is not None else self.certs
        if folder is None:
            raise ConfigError(f"deployment file {str(self.path)!r} names no certs folder for {name!r}: set certs (or "
                              "run with --insecure for a local experiment)")
        return TLSFiles.in_folder(folder, name)

    def check_keys(self, *names: str) -> None:
        """Refuse now (before any data is read) a private key of ``names`` that others may read."""
        if self.insecure:
            return
        from verticalfs.transport.grpc.tls import check_private

        for n in names:
            files = self.tls(n)
            if files is not None:
                check_private(files.key)

    def state_dir(self, name: str) -> Path:
        """The working folder of party ``name`` (or of the label holder, ``active``) on its own host:
        ``state/<name>`` beside the deployment file (the PSI cache, a party's digest secret)."""
        return self.path.parent / "state" / name

    def channel(self, name: str = LABEL_HOLDER, *, call_timeout: float | None = None, **kw: Any) -> GrpcChannel:
        """The :class:`~verticalfs.transport.grpc.channel.GrpcChannel` of ``name`` (the label holder by
        default) to every party, with this file's TLS, timeouts, retries and fan-out (``call_timeout``
        overrides the file's)."""
        from verticalfs.transport.grpc.channel import GrpcChannel

        return GrpcChannel(name, self.addresses, tls=self.tls(name), insecure=self.insecure,
                           connect_timeout=self.connect_timeout,
                           call_timeout=self.call_timeout if call_timeout is None else call_timeout,
                           retries=self.retries, fan_out=self.fan_out,
                           **{"setup_timeout": self.setup_timeout, **kw})

    def checkpoint_dir(self, name: str) -> Path | None:
        return None if self.checkpoints is None else self.checkpoints / name

