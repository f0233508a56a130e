"""The ``verticalfs`` command line: a thin Typer app over the method and data-set registries.

Every option is checked before any data is loaded or any epoch runs (:mod:`verticalfs.options`);
every problem is one line ``error: ...`` naming the option, file or column and the fix, with exit
code 2. Ctrl-C says what was interrupted and where finished results are (exit code 130).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.table import Table as RichTable

from verticalfs.exceptions import ConfigError, VerticalFSError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Vertical federated learning with feature selection, on one metered transport.",
)
console = Console()
err = Console(stderr=True)

DataDir = typer.Option(None, "--data-dir", help="Folder with the benchmark data sets (default: $VERTICALFS_DATA).")


@app.callback()
def _main(
    threads: int = typer.Option(
        1, "--threads", help="Torch CPU threads (0 = torch's default). One thread is fastest for the "
        "small per-party models of VFL; raise it for wide models.", min=0),
) -> None:
    """Vertical federated learning with feature selection, on one metered transport."""
    import warnings

    from verticalfs.exceptions import VerticalFSWarning

    warnings.filterwarnings("ignore", category=VerticalFSWarning)  # printed once each from the result
    global _THREADS
    _THREADS = threads or None
    if threads > 0 and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)


#: ``--threads`` (None: torch's default). Torch is imported only when a command starts its work
#: (``--help`` and the errors found before work stay fast), so the commands apply it there
#: (:func:`_torch_threads`; ``run`` and ``compare`` pass it to :func:`verticalfs.api.run`).
_THREADS: int | None = 1


def _torch_threads() -> None:
    """Apply ``--threads`` to torch, importing it: call where a command's work starts."""
    if _THREADS:
        import torch

        torch.set_num_threads(_THREADS)


def _fail(exc: Exception) -> None:
    from verticalfs.options import fail

    fail(exc)


def _warn(notes, shown: set[str]) -> None:
    """Print each warning once (``shown``: those already printed)."""
    from rich.markup import escape

    for w in notes:
        if w not in shown:
            shown.add(w)
            err.print(f"[bold yellow]warning:[/] {escape(w)}", soft_wrap=True, highlight=False)


def _interrupted(what: str, where: str | None = None) -> None:
    err.print(f"interrupted: {what}" + (f"; {where}" if where else "; nothing was written"), soft_wrap=True)
    raise typer.Exit(130)


OPT_EVENTS_HELP = ("Write the run's events to this file, one JSON line each as they happen (start with the parties "
                   "and their policies, phases, epochs or rounds with metrics and bytes, selection, refusals, warnings, "
                   "end); the schema: docs/reference/events.md. Appended to; mode 0600.")


def _callbacks(progress: bool, events: Path | None, stack: Any, force: bool | None = None) -> list[Any]:
    """The run's callbacks: the progress lines or bars (unless --quiet), the --events file (opened
    on ``stack``, closed when the command ends), and for a training command (``force`` given) the
    bound on a phase's estimated time unless ``--force`` (:class:`EtaGuard`, issue 53)."""
    out: list[Any] = []
    if force is False:
        from verticalfs.training.history import EtaGuard

        out.append(EtaGuard(ETA_BOUND))
    if progress:
        from verticalfs.training.history import ProgressCallback

        out.append(ProgressCallback())
    if events is not None:
        from verticalfs.events import EventLog

        out.append(stack.enter_context(EventLog(events)))
    return out


