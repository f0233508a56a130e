"""Saved models: each party's part in its own file, the label holder's in its own, a manifest.

``verticalfs run --save-model DIR`` (or :func:`save_model`) writes:

- ``DIR/<party>.pt``, written *by that party* (on its side, after a metered ``SaveModel``
  message): its preprocessing (:class:`~verticalfs.data.preprocess.PartyPreprocessor`: imputation,
  scaling, categories), its kept features and its role's state (e.g. its bottom model);
- ``DIR/active.pt``: the label holder's part (its top model, or a filter method's classifier, and
  the class names);
- ``DIR/manifest.json``: the method, its parameters, the parties and their feature names, the
  library version and a SHA-256 per file.

Files hold tensors, numbers, strings, lists and dicts only and are loaded with
``torch.load(weights_only=True)``: nothing is unpickled from disk. A model saved by another version
of verticalfs, or a file whose checksum does not match the manifest, is refused with a clear error.

The manifest holds the files' checksums, so whoever can edit the folder can replace a file *and*
its checksum. The manifest's own SHA-256 (:func:`manifest_sha256`) is printed when the model is
saved (``model saved to DIR, manifest sha256 ...``); keep it apart from the folder and give it to
``predict`` (``expected_sha256=`` / ``--expect-sha256``): a manifest that differs in one byte is
then refused. File names in a manifest are confined to the folder (``..``, absolute paths and
links leading out are refused, :func:`~verticalfs.model_files.confined`).

``verticalfs predict`` (or :func:`predict`) aligns new rows by id, lets every party transform its
own rows with its saved preprocessing and restore its role (``LoadModel``), and runs federated
inference through the same messages and ledger as training.

What goes into the label holder's part, and how it predicts, is the method's own business
(:meth:`~verticalfs.methods.base.Method.export_holder`,
:meth:`~verticalfs.methods.base.Method.predict_from_holder`; the method is found by the name in
the manifest). This module keeps the folder's layout, the manifest and the checks; the file format
is :mod:`verticalfs.model_files`.
"""

from __future__ import annotations

import json
import warnings as _warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from verticalfs.data.preprocess import PartyPreprocessor
from verticalfs.data.user import DEFAULT_MAX_BYTES, read_party_rows
from verticalfs.data.vertical import LabelData, PartyData
from verticalfs.exceptions import ConfigError, VerticalFSWarning
from verticalfs.federation import Federation
from verticalfs.methods import registry
from verticalfs.methods.base import probabilities
from verticalfs.model_files import FORMAT, MANIFEST, confined, dump, load, load_party_file, sha256
from verticalfs.names import LABEL_HOLDER
from verticalfs.party import LocalData, PartyRuntime
from verticalfs.transport.inprocess import InProcessChannel
from verticalfs.transport.ledger import Ledger
from verticalfs.transport.messages import Ack, At, LoadModel, ModelSaved, SaveModel
from verticalfs.utils.io import write_bytes_atomic, write_json_atomic
from verticalfs.version import __version__

if TYPE_CHECKING:
    from verticalfs.methods.base import Method

__all__ = ["FORMAT", "MANIFEST", "manifest_sha256", "predict", "probabilities", "read_manifest", "save_model",
           "write_predictions"]


def save_model(method: Method, fed: Federation, directory: str | Path, *,
               params: Mapping[str, Any] | None = None) -> Path:
    """Save a fitted method: every party writes its part on its side (metered ``SaveModel``,
    phase ``report``), the label holder writes its part (the method's
    :meth:`~verticalfs.methods.base.Method.export_holder`) and the manifest. Returns the manifest."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--save-model {str(directory)!r} is a file; give a folder")
    directory.mkdir(parents=True, exist_ok=True)
    holder = method.export_holder()
    parties = {}
    at = At("report")
    names = fed.feature_names()
    # parties of a deployment save under the model's name in their own folder (their policy's model_dir)
    where = directory.resolve().name if fed.model_names_only else str(directory)
    in_model = method.parties_in_model(fed)
    for p in in_model:
        rep = fed.proxy(p).request(SaveModel(directory=where), at, expect=ModelSaved)
        confined(directory, rep.file, f"party {p!r}'s reply to SaveModel")
        parties[p] = {"file": rep.file, "sha256": rep.sha256, "feature_names": names[p]}
    # a party an earlier stage left without a feature takes no part: no file, and none asked at inference
    left_out = [p for p in fed.party_names if p not in in_model]
    labels = fed.labels
    data = dump({"method": method.name, "task": labels.task, "n_classes": int(labels.n_classes),
                 "class_names": [str(c) for c in (labels.class_names or [])], "holder": holder})
    write_bytes_atomic(directory / f"{LABEL_HOLDER}.pt", data)
    manifest = {
        "format": FORMAT, "verticalfs_version": __version__, "method": method.name,
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (params or {}).items()},
        "task": labels.task, "class_names": [str(c) for c in (labels.class_names or [])],
        "parties": parties, "label_holder": {"file": f"{LABEL_HOLDER}.pt", "sha256": sha256(data)},
    }
    if left_out:
        manifest["parties_left_out"] = left_out
    return write_json_atomic(directory / MANIFEST, manifest)


def manifest_sha256(directory: str | Path) -> str:
    """The hex SHA-256 of a saved model's manifest (it covers every file through their checksums)."""
    path = Path(directory) / MANIFEST
    try:
        return sha256(path.read_bytes())
    except FileNotFoundError:
        raise ConfigError(f"--model {str(directory)!r} has no {MANIFEST}; give the folder written by --save-model") from None


