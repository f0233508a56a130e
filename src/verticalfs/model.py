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

``verticalfs predict`` (or :func:`predict`) aligns new rows by id, lets every party transform its
own rows with its saved preprocessing and restore its role (``LoadModel``), and runs federated
inference through the same messages and ledger as training.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from verticalfs import __version__
from verticalfs.exceptions import ConfigError, DataError
from verticalfs.names import LABEL_HOLDER
from verticalfs.utils.io import write_bytes_atomic, write_json_atomic

FORMAT = 1
MANIFEST = "manifest.json"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _dump(obj: dict) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _load(path: Path, expected_sha256: str | None, what: str) -> dict:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what}: {str(path)!r} does not exist") from None
    if expected_sha256 is not None and _sha256(raw) != expected_sha256:
        raise ConfigError(f"{what}: {str(path)!r} does not match its checksum in the manifest; it was changed "
                          "after saving, refuse to use it (save the model again)")
    try:
        obj = torch.load(io.BytesIO(raw), weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a file that is not a safe saved model
        raise ConfigError(f"{what}: {str(path)!r} is not a verticalfs model file ({type(exc).__name__})") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise ConfigError(f"{what}: {str(path)!r} is not a verticalfs model file of format {FORMAT}")
    if obj.get("verticalfs_version") != __version__:
        raise ConfigError(f"{what}: {str(path)!r} was saved by verticalfs {obj.get('verticalfs_version')}, this is "
                          f"{__version__}; use that version, or train and save the model again")
    return obj


def save_party_file(directory: Path, party: str, content: dict) -> tuple[str, str]:
    """A party writes its part (on its side); returns ``(file name, sha256)``."""
    data = _dump({"format": FORMAT, "verticalfs_version": __version__, **content})
    path = Path(directory) / f"{party}.pt"
    write_bytes_atomic(path, data)
    return path.name, _sha256(data)


def load_party_file(path: Path, *, expected_sha256: str, party: str) -> dict:
    """A party reads its part back (checksum and version checked, no unpickling)."""
    saved = _load(Path(path), expected_sha256, f"party {party!r}")
    if saved.get("party") != party:
        raise ConfigError(f"party {party!r}: {str(path)!r} is the model file of party {saved.get('party')!r}")
    return saved


# ------------------------------------------------------------------------- the label holder's part
def holder_part(method) -> dict:
    """The label holder's part of a fitted method: its top model or its classifier."""
    from verticalfs.methods.filter import FilterMethod
    from verticalfs.selection.evaluate import ConstantModel

    trainer = getattr(method, "trainer_", None)
    if isinstance(method, FilterMethod) or (trainer is None and hasattr(method, "classifier_")):
        clf = method.classifier_
        out: dict[str, Any] = {"kind": "filter", "selected": [[p, int(i)] for p, i in method.selected_]}
        if isinstance(clf, ConstantModel):
            out["classifier"] = {"name": "constant", "value": torch.as_tensor(np.asarray(clf.value, dtype=np.float64))}
        elif type(clf).__name__ in ("LogisticRegression", "Ridge"):
            out["classifier"] = {"name": type(clf).__name__, "coef": torch.as_tensor(np.asarray(clf.coef_)),
                                 "intercept": torch.as_tensor(np.atleast_1d(np.asarray(clf.intercept_, dtype=np.float64))),
                                 "classes": [int(c) for c in getattr(clf, "classes_", [])]}
        else:
            raise ConfigError(f"{method.name}: a saved filter-method model keeps its classifier as plain numbers, "
                              f"which classifier={method.params.classifier!r} cannot be; use classifier=lr")
        return out
    if trainer is None or getattr(trainer, "top", None) is None:
        raise ConfigError(f"{method.name} has no model to save (fit it first)")
    why = getattr(trainer, "unsaveable", None)
    if why:
        raise ConfigError(f"{method.name}: {why}")
    own = getattr(trainer, "holder_state", None)
    if callable(own):  # a method whose top model is not a TopModel (ICAFS's gated selectors)
        return own()
    top = trainer.top
    return {"kind": "split", "parties": list(trainer.parties),
            "embedding_dims": {p: int(d) for p, d in trainer.embedding_dims.items()},
            "top_state": {k: v.detach().clone() for k, v in top.state_dict().items()},
            "top_hidden": [int(m.out_features) for m in top.linears[:-1]],
            "activation": str(getattr(top, "activation", "relu")),
            "two_column": bool(getattr(trainer, "binary", False))}


def save_model(method, fed, directory: str | Path, *, params: Mapping | None = None) -> Path:
    """Save a fitted method: every party writes its part on its side (metered ``SaveModel``,
    phase ``report``), the label holder writes its part and the manifest. Returns the manifest."""
    from verticalfs.transport.messages import At, ModelSaved, SaveModel

    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--save-model {str(directory)!r} is a file; give a folder")
    directory.mkdir(parents=True, exist_ok=True)
    holder = holder_part(method)
    parties = {}
    at = At("report")
    names = fed.feature_names()
    for p in fed.party_names:
        rep = fed.proxy(p).request(SaveModel(directory=str(directory)), at, expect=ModelSaved)
        parties[p] = {"file": rep.file, "sha256": rep.sha256, "feature_names": names[p]}
    labels = fed.labels
    data = _dump({"format": FORMAT, "verticalfs_version": __version__, "method": method.name,
                  "task": labels.task, "n_classes": int(labels.n_classes),
                  "class_names": [str(c) for c in (labels.class_names or [])], "holder": holder})
    write_bytes_atomic(directory / f"{LABEL_HOLDER}.pt", data)
    manifest = {
        "format": FORMAT, "verticalfs_version": __version__, "method": method.name,
        "params": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (params or {}).items()},
        "task": labels.task, "class_names": [str(c) for c in (labels.class_names or [])],
        "parties": parties, "label_holder": {"file": f"{LABEL_HOLDER}.pt", "sha256": _sha256(data)},
    }
    return write_json_atomic(directory / MANIFEST, manifest)


