"""Filter-type feature selection across parties: the shared base class, discretisation,
information-theoretic scores and the classifier evaluation of feast.md section 5."""

from verticalfs.selection.base import FilterMethod, FilterParams
from verticalfs.selection.evaluate import (
    CLASSIFIERS,
    cross_validate_selected,
    evaluate_selected,
    make_classifier,
)
from verticalfs.selection.messages import Columns, GatherColumns

__all__ = [
    "CLASSIFIERS",
    "Columns",
    "FilterMethod",
    "FilterParams",
    "GatherColumns",
    "cross_validate_selected",
    "evaluate_selected",
    "make_classifier",
]
