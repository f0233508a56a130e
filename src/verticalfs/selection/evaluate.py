"""Classifiers trained on selected columns: the evaluation of feast.md section 5.

The papers judge a filter method by the test ROC-AUC of a classifier trained on the N selected
features (LR, SVM, RF, XGBoost and an MLP; feast.md section 5.1). :func:`evaluate_selected` does
this on a held-out split; :func:`cross_validate_selected` is the paper's protocol (k-fold
cross-validation over all rows) for comparison with the public implementation.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold

from verticalfs.evaluation.metrics import prediction_metrics
from verticalfs.exceptions import ConfigError, DataError

CLASSIFIERS: tuple[str, ...] = ("lr", "svm", "rf", "xgboost", "mlp")


def make_classifier(name: str, seed: int = 0, task: str = "binary"):
    """A scikit-learn-like estimator (a regressor when ``task == "regression"``).

    Parameters
    ----------
    name : {"lr", "svm", "rf", "xgboost", "mlp"}
        Logistic regression (ridge for regression), an RBF support-vector machine, a random forest
        of 100 trees, XGBoost (100 trees, ``hist``; imported lazily) and a one-hidden-layer MLP
        (64 units). Library defaults otherwise (feast.md section 5.1 does not give
        hyper-parameters); all single-threaded and seeded.
    seed : int
    task : {"binary", "multiclass", "regression"}
    """
    reg = task == "regression"
    if name == "lr":
        from sklearn.linear_model import LogisticRegression, Ridge

        return Ridge(alpha=1.0) if reg else LogisticRegression(max_iter=1000)
    if name == "svm":
        from sklearn.svm import SVC, SVR

        return SVR() if reg else SVC(random_state=seed)
    if name == "rf":
        from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

        cls = RandomForestRegressor if reg else RandomForestClassifier
        return cls(n_estimators=100, random_state=seed, n_jobs=1)
    if name == "xgboost":
        try:
            import xgboost
        except ImportError as exc:  # pragma: no cover - installed with the package's extras
            raise ConfigError("classifier 'xgboost' needs the xgboost package: pip install 'verticalfs[xgboost]' "
                              "(or xgboost-cpu); or choose one of lr, svm, rf, mlp") from exc
        cls = xgboost.XGBRegressor if reg else xgboost.XGBClassifier
        return cls(n_estimators=100, random_state=seed, n_jobs=1, tree_method="hist", verbosity=0)
    if name == "mlp":
        from sklearn.neural_network import MLPClassifier, MLPRegressor

        cls = MLPRegressor if reg else MLPClassifier
        return cls(hidden_layer_sizes=(64,), max_iter=300, random_state=seed)
    raise ConfigError(f"unknown classifier {name!r}; use one of {CLASSIFIERS}")


def _output(model, X: np.ndarray, task: str, n_classes: int) -> np.ndarray:
    """Model output in the form :func:`prediction_metrics` expects (logits or log-probabilities)."""
    if task == "regression":
        return np.asarray(model.predict(X), dtype=np.float64)
    classes = np.asarray(model.classes_)
    if hasattr(model, "predict_proba") and not type(model).__name__ == "SVC":
        p = np.asarray(model.predict_proba(X), dtype=np.float64)
        logp = np.log(np.clip(p, 1e-12, 1.0))
    else:  # SVC: decision values; softmax of [0, d] is sigmoid(d), so argmax = sign(d)
        d = np.asarray(model.decision_function(X), dtype=np.float64)
        logp = np.stack([np.zeros_like(d), d], 1) if d.ndim == 1 else d
    out = np.full((len(X), max(n_classes, len(classes))), -1e9)
    out[:, classes.astype(np.int64)] = logp  # classes absent from the training rows get ~0 probability
    return out


def _constant_output(y_train: np.ndarray, n: int, task: str, n_classes: int) -> np.ndarray:
    """Prediction without features: the training mean / class prior."""
    if task == "regression":
        return np.full(n, float(np.mean(y_train)))
    prior = np.bincount(np.asarray(y_train, dtype=np.int64), minlength=n_classes) / max(1, len(y_train))
    return np.tile(np.log(np.clip(prior, 1e-12, 1.0)), (n, 1))


class ConstantModel:
    """The prediction without features (or with one class): the training mean / class prior."""

    def __init__(self, y_train: np.ndarray, task: str, n_classes: int) -> None:
        self.task, self.n_classes = task, n_classes
        self.value = _constant_output(np.asarray(y_train), 1, task, n_classes)[0]

    def output(self, X: np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(self.value)[None, ...], len(X), axis=0) if self.task != "regression" \
            else np.full(len(X), float(self.value))


def fit_classifier(X_train, y_train, classifier: str, seed: int = 0, task: str = "binary", n_classes: int = 2):
    """The fitted ``classifier`` on the training rows (a :class:`ConstantModel` without features)."""
    X_train = np.asarray(X_train, dtype=np.float64)
    y_train = np.asarray(y_train)
    if X_train.ndim != 2 or len(X_train) != len(y_train):
        raise DataError(f"X_train has shape {X_train.shape} but y_train has {len(y_train)} rows; "
                        "pass a 2-D array with one row per label")
    if X_train.shape[1] == 0 or (task != "regression" and len(np.unique(y_train)) < 2):
        return ConstantModel(y_train, task, n_classes)
    model = make_classifier(classifier, seed=seed, task=task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence warnings of LR/MLP on small data
        model.fit(X_train, y_train)
    return model


def classifier_output(model, X, task: str, n_classes: int) -> np.ndarray:
    """A fitted classifier's output on ``X`` in the form :func:`prediction_metrics` takes."""
    X = np.asarray(X, dtype=np.float64)
    if isinstance(model, ConstantModel):
        return model.output(X)
    if not len(X):
        return np.zeros((0, n_classes))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _output(model, X, task, n_classes)


