"""What a memory says about itself beyond its content (contract sections 13 and 17): a summary,
and a taxonomy the caller chooses (category, sensitivity, recall policy, tags).

The limits a type can say are here; what it cannot (a summary's size in bytes, blank text) is
checked by handlers/taxonomy.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from schema.base import ID_PATTERN

Category = Literal["fact", "preference", "event", "instruction", "note"]
Sensitivity = Literal["public", "internal", "restricted"]
# `always`: as if pinned (never evicted nor decayed, returned with the pinned memories);
# `never`: kept, listed and gettable, but never returned by recall or memory::context.
RecallPolicy = Literal["auto", "always", "never"]
CATEGORIES: tuple[Category, ...] = ("fact", "preference", "event", "instruction", "note")
# Least to most sensitive: `maxSensitivity` passes a memory whose level is at most the one given.
SENSITIVITIES: tuple[Sensitivity, ...] = ("public", "internal", "restricted")
POLICIES: tuple[RecallPolicy, ...] = ("auto", "always", "never")

# A tag is a label other systems compare and show: no control or invisible formatting
# characters and no whitespace at either end, as ids (schema/base.py), and 1-64 characters.
TAG_PATTERN = ID_PATTERN.replace("]*(?<!", "]{1,64}(?<!")
TAG_RULE = (
    "a tag: 1-64 characters, no control or invisible formatting characters, "
    "no whitespace at either end"
)
# How msgspec words a refused tag, and the words dispatch puts in their place.
TAG_REFUSAL = f"`str` matching regex {TAG_PATTERN!r}"
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=TAG_PATTERN)]
MAX_TAGS = 32
# What a memory carries: up to 32 (repeats collapse; `[]` on update removes them all).
Tags = Annotated[list[Tag], msgspec.Meta(max_length=MAX_TAGS)]
# A filter's tags: a memory passes when it has any of them.
AnyTags = Annotated[list[Tag], msgspec.Meta(min_length=1, max_length=MAX_TAGS)]
AnyCategories = Annotated[list[Category], msgspec.Meta(min_length=1, max_length=5)]
MAX_SUMMARY_BYTES = 1024
