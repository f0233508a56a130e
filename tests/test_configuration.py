"""The configuration files are read through one typed schema (:mod:`verticalfs.configuration`).

Every key of every kind of file, given a value of the wrong type, ends the command with exit
code 2 and one line naming the file and the key; booleans are never read from strings; the
readers hold no ``bool(...)``/``float(...)``/``int(...)`` on raw values; the reference page is
what the schema generates.
"""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from verticalfs import configuration as cfg
from verticalfs.cli import app
from verticalfs.exceptions import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "verticalfs"
runner = CliRunner()

# the first of these a key refuses is its wrong value (a string "false" first: booleans)
CANDIDATES = ["false", 5, True, [1], {"a": {"b": 1}}]

DEPLOYMENT = {"label_party": "bank", "label_column": "default", "insecure": True,
              "parties": {"bank": {"address": "127.0.0.1:47001", "file": "bank.csv"},
                          "telecom": {"address": "127.0.0.1:47002", "file": "telecom.csv"}}}


def _toml(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    return repr(v)


def dumps(d: dict, prefix: str = "") -> str:
    """Enough TOML for these tests (scalars and inline values first, then tables)."""
    lines = [f"{k} = {_toml(v)}" for k, v in d.items() if not (isinstance(v, dict) and k in ("parties",) and
                                                               all(isinstance(x, dict) for x in v.values()))]
    for k, v in d.items():
        if k == "parties" and isinstance(v, dict) and all(isinstance(x, dict) for x in v.values()):
            for name, table in v.items():
                lines.append(f"[{prefix}{k}.{name}]")
                lines += [f"{kk} = {_toml(vv)}" for kk, vv in table.items()]
    return "\n".join(lines) + "\n"


def _wrong(model, base: dict, path: tuple) -> object:
    """A value of the wrong type for the key at ``path`` (one the schema refuses)."""
    for cand in CANDIDATES:
        d = _set(base, path, cand)
        try:
            model.model_validate(d)
        except ValidationError:
            return cand
    raise AssertionError(f"no candidate value is refused for {'.'.join(path)}")


def _set(base: dict, path: tuple, value) -> dict:
    import copy

    d = copy.deepcopy(base)
    cur = d
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return d


def _error_line(res) -> str:
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert res.exit_code == 2 and len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


DEP_KEYS = [(k,) for k in cfg.DeploymentFile.model_fields] + \
    [("parties", "telecom", k) for k in cfg.DeploymentParty.model_fields]


@pytest.mark.parametrize("path", DEP_KEYS, ids=[".".join(p) for p in DEP_KEYS])
def test_every_deployment_key_of_the_wrong_type(tmp_path, path):
    bad = _wrong(cfg.DeploymentFile, DEPLOYMENT, path)
    f = tmp_path / "dep.toml"
    f.write_text(dumps(_set(DEPLOYMENT, path, bad)))
    line = _error_line(runner.invoke(app, ["run", "--config", str(f), "-m", "vfl", "--no-progress"]))
    assert str(f) in line and ".".join(path) in line, line


@pytest.mark.parametrize("key", list(cfg.RunFile.model_fields))
def test_every_options_file_key_of_the_wrong_type(tmp_path, key):
    bad = _wrong(cfg.RunFile, {}, (key,))
    f = tmp_path / "run.toml"
    f.write_text(dumps({key: bad}))
    line = _error_line(runner.invoke(app, ["run", "--config", str(f)]))
    assert str(f) in line and re.search(rf"\b{key}\b", line), line


def test_assignment_key_of_the_wrong_type(tmp_path):
    f = tmp_path / "cols.toml"
    f.write_text('[parties]\nparty1 = "alcohol"\nparty2 = ["ash"]\n')
    line = _error_line(runner.invoke(app, ["run", "-m", "vfl", "-d", "wine", "--assignment", str(f)]))
    assert str(f) in line and 'parties.party1 = "alcohol"' in line, line


@pytest.mark.parametrize("text", ['"false"', '"true"', "0", "1", '"no"'])
def test_booleans_are_booleans(tmp_path, text):
    """``insecure = "false"`` was read with bool(...) and turned TLS off; now no non-boolean passes."""
    f = tmp_path / "dep.toml"
    f.write_text(dumps({**DEPLOYMENT, "insecure": False, "certs": "certs"}).replace("insecure = false",
                                                                                   f"insecure = {text}"))
    with pytest.raises(ConfigError, match=rf"insecure = {re.escape(text)}: expected true or false"):
        from verticalfs.deploy.config import Deployment

        Deployment.load(f)


def test_unknown_keys_suggest_the_closest():
    with pytest.raises(ConfigError, match=r"unknown key 'conect_timeout'; did you mean 'connect_timeout'\?"):
        cfg.validate(cfg.DeploymentFile, {**DEPLOYMENT, "conect_timeout": 3}, "deployment file 'x'")
    with pytest.raises(ConfigError, match=r"unknown key 'parties\.bank\.fille'; did you mean 'file'\?"):
        cfg.validate(cfg.DeploymentFile, _set(DEPLOYMENT, ("parties", "bank", "fille"), "b.csv"), "x")
    with pytest.raises(ConfigError, match=r"unknown key 'colour'; valid keys here: "):  # nothing close
        cfg.validate(cfg.DeploymentFile, {**DEPLOYMENT, "colour": 1}, "x")


def test_ranges(tmp_path):
    for key, value, expect in (("test_size", 1.0, r"test_size = 1.0: expected a number \(>= 0, < 1\)"),
                               ("val_size", -0.1, r"val_size = -0.1"),
                               ("connect_timeout", 0, r"connect_timeout = 0: expected a number \(> 0\)"),
                               ("delimiter", ";;", r'delimiter = ";;": expected one character')):
        with pytest.raises(ConfigError, match=expect):
            cfg.validate(cfg.DeploymentFile, {**DEPLOYMENT, key: value}, "x")
    with pytest.raises(ConfigError, match=r"seed = -1: expected an integer \(>= 0"):
        cfg.validate(cfg.RunFile, {"seed": -1}, "x")
    with pytest.raises(ConfigError, match=r"missing key 'parties\.bank\.address'"):
        cfg.validate(cfg.DeploymentFile, _set(DEPLOYMENT, ("parties", "bank"), {"file": "b.csv"}), "x")


def test_valid_files_read_as_before(tmp_path):
    """The README's deployment file and an options file: the values the commands used before."""
    from verticalfs.deploy.config import Deployment

    f = tmp_path / "dep.toml"
    f.write_text('label_party = "bank"\nlabel_column = "default"\nid_column = "customer_id"\ncerts = "certs"\n'
                 'test_size = 0\nna_values = "?, NA"\n[parties.bank]\naddress = "h:7001"\nfile = "data/bank.csv"\n'
                 '[parties.telecom]\naddress = "t:7001"\nlisten = "0.0.0.0:7001"\nfile = "/abs/t.csv"\n'
                 'categorical = "auto"\n')
    dep = Deployment.load(f)
    assert dep.parties["bank"].file == tmp_path / "data" / "bank.csv" and dep.parties["bank"].listen == "h:7001"
    assert dep.parties["telecom"].file == Path("/abs/t.csv") and dep.parties["telecom"].categorical == "auto"
    assert dep.certs == tmp_path / "certs" and dep.test_size == 0.0 and isinstance(dep.test_size, float)
    assert dep.na_values == ["?", "NA"] and dep.insecure is False
    assert Deployment.load(f, insecure=True).insecure is True  # --insecure overrides the file
    run = cfg.read_run_file(_write(tmp_path / "run.toml", 'pipeline = ["feast", "vfl"]\nmax-file-mb = 5\n'
                                   'noise = [0.5, 0]\nparams = { hidden = [16, 8], lr = 0.1, x = true }\n'
                                   'categorical = "auto"\n'))
    assert run.cli_defaults() == {"method": "feast+vfl", "max_file_mb": 5, "noise": "0.5,0.0",
                                  "param": ["hidden=16,8", "lr=0.1", "x=true"], "categorical": ["auto"]}


def _write(p: Path, text: str) -> Path:
    p.write_text(text)
    return p


def test_the_options_file_has_the_options_of_run():
    """Every option of `run` is a key of the options file and nothing else is."""
    import typer.main

    cmd = typer.main.get_command(app)
    options = {p.name for p in cmd.commands["run"].params} - {"config"}
    assert set(cfg.RunFile.model_fields) - {"pipeline"} == options


def test_the_schema_literals_are_the_library_values():
    from verticalfs.data.user import USER_TASKS
    from verticalfs.data.vertical import IMPUTATIONS, SCALINGS

    assert typing.get_args(cfg.Scaling) == SCALINGS
    assert typing.get_args(cfg.Impute) == IMPUTATIONS
    assert set(typing.get_args(cfg.ImputeFixed)) == set(IMPUTATIONS) - {"auto"}
    assert set(typing.get_args(cfg.Task)) == set(USER_TASKS)


def test_readers_go_through_the_schema():
    """Only the schema module parses TOML; the readers convert no raw value themselves."""
    parsers = [p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")
               if re.search(r"^\s*(import tomllib|import tomli|from tomli)", p.read_text(), re.M)]
    assert parsers == ["configuration.py"]
    import importlib

    from verticalfs import cli
    from verticalfs.deploy import config

    partition = importlib.import_module("verticalfs.data.partition")

    conversions = re.compile(r"\b(bool|float|int)\(")
    for where, src in (("deploy/config.py", inspect.getsource(config)),
                       ("cli._load_config", inspect.getsource(cli._load_config)),
                       ("partition.load_assignment", inspect.getsource(partition.load_assignment))):
        assert not conversions.findall(src), f"{where} converts values itself: {conversions.findall(src)}"


def test_the_reference_page_is_generated_from_the_schema():
    page = ROOT / "docs" / "reference" / "configuration.md"
    assert page.read_text() == cfg.reference_markdown(), (
        "docs/reference/configuration.md is stale: python -m verticalfs.configuration --write "
        "docs/reference/configuration.md")
    text = page.read_text()
    for model in (cfg.DeploymentFile, cfg.DeploymentParty, cfg.RunFile, cfg.AssignmentFile):
        for name, info in model.model_fields.items():
            assert f"`{name}`" in text or f"`parties.<name>.{name}`" in text
            assert info.description, f"{model.__name__}.{name} has no description"
