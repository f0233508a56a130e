"""The method interface.

A method is a class with a ``name``, a ``Params`` dataclass (its hyper-parameters with the paper's
defaults, each documented in the dataclass docstring), a party ``Role`` (what it runs at each
feature party; :mod:`verticalfs.party`) and :meth:`Method.fit`, which runs the protocol from the
label holder on a :class:`~verticalfs.federation.Federation` and sets the learned state:

- ``history_``: :class:`~verticalfs.training.History`, one entry per communication epoch;
- ``support_``: per party, a bool mask over that party's prepared features (what it kept);
- ``metrics_``: final test metrics; ``info_``: method-specific figures (JSON-serialisable);
- ``feature_scores_``: per party, a score per prepared feature (NaN where none): what the method
  ranks or weighs features by (a filter's score, an input group's weight norm, a gate); empty
  when the method has none;
- ``trainer_``: the :class:`~verticalfs.training.split.SplitTrainer` of a split-trained method
  (``None`` for the others).

Like scikit-learn's selectors, :meth:`get_support` gives the support per party.

The whole contract between a method and the rest of the library is in :class:`Method`: what the
runner sets before :meth:`~Method.fit` (``entry_hook``, ``checkpoints``), what ``fit`` sets, and the
hooks with their defaults (:meth:`~Method.cannot_save`, :meth:`~Method.export_holder`,
:meth:`~Method.predict_from_holder`, :meth:`~Method.joined_as`, :meth:`~Method.predict_proba`).
Nothing else is looked up on a method by name.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from verticalfs.codecs import get_codec
from verticalfs.exceptions import ConfigError
from verticalfs.params import make_params

if TYPE_CHECKING:
    from typing_extensions import Self

    from verticalfs.federation import Federation
    from verticalfs.model_files import HolderPart
    from verticalfs.training.checkpoint import Checkpointer
    from verticalfs.training.history import Callback, History
    from verticalfs.training.split import SplitHolder, SplitTrainer

#: how a method treats the payload codec a user asks for (``--codec``)
CODEC_POLICIES = ("channel", "fixed", "none")


class FederationView(Protocol):
    """What a method's prediction (:meth:`Method.predict_from_holder`) sees of the label holder's
    federation: its labels, its parties and their proxies (a :class:`~verticalfs.federation.Federation`,
    or a deployment's view at inference)."""

    @property
    def labels(self) -> Any: ...

    @property
    def party_names(self) -> list[str]: ...

    def proxy(self, name: str) -> Any: ...

    def n_samples(self, split: str = "train") -> int: ...


class Method(ABC):
    """Base class of every registered method.

    Subclasses set ``name``, ``summary``, ``paper``, ``Params``, ``Role`` and ``test_params`` and
    implement :meth:`fit`.

    Class attributes
    ----------------
    Role : type or None
        The party role created by ``Join(name, spec)`` at every feature party (``None`` for a method
        that never runs at the parties).
    needs_pooled_data : bool
        True only for non-federated references (``central``, ``cfeast``).
    codec_policy : {"channel", "fixed", "none"}
        ``channel``: the method's embeddings and gradients use the codec the user asks for
        (default float32); ``fixed``: the method fixes its own codecs (asking for one is an error);
        ``none``: the method sends no tensors (asking for a codec is an error).
    test_params : dict
        Small settings for the shared contract tests (seconds, not minutes); every method declares
        its own.
    disclosures : dict
        What the protocol deliberately reveals, by message kind, for the privacy audit:
        ``labels_to_parties`` (kinds that carry labels to feature parties, e.g. FEAST's sample),
        ``columns_to_label_holder`` (kinds that carry raw selected columns to the label holder,
        e.g. the filter methods' evaluation). Anything not declared here is a leak. An instance may
        set its own when a parameter changes what crosses (FedSDG-FS's ``secure=false``); the
        privacy audit reads the instance's.

    Attributes
    ----------
    entry_hook : callable or None
        Set by the runner before :meth:`fit`: ``hook(entry)`` adds evaluator-only fields to each
        history entry (``spurious_removed``); pass it to the trainer.
    checkpoints : Checkpointer or None
        Set by the runner before :meth:`fit` when the run checkpoints every epoch
        (:class:`~verticalfs.training.checkpoint.Checkpointer`); pass it to the trainer of a
        federated run (``SplitTrainer(..., checkpoints=self.checkpoints)``), never to a
        non-federated reference's.
    trainer_ : SplitTrainer or None
        Set by :meth:`finish_training`; the default :meth:`export_holder` saves its top model.
    info_ : dict
        Method-specific figures of the run (JSON-serialisable), ``warnings`` among them.
    feature_scores_ : dict
        Per party, a score per prepared feature (see the module docstring); empty if none.
    support_ : dict or None
        Per party, the bool mask of kept features, set by :meth:`fit`.
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    Params: ClassVar[type]
    Role: ClassVar[type | None] = None
    needs_pooled_data: ClassVar[bool] = False
    codec_policy: ClassVar[str] = "channel"
    test_params: ClassVar[dict[str, Any]] = {}
    disclosures: ClassVar[dict[str, tuple[str, ...]]] = {}

    #: what :meth:`fit` sets (see the class docstring)
    history_: History
    metrics_: dict[str, float]

    def __init__(self, *, seed: int = 0, callbacks: Sequence[Callback] = (), codec: str | None = None,
                 **params: Any) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= int(seed) < 2**32:
            raise ConfigError(f"{self.name}: seed must be an integer in [0, 2**32), got {seed!r}")
        self.seed = int(seed)
        self.callbacks: list[Callback] = list(callbacks)
        self.params: Any = make_params(self.Params, params, self.name)
        self.codec = self.resolve_codec(codec)
        #: set by the runner: ``hook(entry)`` adds evaluator-only fields (``spurious_removed``)
        self.entry_hook: Callable[[dict[str, Any]], None] | None = None
        #: set by the runner when the run checkpoints (a Checkpointer; see the class docstring)
        self.checkpoints: Checkpointer | None = None
        self.info_: dict[str, Any] = {}
        self.feature_scores_: dict[str, np.ndarray] = {}
        self.trainer_: SplitTrainer | None = None
        self.support_: dict[str, np.ndarray] | None = None

    @classmethod
    def resolve_codec(cls, codec: str | None) -> str | None:
        """The payload codec this method uses for ``codec`` asked by the user (``None`` = default)."""
        if codec is None:
            return "float32" if cls.codec_policy == "channel" else None
        get_codec(codec)  # unknown names are an error
        if cls.codec_policy == "fixed":
            raise ConfigError(f"method {cls.name!r} fixes its own codecs ({cls.codec_description()}); "
                              f"--codec {codec} does not apply to it (leave --codec out)")
        if cls.codec_policy == "none":
            raise ConfigError(f"method {cls.name!r} sends no tensors, so --codec {codec} does not apply to it "
                              "(leave --codec out)")
        return codec

    @classmethod
    def codec_description(cls) -> str:
        """The codecs the method uses, for results and messages (override for ``fixed`` methods)."""
        return {"channel": "the channel codec", "none": "no tensors"}.get(cls.codec_policy, "its own")

    @abstractmethod
    def fit(self, fed: Federation) -> Self:
        """Run the method on the federation; return ``self``."""

    # -------------------------------------------------------------------- tail
    def finish_training(self, fed: Federation, trainer: SplitTrainer, info: dict[str, Any] | None = None) -> Self:
        """The common end of a trained method: ``trainer_``, ``history_``, ``metrics_`` (the
        trainer's final or best-checkpoint test metrics), ``support_`` (asked from the parties,
        phase ``report``) and ``info_``."""
        self.trainer_ = trainer
        self.history_ = trainer.history
        self.metrics_ = trainer.finish()
        self.support_, self.feature_scores_ = fed.collect_support_and_scores()
        if info:
            self.info_.update(info)
        return self

    # --------------------------------------------------------- saved models
    def parties_in_model(self, fed: FederationView) -> list[str]:
        """The parties the fitted model asks at inference, in ``fed``'s order: those that save a
        part (``SaveModel``) and that :func:`~verticalfs.model.predict` needs a file from. Default:
        every party of ``fed`` that the split model takes embeddings from (:attr:`trainer_`'s
        parties, e.g. less-vfl's stage 3 leaves out a party with no significant component), or
        every party for a method without one; a pipeline leaves out those its earlier stages left
        without a feature (they never joined its last stage)."""
        if self.trainer_ is None:
            return list(fed.party_names)
        used = set(self.trainer_.parties)
        return [p for p in fed.party_names if p in used]

    def cannot_save(self) -> str | None:
        """Why a run with these parameters could not save its model, or ``None`` if it can.

        Asked by the runner *before* training when the user wants the model saved, so that a long
        run does not end in an error. Default: ``None`` (the model can be saved).
        """
        return None

    def export_holder(self) -> HolderPart:
        """The label holder's part of the fitted model, for a saved model.

        Tensors, numbers, strings, lists and dicts only (the file is read with
        ``torch.load(weights_only=True)``), with a ``"kind"`` that :meth:`predict_from_holder`
        checks. The parties save their own parts (their roles' ``export``).

        Default, for a split-trained method: the top model of :attr:`trainer_`
        (:meth:`~verticalfs.training.split.SplitTrainer.export_top`, kind ``"split"``). Raises
        :class:`~verticalfs.exceptions.ConfigError` if :meth:`cannot_save` says why not, or if
        the method was not fitted.
        """
        why = self.cannot_save()
        if why:
            raise ConfigError(f"{self.name}: {why}")
        trainer = self.trainer_
        if trainer is None or trainer.top is None:
            raise ConfigError(f"{self.name} has no model to save (fit it first)")
        return trainer.export_top()

    @classmethod
    def predict_from_holder(cls, holder: HolderPart, fed: FederationView, split: str) -> np.ndarray:
        """The label holder's output on ``split`` of ``fed`` from a part :meth:`export_holder`
        wrote, asking the parties (their roles restored from their saved parts) through ``fed``
        in phase ``eval``.

        Returns what :func:`~verticalfs.evaluation.metrics.prediction_metrics` takes: logits or
        log-probabilities per class, values for regression. ``holder`` was read from disk: check
        what it names before using it. Default, for a split-trained method: every party's
        embeddings, then the saved top model (:func:`~verticalfs.training.split.saved_split_output`).
        """
        from verticalfs.training.split import saved_embeddings, saved_split_output  # torch: on use

        expect_holder_kind(holder, "split", cls.name)
        part: SplitHolder = holder  # type: ignore[assignment]  # its kind was checked
        return saved_split_output(part, saved_embeddings(part, fed, split))

    @classmethod
    def joined_as(cls) -> str:
        """The method name the parties' roles are built under at ``Join``, which their saved parts
        record (``LoadModel`` asks for it): the method's own name by default."""
        return cls.name

    def predict_proba(self, fed: FederationView, split: str = "test") -> np.ndarray:
        """Class probabilities (values for regression) of the fitted model on ``split`` of the
        federation it was trained on, asked from the parties through ``fed`` (phase ``eval``).

        Default: :meth:`predict_from_holder` on :meth:`export_holder`, i.e. exactly what the saved
        model predicts. A method whose model cannot be saved but predicts in its run overrides it.
        """
        return probabilities(self.predict_from_holder(self.export_holder(), fed, split), fed.labels.task)

    def get_support(self, party: str | None = None, indices: bool = False) -> Any:
        """Bool mask (or indices) of kept features for ``party``, or a dict over all parties."""
        sup = self.support_
        if sup is None:
            raise ConfigError(f"{self.name}: call fit() before get_support()")

        def conv(m: np.ndarray) -> np.ndarray:
            return np.flatnonzero(m) if indices else m

        if party is None:
            return {k: conv(v) for k, v in sup.items()}
        return conv(sup[party])


def probabilities(out: np.ndarray, task: str) -> np.ndarray:
    """Class probabilities from logits / log-probabilities (rows sum to one); values for regression."""
    if task == "regression":
        return np.asarray(out, dtype=np.float64).reshape(-1)
    z = np.asarray(out, dtype=np.float64)
    z = z - z.max(1, keepdims=True)
    e = np.exp(z)
    probs: np.ndarray = e / e.sum(1, keepdims=True)
    return probs


def expect_holder_kind(holder: Any, kind: str, method: str) -> None:
    """Refuse a saved label-holder part (read from disk) that is not of ``kind``."""
    if not isinstance(holder, dict) or holder.get("kind") != kind:
        got = holder.get("kind") if isinstance(holder, dict) else type(holder).__name__
        raise ConfigError(f"the saved model's label-holder part is of kind {got!r}; {method} saves kind {kind!r} "
                          "(the model folder was changed, or saved by another method)")


def params_doc(cls: type) -> dict[str, str]:
    """Parse the numpydoc 'Parameters' section of a params dataclass docstring into {name: text}."""
    doc = cls.__doc__ or ""
    out: dict[str, str] = {}
    cur = None
    for line in doc.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("---") or stripped == "Parameters":
            continue
        indent = len(line) - len(line.lstrip())
        head = stripped.split(" : ")[0]
        if " : " in stripped and indent <= 4:
            cur = head
            out[cur] = ""
        elif cur is not None and indent > 4:
            out[cur] = (out[cur] + " " + stripped).strip()
    for base in cls.__mro__[1:]:
        if base is object or not dataclasses.is_dataclass(base):
            continue
        for k, v in params_doc(base).items():
            out.setdefault(k, v)
    return out
