"""The bad inputs a new user meets: files, options and data values (used by test_bad_input.py).

Each case is a command line (with ``{placeholders}`` for files a ``setup`` function writes into a
temporary folder) and a regular expression the one-line error must match: it names the problem
(the option, file or column) and, mostly, the fix. ``python tests/bad_inputs.py --src DIR`` runs the
table against another checkout (e.g. the code before the hardening) and counts how each case
ended: a clear error, a misleading one, a traceback, or a silent result.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

# ------------------------------------------------------------------------------------ files
N = 120


def people(n: int = N, seed: int = 0) -> dict[str, pd.DataFrame]:
    """Three organisations' files about the same customers (ids 1..n), a label at the bank."""
    rng = np.random.default_rng(seed)
    ids = np.arange(1, n + 1)
    bank = pd.DataFrame({"id": ids, "income": rng.normal(50, 10, n).round(1),
                         "age": rng.integers(18, 80, n), "default": rng.integers(0, 2, n)})
    telecom = pd.DataFrame({"id": ids, "calls": rng.poisson(30, n), "plan": rng.choice(["a", "b", "c"], n)})
    insurer = pd.DataFrame({"id": ids, "claims": rng.poisson(2, n).astype(float)})
    return {"bank": bank, "telecom": telecom, "insurer": insurer}


def write(tmp: Path, frames: dict[str, pd.DataFrame], **kw) -> dict[str, str]:
    out = {}
    for name, df in frames.items():
        p = tmp / f"{name}.csv"
        df.to_csv(p, index=False, **kw)
        out[name] = str(p)
    return out


def base(tmp: Path, mutate=None) -> dict[str, str]:
    frames = people()
    if mutate is not None:
        mutate(frames)
    return write(tmp, frames)


FILES = ["--party-file", "bank={bank}", "--party-file", "telecom={telecom}", "--party-file", "insurer={insurer}",
         "--label-party", "bank", "--label-column", "default", "--categorical", "telecom:plan"]
RUN = ["run", "--no-progress", "-e", "1", "-m", "vfl"]


@dataclass
class Case:
    name: str
    args: list[str]
    expect: str
    setup: object = None  # fn(tmp) -> {placeholder: value}
    notes: str = ""
    extra: dict = field(default_factory=dict)


def _set(frames, party, col, values):
    frames[party][col] = values


