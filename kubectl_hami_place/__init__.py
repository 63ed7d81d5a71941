"""hami-place: pin HAMi GPU pods to exact nodes and cards."""

__version__ = "0.1.0"