def read_manifest(directory: str | Path) -> dict:
    path = Path(directory) / MANIFEST
    try:
        m = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"--model {str(directory)!r} has no {MANIFEST}; give the folder written by --save-model") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{str(path)!r} is not a valid manifest: {exc}") from None
    if m.get("verticalfs_version") != __version__:
        raise ConfigError(f"the model in {str(directory)!r} was saved by verticalfs {m.get('verticalfs_version')}, "
                          f"this is {__version__}; use that version, or train and save it again")
    if m.get("format") != FORMAT:
        raise ConfigError(f"the model in {str(directory)!r} has format {m.get('format')}, expected {FORMAT}")
    return m


# ----------------------------------------------------------------------------------- prediction
def _holder_output(holder: dict, fed, split: str, task: str, n_classes: int) -> np.ndarray:
    """The label holder's output on ``split``, asking the parties through ``fed``."""
    from verticalfs.methods.filter import Columns, GatherColumns
    from verticalfs.nn.models import TopModel, load_shaped
    from verticalfs.transport.messages import At, Embeddings, EmbedRequest

    at = At("eval")
    n = fed.n_samples(split)
    if holder["kind"] in ("split", "icafs"):
        blocks = []
        for p in holder["parties"]:
            v = fed.proxy(p).request(EmbedRequest(split, 0, -1, False), at, expect=Embeddings).values
            if v.shape != (n, holder["embedding_dims"][p]):
                raise DataError(f"party {p!r} sent embeddings of shape {v.shape}, expected {(n, holder['embedding_dims'][p])}")
            blocks.append(v)
        H = np.concatenate(blocks, 1) if len(blocks) > 1 else blocks[0]
        if holder["kind"] == "icafs":
            from verticalfs.methods.icafs.method import saved_top_output

            return saved_top_output(holder, H)
        state = holder["top_state"]
        d_in = int(state[[k for k in state if k.endswith("weight")][0]].shape[1])
        out_dim = int(state[[k for k in state if k.endswith("weight")][-1]].shape[0])
        top = TopModel(d_in, holder["top_hidden"], out_dim, holder["activation"])
        load_shaped(top, state)
        top.eval()
        with torch.no_grad():
            out = top(torch.from_numpy(np.ascontiguousarray(H, dtype=np.float32))).numpy()
        if holder["two_column"]:
            out = np.concatenate([np.zeros_like(out), out], 1)
        return out
    # a filter method: the selected columns, then its classifier
    from verticalfs.selection.evaluate import classifier_output

    selected = [(str(p), int(i)) for p, i in holder["selected"]]
    blocks, order = [], []
    for p in fed.party_names:
        idx = [i for q, i in selected if q == p]
        rep = fed.proxy(p).request(GatherColumns(split=split, indices=np.asarray(idx, dtype=np.int64)), at,
                                   expect=Columns)
        blocks.append(np.asarray(rep.values, dtype=np.float64).reshape(n, len(idx)))
        order += [k for k, (q, _) in enumerate(selected) if q == p]
    X = np.concatenate(blocks, 1)[:, np.argsort(order)] if blocks else np.zeros((n, 0))
    c = holder["classifier"]
    if c["name"] == "constant":
        from verticalfs.selection.evaluate import ConstantModel

        model = ConstantModel.__new__(ConstantModel)
        model.task, model.n_classes, model.value = task, n_classes, c["value"].numpy()
    elif c["name"] == "LogisticRegression":
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression()
        model.coef_, model.intercept_ = c["coef"].numpy(), c["intercept"].numpy()
        model.classes_ = np.asarray(c["classes"])
    else:
        from sklearn.linear_model import Ridge

        model = Ridge()
        model.coef_, model.intercept_ = c["coef"].numpy(), float(c["intercept"].numpy()[0])
    return classifier_output(model, X, task, n_classes)


