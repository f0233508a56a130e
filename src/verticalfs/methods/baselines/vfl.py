"""``vfl``: standard vertical federated learning, less-vfl.md Appendix A, Algorithm 2.

With the original data this is the papers' "VFL (Original)"; with injected noise features
(``--noise``) it is "VFL (Spurious)". It keeps every feature. Its party role is the plain
:class:`~verticalfs.training.split.SplitRole`.
"""

from __future__ import annotations

from dataclasses import dataclass

from verticalfs.methods.base import Method
from verticalfs.methods.registry import register
from verticalfs.training.split import SplitRole, SplitTrainer, TrainConfig, scaled_config


@dataclass
class VFLParams(TrainConfig):
    """Standard VFL training.

    Parameters
    ----------
    epochs : int
        Communication epochs (default 50).
    batch_size : int
        Mini-batch size agreed by all parties (default 256).
    lr : float
        Learning rate of every party's optimizer (less-vfl.md section 5: 0.01).
    optimizer : str
        ``adam`` (the papers' choice), ``adamw`` or ``sgd``.
    weight_decay : float
        L2 penalty of every optimizer.
    hidden : tuple of int
        Hidden widths of each bottom MLP; two hidden layers make the 3-layer MLP of less-vfl.md.
    embedding_dim : int
        Embedding components per party.
    activation : str
        Hidden activation (relu, tanh, sigmoid, gelu, leaky_relu, elu, selu).
    top_hidden : tuple of int
        Hidden widths of the top model; empty = linear (less-vfl.md section 5).
    """


def class_count(fed) -> int | None:
    """The classes of ``fed``'s labels (None for regression)."""
    return None if fed.labels.task == "regression" else int(fed.labels.n_classes)


#: small settings of the split-training methods for the shared contract tests
SMALL_SPLIT = {"epochs": 3, "batch_size": 64, "hidden": (16, 8)}


@register
class VFL(Method):
    name = "vfl"
    summary = "Standard VFL (Algorithm 2): embeddings up, embedding gradients down, every feature kept."
    paper = "less-vfl.md Appendix A (Hu et al. 2019; Ceballos et al. 2020)"
    Params = VFLParams
    Role = SplitRole
    test_params = SMALL_SPLIT

    def class_scaling(self) -> tuple[float, float]:
        """``(top_per_class, lr_classes)``: how much the top model's hidden layers widen with the
        classes and the learning rate falls beyond that many classes
        (:func:`~verticalfs.training.split.scaled_config`); ``(0, 0)``: as given. The FedSDG-FS
        baselines, whose parameters carry both, override it."""
        return 0.0, 0.0

    def _config(self, fed=None) -> TrainConfig:
        """The training config; with ``fed``, scaled with the classes by :meth:`class_scaling`."""
        config = TrainConfig.from_params(self.params)
        per_class, lr_classes = self.class_scaling()
        if fed is None or not (per_class or lr_classes):
            return config
        return scaled_config(config, class_count(fed), per_class, lr_classes)

    def make_trainer(self, fed, **kwargs) -> SplitTrainer:
        return SplitTrainer(fed, self.name, self._config(fed), seed=self.seed,
                            callbacks=self.callbacks, entry_hook=self.entry_hook, codec=self.codec or "float32", **kwargs)

    def fit(self, fed) -> VFL:
        trainer = self.make_trainer(fed, checkpoints=self.checkpoints)
        trainer.setup()
        trainer.fit(phase="train")
        return self.finish_training(fed, trainer)