def fit_predict(X_train, y_train, X_eval_list, classifier: str, seed: int = 0, task: str = "binary",
                n_classes: int = 2) -> list[np.ndarray]:
    """Fit ``classifier`` on the training rows; return its outputs on each array of ``X_eval_list``."""
    model = fit_classifier(X_train, y_train, classifier, seed, task, n_classes)
    return [classifier_output(model, X, task, n_classes) for X in X_eval_list]


def evaluate_selected(X_train, y_train, X_test, y_test, classifier: str, seed: int = 0, task: str = "binary",
                      n_classes: int = 2) -> dict[str, float]:
    """Train ``classifier`` on the selected training columns; metrics on the test rows.

    Returns :func:`~verticalfs.evaluation.metrics.prediction_metrics` (``accuracy``,
    ``balanced_accuracy``, ``roc_auc``, ``f1_macro``; ``r2``, ``mse``, ``mae`` for regression).
    With zero columns the prediction is the training prior.
    """
    (out,) = fit_predict(X_train, y_train, [X_test], classifier, seed, task, n_classes)
    return prediction_metrics(task, np.asarray(y_test), out, n_classes)


def cross_validate_selected(X, y, classifier: str, folds: int = 5, seed: int = 0, task: str = "binary",
                            n_classes: int = 2) -> dict[str, float]:
    """The paper's protocol: mean test metrics over ``folds`` (stratified, shuffled, seeded) folds of
    all rows (feast.md section 5.1)."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y)
    if folds < 2:
        raise ConfigError(f"folds must be at least 2, got {folds}")
    splitter = (KFold(folds, shuffle=True, random_state=seed) if task == "regression"
                else StratifiedKFold(folds, shuffle=True, random_state=seed))
    per_fold = []
    for tr, te in splitter.split(X, y):
        per_fold.append(evaluate_selected(X[tr], y[tr], X[te], y[te], classifier, seed, task, n_classes))
    keys = per_fold[0].keys()
    return {k: float(np.nanmean([m[k] for m in per_fold])) for k in keys}
