"""Type stubs of the xmc package (the native module ``xmc._xmc``, re-exported)."""

from os import PathLike
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import scipy.sparse

__version__: str

_Path = Union[str, "PathLike[str]"]
_Features = Union[scipy.sparse.csr_matrix, Sequence[str], str]
_Labels = Union[scipy.sparse.csr_matrix, Sequence[Sequence[int]], Sequence[Sequence[str]]]
_Setting = Union[bool, int, float, str, Sequence[Union[int, float, str]]]

class BundleError(ValueError):
    """A model bundle is corrupt, truncated or of an unknown format."""

class DataError(ValueError):
    """Input data is malformed: a bad file, dtype, shape, id or value."""

class Model:
    """An xmc model: a validated, memory-mapped bundle (or a freshly trained one in memory)."""

    @staticmethod
    def open(path: _Path, *, verify: bool = False) -> "Model":
        """Opens the bundle at ``path``, memory-mapped; ``verify`` checks every checksum."""
    def save(self, path: _Path) -> None:
        """Writes the bundle to ``path`` atomically."""
    def predict(
        self, x: _Features, k: int = 5, *, threads: Optional[int] = None, **options: _Setting
    ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The top ``k`` labels and scores of every row, shape ``[n, k]`` each (-1/0 padding)."""
    def predict_names(
        self, x: _Features, k: int = 5, *, threads: Optional[int] = None, **options: _Setting
    ) -> List[List[str]]:
        """The names of the top ``k`` labels of every row."""
    def evaluate(self, x: _Features, y: _Labels, k: int = 5, **options: _Setting) -> Dict[str, float]:
        """P@k, nDCG@k, PSP@k, coverage@k and more, as ``xmc eval`` computes them."""
    def vectorize(self, texts: Union[str, Sequence[str]]) -> scipy.sparse.csr_matrix:
        """The model's text vectorizer applied to ``texts`` (float32 CSR, one row a text)."""
    @property
    def info(self) -> Dict[str, Any]:
        """The model's metadata."""
    @property
    def label_names(self) -> Optional[List[str]]:
        """The label names by id, or None."""
    @property
    def n_features(self) -> int:
        """The number of input features."""
    @property
    def n_labels(self) -> int:
        """The number of labels."""

def train(
    x: Union[scipy.sparse.csr_matrix, Sequence[str]],
    y: _Labels,
    config: Optional[_Path] = None,
    *,
    label_names: Optional[Sequence[str]] = None,
    feature_names: Optional[Sequence[str]] = None,
    **settings: _Setting,
) -> Model:
    """Trains a model; ``settings`` are ``xmc train --set`` keys (``text__min_df`` for ``text.min_df``)."""

def read_data(
    path: _Path, format: Optional[str] = None
) -> Union[
    Tuple[scipy.sparse.csr_matrix, scipy.sparse.csr_matrix], Tuple[List[str], List[List[str]]]
]:
    """Reads an XC file as ``(X, Y)`` CSR matrices, or a JSON Lines file as ``(texts, labels)``."""