def _check_sha256(value: str, what: str) -> str:
    v = str(value).strip().lower()
    if len(v) != 64 or any(c not in "0123456789abcdef" for c in v):
        raise ConfigError(f"{what} must be the 64 hex digits printed when the model was saved, got {value!r}")
    return v


def read_manifest(directory: str | Path, *, expected_sha256: str | None = None) -> dict[str, Any]:
    """The manifest of a saved model, checked: its SHA-256 (when ``expected_sha256`` is given),
    version, format, and its file names (confined to the folder)."""
    path = Path(directory) / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"--model {str(directory)!r} has no {MANIFEST}; give the folder written by --save-model") from None
    if expected_sha256 is not None:
        want = _check_sha256(expected_sha256, "the expected manifest sha256")
        got = sha256(raw)
        if got != want:
            raise ConfigError(f"the manifest {str(path)!r} has sha256 {got}, not the expected {want}: the model was "
                              "changed after it was saved (or another model was given); refuse to use it")
    try:
        m = json.loads(raw.decode())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{str(path)!r} is not a valid manifest: {exc}") from None
    if not isinstance(m, dict):
        raise ConfigError(f"{str(path)!r} is not a valid manifest (not a JSON object)")
    if m.get("verticalfs_version") != __version__:
        raise ConfigError(f"the model in {str(directory)!r} was saved by verticalfs {m.get('verticalfs_version')}, "
                          f"this is {__version__}; use that version, or train and save it again")
    if m.get("format") != FORMAT:
        raise ConfigError(f"the model in {str(directory)!r} has format {m.get('format')}, expected {FORMAT}")
    parties, holder = m.get("parties"), m.get("label_holder")
    if not isinstance(parties, dict) or not isinstance(holder, dict) or not all(
            isinstance(e, dict) for e in parties.values()):
        raise ConfigError(f"{str(path)!r} is not a valid manifest (no 'parties' or 'label_holder' table)")
    for key, entry in [*((f"parties.{p}", e) for p, e in parties.items()), ("label_holder", holder)]:
        confined(Path(directory), entry.get("file"), f"{str(path)!r}, entry {key}.file,")
        _check_sha256(entry.get("sha256"), f"{str(path)!r}, entry {key}.sha256,")
    return m


# ----------------------------------------------------------------------------------- prediction
def predict(model_dir: str | Path, files: Mapping[str, str | Path], *, id_column: str = "id", na_values: Any = None,
            delimiter: str = ",", encoding: str = "utf-8", max_bytes: int | None = None,
            strip_ids: bool = False, expected_sha256: str | None = None,
            callbacks: Sequence[Any] = ()) -> dict[str, Any]:
    """Federated inference with a saved model on new rows (one file per party, aligned by id).

    ``expected_sha256``: the manifest's SHA-256 printed at save; a manifest with another is refused
    (the manifest's own checksums then vouch for every file). ``callbacks``: as for
    :func:`verticalfs.run` (the events of a prediction: its start, the ``predict`` phase, the
    warnings, its end).

    Returns ``{"ids", "prediction", "probabilities" (or None), "classes", "communication", "report",
    "warnings"}``; ``warnings`` counts, per party and column, category levels the model never saw
    (encoded as all zeros), and ids that would align after stripping (``strip_ids``).
    """
    from verticalfs.run_events import events_of, failing

    _, events = events_of(callbacks)
    with failing(events, kind="predict", dataset=Path(model_dir).name, parties=list(files)):
        return _predict(Path(model_dir), files, events, id_column=id_column, na_values=na_values,
                        delimiter=delimiter, encoding=encoding, max_bytes=max_bytes, strip_ids=strip_ids,
                        expected_sha256=expected_sha256)


