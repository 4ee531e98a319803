"""moto's response serializer, with the keys it tries on a dict remembered per shape: installed by the
local stack's moto server (``remote_batch_local.resources``) and by ``tests/conftest.py`` in every test
process.

moto 5.2 serializes a response by walking its botocore output shape and, for each member of each
structure, asking six alias providers which keys of the result object to try (``AttributePicker``).
On a DynamoDB response, whose result objects are dicts, that is about a third of a moto-bound test's
time: every attribute value is a structure of ten members, each asked of all six providers. For a
plain dict the providers' answers depend only on the member's name, its shape and the structure it is
a member of (a dict has no ``Meta``; its class name is always "dict"), so they are computed once and
kept on the shape, which botocore's model caches for the process. The keys tried, in their order, and
so the value picked and every response, are the same (``tests/integration/test_moto_keys.py``).

``install`` replaces ``AttributePicker.__call__`` (process-wide) when ``moto.__version__`` is the
version this was written against (``COPIED_FROM``); on another it leaves moto's own in place and logs
a warning once. Only the local stack and the tests install it; ``functions/`` never sees moto.
"""

from __future__ import annotations

import logging
from typing import Any

import moto
from moto.core import serialize
from moto.core.constants import MISSING
from moto.core.utils import get_value

_Picker = serialize.AttributePicker
_original_call = _Picker.__call__
# The providers known to answer from the key and the shape alone when the object is a plain dict.
_KNOWN_PROVIDERS = frozenset(serialize.DEFAULT_ALIAS_PROVIDERS)
_CACHE = "_remote_batch_possible_keys"
logger = logging.getLogger(__name__)

COPIED_FROM = "5.2.5"
"""The moto version whose ``AttributePicker.__call__`` ``_picked`` follows line for line."""


def _picked(self: Any, context: Any) -> Any:
    """``AttributePicker.__call__``, with the possible keys of a dict's member remembered."""
    obj, shape = context.obj, context.shape
    if type(obj) is not dict or shape is None or not _KNOWN_PROVIDERS.issuperset(self.alias_providers):
        return _original_call(self, context)
    cache = shape.__dict__.setdefault(_CACHE, {})
    # The parent itself (botocore's shapes compare by identity): held here, its id is never reused.
    memo = (type(self), tuple(self.alias_providers), context.key, getattr(shape, "parent", None))
    keys = cache.get(memo)
    if keys is None:
        # A dotted key is a path (moto's get_value); any other is one dict lookup, as get_value does it.
        found = tuple(self.get_possible_keys(context))
        keys = cache[memo] = (found, not any("." in key for key in found))
    possible_keys, plain = keys
    value: Any = MISSING
    for possible_key in possible_keys:
        value = obj.get(possible_key, MISSING) if plain else get_value(obj, possible_key, MISSING)
        if value is not MISSING:
            break
    else:
        value = None
    key_path = f"{context.key_path}.{context.key}"
    for transform_path, transform in self.response_transformers.items():
        if key_path.endswith(transform_path):
            value = transform(value)
            break
    return value


def install() -> bool:
    """Put the remembering picker in place of ``AttributePicker.__call__`` (its subclass inherits it;
    idempotent). Returns True when installed; False (moto's own stays, a warning is logged once) when
    ``moto.__version__`` differs from ``COPIED_FROM``."""
    if moto.__version__ != COPIED_FROM:
        logger.warning(
            "moto %s is not %s: its serializer looks up every key again (slower); "
            "update remote_batch_local/moto_keys.py",
            moto.__version__,
            COPIED_FROM,
        )
        return False
    _Picker.__call__ = _picked  # type: ignore[method-assign]
    return True