def probabilities(out: np.ndarray, task: str) -> np.ndarray:
    """Class probabilities from logits / log-probabilities (rows sum to one); values for regression."""
    if task == "regression":
        return np.asarray(out, dtype=np.float64).reshape(-1)
    z = np.asarray(out, dtype=np.float64)
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(1, keepdims=True)


def predict(model_dir: str | Path, files: Mapping[str, str | Path], *, id_column: str = "id", na_values=None,
            delimiter: str = ",", encoding: str = "utf-8", max_bytes: int | None = None,
            strip_ids: bool = False) -> dict:
    """Federated inference with a saved model on new rows (one file per party, aligned by id).

    Returns ``{"ids", "prediction", "probabilities" (or None), "classes", "communication", "report",
    "warnings"}``; ``warnings`` counts, per party and column, category levels the model never saw
    (encoded as all zeros), and ids that would align after stripping (``strip_ids``).
    """
    import warnings as _warnings

    from verticalfs.data.user import DEFAULT_MAX_BYTES, read_party_rows
    from verticalfs.data.vertical import LabelData, PartyData
    from verticalfs.exceptions import VerticalFSWarning
    from verticalfs.federation import Federation
    from verticalfs.party import LocalData, PartyRuntime
    from verticalfs.transport.inprocess import InProcessChannel
    from verticalfs.transport.ledger import Ledger
    from verticalfs.transport.messages import Ack, At, LoadModel

    model_dir = Path(model_dir)
    man = read_manifest(model_dir)
    parties = man["parties"]
    missing = [p for p in parties if p not in files]
    extra = [p for p in files if p not in parties]
    if missing or extra:
        raise ConfigError(f"the model was trained with parties {list(parties)}; give one --party-file for each "
                          f"(missing {missing}, not in the model {extra})")
    holder_path = model_dir / man["label_holder"]["file"]
    holder = _load(holder_path, man["label_holder"]["sha256"], "the label holder")
    frames, ids, report = read_party_rows({p: files[p] for p in parties}, id_column=id_column, na_values=na_values,
                                          delimiter=delimiter, encoding=encoding,
                                          max_bytes=max_bytes or DEFAULT_MAX_BYTES, strip_ids=strip_ids)
    notes = list(report.warnings)
    # every party prepares its own rows with its own saved preprocessing (done at the party)
    runtimes = []
    for p, entry in parties.items():
        saved = load_party_file(model_dir / entry["file"], expected_sha256=entry["sha256"], party=p)
        from verticalfs.data.preprocess import PartyPreprocessor

        pp = PartyPreprocessor.from_dict(saved["preprocessor"])
        unseen: dict[str, int] = {}
        X = pp.transform(frames[p], where=str(files[p]), unseen=unseen)
        if unseen:
            notes.append(f"party {p!r}: category levels the model never saw in training, encoded as all zeros (as "
                         "if unknown): " + ", ".join(f"{c!r} in {k} of {len(X)} rows" for c, k in unseen.items())
                         + f" of {str(files[p])!r}; check their spelling, or retrain with rows that have them")
        runtimes.append(PartyRuntime(LocalData.of(PartyData(p, list(saved["feature_names"]), {"predict": X}))))
    task, n_classes = holder["task"], int(holder["n_classes"])
    labels = LabelData(y={"predict": np.zeros(len(ids), dtype=np.float32 if task == "regression" else np.int64)},
                       task=task, n_classes=n_classes, class_names=holder["class_names"] or None)
    channel, ledger = InProcessChannel(), Ledger()
    for r in runtimes:
        channel.register(r.connect(channel, ledger))
    fed = Federation(labels, channel, list(parties), ledger=ledger)
    channel.register(fed.node)
    for p, entry in parties.items():
        fed.proxy(p).request(LoadModel(method=man["method"], file=str(model_dir / entry["file"]), sha256=entry["sha256"]),
                             At("setup"), expect=Ack)
    out = _holder_output(holder["holder"], fed, "predict", task, n_classes)
    probs = probabilities(out, task)
    names = holder["class_names"] or [str(i) for i in range(n_classes)]
    if task == "regression":
        prediction, probs_out = probs, None
    else:
        prediction, probs_out = np.asarray(names, dtype=object)[probs.argmax(1)], probs
    for w in notes:
        _warnings.warn(w, VerticalFSWarning, stacklevel=2)
    return {"ids": ids, "prediction": prediction, "probabilities": probs_out, "classes": names,
            "communication": fed.ledger.summary(), "report": report, "method": man["method"], "warnings": notes}


def write_predictions(result: dict, path: str | Path, id_column: str = "id") -> Path:
    """``id, prediction[, prob_<class> ...]`` as CSV, atomically."""
    import pandas as pd

    df = pd.DataFrame({id_column: result["ids"], "prediction": result["prediction"]})
    if result["probabilities"] is not None:
        for j, c in enumerate(result["classes"]):
            df[f"prob_{c}"] = result["probabilities"][:, j]
    return write_bytes_atomic(path, df.to_csv(index=False).encode())
