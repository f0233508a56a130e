"""The state of a role or a trainer as plain data, for checkpoints read without unpickling code.

A checkpoint used to be a pickle of the objects themselves (modules, optimisers, a party's
Paillier key pair...), read back with ``torch.load(weights_only=False)``: loading one ran whatever
code the file named, and a party's private key sat in it beside the model. Here an object's state
is turned into a tree of tensors, numbers, strings, bytes, lists, tuples and dicts only
(:func:`encode`), which ``torch.load(weights_only=True)`` reads without constructing any class,
and is put back *into the objects of the resumed run* (:func:`restore_into`), which the run has
rebuilt with the same structure (the same method, parameters and seed):

- a module: its ``state_dict`` (a parameter whose shape changed since, e.g. after inputs were
  dropped, gets the saved tensor in place, so optimisers keep pointing at it) and the plain
  attributes of each of its submodules;
- an optimiser: its ``state_dict``;
- a tensor: its values, copied into the resumed run's tensor where there is one (an optimiser may
  hold it), with its ``requires_grad``;
- NumPy arrays, scalars, dtypes and generators, torch generators: their values or states;
- a Paillier public key: its modulus and local choices (back end, randomness);
- a Paillier **private** key: never in the tree. It is replaced by a reference (``"k0"``) and
  its integers ``n, p, q`` are returned beside the tree (:class:`Encoder.private_keys`) for the
  caller to write into a separate file, mode 0600, read as JSON (:func:`keys_to_json`);
- any other object: its attributes, restored into the resumed run's object of the same class
  (a class name in the file never makes the loader create an object).

Classes and functions held as attributes are code, not state: they are left out (the resumed run
has them). Anything else (an object the run does not have, an object array) is refused with an
error naming its path in the state, so a checkpoint never silently misses state.
"""

from __future__ import annotations

import json
import types
from typing import Any

import numpy as np
import torch

from verticalfs.crypto.keys import PrivateKey, PublicKey
from verticalfs.exceptions import ConfigError

TAG = "__vfs__"
KEYS_FORMAT = 1
_CODE = (type, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType)


def _qualname(obj: Any) -> str:
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _attributes(v: Any) -> dict[str, Any] | None:
    """An object's own attributes (``vars``), or ``None`` for one that keeps none."""
    try:
        return dict(vars(v))
    except TypeError:
        return None


def _module_attrs(m: torch.nn.Module) -> dict[str, Any]:
    """A module's plain attributes (not parameters, buffers, submodules or hooks)."""
    return {k: v for k, v in vars(m).items() if not k.startswith("_")}


