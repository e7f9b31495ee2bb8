"""xmc: extreme multi-label classification from Python.

Train a model from a scipy CSR matrix or from plain text, open a model bundle (memory-mapped,
as ``xmc serve`` does), predict, evaluate and save. Every computation is the ``xmc`` Rust
library's; this package only moves arrays in and out.

    >>> import xmc
    >>> model = xmc.train(["red apple", "green pear"], [["fruit", "red"], ["fruit"]], text__min_df=1)
    >>> model.predict_names(["a red apple"], k=2)
"""

from ._xmc import BundleError, DataError, Model, __version__, read_data, train

__all__ = ["BundleError", "DataError", "Model", "read_data", "train", "__version__"]
