"""Pure building blocks of feature selection: discretisation, information-theoretic scores,
stratified sampling and the classifier evaluation of feast.md section 5 (no messages, no parties;
the filter methods' base class is :mod:`verticalfs.methods.filter`)."""

from verticalfs.selection.evaluate import (
    CLASSIFIERS,
    cross_validate_selected,
    evaluate_selected,
    make_classifier,
)

__all__ = [
    "CLASSIFIERS",
    "cross_validate_selected",
    "evaluate_selected",
    "make_classifier",
]
