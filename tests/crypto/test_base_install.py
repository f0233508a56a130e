"""A base install has none of the optional Paillier back ends (the ``crypto`` extra): ``auto`` must
still resolve to the built-in back end, and asking for a missing one must name what is there.

The optional modules are made unimportable here by giving fresh back-end objects module names that
do not exist; CI also runs a smoke test in a venv with only the base dependencies.
"""

from __future__ import annotations

import numpy as np
import pytest

from verticalfs.crypto import EncryptedArray, generate_keypair
from verticalfs.crypto import backends as B
from verticalfs.exceptions import CryptoError


@pytest.fixture
def base_install(monkeypatch):
    fresh = {}
    for name, b in B.BACKENDS.items():
        nb = type(b)()
        if nb.module is not None:
            monkeypatch.setattr(nb, "module", f"verticalfs_missing_{name}")
        fresh[name] = nb
    monkeypatch.setattr(B, "BACKENDS", fresh)
    return fresh


def test_auto_resolves_to_python_without_optional_back_ends(base_install):
    assert B.available_backends() == ["python"]
    assert B.resolve_backend("auto", 2048).name == "python"
    assert B.resolve_backend("auto", 512, randomness="short").name == "python"


def test_a_missing_back_end_is_named_with_what_is_available(base_install):
    # before the fix, building this message called load() on every missing back end again, which
    # raised while building its own message: RecursionError
    with pytest.raises(CryptoError, match=r"'heu' is not available.*pip install sf-heu.*\(python\)"):
        B.get_backend("heu")
    assert B.backend_info()["pypaillier"]["available"] is False


def test_keys_and_arithmetic_work_on_the_built_in_back_end(base_install):
    pub, priv = generate_keypair(512, backend="auto", insecure=True)
    assert pub.backend.name == "python"
    x = np.array([1.5, -2.25, 3.0])
    e = EncryptedArray.encrypt(pub, x)
    np.testing.assert_allclose((e + e).decrypt(priv), 2 * x, atol=2**-30)