def _parse_params(items: list[str] | None) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ConfigError(f"--param expects name=value, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _load_config(ctx: typer.Context, param, value: str | None):
    """``--config run.toml``: every option of the command from a file (the command line wins).

    The file is read through :mod:`verticalfs.configuration` (typed: a wrong type or unknown key is
    one line ``error: ...`` naming the file and the key); a file with ``[parties.<name>]`` tables
    is a deployment file, read when the command runs."""
    if not value:
        return value
    from verticalfs.configuration import is_deployment, read_raw, read_run_file

    try:
        raw = read_raw(value, "config file")
        if is_deployment(raw):  # a deployment file (verticalfs.deploy.config)
            ctx.meta["deployment"] = value
            return value
        defaults = read_run_file(value, raw).cli_defaults()
    except ConfigError as exc:
        _fail(exc)
    names = {p.name for p in ctx.command.params}
    unused = sorted(set(defaults) - names)
    if unused:  # the schema and the command's options disagree: a bug, not the user's
        raise RuntimeError(f"options file keys {unused} are not options of {ctx.command.name!r}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta["config_file"] = value
    return value


@app.command()
def methods() -> None:
    """List the registered methods and their parameters (with defaults)."""
    from verticalfs.methods import registry
    from verticalfs.methods.base import params_doc

    for name in registry.available():
        cls = registry.get(name)
        console.print(f"[bold cyan]{name}[/]  {cls.summary}")
        if cls.paper:
            console.print(f"  [dim]paper: {cls.paper}[/]")
        docs = params_doc(cls.Params)
        t = RichTable(show_header=True, header_style="bold", box=None, pad_edge=False)
        t.add_column("  parameter")
        t.add_column("default")
        t.add_column("meaning")
        for f in dataclasses.fields(cls.Params):
            d = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
            t.add_row(f"  {f.name}", repr(d), docs.get(f.name, ""))
        console.print(t)
        console.print()


@app.command()
def datasets(data_dir: Path = DataDir) -> None:
    """List the data sets: built-in ones and those found in the data folder, with shapes."""
    from verticalfs.data.registry import list_datasets, resolve_data_dir

    try:
        rows = list_datasets(data_dir)
    except VerticalFSError as exc:
        _fail(exc)
    t = RichTable(title=f"data sets (data folder: {resolve_data_dir(data_dir) or 'not set'})")
    for col in ("name", "task", "available", "samples", "features", "classes", "used by"):
        t.add_column(col, no_wrap=col in ("name", "task"))
    for r in rows:
        t.add_row(r["name"], r["task"], "yes" if r["available"] else "no",
                  str(r.get("n_samples") or "-"), str(r.get("n_features") or "-"),
                  str(r.get("n_classes") or "-"), r.get("used_by") or "")
    console.print(t)


# ----------------------------------------------------------------------------- data options
@dataclasses.dataclass
class DataOptions:
    """The data options shared by ``run`` and ``compare`` (checked before loading)."""

    dataset: str | None
    parties: int | None
    noise: str
    overlap: str
    partition: str | None
    assignment: Path | None
    scaling: str
    impute: str
    party_file: list[str] | None
    label_party: str | None
    label_column: str | None
    id_column: str
    categorical: list[str] | None
    na_values: str | None
    delimiter: str
    encoding: str
    task: str | None
    max_file_mb: float
    data_dir: Path | None
    strip_ids: bool = False
    datetime: str = "refuse"

    def check(self) -> dict:
        """Everything that can be checked without reading data; returns the parsed values."""
        from verticalfs.data.choices import IMPUTATIONS, SCALINGS, STRATEGIES
        from verticalfs.data.layouts import is_layout, layout_names, resolve_layout
        from verticalfs.options import (
            parse_categorical,
            parse_counts,
            parse_fractions,
            parse_party_files,
        )

        out: dict[str, Any] = {}
        if self.scaling not in SCALINGS:
            raise ConfigError(f"--scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.impute not in IMPUTATIONS:
            raise ConfigError(f"--impute must be one of {IMPUTATIONS}, got {self.impute!r}")
        if self.task is not None and self.task not in ("classification", "regression", "binary", "multiclass"):
            raise ConfigError(f"--task must be classification or regression, got {self.task!r}")
        if not self.max_file_mb > 0:
            raise ConfigError(f"--max-file-mb must be > 0, got {self.max_file_mb}")
        if self.datetime not in ("refuse", "drop", "derive"):
            raise ConfigError(f"--datetime must be refuse, drop or derive, got {self.datetime!r}")
        files = parse_party_files(self.party_file)
        if files:
            given = [o for o, v in (("--dataset", self.dataset), ("--parties", self.parties),
                                    ("--partition", self.partition), ("--assignment", self.assignment)) if v]
            if given:
                raise ConfigError(f"{', '.join(given)} do(es) not apply to --party-file data (each file is a "
                                  "party's own columns); leave them out")
            if not self.label_party or not self.label_column:
                raise ConfigError("--party-file needs --label-party (the party whose file holds the label) and "
                                  "--label-column")
            if self.label_party not in files:
                raise ConfigError(f"--label-party {self.label_party!r} has no --party-file; parties: {list(files)}")
            out["categorical"] = parse_categorical(self.categorical, list(files))
            n_parties = None
        else:
            for o, v in (("--categorical", self.categorical), ("--na-values", self.na_values),
                         ("--strip-ids", self.strip_ids), ("--datetime", self.datetime != "refuse"),
                         ("--label-party", self.label_party), ("--label-column", self.label_column)):
                if v:
                    raise ConfigError(f"{o} applies to --party-file data only")
            if not self.dataset:
                raise ConfigError("give --dataset NAME (see `verticalfs datasets`) or --party-file name=path ...")
            from verticalfs.data.registry import get_info

            get_info(self.dataset)  # an unknown name, before anything is loaded
            if self.parties is not None and self.parties < 1:
                raise ConfigError(f"--parties must be >= 1, got {self.parties}")
            if self.partition is not None and self.partition not in STRATEGIES and not is_layout(self.partition):
                raise ConfigError(f"--partition must be one of {(*STRATEGIES, *layout_names())}, got "
                                  f"{self.partition!r}")
            if is_layout(self.partition):
                lay = resolve_layout(self.partition, self.dataset)
                if self.assignment is not None:
                    raise ConfigError(f"--partition {self.partition} fixes the columns ({lay.source}); leave out "
                                      f"--assignment")
                if self.parties is not None and self.parties != lay.parties:
                    raise ConfigError(f"--partition {self.partition}: layout {lay.name!r} of {self.dataset!r} has "
                                      f"{lay.parties} parties ({lay.source}); leave out --parties or set it to "
                                      f"{lay.parties}")
                out["layout"] = lay
            if self.assignment is not None:
                if not Path(self.assignment).is_file():
                    raise ConfigError(f"--assignment file {str(self.assignment)!r} does not exist")
                from verticalfs.configuration import read_assignment

                read_assignment(self.assignment)  # its keys and types, before any data is loaded
            n_parties = out["layout"].parties if "layout" in out else (self.parties or 3)
        out["files"] = files
        out["noise"] = parse_fractions(self.noise, "--noise", n_parties=n_parties)
        out["overlap"] = parse_counts(self.overlap, "--overlap", n_parties=n_parties)
        return out

    def build(self, seed: int, parsed: dict, *, noise=None):
        from verticalfs.api import build_data

        noise = parsed["noise"] if noise is None else noise
        if parsed["files"]:
            from verticalfs.data.user import load_party_files

            vds, report = load_party_files(
                parsed["files"], label_party=self.label_party, label_column=self.label_column,
                id_column=self.id_column, categorical=parsed["categorical"], task=self.task,
                na_values=self.na_values, delimiter=self.delimiter, encoding=self.encoding,
                max_bytes=int(self.max_file_mb * 2**20), impute=None if self.impute == "auto" else self.impute,
                strip_ids=self.strip_ids, datetime=self.datetime)
            err.print(report.summary(), soft_wrap=True, highlight=False, markup=False)
            dataset = vds
            parties = len(vds.blocks)
        elif "layout" in parsed:
            from verticalfs.data.layouts import build_layout

            lay = parsed["layout"]
            return build_layout(lay.name, lay.dataset, seed=seed, data_dir=self.data_dir, noise=noise,
                                overlap=parsed["overlap"], scaling=self.scaling, impute=self.impute)
        else:
            dataset, parties = self.dataset, self.parties or 3
        return build_data(dataset, parties=parties, noise=noise, overlap=parsed["overlap"],
                          partition_strategy=self.partition or "random", assignment=self.assignment, seed=seed,
                          data_dir=self.data_dir, scaling=self.scaling, impute=self.impute)

    def fingerprint(self, parsed: dict) -> dict:
        """The data's identity for ``compare --resume``: the options, and each file's SHA-256."""
        from verticalfs.resume import file_sha256

        def sha(path) -> str | None:
            try:
                return file_sha256(path)
            except OSError:
                return None  # reading the data says what is wrong with it

        out: dict[str, Any] = {
            "dataset": self.dataset, "noise": parsed["noise"], "overlap": parsed["overlap"],
            "partition": self.partition or "random", "scaling": self.scaling, "impute": self.impute,
            "task": self.task}
        if parsed["files"]:
            out["files"] = {p: {"sha256": sha(f)} for p, f in parsed["files"].items()}
            out.update(label_party=self.label_party, label_column=self.label_column, id_column=self.id_column,
                       categorical=parsed["categorical"], na_values=self.na_values, delimiter=self.delimiter,
                       encoding=self.encoding, strip_ids=self.strip_ids, datetime=self.datetime)
        else:
            out["parties"] = parsed["layout"].parties if "layout" in parsed else (self.parties or 3)
            if self.assignment is not None:
                out["assignment_sha256"] = sha(self.assignment)
        return out

    def config(self) -> dict:
        from verticalfs.data.layouts import is_layout, resolve_layout

        out = {"noise": self.noise, "overlap": self.overlap, "partition": self.partition or "random",
               "scaling": self.scaling, "impute": self.impute}
        if is_layout(self.partition) and self.dataset:
            lay = resolve_layout(self.partition, self.dataset)
            out["layout"] = {"name": lay.name, "source": lay.source}
        return out


def _data_options(**kw) -> DataOptions:
    return DataOptions(**kw)


O = typer.Option  # noqa: E741 - short alias for the many option declarations below
OPT_DATASET = O(None, "--dataset", "-d", help="A data set name (`verticalfs datasets`).")
OPT_PARTIES = O(None, "--parties", "-k", help="Number of feature-holding parties (default 3; not for --party-file).")
OPT_NOISE = O("0", "--noise", help="Gaussian noise features as a fraction of each party's columns; one value or one per party (0.8,0.25,0.1,0).")
OPT_OVERLAP = O("0", "--overlap", help="Columns of other parties copied into each party (one value or one per party).")
OPT_PARTITION = O(None, "--partition", help="Column split: random (default) or contiguous; or a paper's own "
                  "columns and rows by name: paper (the data set's registered layout) or sparsevfl (adult, "
                  "wine_quality, physionet2012: sparsevfl.md Tables A1 and 1).")
OPT_ASSIGNMENT = O(None, "--assignment", help="TOML/JSON file with explicit columns per party.")
OPT_SCALING = O("minmax", "--scaling", help="minmax, standard, robust (median and interquartile range: a few extreme values do not squash the rest), quantile (each value's rank in [0, 1]: any magnitude, 1e300 included) or none (fitted on each party's training rows).")
OPT_IMPUTE = O("auto", "--impute", help="Missing values, per party from its own training rows: median, mean, most-frequent, none (an error), auto (the data set's default).")
OPT_PARTY_FILE = O(None, "--party-file", help="Your own data: party=path.csv|.csv.gz|.parquet (repeatable).")
OPT_LABEL_PARTY = O(None, "--label-party", help="With --party-file: the party whose file holds the label.")
OPT_LABEL_COLUMN = O(None, "--label-column", help="With --party-file: the label column.")
OPT_ID_COLUMN = O("id", "--id-column", help="With --party-file: the id column shared by all files (read as text).")
OPT_CATEGORICAL = O(None, "--categorical", help="With --party-file: party:col1,col2 (repeatable) to one-hot encode, or auto (every non-numeric column).")
OPT_NA_VALUES = O(None, "--na-values", help="With --party-file: extra strings read as missing, comma-separated (e.g. '?,NA,').")
OPT_DELIMITER = O(",", "--delimiter", help="With --party-file: the CSV delimiter.")
OPT_ENCODING = O("utf-8", "--encoding", help="With --party-file: the files' text encoding.")
OPT_TASK = O(None, "--task", help="classification or regression (inferred when unambiguous).")
#: a training phase estimated longer than this after its first epoch stops unless --force (7 days;
#: as verticalfs.training.history.ETA_BOUND, repeated here so that --help does not import it)
ETA_BOUND = 7 * 24 * 3600.0
#: the exit code of ``run --strict`` / ``compare --strict`` when a run ended at or near chance
EXIT_CHANCE = 3
OPT_FORCE = O(False, "--force", help="Run even when a training phase's time, estimated after its first epoch, "
              "exceeds 7 days (without it such a run stops there with the estimate).")
OPT_STRICT = O(False, "--strict", help=f"Exit with code {EXIT_CHANCE} (after writing the results) when a run ends at or "
               "near chance or removes every feature (the warning says which and why).")
OPT_DATETIME = O("refuse", "--datetime", help="With --party-file: columns holding dates or times are refused (with "
                 "their names), left out (drop) or each made into its year, month and day as numeric columns (derive).")
OPT_STRIP_IDS = O(False, "--strip-ids", help="With --party-file: strip surrounding whitespace and leading zeros "
                  "from the ids before aligning (' 007' matches '7'); without it, ids that would match are counted in a warning.")
OPT_MAX_FILE = O(1024.0, "--max-file-mb", help="With --party-file: the most MiB a party file may hold (CSV, .csv.gz and Parquet: its size on disk, and decompressed for .csv.gz and Parquet); a larger file is refused before it is read. Reading a CSV takes several times its size in memory.")


def _data_kwargs(locals_: dict) -> dict:
    keys = [f.name for f in dataclasses.fields(DataOptions)]
    return {k: locals_[k] for k in keys}


# ----------------------------------------------------------------------------------------- run
@app.command("run")
def run_cmd(
    ctx: typer.Context,
    method: str = O(..., "--method", "-m", help="A registered method (`verticalfs methods`), or a pipeline such as feast+sparsevfl-16."),
    dataset: str = OPT_DATASET,
    parties: int = OPT_PARTIES,
    noise: str = OPT_NOISE,
    overlap: str = OPT_OVERLAP,
    epochs: int = O(None, "--epochs", "-e", help="Communication epochs (the method's `epochs` parameter), at least 1."),
    seed: int = O(0, "--seed", "-s", help="Seeds the split, the models and the method (0 .. 2**32-1)."),
    param: list[str] = O(None, "--param", "-p", help="Method parameter name=value (repeatable)."),
    codec: str = O(None, "--codec", help="Payload codec of embeddings and gradients (float32, float16, int8) for methods that take one; default float32. Methods that fix their own codecs (the SparseVFL family) refuse it."),
    partition: str = OPT_PARTITION,
    assignment: Path = OPT_ASSIGNMENT,
    scaling: str = OPT_SCALING,
    impute: str = OPT_IMPUTE,
    party_file: list[str] = OPT_PARTY_FILE,
    label_party: str = OPT_LABEL_PARTY,
    label_column: str = OPT_LABEL_COLUMN,
    id_column: str = OPT_ID_COLUMN,
    categorical: list[str] = OPT_CATEGORICAL,
    na_values: str = OPT_NA_VALUES,
    delimiter: str = OPT_DELIMITER,
    encoding: str = OPT_ENCODING,
    task: str = OPT_TASK,
    max_file_mb: float = OPT_MAX_FILE,
    strip_ids: bool = OPT_STRIP_IDS,
    datetime: str = OPT_DATETIME,
    data_dir: Path = DataDir,
    out: Path = O(None, "--out", "-o", help="Write the result JSON here (atomically)."),
    save_model: Path = O(None, "--save-model", help="Save the trained model in this folder: each party's part (preprocessing, model, selection) in its own file, the label holder's, a manifest; `verticalfs predict` uses it."),
    progress: bool = O(True, "--progress/--no-progress", help="Show progress on standard error: a bar on a terminal, "
                       "otherwise (a file or a pipe) one line per epoch or stage with elapsed time, ETA and MB sent."),
    quiet: bool = O(False, "--quiet", "-q", help="No progress output (the same as --no-progress)."),
    checkpoints: Path = O(None, "--checkpoints", help="Checkpoint every training epoch in this folder (in-process parties in its parties/ subfolder; networked parties in their own `checkpoints` folder); removed when the run completes."),
    insecure: bool = O(False, "--insecure", help="With a deployment file: no TLS (messages in the clear, no party authenticated). Local experiments only."),
    resume: bool = O(False, "--resume", help="Continue the interrupted run whose checkpoints are in --checkpoints (or the deployment's folder), with the same options."),
    config: str = O(None, "--config", help="A TOML file with any of these options (the command line wins); its resolved values go into the result. A deployment file (with [parties.<name>] tables) runs across machines: see README 'Deploy across machines'. Every key: docs/reference/configuration.md.", callback=_load_config, is_eager=True),
    strict: bool = OPT_STRICT,
    events: Path = O(None, "--events", help=OPT_EVENTS_HELP),
    force: bool = OPT_FORCE,
) -> None:
    """Run one method on one data set and print its figures; optionally write the result JSON."""
    from verticalfs.options import check_epochs, check_out, check_seed

    deployment = ctx.meta.get("deployment")
    progress = progress and not quiet
    opts = _data_options(**_data_kwargs(locals()))
    resolved = {k: (str(v) if isinstance(v, Path) else v) for k, v in locals().items()
                if k not in ("opts", "check_out", "check_seed", "check_epochs", "ctx")}
    try:
        check_seed(seed)
        check_epochs(epochs)
        check_out(out)
        check_out(save_model, "--save-model", directory=True)
        check_out(checkpoints, "--checkpoints", directory=True)
        check_out(events, "--events")
        params = _parse_params(param)
        if epochs is not None:
            params.setdefault("epochs", str(epochs))
        from verticalfs.methods import registry

        registry.check_name(method)  # without importing any method (torch): a fast error
        if deployment is None:
            parsed = opts.check()  # the data options next, still without pandas or torch
            registry.get(method)(seed=seed, codec=codec, **params)  # checked before any data is loaded
        if deployment is not None:
            given = [o for o, v in (("--dataset", dataset), ("--party-file", party_file), ("--parties", parties))
                     if v]
            if given:
                raise ConfigError(f"{', '.join(given)} do(es) not apply with a deployment file (each party reads "
                                  f"its own file named in {deployment!r}); leave them out")
            from verticalfs.deploy.config import Deployment
            from verticalfs.deploy.holder import federated_method

            dep = Deployment.load(deployment, insecure=insecure)
            # what the parties' policies let the method be (feast -> feast+vfl), checked before connecting
            run_method, run_params, _ = federated_method(dep, method, params)
            registry.get(run_method)(seed=seed, codec=codec, **(run_params or {}))
            if checkpoints is None and dep.checkpoints is not None:
                from verticalfs.names import LABEL_HOLDER

                check_out(dep.checkpoint_dir(LABEL_HOLDER), f"checkpoints of {deployment!r}", directory=True)
            if resume and checkpoints is None and dep.checkpoints is None:
                raise ConfigError(f"--resume needs the checkpoint folder: set checkpoints in {deployment!r} or "
                                  "give --checkpoints")
        else:
            if insecure:
                raise ConfigError("--insecure applies to a run over a deployment file (--config deployment.toml) only")
            if resume and checkpoints is None:
                raise ConfigError("--resume needs --checkpoints FOLDER (the folder of the interrupted run)")
    except VerticalFSError as exc:
        _fail(exc)
    from verticalfs.api import run

    if progress:  # reading, preparing, scoring under encryption: a line every few seconds (issue 53)
        from verticalfs.utils.progress import to_stderr

        to_stderr(f"[{method}] %(message)s")
    stage = "loading the data"
    shown: set[str] = set()
    stack = contextlib.ExitStack()
    try:
        callbacks = _callbacks(progress, events, stack, force)
        if deployment is not None:
            from verticalfs.deploy.holder import run_deployment

            stage = f"running {method} over {deployment}"
            res = run_deployment(dep, method, seed=seed, params=params, codec=codec, callbacks=callbacks,
                                 save_model=save_model, checkpoint_dir=checkpoints, resume=resume,
                                 threads=_THREADS)
            cached = res.info["deployment"].get("psi_cached") or []
            err.print(f"aligned {res.info['deployment']['n_aligned']} rows by private set intersection "
                      f"({res.timings.get('psi_s', 0.0):.1f} s"
                      + (f"; unchanged ids, result reused for {', '.join(cached)}" if cached else "") + "): "
                      + ", ".join(f"{p} kept {r['rows_kept']} of {r['rows_in_file']}"
                                  for p, r in res.info["deployment"]["rows"].items()),
                      soft_wrap=True, highlight=False, markup=False)
            if "trained_as_reason" in res.info:
                err.print(f"trained as {res.info['trained_as']}: {res.info['trained_as_reason']}", soft_wrap=True,
                          highlight=False, markup=False)
        else:
            data = opts.build(seed, parsed)
            _warn(data.warnings, shown)  # before the training, not only after it
            stage = f"running {method}"
            res = run(method, data, seed=seed, params=params, codec=codec, callbacks=callbacks,
                      data_config=opts.config(), save_model=save_model, checkpoint_dir=checkpoints, resume=resume,
                      threads=_THREADS)
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        _interrupted(f"{stage} (seed {seed})")
    finally:
        stack.close()
    res.config["cli"] = {k: v for k, v in resolved.items() if v is not None}
    _print_result(res, shown)
    if save_model is not None:
        from verticalfs.model import manifest_sha256

        console.print(f"model saved to {save_model}, manifest sha256 {manifest_sha256(save_model)}", soft_wrap=True,
                      highlight=False, markup=False)
        err.print("(one file per party, the label holder's, a manifest; keep the sha256 apart from the folder and "
                  "give it to `verticalfs predict --expect-sha256`)", soft_wrap=True, highlight=False, markup=False)
        if deployment is not None:
            err.print(f"each party's part is on its own host, in models/<party>/{Path(save_model).resolve().name}/; use "
                      "the model there with `verticalfs predict --config` or `verticalfs serve-model`", soft_wrap=True,
                      highlight=False, markup=False)
    if out is not None:
        res.save(out)
        console.print(f"result written to [bold]{out}[/]")
    if strict and res.chance is not None:
        err.print(f"--strict: {res.method} ended at or near chance; exit code {EXIT_CHANCE}", soft_wrap=True,
                  highlight=False, markup=False)
        raise typer.Exit(EXIT_CHANCE)


# ------------------------------------------------------------------------------------- predict
@app.command("predict")
def predict_cmd(
    model: Path = O(..., "--model", help="The folder written by `run --save-model`."),
    party_file: list[str] = O(None, "--party-file", help="New rows: party=path (one per party of the model)."),
    out: Path = O(..., "--out", "-o", help="predictions.csv: id, prediction and one probability per class."),
    config: Path = O(None, "--config", help="A deployment file: predict where the data lives (each party reads its "
                     "predict_file, or its file, and its own part of the model by the model's name; see docs/guide/"
                     "use-the-model.md). Instead of --party-file."),
    insecure: bool = O(False, "--insecure", help="With --config: no TLS (local experiments only)."),
    id_column: str = OPT_ID_COLUMN,
    na_values: str = OPT_NA_VALUES,
    delimiter: str = OPT_DELIMITER,
    encoding: str = OPT_ENCODING,
    max_file_mb: float = OPT_MAX_FILE,
    strip_ids: bool = OPT_STRIP_IDS,
    expect_sha256: str = O(None, "--expect-sha256", help="The manifest sha256 printed by `run --save-model`: a model whose manifest differs (changed files and checksums) is refused."),
    events: Path = O(None, "--events", help=OPT_EVENTS_HELP),
) -> None:
    """Federated inference with a saved model: each party prepares its own new rows, the label
    holder combines them through the same messages as training; the bytes are reported."""
    from verticalfs.model import predict, write_predictions
    from verticalfs.options import check_out, parse_party_files

    if config is not None:
        _predict_deployed(config, model, out, party_file, insecure, expect_sha256, events)
        return
    stack = contextlib.ExitStack()
    try:
        if not party_file:
            raise ConfigError("give --party-file party=path for each party of the model, or --config deployment.toml")
        check_out(out)
        check_out(events, "--events")
        files = parse_party_files(party_file)
        if not max_file_mb > 0:
            raise ConfigError(f"--max-file-mb must be > 0, got {max_file_mb}")
        _torch_threads()
        res = predict(model, files, id_column=id_column, na_values=na_values, delimiter=delimiter,
                      encoding=encoding, max_bytes=int(max_file_mb * 2**20), strip_ids=strip_ids,
                      expected_sha256=expect_sha256, callbacks=_callbacks(False, events, stack))
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        _interrupted("predicting")
    finally:
        stack.close()
    err.print(res["report"].summary(), soft_wrap=True, highlight=False, markup=False)
    _warn(res["warnings"], set())
    write_predictions(res, out, id_column)
    c = res["communication"]
    console.print(f"{len(res['ids'])} predictions ({res['method']}) written to [bold]{out}[/]; "
                  f"{c['total_bytes'] / 1e3:.1f} kB in {c['messages']} messages")


def _deployment(config: Path, insecure: bool):
    from verticalfs.configuration import is_deployment, read_raw
    from verticalfs.deploy.config import Deployment

    if not is_deployment(read_raw(config, "config file")):
        raise ConfigError(f"{str(config)!r} is not a deployment file (it has no [parties.<name>] tables)")
    return Deployment.load(config, insecure=insecure)


def _predict_deployed(config: Path, model: Path, out: Path, party_file, insecure: bool,
                      expect_sha256: str | None, events: Path | None = None) -> None:
    """``predict --config``: batch prediction where the data lives (verticalfs.deploy.predict)."""
    from verticalfs.model import write_predictions
    from verticalfs.options import check_out

    stack = contextlib.ExitStack()
    try:
        if party_file:
            raise ConfigError(f"--party-file does not apply with a deployment file (each party reads its own "
                              f"predict_file or file named in {str(config)!r}); leave it out")
        check_out(out)
        check_out(events, "--events")
        dep = _deployment(config, insecure)
        from verticalfs.deploy.predict import predict_deployment

        _torch_threads()
        res = predict_deployment(dep, model, expected_sha256=expect_sha256,
                                 callbacks=_callbacks(False, events, stack))
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        _interrupted("predicting")
    finally:
        stack.close()
    write_predictions(res, out, dep.id_column)
    c = res["communication"]
    err.print("scoring files: " + ", ".join(f"{p} holds {n} rows" for p, n in res["rows"].items())
              + f"; {len(res['ids'])} ids held by every party (private set intersection, {res['psi_s']:.1f} s"
              + (f"; reused for {', '.join(res['psi_cached'])}" if res["psi_cached"] else "") + ")",
              soft_wrap=True, highlight=False, markup=False)
    console.print(f"{len(res['ids'])} predictions ({res['method']}) written to [bold]{out}[/]; "
                  f"{c['total_bytes'] / 1e3:.1f} kB in {c['messages']} messages "
                  f"({c['by_phase'].get('predict', 0) / 1e3:.1f} kB at inference)")


@app.command("serve-model")
def serve_model_cmd(
    config: Path = O(..., "--config", help="The deployment file (each party serves its own rows and model part)."),
    model: Path = O(..., "--model", help="The label holder's folder of the model (`run --config ... --save-model`); "
                    "the parties are sent its name only."),
    port: int = O(8080, "--port", min=0, max=65535, help="The HTTP port."),
    host: str = O("127.0.0.1", "--host", help="The HTTP address to bind (0.0.0.0: every interface; put TLS and "
                  "authentication in front of it)."),
    batch_ms: float = O(0.0, "--batch-ms", help="Milliseconds to wait after a request for others to score with it "
                        "(0: a batch is what arrived while the previous one was scored)."),
    max_batch: int = O(4096, "--max-batch", min=1, help="The most ids scored in one round to the parties."),
    max_body_mb: float = O(8.0, "--max-body-mb", help="The largest request body, in MiB: a larger one is refused "
                           "(413) before it is parsed."),
    insecure: bool = O(False, "--insecure", help="No TLS between the parties (local experiments only)."),
    expect_sha256: str = O(None, "--expect-sha256", help="The manifest sha256 printed by `run --save-model`: "
                           "a model whose manifest differs is refused."),
) -> None:
    """Online scoring: POST /predict {"ids": [...]} -> probabilities per id, unknown ids listed;
    GET /health (liveness), GET /ready (every party reachable with the model open; else 503 and why),
    GET /metrics (Prometheus); the OpenAPI page at /docs. A party that restarts is set up again
    by itself. Runs at the label party until interrupted."""
    try:
        if not batch_ms >= 0:
            raise ConfigError(f"--batch-ms must be >= 0, got {batch_ms}")
        dep = _deployment(config, insecure)
        from verticalfs.deploy.predict import DeployedModel
        from verticalfs.deploy.serve import serve

        _torch_threads()
        m = DeployedModel(dep, model, expected_sha256=expect_sha256)
    except VerticalFSError as exc:
        _fail(exc)
    try:
        err.print(f"model {m.name} ({m.manifest['method']}): {len(m.known)} ids held by every party of "
                  f"{', '.join(m.parties)}", soft_wrap=True, highlight=False, markup=False)
        serve(m, host=host, port=port, batch_ms=batch_ms, max_batch=max_batch, max_body_mb=max_body_mb,
              on_ready=lambda: console.print(f"serving {m.name} on http://{host}:{port} (POST /predict, GET "
                                             "/health, /ready, /metrics, /docs)", soft_wrap=True, highlight=False,
                                             markup=False))
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass
    finally:
        m.close()


def _print_result(res, shown: set[str] | None = None) -> None:
    t = RichTable(title=f"{res.method} on {res.dataset} ({len(res.parties)} parties, seed {res.seed})")
    t.add_column("figure")
    t.add_column("value", justify="right")
    for k, v in res.metrics.items():
        t.add_row(f"test {k}", f"{v:.4f}" if isinstance(v, float) else str(v))
    sel = res.selection
    t.add_row("features kept", f"{sel['n_kept']} / {sel['n_features']}")
    if sel.get("spurious_removed") is not None:
        t.add_row("spurious removed", f"{sel['spurious_removed']:.1%}")
    c = res.communication
    t.add_row("total sent", f"{c['total_bytes'] / 1e6:.3f} MB in {c['messages']} messages")
    for ph, b in sorted(c["by_phase"].items()):
        t.add_row(f"  phase {ph}", f"{b / 1e6:.3f} MB")
    for e in res.estimates:
        t.add_row(f"est. wall time at {e['bandwidth_mbps']:g} Mbit/s", f"{e['seconds']:.1f} s")
    for k, v in (res.info or {}).items():
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    t.add_row("time", f"{res.timings['total_seconds']:.1f} s")
    console.print(t)
    _print_selection(res)
    _warn(res.warnings, set() if shown is None else shown)


def _print_selection(res) -> None:
    """Per party, the kept and removed columns by the names in the user's data, with scores."""
    t = RichTable(title="selection by column (one-hot levels grouped to their column)")
    t.add_column("party")
    t.add_column("kept columns (score)")
    t.add_column("removed columns")
    for p, e in res.selection["parties"].items():
        def show(c):
            sc = c.get("score")
            lv = f" [{len(c['levels_kept'])}/{len(c['levels'])} levels]" if "levels" in c else ""
            return c["column"] + lv + (f" ({sc:.3g})" if sc is not None else "")
        kept = [show(c) for c in e["columns"] if c["kept"]]
        removed = [c["column"] for c in e["columns"] if not c["kept"]]
        t.add_row(p, ", ".join(kept) or "-", ", ".join(removed) or "-")
    console.print(t)


# ------------------------------------------------------------------------------------- compare
@app.command("compare")
def compare_cmd(
    methods: str = O(..., "--methods", help="Comma-separated method names."),
    out: Path = O(..., "--out", "-o", help="Folder for results.json, accuracy_vs_mb.png and runs/ (one JSON per finished run)."),
    dataset: str = OPT_DATASET,
    parties: int = OPT_PARTIES,
    noise: str = OPT_NOISE,
    overlap: str = OPT_OVERLAP,
    epochs: int = O(None, "--epochs", "-e", help="Communication epochs of every method, at least 1."),
    seeds: str = O("0", "--seeds", help="Comma-separated seeds, e.g. 0,1,2,3,4."),
    param: list[str] = O(None, "--param", "-p", help="method.name=value or name=value for all methods."),
    codec: str = O(None, "--codec", help="As for run: applied to every method, an error for those that fix their own codecs."),
    reference: bool = O(None, "--reference/--no-reference", help="Also run VFL on the original data (default: when --noise > 0) and report MB to 90 % of its best accuracy."),
    insecure: bool = O(False, "--insecure", help="With a deployment file: no TLS (messages in the clear, no party authenticated). Local experiments only."),
    resume: bool = O(False, "--resume", help="Skip the runs already written to OUT/runs by an earlier, interrupted compare."),
    partition: str = OPT_PARTITION,
    assignment: Path = OPT_ASSIGNMENT,
    scaling: str = OPT_SCALING,
    impute: str = OPT_IMPUTE,
    party_file: list[str] = OPT_PARTY_FILE,
    label_party: str = OPT_LABEL_PARTY,
    label_column: str = OPT_LABEL_COLUMN,
    id_column: str = OPT_ID_COLUMN,
    categorical: list[str] = OPT_CATEGORICAL,
    na_values: str = OPT_NA_VALUES,
    delimiter: str = OPT_DELIMITER,
    encoding: str = OPT_ENCODING,
    task: str = OPT_TASK,
    max_file_mb: float = OPT_MAX_FILE,
    strip_ids: bool = OPT_STRIP_IDS,
    datetime: str = OPT_DATETIME,
    data_dir: Path = DataDir,
    progress: bool = O(True, "--progress/--no-progress", help="Show progress on standard error (see `run --help`)."),
    quiet: bool = O(False, "--quiet", "-q", help="No progress output (the same as --no-progress)."),
    strict: bool = OPT_STRICT,
    events: Path = O(None, "--events", help=OPT_EVENTS_HELP + " The comparison's events enclose each run's."),
    force: bool = OPT_FORCE,
) -> None:
    """Run several methods on the same data and seeds: a table, results.json and a plot of accuracy against MB."""
    from verticalfs.compare import compare, write_compare
    from verticalfs.methods import registry
    from verticalfs.options import check_epochs, check_out, parse_seeds

    progress = progress and not quiet
    opts = _data_options(**_data_kwargs(locals()))
    names = [m.strip() for m in methods.split(",") if m.strip()]
    try:
        check_out(out, "--out", directory=True)
        check_out(out / "runs", "--out", directory=True)  # what compare writes in it, checked now
        for f in ("results.json", "accuracy_vs_mb.png"):
            check_out(out / f, "--out")
        check_epochs(epochs)
        check_out(events, "--events")
        seed_list = parse_seeds(seeds)
        parsed = opts.check()
        if not names:
            raise ConfigError("--methods is empty; give comma-separated method names")
        if len(set(names)) != len(names):
            raise ConfigError(f"--methods names a method twice: {names}")
        common, specific = {}, {}
        for k, v in _parse_params(param).items():
            if "." in k and k.split(".", 1)[0] in names + ["vfl"]:
                m, p = k.split(".", 1)
                specific.setdefault(m, {})[p] = v
            else:
                common[k] = v
        for m in names:
            registry.get(m)
    except VerticalFSError as exc:
        _fail(exc)
    state = {"current": None}

    def on_start(method: str, seed: int) -> None:
        state["current"] = (method, seed)

    stack = contextlib.ExitStack()
    _torch_threads()
    try:
        summary = compare(opts, names, seeds=seed_list, epochs=epochs, params=specific, common_params=common,
                          codec=codec, reference=reference, callbacks=_callbacks(progress, events, stack, force),
                          out_dir=out, resume=resume, parsed=parsed, on_start=on_start)
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        m, s = state["current"] or ("set-up", "-")
        _interrupted(f"{m} (seed {s})", f"the finished runs are in {out / 'runs'}; rerun with --resume to "
                     "complete the rest")
    finally:
        stack.close()
    _print_compare(summary, opts, seeds)
    _warn(summary["warnings"], set())
    paths = write_compare(summary, out)
    if isinstance(paths["plot"], str):
        console.print(f"wrote {paths['results']}")
        err.print(f"[yellow]no plot:[/] {paths['plot']}")
    else:
        console.print(f"wrote {paths['results']} and {paths['plot']}")
    at_chance = [r["method"] for r in summary["table"] if r.get("at_chance")]
    if strict and at_chance:
        err.print(f"--strict: at or near chance: {', '.join(at_chance)}; exit code {EXIT_CHANCE}", soft_wrap=True,
                  highlight=False, markup=False)
        raise typer.Exit(EXIT_CHANCE)


def _print_compare(summary: dict, opts: DataOptions, seeds: str) -> None:
    metric = summary["metric"]
    t = RichTable(title=f"{summary['dataset']}: {summary['parties']} parties, noise {opts.noise}, seeds {seeds}")
    for col in ("method", f"test {metric}", "MB sent (train)", "MB to target", "spurious removed", "features kept"):
        if col == "method":
            t.add_column(col, no_wrap=True, min_width=14)
        else:
            t.add_column(col, justify="right")

    def fmt(row, key, pct=False):
        v, s = row.get(key), row.get(key + "_std")
        if v is None:
            return "-"
        txt = f"{v:.1%}" if pct else f"{v:.4g}"
        if s:
            txt += f" ± {s:.1%}" if pct else f" ± {s:.2g}"
        return txt

    for row in summary["table"]:
        if row.get("skipped"):
            t.add_row(row["method"], "skipped", "-", "-", "-", "-")
            continue
        mbt = fmt(row, "mb_to_target")
        if row["mb_to_target"] is not None and row["reached"] < row["runs"]:
            mbt += f" ({row['reached']}/{row['runs']} reached)"
        name = row["method"] + (" (chance)" if row.get("at_chance") else "")
        t.add_row(name, fmt(row, "metric"), fmt(row, "train_mb"), mbt,
                  fmt(row, "spurious_removed", pct=True), fmt(row, "n_kept"))
    console.print(t)
    for row in summary["table"]:
        if row.get("skipped"):
            console.print(f"{row['method']} skipped: {row['skipped']}", soft_wrap=True, highlight=False, markup=False)


certs_app = typer.Typer(help="Mutual-TLS material for networked runs (needs the deploy extra).",
                        no_args_is_help=True)
app.add_typer(certs_app, name="certs")


@certs_app.command("make")
def certs_make(
    parties: str = typer.Option(..., "--parties", help="Comma-separated party names (the label holder, "
                                "'active', is added)."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for ca.pem, ca.key and <party>.pem / <party>.key."),
    hosts: str = typer.Option("localhost,127.0.0.1", "--hosts", help="Host names or IP addresses the parties "
                              "are reached at (in every certificate, beside the party's own name)."),
    days: int = typer.Option(365, "--days", min=1, help="Validity."),
) -> None:
    """LOCAL EXPERIMENTS ONLY: a development CA and every party's key and certificate, all made on
    this host (ECDSA P-256), for mutual TLS.

    Every private key exists on this one host, so whoever runs it could impersonate any party.
    Across organisations use `certs ca` at the CA, `certs request` at each party (its key never
    leaves its host) and `certs sign` at the CA.
    """
    from verticalfs.exceptions import ConfigError
    from verticalfs.names import LABEL_HOLDER

    names = [p.strip() for p in parties.split(",") if p.strip()]
    if not names:
        _fail(ConfigError("--parties names no party; e.g. --parties bank,telecom,insurer"))
    if LABEL_HOLDER not in names:
        names = [LABEL_HOLDER, *names]
    try:
        from verticalfs.transport.grpc.tls import make_certs

        paths = make_certs(names, out, hosts=[h.strip() for h in hosts.split(",") if h.strip()], days=days)
    except ConfigError as exc:
        _fail(exc)
    console.print(f"wrote a development CA ({paths['ca']}) and certificates for {', '.join(names)} in {out}; "
                  "the .key files are private (mode 0600)")


@certs_app.command("ca")
def certs_ca(
    out: Path = typer.Option(..., "--out", "-o", help="Folder for ca.pem (give it to every party) and ca.key "
                             "(mode 0600; it never leaves this host)."),
    name: str = typer.Option("verticalfs CA", "--name", help="The CA's common name (no party may use it)."),
    days: int = typer.Option(3650, "--days", min=1, help="Validity."),
) -> None:
    """At the CA: create the CA that signs the parties' requests (`certs sign`)."""
    try:
        from verticalfs.transport.grpc.ca import make_ca

        paths = make_ca(out, name=name, days=days)
    except VerticalFSError as exc:
        _fail(exc)
    console.print(f"wrote the CA certificate {paths['ca']} (give it to every party) and its key {paths['key']} "
                  "(mode 0600: keep it on this host)", soft_wrap=True, highlight=False, markup=False)


@certs_app.command("request")
def certs_request(
    party: str = typer.Option(..., "--party", help="This host's party name (as in the deployment file; the "
                              "label holder is 'active')."),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for <party>.key (mode 0600, stays on this host) and "
                             "<party>.csr (send it to the CA)."),
    hosts: str = typer.Option("localhost,127.0.0.1", "--hosts", help="Host names or IP addresses this party is "
                              "reached at (in the certificate, beside the party's own name)."),
) -> None:
    """At each party: make its private key on its own host and a certificate signing request for the CA."""
    try:
        from verticalfs.transport.grpc.ca import request

        paths = request(party, out, hosts=hosts.split(","))
    except VerticalFSError as exc:
        _fail(exc)
    console.print(f"wrote {paths['key']} (private, mode 0600: never copy it off this host) and {paths['csr']}; "
                  f"send the .csr to the CA, which runs `verticalfs certs sign --ca DIR --csr {paths['csr'].name} "
                  f"--party {party} --out {party}.pem`", soft_wrap=True, highlight=False, markup=False)


@certs_app.command("sign")
def certs_sign(
    ca: Path = typer.Option(..., "--ca", help="The CA's folder (ca.pem and ca.key, from `certs ca`)."),
    csr: Path = typer.Option(..., "--csr", help="The party's request (<party>.csr from `certs request`)."),
    party: str = typer.Option(..., "--party", help="The party you know the requester as: the request must name it."),
    out: Path = typer.Option(..., "--out", "-o", help="The certificate to write (<party>.pem); send it and ca.pem "
                             "back to the party."),
    days: int = typer.Option(365, "--days", min=1, help="Validity."),
) -> None:
    """At the CA: check a party's request (signature, name) and sign its certificate."""
    try:
        from verticalfs.transport.grpc.ca import sign

        path = sign(ca, csr, out, party=party, days=days)
    except VerticalFSError as exc:
        _fail(exc)
    console.print(f"signed {party}'s certificate: {path}; send it and {Path(ca) / 'ca.pem'} to {party}",
                  soft_wrap=True, highlight=False, markup=False)


party_app = typer.Typer(help="One party of a deployment across machines (needs the deploy extra).",
                        no_args_is_help=True)
app.add_typer(party_app, name="party")
model_app = typer.Typer(help="Saved models.", no_args_is_help=True)
app.add_typer(model_app, name="model")


@model_app.command("gather")
def model_gather(
    model: Path = typer.Option(..., "--model", help="The label holder's folder of the model (`run --config ... "
                               "--save-model DIR`: its manifest and active.pt)."),
    out: Path = typer.Option(..., "--out", help="A new folder: every part of the model, for `predict --model`."),
    config: Path = typer.Option(None, "--config", help="The deployment file: each party's part is read from its "
                                "model folder (<model_dir>/<name>/<party>.pt) on this host."),
    part: list[str] = typer.Option(None, "--part", help="PARTY=PATH: a party's part (its .pt file, or the folder "
                                   "holding it), e.g. copied from its host; repeat per party."),
) -> None:
    """One folder with every part of a model trained over a deployment (each part checked against the
    manifest's SHA-256), for the in-process `verticalfs predict --model OUT`. Each party's part leaves
    its host only if you copy it: use it for an audit or a single-host experiment."""
    try:
        from verticalfs.deploy.gather import gather_model

        parts = {}
        for item in part or []:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise ConfigError(f"--part {item!r}: expected PARTY=PATH")
            parts[name] = Path(path)
        done = gather_model(model, out, config=config, parts=parts)
    except VerticalFSError as exc:
        _fail(exc)
    console.print(f"model gathered in {done}: `verticalfs predict --model {done} --party-file ...`",
                  soft_wrap=True, highlight=False, markup=False)


@party_app.command("serve")
def party_serve(
    config: Path = typer.Option(..., "--config", help="The deployment file (the same on every host; its keys: docs/reference/configuration.md)."),
    name: str = typer.Option(..., "--name", help="This host's party, as named in the deployment file."),
    checkpoints: Path = typer.Option(None, "--checkpoints", help="This party's checkpoint folder (default: "
                                     "<checkpoints>/<name> of the deployment file, if set)."),
    threads: int = typer.Option(1, "--threads", min=1, help="Torch CPU threads of this party (its models are "
                                "small: one thread is fastest when several parties share a host)."),
    insecure: bool = typer.Option(False, "--insecure", help="No TLS: messages in the clear, any process that "
                                  "reaches the address can claim to be a peer. Local experiments only."),
    policy: Path = typer.Option(None, "--policy", help="A policy file only this party reads (TOML: the keys of "
                                "[parties.<name>.policy], docs/reference/configuration.md); its keys replace the "
                                "deployment file's."),
    max_file_mb: float = typer.Option(None, "--max-file-mb", help="The largest file this party reads, in MiB (on "
                                      "disk and decompressed); default: the deployment file's max_file_mb (1024)."),
    engine: str = typer.Option(None, "--engine", help="Where this party reads, prepares and PSI-blinds its table: "
                               "local (this process) or ray (a Ray cluster; the ray extra, docs/scale.md); default: "
                               "the engine key of its [parties.<name>] table (local)."),
    ray_address: str = typer.Option(None, "--ray-address", help="The Ray cluster of --engine ray (HOST:PORT of its "
                                    "head, as `ray start --head` prints it); default: its ray_address key, else a Ray "
                                    "instance started on this host."),
) -> None:
    """Serve one party: read and check only its own file, listen on its address, answer the label holder.

    The party's policy (what it agrees to do: methods, raw columns, key sizes, labels, model folder,
    PSI and message limits, and the floors of what it computes: its bottom model's shape, its own
    randomness, proven labels, bins, DP) is its [parties.<name>.policy] table with --policy's keys in
    place; it is printed at start, and a request outside it is refused with the rule and the key to
    change (docs/security.md, threat model).

    Runs until interrupted (Ctrl-C or SIGTERM); every run of the label holder aligns the rows
    afresh by private set intersection. The label party does not serve: it runs
    `verticalfs run --config deployment.toml -m METHOD`, which serves its own feature columns.
    """
    import logging
    import signal
    import threading

    from verticalfs.deploy.config import Deployment
    # refused senders (with their address), retried calls: one timestamped line each on stderr
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s {name}: %(message)s"))
    logging.getLogger("verticalfs").addHandler(handler)
    logging.getLogger("verticalfs").setLevel(logging.INFO)

    try:
        from verticalfs.options import check_out

        check_out(checkpoints, "--checkpoints", directory=True)
        dep = Deployment.load(config, insecure=insecure)
        entry = dep.party(name)
        if checkpoints is None and dep.checkpoints is not None:
            check_out(dep.checkpoint_dir(name), f"checkpoints of {str(config)!r}", directory=True)
        if name == dep.label_party:
            raise ConfigError(f"{name!r} is the label party of {str(config)!r}: it runs `verticalfs run --config "
                              f"{config} -m METHOD`, which also serves its feature columns")
        from verticalfs.deploy.holder import party_policy, serve_party

        effective = party_policy(dep, name, policy)
        if max_file_mb is not None and not max_file_mb > 0:
            raise ConfigError(f"--max-file-mb must be > 0, got {max_file_mb}")
        if engine is not None:
            from verticalfs.engine import check_engine

            check_engine(engine)
        import torch  # the work starts here (the checks above stay fast without it)

        torch.set_num_threads(threads)
        party = serve_party(dep, name, checkpoint_dir=checkpoints, policy=effective,
                            max_bytes=None if max_file_mb is None else int(max_file_mb * 2**20),
                            engine=engine, ray_address=ray_address)
        # the models it had open before it stopped (a restart): scoring goes on without waiting for OpenModel
        notes: list[str] = []
        scoring = party.runtime.scoring
        reopened = [] if scoring is None else scoring.restore_open_models(
            log=lambda text: notes.append(f"party {name} {text}"))
        notes += [f"party {name}: model {m!r} open again (it was open when the party stopped)" for m in reopened]
        party.start()
    except VerticalFSError as exc:
        _fail(exc)
    rt = party.runtime
    from verticalfs.data.user import named_like

    _warn([f"party {name!r} serves a column {c!r} of {str(entry.file)!r} named like the label column "
           f"{dep.label_column!r} of {dep.label_party!r}; if it is a copy of the label, the model learns the answer "
           "from it: drop the column or fix the file" for c in rt.columns if named_like(c, dep.label_column)], set())
    on = "" if rt.engine == "local" else f" (engine {rt.engine}{', cluster ' + (ray_address or entry.ray_address) if (ray_address or entry.ray_address) else ''})"
    console.print(f"party [bold]{name}[/] serves {rt.n_rows} rows x {len(rt.columns)} columns of "
                  f"{entry.table or entry.file}{on} on {entry.listen} ({'INSECURE, no TLS' if dep.insecure else 'mutual TLS'}); "
                  f"peers: {', '.join(sorted(party.server.peers))}", soft_wrap=True)
    console.print(f"policy of {name} ({'its [parties.' + name + '.policy]' if policy is None else f'{policy} over [parties.{name}.policy]'}): "
                  + "; ".join(effective.lines()), soft_wrap=True, highlight=False, markup=False)
    for note in notes:
        err.print(note, soft_wrap=True, highlight=False, markup=False)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        party.stop()
        console.print(f"party {name} stopped")


# --------------------------------------------------------------------------------------- board
def run_command_line(options: dict[str, Any]) -> str | None:
    """The ``verticalfs run`` command of a result's ``config.cli`` (the options it ran with, those at
    their default left out), from the command's own declarations (the board shows it)."""
    import shlex

    import typer.core
    import typer.main

    if not options or "method" not in options:
        return None
    cmd = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    args = ["verticalfs", "run"]
    for p in cmd.params:
        if p.name not in options or not isinstance(p, typer.core.TyperOption):
            continue
        v = options[p.name]
        if v is None or v == p.default or (isinstance(v, list) and not v):
            continue
        if p.is_flag:
            if v:
                args.append(p.opts[0])
            elif p.secondary_opts:
                args.append(p.secondary_opts[0])
            continue
        for item in v if isinstance(v, list) else [v]:
            args += [p.opts[0], str(item)]
    return shlex.join(args)


@app.command("board")
def board_cmd(
    folders: list[Path] = typer.Argument(None, help="Folders with results (`run --out`, `compare --out`), event files (`--events`, .jsonl) and saved models; default results/."),
    host: str = O("127.0.0.1", "--host", help="Address to listen on. Another than the loopback needs --token (or --token-file)."),
    port: int = O(8765, "--port", help="Port to listen on (0: any free port).", min=0, max=65535),
    token: str = O(None, "--token", help="Required of every request (as ?token= once, or 'Authorization: Bearer'); at least 16 characters."),
    token_file: Path = O(None, "--token-file", help="Read the token from this file (its first line; mode 600)."),
    deployment: list[Path] = O(None, "--deployment", help="A deployment file: show each party's status, asked through the protocol with the label holder's certificate (repeatable)."),
    insecure: bool = O(False, "--insecure", help="With --deployment: no TLS (a local experiment's deployment)."),
) -> None:
    """A read-only web page over runs, comparisons, live runs (--events) and a deployment's parties."""
    from verticalfs.board import check_bind, is_loopback, read_token, serve

    roots = [str(f) for f in (folders or [Path("results")])]
    try:
        tok = read_token(token, token_file)
        check_bind(host, tok)
        for f in roots:
            if not Path(f).is_dir():
                raise ConfigError(f"board: {f!r} is not a folder (give the folders holding results; default results/)")
    except ConfigError as exc:
        _fail(exc)
    if not is_loopback(host):
        err.print(f"[bold yellow]warning:[/] the board listens on {host}: anyone who can reach this machine and has the "
                  "token can read every result under the folders, and its traffic is not encrypted (put it behind a "
                  "TLS proxy, or keep --host 127.0.0.1 and use an SSH tunnel)", soft_wrap=True, highlight=False)

    def ready(server) -> None:
        sock = server.servers[0].sockets[0].getsockname()
        shown = f"[{sock[0]}]" if ":" in sock[0] else sock[0]
        url = f"http://{shown}:{sock[1]}/" + (f"?token={tok}" if tok else "")
        console.print(f"board on {url} over {', '.join(roots)} (read-only; Ctrl-C stops it)", soft_wrap=True,
                      highlight=False, markup=False)

    try:
        serve(roots, host=host, port=port, token=tok, deployments=[str(d) for d in deployment or []],
              insecure=insecure, on_ready=ready, command_line=run_command_line)
    except VerticalFSError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        pass


def _register_method_commands() -> None:
    """Methods add their own commands (e.g. LESS-VFL's grid search) through the method registry."""
    from verticalfs.method_registry import commands

    for register in commands().values():
        register(app)


_register_method_commands()


def main() -> None:  # pragma: no cover
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
