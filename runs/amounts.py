"""Amounts as the ledger writes them, and as people read them.

An amount is stored, hashed and sent to agents as a plain decimal ("1250.00"); a person
reads it with thousands separators ("1,250.00"), on a page (the ``amount`` filter) and in
the sentences an action writes (a preview's "why", what changed since the reviewer
looked, a queue row's gist). One function for both, importing nothing of Oversight, so
that templates and actions alike can use it."""

import re
from decimal import Decimal

# A sign, digits, maybe a fraction; no exponent, no spaces.
PLAIN_AMOUNT = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def readable_amount(value) -> str:
    """An amount with thousands separators, "-17,000.00" for "-17000.00", digits as
    written (no rounding); anything else (not an amount, or not plain) as it is."""
    text = str(value)
    return f"{Decimal(text):,f}" if PLAIN_AMOUNT.fullmatch(text) else text
