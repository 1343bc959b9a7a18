"""Synthetic memories for the bench, written in real English words.

A learned embedder's cost grows with its token count, and invented words split into many
word pieces, so a made-up vocabulary would make the builtin model look several times slower
than on real text. Rare words are pairs of common ones ("riverbasket"), as English compounds
are: a long Zipf tail for the keyword postings, at about two word pieces each.
"""

from __future__ import annotations

import itertools
import random

_COMMON_WORDS = """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government
number night point home water room mother area money story fact month lot right study book
eye job word business issue side kind head house service friend father power hour game line
end member law car city community name president team minute idea kid body information back
parent face others level office door health person art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy
music market sense nation plan college interest death experience effect use class control
care field development role effort rate heart drug show leader light voice wife police mind
price report decision son view relationship town road arm difference value building action
model season society tax director position player record paper space ground form event
official matter center couple site project activity star table need court oil situation cost
industry figure street image phone data picture practice piece land product doctor wall
patient worker news test movie north love support technology step baby computer type
attention film tree source organization hair window evidence population river garden
stone basket letter dog cat park beach mountain island bread coffee painting guitar camera
"""
COMMON = _COMMON_WORDS.split()


class Corpus:
    """Seeded texts: Zipf-distributed words, so some are common and most are rare."""

    def __init__(self, seed: int = 7, words: int = 20_000) -> None:
        self.random = random.Random(seed)
        pairs = [a + b for a in COMMON for b in COMMON if a != b]
        self.random.shuffle(pairs)
        self.words = (COMMON + pairs)[:words]
        self.weights = [1.0 / (rank + 1) for rank in range(len(self.words))]
        # Summed once: `choices` with plain weights sums all 20 000 on every call (the same
        # draws either way).
        self.cumulative = list(itertools.accumulate(self.weights))

    def text(self, low: int, high: int) -> str:
        count = self.random.randint(low, high)
        return " ".join(self.random.choices(self.words, cum_weights=self.cumulative, k=count))
