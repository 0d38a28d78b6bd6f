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
