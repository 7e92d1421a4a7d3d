"""Canonical JSON: one byte string per value, so that equal arguments hash equally
whatever key order or whitespace the agent sent, and a checkpoint hash can be
recomputed from the stored row years later on either database backend.

That holds only if each backend gives back what was hashed. SQLite keeps a JSON
column's text as written; PostgreSQL's ``jsonb`` keeps a number's decimal value, not its
text (measured on PostgreSQL 15 through the model's JSONField, Python's reading on the
right):

    1.0 → 1.0    0.1 → 0.1    100.0 → 100.0    1e-07 → 0.0000001 (the same float)
    2**64 + 1 and integers of any length (up to Python's limit) → the same integer
    1e16 → 10000000000000000 (an int)    1.5e300 → 15 and 299 zeros (an int)
    1e23 → 10**23 (an int; the double's own value is 99999999999999991611392)
    -0.0 → 0.0 (no negative zero)

A float Python writes with an exponent of 16 or more (magnitude 1e16 and up: every such
double is a whole number) comes back as an int, and -0.0 as 0.0, so both would hash
differently once stored. The canonical form of a number is therefore what PostgreSQL
gives back, which ``canonical_float`` makes of a float:

- -0.0 becomes 0.0;
- a float of magnitude 1e16 or more becomes the integer its shortest decimal form
  names (1e16 → 10000000000000000, 1e23 → 10**23, as PostgreSQL reads it);
- every other float is canonical as it is, and so is every integer. 1.0 stays a float
  (both backends keep it), as does 1e-07 (PostgreSQL writes it out, in digits Python
  reads back as the same float).

``runs.jsonsafe.parse`` applies this to every number of every JSON value from outside
(agents' API bodies, a reviewer's edit, a target's answer) as it reads it, before
anything hashes or stores it, and refuses integers longer than Python reads back.
``canonical_json`` writes a value as it is: a float built in Python and hashed without
``canonical_float`` would not survive PostgreSQL.
"""

import hashlib
import json
from decimal import Decimal
from typing import Any

# The smallest magnitude Python writes with an exponent (``repr(1e16) == "1e+16"``),
# which PostgreSQL writes out in digits.
EXPONENT_FROM = 1e16


def canonical_float(number: float) -> float | int:
    """``number`` as PostgreSQL's ``jsonb`` gives it back (see above). NaN and the
    infinities are returned as they are, for the caller to refuse."""
    if number == 0:
        return 0.0
    if EXPONENT_FROM <= abs(number) < float("inf"):
        return int(Decimal(repr(number)))
    return number


def canonical_json(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_hash(value: Any) -> str:
    return sha256_hex(canonical_json(value))
