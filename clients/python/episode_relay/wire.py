"""msgpack helpers shared by the sink and the forwarder.

Deltas and replies are packed exactly the way the worker packs them in
``verifiers.v1.serve.delta.pack``: ``msgpack.packb(obj, default=msgpack_encoder,
use_bin_type=True)``. For the plain dicts a ``DeltaStreamer`` hands its ``send`` callable
(str, bytes, ints, floats, lists, dicts, None, bool) this is just
``msgpack.packb(obj, use_bin_type=True)``; the ``default`` encoder only matters for values
msgpack does not know (numpy scalars, pydantic models, ...). When ``verifiers`` is importable
its own ``msgpack_encoder`` is used, so the bytes are the worker's bytes; otherwise a
compatible fallback is.
"""

from __future__ import annotations

import dataclasses
import sys
from datetime import date, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Dict, Mapping, Optional, Union
from uuid import UUID

import msgpack

#: The append-only list fields of a trace, in upstream order.
LIST_FIELDS = (
    "nodes",
    "calls",
    "payload",
    "errors",
    "extra_usage",
    "request_rewrites",
    "response_rewrites",
)

#: An upstream delta or reply: a dict, or its msgpack bytes.
Document = Union[Mapping[str, Any], bytes, bytearray, memoryview]

Encoder = Callable[[Any], Any]

_TENSOR_TAG = "__torch_tensor__"


def _fallback_encoder(obj: Any) -> Any:
    """A stand-in for ``verifiers.v1.serve.encoding.msgpack_encoder`` (same output)."""
    if isinstance(obj, (Path, UUID)):
        return str(obj)
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        if isinstance(obj, (numpy.integer, numpy.floating)):
            return obj.item()
        if isinstance(obj, numpy.ndarray):
            return {_TENSOR_TAG: True, "dtype": str(obj.dtype), "shape": list(obj.shape), "data": obj.tobytes()}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        arr = obj.detach().cpu().contiguous().numpy()
        return {_TENSOR_TAG: True, "dtype": str(arr.dtype), "shape": list(arr.shape), "data": arr.tobytes()}
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"Object of type {type(obj)} is not msgpack serializable")


def default_encoder() -> Encoder:
    """verifiers' own ``msgpack_encoder`` when importable, else a compatible fallback."""
    try:
        from verifiers.v1.serve.encoding import msgpack_encoder  # type: ignore[import-not-found,unused-ignore]
    except Exception:  # verifiers (or numpy) not installed: the fallback does the same
        return _fallback_encoder
    return msgpack_encoder  # type: ignore[no-any-return]


def pack(obj: Any, default: Optional[Encoder] = None) -> bytes:
    """Pack like the worker does: str and bin distinct, map order kept, minimal formats."""
    packed: bytes = msgpack.packb(obj, default=default, use_bin_type=True)
    return packed


def unpack(data: bytes) -> Any:
    """Unpack like the reference client does (``links`` / ``routing_repairs`` have int keys)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def to_bytes(doc: Document, default: Optional[Encoder] = None) -> bytes:
    """The msgpack bytes of ``doc``: bytes pass through untouched, anything else is packed."""
    if isinstance(doc, bytes):
        return doc
    if isinstance(doc, (bytearray, memoryview)):
        return bytes(doc)
    return pack(doc, default)


def parse_delta(data: bytes) -> Dict[str, Any]:
    """Unpack one upstream delta and check its outer shape (a map whose ``trace`` is a str)."""
    try:
        delta = unpack(data)
    except Exception as e:
        raise ValueError(f"delta is not a single msgpack document: {e}") from e
    if not isinstance(delta, dict) or not isinstance(delta.get("trace"), str):
        raise ValueError("a delta is a msgpack map with a str `trace`")
    return delta
