"""LoCoMo retrieval figures: recall@5 and @10 overall, per category, per conversation and per
half of the conversations.

The halves are there for cross-validation: a constant of the ranking (handlers/recall/expand.py)
is chosen on one half and reported on the other, so that a figure is not one that fits these very
conversations (README "Recall quality and speed").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

# The two halves of the dev split the README's cross-validated figures use.
HALVES = (("conv-26", "conv-30"), ("conv-41", "conv-42"))


class Answer(NamedTuple):
    """One question's share of its evidence among the first 5 and 10 memories recalled."""

    conversation: str
    category: int
    at5: float
    at10: float


def mean(values: Sequence[float]) -> float:
    return sum(values) / max(1, len(values))


def _recalls(answers: Sequence[Answer]) -> dict[str, float]:
    return {
        "recall@5": mean([a.at5 for a in answers]),
        "recall@10": mean([a.at10 for a in answers]),
        "questions": len(answers),
    }


def summary(answers: Sequence[Answer], categories: Iterable[int]) -> dict[str, Any]:
    result: dict[str, Any] = _recalls(answers)
    for k in (5, 10):
        result[f"recall@{k}_by_category"] = {
            str(c): mean([a.at5 if k == 5 else a.at10 for a in answers if a.category == c])
            for c in categories
            if any(a.category == c for a in answers)
        }
    conversations = list(dict.fromkeys(a.conversation for a in answers))
    result["by_conversation"] = {
        name: _recalls([a for a in answers if a.conversation == name]) for name in conversations
    }
    result["by_half"] = {
        "+".join(half): _recalls([a for a in answers if a.conversation in half])
        for half in HALVES
        if all(name in conversations for name in half)
    }
    return result


def locomo_rows(quality: dict[str, Any], embedder: str) -> list[tuple[str, Any]]:
    label = "LoCoMo stores per second" + (", vectors included" if embedder != "none" else "")
    rows: list[tuple[str, Any]] = [
        (label, quality["stores_per_second"]),
        ("LoCoMo questions (categories 1-4)", quality["questions"]),
    ]
    for k in (5, 10):
        by_category = ", ".join(
            f"c{c} {v:.3f}" for c, v in quality[f"recall@{k}_by_category"].items()
        )
        rows.append((f"LoCoMo recall@{k}", f"{quality[f'recall@{k}']:.3f} ({by_category})"))
    for group in ("by_conversation", "by_half"):
        for name, figures in quality.get(group, {}).items():
            rows.append(
                (
                    f"LoCoMo recall@5 / @10, {name}",
                    f"{figures['recall@5']:.3f} / {figures['recall@10']:.3f} "
                    f"({figures['questions']} questions)",
                )
            )
    return rows