class Encoder:
    """Turns objects into a safe tree; private keys go to :attr:`private_keys` (by reference)."""

    def __init__(self) -> None:
        self.private_keys: dict[str, PrivateKey] = {}
        self._key_refs: dict[int, str] = {}

    def encode(self, v: Any, path: str = "state") -> Any:
        if isinstance(v, np.generic):  # before float and str: np.float64 and np.str_ subclass them
            return {TAG: "npscalar", "dtype": v.dtype.str, "value": v.item()}
        if v is None or type(v) in (bool, int, float, str, bytes):
            return v
        if isinstance(v, torch.nn.Parameter):
            return {TAG: "parameter", "data": v.detach()}
        if isinstance(v, torch.Tensor):
            return v.detach().requires_grad_(v.requires_grad) if v.requires_grad else v.detach()
        if isinstance(v, np.ndarray):
            if v.dtype.kind in "biufc":
                return {TAG: "ndarray", "data": torch.from_numpy(np.array(v, copy=True)), "dtype": v.dtype.str}
            if v.dtype.kind in "US":
                return {TAG: "ndarray-str", "data": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
            raise ConfigError(f"checkpoint: {path} is a NumPy array of {v.dtype}, which cannot be saved as plain data")
        if isinstance(v, np.dtype):
            return {TAG: "dtype", "name": v.str}
        if isinstance(v, np.random.Generator):
            return {TAG: "nprng", "state": v.bit_generator.state}
        if isinstance(v, torch.Generator):
            return {TAG: "torchrng", "state": v.get_state()}
        if isinstance(v, PrivateKey):
            ref = self._key_refs.get(id(v))
            if ref is None:
                ref = self._key_refs[id(v)] = f"k{len(self._key_refs)}"
                self.private_keys[ref] = v
            return {TAG: "private-key", "ref": ref}
        if isinstance(v, PublicKey):
            return {TAG: "public-key", "n": str(v.n), "backend": v.backend.name, "randomness": v.randomness,
                    "insecure": bool(v.insecure)}
        if isinstance(v, dict):
            if all(type(k) is str for k in v) and TAG not in v:
                return {k: self.encode(x, f"{path}.{k}") for k, x in v.items() if not isinstance(x, _CODE)}
            return {TAG: "dict", "items": [[self.encode(k, f"{path} key"), self.encode(x, f"{path}[{k!r}]")]
                                           for k, x in v.items() if not isinstance(x, _CODE)]}
        if isinstance(v, list):
            return [self.encode(x, f"{path}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return tuple(self.encode(x, f"{path}[{i}]") for i, x in enumerate(v))
        if isinstance(v, (set, frozenset)):
            return {TAG: "set", "items": [self.encode(x, f"{path} item") for x in v]}
        if isinstance(v, torch.nn.Module):
            return {TAG: "module", "type": _qualname(v), "state": dict(v.state_dict()),
                    "attrs": {name: self.encode(_module_attrs(m), f"{path}.{name or '<root>'}")
                              for name, m in v.named_modules()}}
        if isinstance(v, torch.optim.Optimizer):
            return {TAG: "optimizer", "type": _qualname(v), "state": self.encode(v.state_dict(), f"{path} state")}
        attrs = _attributes(v)
        if attrs is not None and not isinstance(v, _CODE):
            return {TAG: "object", "type": _qualname(v), "attrs": self.encode(attrs, path)}
        raise ConfigError(f"checkpoint: {path} is a {type(v).__name__}, which cannot be saved as plain data")


def encode(v: Any) -> tuple[Any, dict[str, PrivateKey]]:
    """``(tree, private keys by reference)`` of ``v`` (see the module docstring)."""
    enc = Encoder()
    return enc.encode(v), enc.private_keys


# ------------------------------------------------------------------------------------ private keys
def keys_to_json(keys: dict[str, PrivateKey]) -> bytes:
    """The private keys' integers (decimal) and local choices, as JSON (write it with mode 0600)."""
    out = {ref: {"n": str(k.public_key.n), "p": str(k.p), "q": str(k.q), "backend": k.public_key.backend.name,
                 "randomness": k.public_key.randomness, "insecure": bool(k.public_key.insecure)}
           for ref, k in keys.items()}
    return (json.dumps({"format": KEYS_FORMAT, "paillier_private_keys": out}, indent=1) + "\n").encode()


def _public(n: int, backend: str, randomness: str, insecure: bool) -> PublicKey:
    pub = PublicKey(n, backend=backend if backend != "heu" else "auto", randomness=randomness, insecure=insecure)
    if not pub.backend.can_encrypt(pub):  # a back end that only encrypts under keys it generated
        pub = PublicKey(n, backend="python", randomness=randomness, insecure=insecure)
    return pub


def keys_from_json(data: bytes, where: str) -> dict[str, PrivateKey]:
    """Inverse of :func:`keys_to_json` (no unpickling; ``p * q == n`` is checked)."""
    try:
        obj = json.loads(data)
        if obj.get("format") != KEYS_FORMAT:
            raise ValueError(f"format {obj.get('format')!r}, expected {KEYS_FORMAT}")
        out = {}
        for ref, k in obj["paillier_private_keys"].items():
            pub = _public(int(k["n"]), str(k["backend"]), str(k["randomness"]), bool(k["insecure"]))
            out[str(ref)] = PrivateKey(pub, int(k["p"]), int(k["q"]))
        return out
    except Exception as exc:  # noqa: BLE001 - any malformed key file
        raise ConfigError(f"{where} is not a verticalfs key file ({type(exc).__name__}: {exc})") from None


# ----------------------------------------------------------------------------------------- decoding
def restore_into(current: Any, saved: Any, keys: dict[str, PrivateKey], path: str = "state") -> Any:
    """The value to hold where ``current`` is, from ``saved`` (modules, optimisers, generators and
    objects are updated in place and returned; plain values are decoded)."""
    if isinstance(saved, list):
        cur: Any = current if isinstance(current, list) and len(current) == len(saved) else [None] * len(saved)
        return [restore_into(c, s, keys, f"{path}[{i}]") for i, (c, s) in enumerate(zip(cur, saved, strict=True))]
    if isinstance(saved, tuple):
        cur = current if isinstance(current, tuple) and len(current) == len(saved) else (None,) * len(saved)
        return tuple(restore_into(c, s, keys, f"{path}[{i}]") for i, (c, s) in enumerate(zip(cur, saved, strict=True)))
    if isinstance(saved, torch.Tensor):
        return _restore_tensor(current, saved)
    if not isinstance(saved, dict):
        return saved
    kind = saved.get(TAG)
    if kind is None:
        cur = current if isinstance(current, dict) else {}
        return {k: restore_into(cur.get(k), s, keys, f"{path}.{k}") for k, s in saved.items()}
    if kind == "dict":
        items = [(restore_into(None, k, keys, path), s) for k, s in saved["items"]]
        cur = current if isinstance(current, dict) else {}
        return {k: restore_into(cur.get(k), s, keys, f"{path}[{k!r}]") for k, s in items}
    if kind == "set":
        return {restore_into(None, s, keys, path) for s in saved["items"]}
    if kind == "parameter":
        if isinstance(current, torch.Tensor):
            return _restore_tensor(current, saved["data"])
        return torch.nn.Parameter(saved["data"])
    if kind == "ndarray":
        return saved["data"].numpy().astype(np.dtype(saved["dtype"]), copy=False)
    if kind == "ndarray-str":
        return np.array(saved["data"], dtype=np.dtype(saved["dtype"])).reshape(saved["shape"])
    if kind == "npscalar":
        return np.dtype(saved["dtype"]).type(saved["value"])
    if kind == "dtype":
        return np.dtype(saved["name"])
    if kind == "nprng":
        rng = current if isinstance(current, np.random.Generator) else np.random.default_rng()
        rng.bit_generator.state = saved["state"]
        return rng
    if kind == "torchrng":
        gen = current if isinstance(current, torch.Generator) else torch.Generator()
        gen.set_state(saved["state"])
        return gen
    if kind == "private-key":
        try:
            return keys[saved["ref"]]
        except KeyError:
            raise ConfigError(f"checkpoint: {path} names private key {saved['ref']!r}, which its key file does "
                              "not hold; the checkpoint's files are incomplete") from None
    if kind == "public-key":
        n = int(saved["n"])
        if isinstance(current, PublicKey) and current.n == n:
            return current
        for k in keys.values():  # the same object as its private key's (as when it was saved)
            if k.public_key.n == n:
                return k.public_key
        return _public(int(saved["n"]), saved["backend"], saved["randomness"], saved["insecure"])
    _check_type(current, saved, path)
    if kind == "module":
        _load_module(current, saved, path)
        return current
    if kind == "optimizer":
        current.load_state_dict(restore_into(None, saved["state"], keys, f"{path} state"))
        return current
    if kind == "object":
        for k, s in saved["attrs"].items():
            object.__setattr__(current, k, restore_into(getattr(current, k, None), s, keys, f"{path}.{k}"))
        return current
    raise ConfigError(f"checkpoint: {path} has unknown kind {kind!r}")


def _restore_tensor(current: Any, saved: torch.Tensor) -> torch.Tensor:
    """The saved values in the run's own tensor object where there is one (an optimiser may hold
    it: a parameter kept outside a module, say), else the saved tensor."""
    if not isinstance(current, torch.Tensor):
        return saved
    with torch.no_grad():
        if current.shape == saved.shape and current.dtype == saved.dtype and current.device == saved.device:
            current.copy_(saved)
        else:  # e.g. a parameter sliced when inputs were dropped
            current.data = saved.detach().clone()
    return current


def _check_type(current: Any, saved: dict[str, Any], path: str) -> None:
    if current is None or _qualname(current) != saved["type"]:
        raise ConfigError(f"checkpoint: {path} was a {saved['type']}, the resumed run has "
                          f"{'nothing' if current is None else _qualname(current)} there; resume with the same "
                          "method, parameters and version of verticalfs")


def _load_module(m: torch.nn.Module, saved: dict[str, Any], path: str) -> None:
    mods = dict(m.named_modules())
    for name, attrs in saved["attrs"].items():
        sub = mods.get(name)
        if sub is None:
            raise ConfigError(f"checkpoint: {path} has a submodule {name!r} the resumed run's model lacks")
        for k, s in attrs.items():
            object.__setattr__(sub, k, restore_into(getattr(sub, k, None), s, {}, f"{path}.{name}.{k}"))
    tensors = {**dict(m.named_parameters()), **dict(m.named_buffers())}
    missing = [k for k in saved["state"] if k not in tensors]
    if missing:
        raise ConfigError(f"checkpoint: {path} holds {missing}, which the resumed run's model lacks")
    with torch.no_grad():
        for k, t in saved["state"].items():
            cur = tensors[k]
            if cur.shape == t.shape and cur.dtype == t.dtype:
                cur.copy_(t)
            else:  # e.g. inputs dropped before the checkpoint: same tensor object, the saved values
                cur.data = t.clone()