def _predict(model_dir: Path, files: Mapping[str, str | Path], events: Any, *, id_column: str, na_values: Any,
             delimiter: str, encoding: str, max_bytes: int | None, strip_ids: bool,
             expected_sha256: str | None) -> dict[str, Any]:
    man = read_manifest(model_dir, expected_sha256=expected_sha256)
    parties = man["parties"]
    missing = [p for p in parties if p not in files]
    extra = [p for p in files if p not in parties]
    left_out = [p for p in extra if p in (man.get("parties_left_out") or [])]
    if left_out:
        raise ConfigError(f"party {left_out[0]!r} takes no part in the model: training kept none of its features "
                          f"(the manifest's parties_left_out); leave its --party-file out (the model's parties "
                          f"are {list(parties)})")
    if missing or extra:
        raise ConfigError(f"the model was trained with parties {list(parties)}; give one --party-file for each "
                          f"(missing {missing}, not in the model {extra})")
    method = registry.get(str(man["method"]))  # an unknown name is an error listing the known ones
    holder_path = confined(model_dir, man["label_holder"]["file"], "the manifest's label_holder.file")
    holder = load(holder_path, man["label_holder"]["sha256"], "the label holder")
    if holder.get("method") != man["method"]:
        raise ConfigError(f"{str(holder_path)!r} holds a {holder.get('method')!r} model, the manifest says "
                          f"{man['method']!r}; the folder was changed after saving (save the model again)")
    frames, ids, report = read_party_rows({p: files[p] for p in parties}, id_column=id_column, na_values=na_values,
                                          delimiter=delimiter, encoding=encoding,
                                          max_bytes=max_bytes or DEFAULT_MAX_BYTES, strip_ids=strip_ids)
    notes = list(report.warnings)
    # every party prepares its own rows with its own saved preprocessing (done at the party)
    runtimes = []
    role_for = registry.party_roles()
    for p, entry in parties.items():
        saved = load_party_file(confined(model_dir, entry["file"], f"the manifest's parties.{p}.file"),
                                expected_sha256=entry["sha256"], party=p)
        pp = PartyPreprocessor.from_dict(saved["preprocessor"])
        unseen: dict[str, int] = {}
        X = pp.transform(frames[p], where=str(files[p]), unseen=unseen)
        if unseen:
            notes.append(f"party {p!r}: category levels the model never saw in training, encoded as all zeros (as "
                         "if unknown): " + ", ".join(f"{c!r} in {k} of {len(X)} rows" for c, k in unseen.items())
                         + f" of {str(files[p])!r}; check their spelling, or retrain with rows that have them")
        runtimes.append(PartyRuntime(LocalData.of(PartyData(p, list(saved["feature_names"]), {"predict": X})),
                                     role_for=role_for))
    task, n_classes = holder["task"], int(holder["n_classes"])
    labels = LabelData(y={"predict": np.zeros(len(ids), dtype=np.float32 if task == "regression" else np.int64)},
                       task=task, n_classes=n_classes, class_names=holder["class_names"] or None)
    channel, ledger = InProcessChannel(), Ledger()
    for r in runtimes:
        channel.register(r.connect(channel, ledger))
    fed = Federation(labels, channel, list(parties), ledger=ledger)
    channel.register(fed.node)
    if events is not None:
        events.ledger = fed.ledger
        events.start(kind="predict", method=str(man["method"]), dataset=model_dir.name, parties=list(parties))
    for p, entry in parties.items():
        fed.proxy(p).request(LoadModel(method=method.joined_as(), file=str(model_dir / entry["file"]),
                                       sha256=entry["sha256"]), At("setup"), expect=Ack)
    with nullcontext() if events is None else events.phase("predict"):
        out = method.predict_from_holder(holder["holder"], fed, "predict")
    probs = probabilities(out, task)
    names = holder["class_names"] or [str(i) for i in range(n_classes)]
    if task == "regression":
        prediction, probs_out = probs, None
    else:
        prediction, probs_out = np.asarray(names, dtype=object)[probs.argmax(1)], probs
    for w in notes:
        _warnings.warn(w, VerticalFSWarning, stacklevel=3)
    if events is not None:
        for w in notes:
            events.warning(w)
        events.end("ok")
    return {"ids": ids, "prediction": prediction, "probabilities": probs_out, "classes": names,
            "communication": fed.ledger.summary(), "report": report, "method": man["method"], "warnings": notes}


def write_predictions(result: dict[str, Any], path: str | Path, id_column: str = "id") -> Path:
    """``id, prediction[, prob_<class> ...]`` as CSV, atomically."""
    import pandas as pd

    df = pd.DataFrame({id_column: result["ids"], "prediction": result["prediction"]})
    if result["probabilities"] is not None:
        for j, c in enumerate(result["classes"]):
            df[f"prob_{c}"] = result["probabilities"][:, j]
    return write_bytes_atomic(path, df.to_csv(index=False).encode())