def _parquet_nested(tmp: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = base(tmp)
    t = pa.table({"id": list(range(1, N + 1)), "claims": [[1, 2]] * N})
    pq.write_table(t, tmp / "insurer.parquet")
    d["insurer"] = str(tmp / "insurer.parquet")
    return d


def _gzip_bomb(tmp: Path) -> dict:
    d = base(tmp)
    frames = people()
    big = pd.concat([frames["insurer"]] * 1, ignore_index=True)
    with gzip.open(tmp / "insurer.csv.gz", "wt") as fh:
        big.to_csv(fh, index=False)
        fh.write(("9" * 1000 + "\n") * 3000)  # ~3 MB of padding rows when decompressed
    d["insurer"] = str(tmp / "insurer.csv.gz")
    return d


def _latin1(tmp: Path) -> dict:
    d = base(tmp)
    df = people()["telecom"]
    df["plan"] = np.where(df["plan"] == "a", "tarif-\u00e9t\u00e9", df["plan"])
    df.to_csv(tmp / "telecom.csv", index=False, encoding="latin-1")
    return d


def _semicolons(tmp: Path) -> dict:
    d = base(tmp)
    people()["insurer"].to_csv(tmp / "insurer.csv", index=False, sep=";")
    return d


def _raw_text(name: str, text: str):
    def setup(tmp: Path) -> dict:
        d = base(tmp)
        (tmp / f"{name}.csv").write_text(text)
        return d
    return setup


def _mut(fn):
    return lambda tmp: base(tmp, fn)


def _extra(tmp: Path) -> dict:
    d = base(tmp)
    (tmp / "dir.csv").mkdir()
    (tmp / "book.xlsx").write_bytes(b"PK\x03\x04")
    (tmp / "a.toml").write_text("party1 = ['nope']\n")
    (tmp / "outdir").mkdir()
    (tmp / "afile").write_text("x")
    return {**d, "dir": str(tmp / "dir.csv"), "xlsx": str(tmp / "book.xlsx"), "tmp": str(tmp)}


def _only_ids(frames):
    frames["insurer"] = frames["insurer"][["id"]]


def _leading_zeros(frames):
    frames["insurer"]["id"] = frames["insurer"]["id"].map(lambda v: f"{v:04d}")


def _many_classes(frames):
    frames["bank"]["default"] = np.arange(N)


def _stray_half(frames):
    y = frames["bank"]["default"].astype(float).to_numpy(copy=True)
    y[5] = 0.5
    frames["bank"]["default"] = y


def _one_class(frames):
    frames["bank"]["default"] = 1


def _question_marks(frames):
    a = frames["bank"]["age"].astype(object)
    a[[3, 7, 11]] = "?"
    frames["bank"]["age"] = a


def _missing(frames):
    c = frames["insurer"]["claims"].copy()
    c[[2, 4]] = np.nan
    frames["insurer"]["claims"] = c


def _inf(frames):
    c = frames["insurer"]["claims"].copy()
    c[1] = np.inf
    frames["insurer"]["claims"] = c


def _huge(frames):
    c = frames["insurer"]["claims"].copy()
    c[1], c[2] = 1e308, -1e308
    frames["insurer"]["claims"] = c


def _dup_ids(frames):
    frames["telecom"].loc[5, "id"] = 1


def _no_common(frames):
    frames["insurer"]["id"] = frames["insurer"]["id"] + 10_000


def _clash(frames):
    frames["insurer"]["income"] = 1.0


def _label_missing(frames):
    y = frames["bank"]["default"].astype(float)
    y[3] = np.nan
    frames["bank"]["default"] = y


def _text_col(frames):
    frames["insurer"]["region"] = np.where(np.arange(N) % 2, "north", "south")


def _thousand_classes(tmp: Path) -> dict:
    frames = people(2000)
    frames["bank"]["default"] = np.arange(2000) % 1000
    return write(tmp, frames)


# ------------------------------------------------------------------- round 2 (issue 37): data and outputs
READ_ONLY = "/proc"  # a folder no one may write in, not even root (permission bits say nothing to root)
RUN_FILES = [*RUN, *FILES]


def _raw_bytes(name: str, data: bytes):
    def setup(tmp: Path) -> dict:
        d = base(tmp)
        (tmp / f"{name}.csv").write_bytes(data)
        return d
    return setup


def _parquet_named_csv(tmp: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d = base(tmp)
    pq.write_table(pa.Table.from_pandas(people()["insurer"]), tmp / "insurer.csv")
    return d


def _zip_named_csv(tmp: Path) -> dict:
    import zipfile

    d = base(tmp)
    with zipfile.ZipFile(tmp / "insurer.csv", "w") as z:
        z.writestr("insurer.csv", people()["insurer"].to_csv(index=False))
    return d


def _stray_bytes(tmp: Path) -> dict:
    """Two bytes that are not UTF-8 on line 50 of an otherwise clean file."""
    d = base(tmp)
    lines = people()["insurer"].to_csv(index=False).encode().split(b"\n")
    lines[49] = lines[49] + b"\xff\xfe"
    (tmp / "insurer.csv").write_bytes(b"\n".join(lines))
    return d


def _with_model(tmp: Path) -> dict:
    """The three files and a model trained on them (one epoch), saved in {model}."""
    from verticalfs.api import build_data, run
    from verticalfs.data.user import load_party_files

    d = base(tmp)
    vds, _ = load_party_files({k: d[k] for k in ("bank", "telecom", "insurer")}, label_party="bank",
                              label_column="default", categorical={"telecom": ["plan"]})
    run("vfl", build_data(vds, seed=0), params={"epochs": 1}, save_model=tmp / "model")
    (tmp / "afile").write_text("x")
    return {**d, "model": str(tmp / "model"), "tmp": str(tmp)}


COMPARE = ["compare", "--no-progress", "--methods", "vfl", "-o", "{tmp}/c"]


def _compared(*args: str, mutate=None):
    """Files and a finished ``compare`` (wine, one epoch, or ``args``) in {tmp}/c; then ``mutate(tmp)``."""
    def setup(tmp: Path) -> dict:
        from typer.testing import CliRunner

        from verticalfs.cli import app

        d = {**_extra(tmp)}
        argv = [a.format(**d) for a in (args or ("-d", "wine", "-e", "1"))]
        res = CliRunner().invoke(app, [*render(COMPARE, d), *argv])
        assert res.exit_code == 0, res.output
        if mutate is not None:
            mutate(tmp)
        return d
    return setup


def _runs_is_a_file(tmp: Path) -> dict:
    d = _extra(tmp)
    (tmp / "c").mkdir()
    (tmp / "c" / "runs").write_text("x")
    return d


def _results_is_a_dir(tmp: Path) -> dict:
    d = _extra(tmp)
    (tmp / "c" / "results.json").mkdir(parents=True)
    return d


def _spaced_ids(frames):
    """The insurer writes every id with a leading space: no id matches."""
    frames["insurer"]["id"] = " " + frames["insurer"]["id"].astype(str)


def _touch_insurer(tmp: Path) -> None:
    with open(tmp / "insurer.csv", "a") as fh:
        fh.write("9999,1.0\n")


def _dates(frames):
    frames["telecom"]["signup"] = pd.date_range("2019-01-01", periods=N, freq="3D").strftime("%Y-%m-%d")


def _timestamps_parquet(tmp: Path) -> dict:
    d = base(tmp)
    df = people()["insurer"]
    df["seen"] = pd.date_range("2020-01-01 08:00", periods=N, freq="11h")
    df.to_parquet(tmp / "insurer.parquet")
    d["insurer"] = str(tmp / "insurer.parquet")
    return d


def data_cases() -> list[Case]:
    """Issue 37's data and output cases: outputs checked before any work, ``--epochs 0``,
    ``compare --resume`` into another configuration, binary and stray-byte files."""
    R = RUN_FILES
    return [
        Case("--epochs 0", ["run", "--no-progress", "-m", "vfl", "-d", "wine", "-e", "0"], r"--epochs must be .*>= 1"),
        Case("--epochs 1e20", ["run", "--no-progress", "-m", "vfl", "-d", "wine", "-e", "100000000000000000000"],
             r"train: 100,000,000,000,000,000,000 epochs would take about .* years \(the first took .* s\), more "
             r"than the bound of 7 days; give fewer epochs \(--epochs\), or pass --force",
             notes="issue 53: accepted, with an ETA of millions of years"),
        Case("compare --epochs 0", [*COMPARE, "-d", "wine", "-e", "0"], r"--epochs must be .*>= 1", _extra),
        Case("--out in a read-only place", [*RUN, "-d", "wine", "--out", f"{READ_ONLY}/r.json"],
             r"--out .*cannot write in the folder '/proc'"),
        Case("compare --out in a read-only place", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine",
             "-e", "1", "-o", f"{READ_ONLY}/c"], r"--out .*cannot write in the folder '/proc'"),
        Case("--save-model in a read-only place", [*RUN, "-d", "wine", "--save-model", f"{READ_ONLY}/m"],
             r"--save-model .*cannot write in the folder '/proc'"),
        Case("--checkpoints under a file", [*RUN, "-d", "wine", "--checkpoints", "{tmp}/afile/ck"],
             r"--checkpoints .*is a file, not a folder", _extra),
        Case("compare --out whose runs/ is a file", [*COMPARE, "-d", "wine", "-e", "1"], r"runs' is a file",
             _runs_is_a_file),
        Case("compare --out whose results.json is a folder", [*COMPARE, "-d", "wine", "-e", "1"],
             r"results.json' is a directory", _results_is_a_dir),
        Case("predict --out in a read-only place", ["predict", "--model", "{model}", "--party-file", "bank={bank}",
             "--party-file", "telecom={telecom}", "--party-file", "insurer={insurer}", "--out",
             f"{READ_ONLY}/p.csv"], r"--out .*cannot write in the folder '/proc'", _with_model),
        Case("Parquet content in a .csv file", R, r"insurer.csv' is not a text CSV file: .*Parquet.*\.parquet",
             _parquet_named_csv),
        Case("zip content in a .csv file", R, r"is not a text CSV file: .*zip", _zip_named_csv),
        Case("NUL bytes in a .csv file", R, r"is not a text CSV file: .*NUL byte",
             _raw_bytes("insurer", b"id,claims\n1,\x00\x00\x00\x01\n")),
        Case("two stray bytes in a UTF-8 file", R, r"not valid utf-8: line 50, column \d+ \(byte offset \d+\)",
             _stray_bytes),
        Case("a date column, categorical auto", [*RUN, *[a if a != "telecom:plan" else "auto" for a in FILES]],
             r"party 'telecom': column 'signup' in .*telecom\.csv' holds dates or times \(signup: 120 distinct "
             r"values\).*--datetime derive .*--datetime drop", _mut(_dates),
             notes="issue 53: a timestamp column was one-hot encoded into 2,666 levels without a word"),
        Case("a date column, undeclared", R, r"column 'signup' .*holds dates or times.*--datetime derive",
             _mut(_dates), notes="said: declare it categorical (one level per date)"),
        Case("a Parquet timestamp column", R,
             r"party 'insurer': column 'seen' in .*insurer\.parquet' holds dates or times", _timestamps_parquet),
        Case("--datetime without party files", [*RUN, "-d", "wine", "--datetime", "drop"],
             r"--datetime applies to --party-file data only"),
        Case("--datetime misspelt", [*R, "--datetime", "derived"], r"--datetime must be refuse, drop or derive",
             _mut(_dates)),
        Case("ids matching only after stripping spaces", R, r"no id .*would align .*--strip-ids", _mut(_spaced_ids)),
        Case("--strip-ids without party files", [*RUN, "-d", "wine", "--strip-ids"],
             r"--strip-ids applies to --party-file"),
        Case("compare --resume with other epochs", [*COMPARE, "-d", "wine", "-e", "2", "--resume"],
             r"--resume: the runs in .* another configuration: epochs was 1, now 2; give another --out", _compared()),
        Case("compare --resume on another data set", [*COMPARE, "-d", "breast_cancer", "-e", "1", "--resume"],
             r"another configuration: data\.dataset was \"wine\", now \"breast_cancer\"", _compared()),
        Case("compare --resume with other noise", [*COMPARE, "-d", "wine", "-e", "1", "--noise", "0.5",
             "--no-reference", "--resume"], r"another configuration: data\.noise was 0\.0, now 0\.5", _compared()),
        Case("less-vfl-grid --out in a read-only place", ["less-vfl-grid", "wine", "--seeds", "1", "--lambdas-m", "1",
             "--lambdas-s", "0.01", "--pretrain-epochs", "1", "--epochs", "1", "--no-reference", "--out",
             f"{READ_ONLY}/g.json"], r"--out .*cannot write in the folder '/proc'"),
        Case("compare --resume after a party file changed", [*COMPARE, "-e", "1", *FILES, "--resume"],
             r"another configuration: data\.files\.insurer\.sha256 was", _compared("-e", "1", *FILES,
                                                                                   mutate=_touch_insurer)),
    ]


# ------------------------------------------------------------------------ configuration files
def deployment_text(files: dict[str, str], *, top: str = "", party: dict[str, str] | None = None,
                    certs: bool = False) -> str:
    """A deployment file over ``files`` (ports are never opened: every case stops before connecting)."""
    lines = ['label_party = "bank"', 'label_column = "default"', 'certs = "certs"' if certs else "insecure = true"]
    lines += [ln for ln in top.splitlines() if ln.strip()]
    for k, name in enumerate(files):
        extra = [ln for ln in (party or {}).get(name, "").splitlines() if ln.strip()]
        lines += [f"[parties.{name}]", f'file = "{files[name]}"', *extra]
        if not any(ln.startswith("address") for ln in extra):
            lines.append(f'address = "127.0.0.1:{47000 + k}"')
        if name == "telecom" and not any(ln.startswith("categorical") for ln in extra):
            lines.append('categorical = ["plan"]')
    return "\n".join(lines) + "\n"


def _deployment(top: str = "", party: dict[str, str] | None = None, certs: bool = False, key_mode: int | None = None,
                key_of: str = "active"):
    def setup(tmp: Path) -> dict:
        d = base(tmp)
        (tmp / "dep.toml").write_text(deployment_text(d, top=top, party=party, certs=certs))
        if certs:
            import os

            from verticalfs.transport.grpc.tls import make_certs

            make_certs(["active", *d], tmp / "certs")
            if key_mode is not None:
                os.chmod(tmp / "certs" / f"{key_of}.key", key_mode)
        return {**d, "dep": str(tmp / "dep.toml"), "tmp": str(tmp)}
    return setup


def _options_file(text: str):
    def setup(tmp: Path) -> dict:
        d = base(tmp)
        (tmp / "run.toml").write_text(text.format(**d))
        return {**d, "run": str(tmp / "run.toml"), "tmp": str(tmp)}
    return setup


def _assignment_file(text: str):
    def setup(tmp: Path) -> dict:
        (tmp / "cols.toml").write_text(text)
        return {"cols": str(tmp / "cols.toml"), "tmp": str(tmp)}
    return setup


def config_cases() -> list[Case]:
    """Configuration files (deployment, ``run --config``, assignment): read through the typed schema."""
    DEP = ["run", "--no-progress", "-m", "vfl", "-e", "1", "--config", "{dep}"]
    SERVE = ["party", "serve", "--name", "telecom", "--config", "{dep}"]
    RUNF = ["run", "--config", "{run}"]
    return [
        Case("deployment: insecure as a string", DEP, r"dep\.toml': insecure = \"false\": expected true or false",
             _deployment('insecure = "false"', certs=True), notes="read with bool(...): the string turned TLS off"),
        Case("deployment: test_size not a number", DEP, r"test_size = \"0\.2x\": expected a number",
             _deployment('test_size = "0.2x"')),
        Case("deployment: test_size as a list", DEP, r"test_size = \[0\.2\]: expected a number",
             _deployment("test_size = [0.2]")),
        Case("deployment: test_size out of range", DEP, r"test_size = 1\.5: expected a number \(>= 0, < 1\)",
             _deployment("test_size = 1.5")),
        Case("deployment: categorical as a number", DEP, r"parties\.telecom\.categorical = 5: expected a list",
             _deployment(party={"telecom": "categorical = 5"})),
        Case("deployment: port out of range", SERVE, r"parties\.insurer\.address = \"127\.0\.0\.1:99999\": expected .*host:port",
             _deployment(party={"insurer": 'address = "127.0.0.1:99999"'})),
        Case("deployment: port 0", SERVE, r"parties\.insurer\.address = '127\.0\.0\.1:0' has port 0.*give a fixed port",
             _deployment(party={"insurer": 'address = "127.0.0.1:0"'}),
             notes="issue 53: served and announced as 127.0.0.1:0, which no label holder can reach"),
        Case("deployment: listen on port 0", SERVE, r"parties\.telecom\.listen = '0\.0\.0\.0:0' has port 0",
             _deployment(party={"telecom": 'listen = "0.0.0.0:0"'})),
        Case("deployment: one host under two names", DEP,
             r"parties 'telecom' \('localhost:47001'\) and 'insurer' \('127\.0\.0\.1:47001'\) are the same host and "
             r"port \(127\.0\.0\.1:47001\)",
             _deployment(party={"telecom": 'address = "localhost:47001"', "insurer": 'address = "127.0.0.1:47001"'}),
             notes="issue 53: served, while the same name twice was refused"),
        Case("deployment: misspelt key", DEP, r"unknown key 'tst_size'; did you mean 'test_size'",
             _deployment("tst_size = 0.3")),
        Case("deployment: misspelt party key", SERVE, r"unknown key 'parties\.telecom\.lisen'; did you mean 'listen'",
             _deployment(party={"telecom": 'lisen = "0.0.0.0:1"'})),
        Case("deployment: connect_timeout as a string", DEP, r"connect_timeout = \"10\": expected a number",
             _deployment('connect_timeout = "10"')),
        Case("deployment: private key readable by others (run)", DEP, r"private key '.*active\.key'.*chmod 600 .*active\.key",
             _deployment(certs=True, key_mode=0o644)),
        Case("deployment: the label party's key readable by the group", DEP,
             r"private key '.*bank\.key'.*chmod 600 .*bank\.key", _deployment(certs=True, key_mode=0o640, key_of="bank")),
        Case("options file: party_file as a string", RUNF,
             r"party_file = \"bank\.csv\": expected a \[party_file\] table of name = path",
             _options_file('method = "vfl"\nparty_file = "bank.csv"\n'), notes='was "Value must be an iterable"'),
        Case("options file: seed as a string", RUNF, r"seed = \"1\": expected an integer",
             _options_file('method = "vfl"\ndataset = "wine"\nseed = "1"\n')),
        Case("options file: progress as a string", RUNF, r"progress = \"false\": expected true or false",
             _options_file('method = "vfl"\ndataset = "wine"\nprogress = "false"\n')),
        Case("options file: noise as a boolean", RUNF, r"noise = true: expected a number",
             _options_file('method = "vfl"\ndataset = "wine"\nnoise = true\n')),
        Case("options file: misspelt key", RUNF, r"unknown key 'epoch'; did you mean 'epochs'",
             _options_file('method = "vfl"\ndataset = "wine"\nepoch = 2\n')),
        Case("options file: not TOML", RUNF, r"config file '.*run\.toml' is not valid TOML",
             _options_file('method = vfl\n')),
        Case("assignment file: a string for a party's columns", [*RUN, "-d", "wine", "--assignment", "{cols}"],
             r"assignment file '.*cols\.toml': parties\.party1 = \"alcohol\": expected",
             _assignment_file('[parties]\nparty1 = "alcohol"\n')),
        *scoring_cases(),
    ]


def scoring_cases() -> list[Case]:
    """Using a saved model over a deployment (``predict --config``, ``serve-model``): refused before
    anything connects."""
    PRED = ["predict", "--config", "{dep}", "--model", "{tmp}", "--out", "{tmp}/p.csv"]
    SERVE = ["serve-model", "--config", "{dep}", "--model", "{tmp}"]
    return [
        Case("predict --config with --party-file", [*PRED, "--party-file", "bank={bank}"],
             r"--party-file does not apply with a deployment file", _deployment()),
        Case("predict --config, a folder without a model", PRED, r"has no manifest\.json", _deployment()),
        Case("predict --config with an options file", ["predict", "--config", "{run}", "--model", "{tmp}", "--out",
             "{tmp}/p.csv"], r"run\.toml' is not a deployment file", _options_file('method = "vfl"\n')),
        Case("predict without --party-file or --config", ["predict", "--model", "{tmp}", "--out", "{tmp}/p.csv"],
             r"give --party-file party=path .* or --config", _deployment()),
        Case("serve-model, a folder without a model", SERVE, r"has no manifest\.json", _deployment()),
        Case("serve-model --batch-ms -1", [*SERVE, "--batch-ms", "-1"], r"--batch-ms must be >= 0", _deployment()),
        Case("deployment: predict_file a number", PRED, r"parties\.telecom\.predict_file",
             _deployment(party={"telecom": "predict_file = 3"})),
    ]


def _parquet_of_zeros(tmp: Path) -> dict:
    """insurer.parquet: 120 rows x 202 columns, 110 KB on disk (columns of zeros), 194 KB decoded."""
    d = base(tmp)
    frame = people()["insurer"]
    frame = frame.assign(**{f"z{i}": np.zeros(len(frame)) for i in range(200)})
    frame.to_parquet(tmp / "insurer.parquet")
    d["insurer"] = str(tmp / "insurer.parquet")
    return d


def wire_cases() -> list[Case]:
    """Issue 37's decoder and memory items a command line can reach: --max-file-mb bounds every
    kind of party file (it bounded only compressed CSVs)."""
    R = [*RUN, *FILES]
    return [
        Case("plain CSV over --max-file-mb", [*R, "--max-file-mb", "0.001"],
             r"'.*\.csv' is [\d,]+ bytes \(.* MiB\), more than the limit of 1,048 bytes \(0\.000999 MiB, --max-file-mb", base),
        Case("Parquet decoding past --max-file-mb", [*R, "--max-file-mb", "0.15"],
             r"'.*insurer\.parquet' holds 120 rows x 202 columns, .* decoded, more than the limit of 157,286 bytes",
             _parquet_of_zeros),
    ]


def cases() -> list[Case]:
    F = FILES
    C = config_cases()
    C += data_cases()
    # ---------------------------------------------------------------------------- options
    C += [
        Case("unknown method", ["run", "-m", "nope", "-d", "wine"], r"unknown method 'nope'"),
        Case("unknown data set", [*RUN, "-d", "nope"], r"unknown data set"),
        Case("negative seed", [*RUN, "-d", "wine", "--seed", "-1"], r"--seed must be an integer"),
        Case("seed beyond numpy's range", [*RUN, "-d", "wine", "--seed", str(2**40)], r"--seed must be an integer"),
        Case("negative noise", [*RUN, "-d", "wine", "--noise", "-0.1"], r"--noise values must be"),
        Case("nan noise", [*RUN, "-d", "wine", "--noise", "nan"], r"--noise values must be"),
        Case("noise not a number", [*RUN, "-d", "wine", "--noise", "abc"], r"--noise.*not a number"),
        Case("noise count != parties", [*RUN, "-d", "wine", "-k", "3", "--noise", "0.5,0.5"], r"2 values for 3 parties"),
        Case("negative overlap", [*RUN, "-d", "wine", "--overlap", "-1"], r"--overlap values must be >= 0"),
        Case("fractional overlap", [*RUN, "-d", "wine", "--overlap", "1.5"], r"--overlap.*whole number"),
        Case("zero parties", [*RUN, "-d", "wine", "-k", "0"], r"--parties must be >= 1"),
        Case("more parties than columns", [*RUN, "-d", "wine", "-k", "99"], r"cannot split 13 columns"),
        Case("nan learning rate", [*RUN, "-d", "wine", "-p", "lr=nan"], r"lr.*finite"),
        Case("infinite learning rate", [*RUN, "-d", "wine", "-p", "lr=inf"], r"lr.*finite"),
        Case("negative learning rate", [*RUN, "-d", "wine", "-p", "lr=-1"], r"lr must be"),
        Case("unknown parameter", [*RUN, "-d", "wine", "-p", "nosuch=1"], r"no parameter.*nosuch"),
        Case("parameter of the wrong type", [*RUN, "-d", "wine", "-p", "batch_size=abc"], r"batch_size.*expects"),
        Case("parameter without a value", [*RUN, "-d", "wine", "-p", "lr"], r"--param expects name=value"),
        Case("negative epochs", ["run", "-m", "vfl", "-d", "wine", "-e", "-1"], r"--epochs"),
        Case("zero batch size", [*RUN, "-d", "wine", "-p", "batch_size=0"], r"batch_size must be"),
        Case("codec for a fixed-codec method", ["run", "--no-progress", "-m", "sparsevfl-16", "-d", "wine", "--codec", "float16"], r"fixes its own codecs"),
        Case("unknown codec", [*RUN, "-d", "wine", "--codec", "zip"], r"unknown codec 'zip'"),
        Case("unknown scaling", [*RUN, "-d", "wine", "--scaling", "log"], r"--scaling must be one of"),
        Case("unknown imputation", [*RUN, "-d", "wine", "--impute", "zero"], r"--impute must be one of"),
        Case("unknown partition", [*RUN, "-d", "wine", "--partition", "diagonal"], r"--partition must be one of"),
        Case("missing assignment file", [*RUN, "-d", "wine", "--assignment", "{tmp}/none.toml"], r"--assignment file", _extra),
        Case("assignment naming unknown columns", [*RUN, "-d", "wine", "--assignment", "{tmp}/a.toml"], r"names columns \['nope'\]", _extra),
        Case("unknown task", [*RUN, "-d", "wine", "--task", "ranking"], r"--task must be"),
        Case("--out is a directory", [*RUN, "-d", "wine", "--out", "{tmp}/outdir"], r"is a directory", _extra),
        Case("--out under a file", [*RUN, "-d", "wine", "--out", "{tmp}/afile/r.json"], r"is a file, not a folder", _extra),
        Case("compare --out under a file", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine", "-o", "{tmp}/afile/sub"], r"is a file, not a folder", _extra),
        Case("neither data set nor files", [*RUN], r"give --dataset"),
        Case("data set and party files", [*RUN, "-d", "wine", *F], r"do\(es\) not apply", base),
        Case("parties with party files", [*RUN, "-k", "2", *F], r"--parties.*do\(es\) not apply", base),
        Case("partition with party files", [*RUN, "--partition", "contiguous", *F], r"--partition.*not apply", base),
        Case("party file without =", [*RUN, "--party-file", "bank.csv", "--label-party", "bank", "--label-column", "y"], r"--party-file expects name=path"),
        Case("party named twice", [*RUN, *F, "--party-file", "bank={telecom}"], r"names party 'bank' twice", base),
        Case("party files without label party", [*RUN, "--party-file", "bank={bank}"], r"needs --label-party", base),
        Case("label party without a file", [*RUN, "--party-file", "bank={bank}", "--label-party", "shop", "--label-column", "default"], r"--label-party 'shop' has no --party-file", base),
        Case("categorical without party files", [*RUN, "-d", "wine", "--categorical", "auto"], r"--categorical applies to --party-file"),
        Case("categorical in a wrong format", [*RUN, *F[:-2], "--categorical", "plan"], r"--categorical expects party:column", base),
        Case("categorical for an unknown party", [*RUN, *F[:-2], "--categorical", "shop:plan"], r"names party 'shop'", base),
        Case("categorical auto with a list", [*RUN, *F, "--categorical", "auto"], r"do not list columns", base),
        Case("zero decompression limit", [*RUN, *F, "--max-file-mb", "0"], r"--max-file-mb must be > 0", base),
        Case("two-character delimiter", [*RUN, *F, "--delimiter", ";;"], r"delimiter must be one character", base),
        Case("unknown encoding", [*RUN, *F, "--encoding", "klingon"], r"unknown encoding 'klingon'", base),
        Case("binary-only method on three classes", ["run", "--no-progress", "-m", "fate-iv", "-d", "wine", "-p", "key_bits=512", "-p", "insecure=true"], r"binary label"),
        Case("n_select beyond the features", ["run", "--no-progress", "-m", "feast", "-d", "wine", "-p", "n_select=500"], r"n_select must be between"),
        Case("learning rate that makes the loss explode", [*RUN, "-d", "breast_cancer", "-p", "lr=1e30"], r"loss became .*lower the learning rate"),
        Case("seeds with a non-number", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine", "--seeds", "0,x", "-o", "{tmp}/c"], r"'x' is not an integer seed", _extra),
        Case("repeated seeds", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine", "--seeds", "1,1", "-o", "{tmp}/c"], r"repeats seeds", _extra),
        Case("empty seeds", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine", "--seeds", ",", "-o", "{tmp}/c"], r"--seeds", _extra),
        Case("compare with an unknown method", ["compare", "--no-progress", "--methods", "vfl,nope", "-d", "wine", "-o", "{tmp}/c"], r"unknown method 'nope'", _extra),
        Case("compare naming a method twice", ["compare", "--no-progress", "--methods", "vfl,vfl", "-d", "wine", "-o", "{tmp}/c"], r"names a method twice", _extra),
        Case("compare output is a file", ["compare", "--no-progress", "--methods", "vfl", "-d", "wine", "-o", "{tmp}/afile"], r"is a file", _extra),
    ]
    # ------------------------------------------------------------------------------ files
    R = [*RUN, "--party-file", "bank={bank}", "--party-file", "telecom={telecom}", "--party-file", "insurer={insurer}",
         "--label-party", "bank", "--label-column", "default", "--categorical", "telecom:plan"]
    C += [
        Case("missing file", [*R[:-2], "--party-file", "extra={tmp}/nope.csv"], r"does not exist", _extra),
        Case("directory given as a file", [*R, "--party-file", "extra={dir}"], r"is a directory", _extra),
        Case("unsupported file type", [*R, "--party-file", "extra={xlsx}"], r"unsupported type", _extra),
        Case("empty file", R, r"is empty", _raw_text("insurer", "")),
        Case("header but no rows", R, r"no data rows", _raw_text("insurer", "id,claims\n")),
        Case("delimiter leaving one column", R, r"--delimiter ';'", _semicolons),
        Case("file not in UTF-8", R, r"--encoding", _latin1),
        Case("duplicate column names", R, r"duplicate column names \['claims'\]", _raw_text("insurer", "id,claims,claims\n1,2,3\n")),
        Case("empty column name", R, r"empty column names", _raw_text("insurer", "id,,claims\n1,2,3\n")),
        Case("ids differing only by leading zeros", R, r"no id .*'007' and '7' differ", _mut(_leading_zeros)),
        Case("party file with only ids", R, r"holds only the id column", _mut(_only_ids)),
        Case("gzip expanding past the limit", [*R, "--max-file-mb", "1"], r"expands when decompressed to more than the limit of 1,048,576 bytes \(1 MiB, --max-file-mb", _gzip_bomb),
        Case("nested parquet column", R, r"nested", _parquet_nested),
        Case("numeric column holding '?'", R, r"--na-values '\?'", _mut(_question_marks)),
        Case("undeclared text column", R, r"--categorical insurer:region", _mut(_text_col)),
        Case("infinite value in a column", [*R, "--impute", "median"], r"'claims'.*infinite", _mut(_inf)),
        Case("values too large to scale", R, r"'claims'.*too large to scale", _mut(_huge)),
        Case("missing values without imputation", [*R, "--impute", "none"], r"'claims'.*missing values.*impute", _mut(_missing)),
        Case("missing values by default", R, r"'claims'.*missing values.*impute", _mut(_missing)),
        Case("label with one class", R, r"only one class", _mut(_one_class)),
        Case("label with many integer values", R, r"--task classification or --task regression", _mut(_many_classes)),
        Case("a stray 0.5 among 0/1 labels", R, r"looks like classes.*0\.5", _mut(_stray_half)),
        Case("1,000 classes in 2,000 rows", [*R, "--task", "classification"], r"1000 classes cannot all appear", _thousand_classes),
        Case("no id column", [*R, "--id-column", "customer"], r"no id column 'customer'", base),
        Case("duplicated ids", R, r"duplicated ids", _mut(_dup_ids)),
        Case("label column missing", [*R[:-4], "--label-column", "target", "--categorical", "telecom:plan"], r"label column 'target' is not in", base),
        Case("missing labels", R, r"'default'.*missing for 1", _mut(_label_missing)),
        Case("no id in every file", R, r"no id in column 'id' is present in every file", _mut(_no_common)),
        Case("a column in two parties' files", R, r"'income' is in the files of both", _mut(_clash)),
        Case("a party named active", [*R, "--party-file", "active={insurer}"], r"reserved", base),
        Case("label column is the id column", [*R[:-4], "--label-column", "id", "--categorical", "telecom:plan"], r"must differ", base),
        Case("categorical column not in the file", [*R[:-2], "--categorical", "telecom:colour"], r"'colour' is declared categorical", base),
    ]
    C += wire_cases()
    return C


def render(args: list[str], values: dict) -> list[str]:
    return [a.format(**values) for a in args]


def classify(exit_code: int, output: str, expect: str) -> str:
    """clear | misleading | traceback | silent."""
    import re

    if "Traceback" in output or exit_code not in (0, 2):
        return "traceback"
    if exit_code == 0:
        return "silent"
    flat = " ".join(output.split())
    return "clear" if re.search(expect, flat) else "misleading"


def main() -> None:  # pragma: no cover - a tool for the before/after counts
    import argparse
    import os
    import subprocess
    import sys
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="the src/ folder of the checkout to try")
    args = ap.parse_args()
    counts: dict[str, int] = {}
    rows = []
    for case in cases():
        with tempfile.TemporaryDirectory() as tmp:
            values = case.setup(Path(tmp)) if case.setup else {}
            argv = render(case.args, values)
            env = {**os.environ, "PYTHONPATH": args.src}
            p = subprocess.run([sys.executable, "-c", "from verticalfs.cli import app; app()", *argv],
                               capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
            kind = classify(p.returncode, p.stdout + p.stderr, case.expect)
        counts[kind] = counts.get(kind, 0) + 1
        rows.append({"case": case.name, "result": kind})
        print(f"{kind:11s} {case.name}", flush=True)
    print(json.dumps(counts))


if __name__ == "__main__":  # pragma: no cover
    main()
