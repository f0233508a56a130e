"""``verticalfs less-vfl-grid``: the grid search of less-vfl.md section 5 from the command line.

Registered with the method registry (:func:`verticalfs.methods.registry.command`); the CLI loads
this file on its own (it imports nothing heavy at module level), so ``verticalfs --help`` stays
fast.
"""

from __future__ import annotations

from verticalfs.method_registry import command


def _floats(s: str) -> list:
    return [None if x.strip().lower() == "none" else float(x) for x in s.split(",") if x.strip()]


@command("less-vfl-grid")
def register_cli(app) -> None:
    """Add the ``less-vfl-grid`` command to a typer app."""
    import typer

    @app.command("less-vfl-grid")
    def less_vfl_grid(
        dataset: str = typer.Argument(..., help="registered data set name"),
        method: str = typer.Option("less-vfl", help="less-vfl, local-lasso or group-lasso"),
        lambdas_m: str = typer.Option("2,1,0.5,0.25,0.1,0.05,0.01", help="comma-separated lambda_m grid"),
        lambdas_s: str = typer.Option("0.01,0.005", help="comma-separated lambda_s grid ('none' for group/local lasso)"),
        pretrain_epochs: str = typer.Option("1,2,3", help="comma-separated pre-training epochs ('none' for group lasso)"),
        seeds: int = typer.Option(5, help="seeds 0..n-1"),
        parties: int = typer.Option(3),
        noise: float = typer.Option(0.5, help="extra Gaussian noise features (fraction per party)"),
        epochs: int = typer.Option(50, help="communication epochs per run"),
        reference: bool = typer.Option(True, help="run VFL (Original) per seed for the bytes-to-target figure"),
        data_dir: str = typer.Option(None, help="folder of the data sets (default $VERTICALFS_DATA)"),
        out: str = typer.Option(None, help="write the rows and the summary as JSON here"),
    ) -> None:
        """Grid search over (lambda_m, lambda_s, pre-training epochs) x seeds (less-vfl.md Tables 5-8)."""
        from rich.console import Console
        from rich.table import Table

        from verticalfs.exceptions import ConfigError
        from verticalfs.options import check_epochs, check_out, fail
        from verticalfs.tuning import grid_search, select_best, summarise

        try:  # before the first of many runs, not after the last
            check_out(out)
            check_epochs(epochs)
        except ConfigError as exc:
            fail(exc)
        con = Console()
        ls = _floats(lambdas_s) if method == "less-vfl" else [None]
        pe = [None if v is None else int(v) for v in _floats(pretrain_epochs)] if method != "group-lasso" else [None]
        rows = grid_search(dataset, _floats(lambdas_m), ls, pe, list(range(seeds)), method=method, parties=parties,
                           noise=noise, data_dir=data_dir, params={"epochs": epochs}, reference=reference,
                           on_row=lambda r: con.print(f"seed {r['seed']} lambda_m={r['lambda_m']} "
                                                      f"lambda_s={r['lambda_s']} pre={r['pretrain_epochs']}: "
                                                      f"spurious removed={r['spurious_removed']}"))
        summ = summarise(rows)
        t = Table(title=f"{method} on {dataset} ({seeds} seeds)")
        for c in ("lambda_m", "lambda_s", "pretrain", "test acc", "val acc", "spurious removed", "MB to target"):
            t.add_column(c)

        def ms(r, k, pct=False):
            v = r.get(k)
            if v is None:
                return "-"
            f = 100.0 if pct else 1.0
            return f"{f * v:.2f} ± {f * (r.get(k + '_std') or 0):.2f}"

        for r in summ:
            t.add_row(str(r["lambda_m"]), str(r["lambda_s"]), str(r["pretrain_epochs"]), ms(r, "accuracy", True),
                      ms(r, "val_accuracy", True), ms(r, "spurious_removed", True),
                      ms(r, "mb_to_target") + f" ({r['reached']}/{r['runs']})")
        con.print(t)
        best = select_best(rows)
        con.print(f"chosen (highest validation accuracy with >= 80 % spurious removed): {best and {k: best[k] for k in ('lambda_m', 'lambda_s', 'pretrain_epochs')}}")
        if out:
            from verticalfs.utils.io import write_json_atomic

            write_json_atomic(out, {"rows": rows, "summary": summ, "best": best})
            con.print(f"wrote {out}")
