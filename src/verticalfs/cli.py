"""The ``verticalfs`` command line: a thin Typer app over the method and data-set registries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table as RichTable

from verticalfs.exceptions import VerticalFSError

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
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}")
    raise typer.Exit(2)


def _parse_params(items: list[str] | None) -> dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise typer.BadParameter(f"--param expects name=value, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _parse_floats(s: str) -> float | list[float]:
    parts = [p for p in s.replace(";", ",").split(",") if p.strip()]
    vals = [float(p) for p in parts]
    return vals[0] if len(vals) == 1 else vals


def _parse_ints(s: str) -> int | list[int]:
    parts = [p for p in s.replace(";", ",").split(",") if p.strip()]
    vals = [int(p) for p in parts]
    return vals[0] if len(vals) == 1 else vals


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


def _build(dataset, parties, noise, overlap, seed, data_dir, partition, assignment, scaling,
           party_file, label_party, label_column, id_column, impute="auto"):
    from verticalfs.api import build_data

    if party_file:
        from verticalfs.data.user import load_party_files

        files = {}
        for it in party_file:
            if "=" not in it:
                raise typer.BadParameter(f"--party-file expects name=path, got {it!r}")
            k, v = it.split("=", 1)
            files[k] = v
        if not label_party or not label_column:
            raise typer.BadParameter("--party-file needs --label-party and --label-column")
        vds, report = load_party_files(files, label_party=label_party, label_column=label_column,
                                       id_column=id_column)
        err.print(report.summary())
        dataset = vds
    elif dataset is None:
        raise typer.BadParameter("give --dataset NAME (see `verticalfs datasets`) or --party-file name=path ...")
    return build_data(dataset, parties=parties, noise=_parse_floats(noise), overlap=_parse_ints(overlap),
                      partition_strategy=partition, assignment=assignment, seed=seed, data_dir=data_dir,
                      scaling=scaling, impute=impute)


@app.command("run")
def run_cmd(
    method: str = typer.Option(..., "--method", "-m", help="A registered method (`verticalfs methods`)."),
    dataset: str = typer.Option(None, "--dataset", "-d", help="A data set name (`verticalfs datasets`)."),
    parties: int = typer.Option(3, "--parties", "-k", help="Number of feature-holding parties."),
    noise: str = typer.Option("0", "--noise", help="Gaussian noise features as a fraction of each party's columns; one value or one per party (0.8,0.25,0.1,0)."),
    overlap: str = typer.Option("0", "--overlap", help="Columns of other parties copied into each party (one value or one per party)."),
    epochs: int = typer.Option(None, "--epochs", "-e", help="Communication epochs (the method's `epochs` parameter)."),
    seed: int = typer.Option(0, "--seed", "-s"),
    param: list[str] = typer.Option(None, "--param", "-p", help="Method parameter name=value (repeatable)."),
    codec: str = typer.Option(None, "--codec", help="Payload codec of embeddings and gradients (float32, float16, int8) for methods that take one; default float32. Methods that fix their own codecs (the SparseVFL family) refuse it."),
    partition: str = typer.Option("random", "--partition", help="Column split: random or contiguous."),
    assignment: Path = typer.Option(None, "--assignment", help="TOML/JSON file with explicit columns per party."),
    scaling: str = typer.Option("minmax", "--scaling", help="minmax, standard or none (fitted on the training split)."),
    impute: str = typer.Option("auto", "--impute", help="Missing values: median (of each party's training rows), none (error), auto (the data set's default)."),
    party_file: list[str] = typer.Option(None, "--party-file", help="Your own data: party=path.csv|.parquet (repeatable)."),
    label_party: str = typer.Option(None, "--label-party", help="With --party-file: the party whose file holds the label."),
    label_column: str = typer.Option(None, "--label-column", help="With --party-file: the label column."),
    id_column: str = typer.Option("id", "--id-column", help="With --party-file: the id column shared by all files."),
    data_dir: Path = DataDir,
    out: Path = typer.Option(None, "--out", "-o", help="Write the result JSON here (atomically)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
) -> None:
    """Run one method on one data set and print its figures; optionally write the result JSON."""
    from verticalfs.api import run

    try:
        params = _parse_params(param)
        if epochs is not None:
            params.setdefault("epochs", str(epochs))
        data = _build(dataset, parties, noise, overlap, seed, data_dir, partition, assignment, scaling,
                      party_file, label_party, label_column, id_column, impute)
        res = run(method, data, seed=seed, params=params, codec=codec, progress=progress,
                  data_config={"noise": noise, "overlap": overlap, "partition": partition, "scaling": scaling,
                               "impute": impute})
    except VerticalFSError as exc:
        _fail(exc)
    _print_result(res)
    if out is not None:
        res.save(out)
        console.print(f"result written to [bold]{out}[/]")


def _print_result(res) -> None:
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


@app.command("compare")
def compare_cmd(
    methods: str = typer.Option(..., "--methods", help="Comma-separated method names."),
    dataset: str = typer.Option(..., "--dataset", "-d"),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for results.json and accuracy_vs_mb.png."),
    parties: int = typer.Option(3, "--parties", "-k"),
    noise: str = typer.Option("0", "--noise"),
    overlap: str = typer.Option("0", "--overlap"),
    epochs: int = typer.Option(None, "--epochs", "-e"),
    seeds: str = typer.Option("0", "--seeds", help="Comma-separated seeds, e.g. 0,1,2,3,4."),
    param: list[str] = typer.Option(None, "--param", "-p", help="method.name=value or name=value for all methods."),
    codec: str = typer.Option(None, "--codec", help="As for run: applied to every method, an error for those that fix their own codecs."),
    reference: bool = typer.Option(None, "--reference/--no-reference", help="Also run VFL on the original data (default: when --noise > 0) and report MB to 90 % of its best accuracy."),
    data_dir: Path = DataDir,
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Run several methods on the same data and seeds: a table, results.json and a plot of accuracy against MB."""
    from verticalfs.compare import compare, write_compare
    from verticalfs.methods import registry

    names = [m.strip() for m in methods.split(",") if m.strip()]
    try:
        for m in names:
            registry.get(m)
        common, specific = {}, {}
        for k, v in _parse_params(param).items():
            if "." in k:
                m, p = k.split(".", 1)
                specific.setdefault(m, {})[p] = v
            else:
                common[k] = v
        summary = compare(dataset, names, parties=parties, noise=_parse_floats(noise), overlap=_parse_ints(overlap),
                          seeds=[int(s) for s in seeds.split(",") if s.strip()], epochs=epochs,
                          params=specific, common_params=common, data_dir=data_dir, codec=codec,
                          reference=reference, progress=progress)
    except VerticalFSError as exc:
        _fail(exc)
    metric = summary["metric"]
    t = RichTable(title=f"{dataset}: {parties} parties, noise {noise}, seeds {seeds}")
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
        mbt = fmt(row, "mb_to_target")
        if row["mb_to_target"] is not None and row["reached"] < row["runs"]:
            mbt += f" ({row['reached']}/{row['runs']} reached)"
        t.add_row(row["method"], fmt(row, "metric"), fmt(row, "train_mb"), mbt,
                  fmt(row, "spurious_removed", pct=True), fmt(row, "n_kept"))
    console.print(t)
    paths = write_compare(summary, out)
    if isinstance(paths["plot"], str):
        console.print(f"wrote {paths['results']}")
        err.print(f"[yellow]no plot:[/] {paths['plot']}")
    else:
        console.print(f"wrote {paths['results']} and {paths['plot']}")


def _register_method_commands() -> None:
    """Methods add their own commands (e.g. LESS-VFL's grid search) through the method registry."""
    from verticalfs.methods.registry import commands

    for register in commands().values():
        register(app)


_register_method_commands()


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
