import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from mushroom.data.label_files import official_hard_from_soft
from mushroom.data.records import SoftSpan
from mushroom.data.spans import (
    hard_to_mask,
    mask_to_hard,
    merge_hard,
    soft_to_vector,
    vector_to_soft,
)

masks = st.lists(st.booleans(), max_size=80).map(lambda v: np.array(v, dtype=bool))


@given(masks)
def test_mask_roundtrip_gives_maximal_sorted_spans(mask):
    spans = mask_to_hard(mask)
    assert np.array_equal(hard_to_mask(spans, mask.size), mask)
    assert all(s < e for s, e in spans)
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:]))  # separated, not touching


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)), max_size=10))
def test_merge_hard_covers_the_same_characters(pairs):
    merged = merge_hard(pairs)
    assert np.array_equal(hard_to_mask(merged, 60), hard_to_mask(pairs, 60))
    assert merged == mask_to_hard(hard_to_mask(pairs, 60))


@given(st.lists(st.sampled_from([0.0, 0.2, 0.5, 0.50000001, 0.7, 1.0]), max_size=60))
def test_vector_soft_roundtrip(values):
    vec = np.array(values, dtype=float)
    soft = vector_to_soft(vec)
    assert np.allclose(soft_to_vector(soft, vec.size), np.round(vec, 6))
    assert all(s.prob > 0 for s in soft)


def test_the_official_derivation_of_hard_labels_merges_touching_spans_over_half():
    soft = [
        SoftSpan(start=0, end=3, prob=0.6),
        SoftSpan(start=3, end=5, prob=0.9),
        SoftSpan(start=7, end=9, prob=0.5),
    ]
    official = official_hard_from_soft([(s.start, s.end, s.prob) for s in soft])
    assert official == [(0, 5)]  # 0.5 is not over half


def test_span_problems_name_every_span_no_scorer_can_take():
    """An empty span [5, 5) passed unsaid when the check was `start <= end` (a mutation audit)."""
    from mushroom.data.spans import span_problems

    bad = [[5, 5], [3, 2], [-1, 2], [0, 11]]
    said = span_problems(10, [], bad)
    assert [name for name, _ in said] == [f"hard_labels.{i}" for i in range(4)], said
    assert "must satisfy 0 <= start < end <= 10 (the answer's length)" in said[0][1]
    assert span_problems(10, [], [[0, 10], [4, 5]]) == []
    assert span_problems(None, [], [[0, 10**6]]) == []  # no answer: its end cannot be checked


def test_probabilities_outside_zero_one_are_clipped_and_a_negative_start_is_clipped_not_wrapped():
    """A detector's 1.5 was written into a submission as a probability (a mutation audit)."""
    soft = vector_to_soft(np.array([1.5, 1.5, -0.2, 0.5]))
    assert [(s.start, s.end, s.prob) for s in soft] == [(0, 2, 1.0), (3, 4, 0.5)]
    assert soft_to_vector([{"start": -3, "end": 2, "prob": 1.0}], 5).tolist() == [1, 1, 0, 0, 0]
