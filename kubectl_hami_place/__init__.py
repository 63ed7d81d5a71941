"""hami-place: pin HAMi GPU pods to exact nodes and cards."""

# The one place the version is written: pyproject.toml, the release tooling and the chart's checks read it here.
__version__ = "0.1.0"
