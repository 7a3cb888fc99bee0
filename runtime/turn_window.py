"""The turns two away from a matching turn: a speaker's next word on the same topic.

In a dialogue the speakers alternate, so the turn two places after a turn is
the same speaker's next one, and the turn two places before it their previous
one: "I adopted a pup last week." / "Aww, what's his name?" / "I named him
Ned." The third turn shares no word with "When did James adopt his dog?" and
its direct neighbour (the question in between) matches nothing either, so the
one-turn neighbour share (`quote_search.NEIGHBOUR_WEIGHT`) never reaches it.
`further_neighbours` gives a passage FAR_WEIGHT of the better of the two
passages two places away within its episode; `quote_search` takes the larger
of that and the near neighbours' share, so it only lifts turns that had less.

Measured on LoCoMo dev (lexical, the best gold turn's rank among the
recalled turns): the gold turn is within two turns of the top hit for 47 of
the 256 questions whose best gold turn ranked below 5, while any given turn
is within two of it for about 1 % of a conversation. Weights 0.2 / 0.35 / 0.5
/ 0.6 / 0.8 lifted the top 5 from 0.752 to 0.752 / 0.754 / 0.759 / 0.760 /
0.754 and the top 12 from 0.826 to 0.826 / 0.828 / 0.831 / 0.833 / 0.832; the
same weight as the near neighbours (0.6) is kept. Adding distances 3 and 4
changed nothing.
"""

from __future__ import annotations

import numpy as np

FAR_WEIGHT = 0.6  # the share of a passage two places away (the near neighbours' share, measured)


def further_neighbours(own: np.ndarray, first: np.ndarray, last: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """FAR_WEIGHT x the better of the matches two places before and after each passage `idx`, within
    its episode (`first` / `last`: whether a passage opens / closes its episode's run of passages)."""
    n = len(own)
    # Two places back stays in the episode when neither the passage nor the one before opens it.
    back = (idx >= 2) & ~first[idx] & ~first[np.maximum(idx - 1, 0)]
    ahead = (idx <= n - 3) & ~last[idx] & ~last[np.minimum(idx + 1, n - 1)]
    far = np.maximum(
        np.where(back, own[np.maximum(idx - 2, 0)], 0.0),
        np.where(ahead, own[np.minimum(idx + 2, n - 1)], 0.0),
    )
    return FAR_WEIGHT * far
