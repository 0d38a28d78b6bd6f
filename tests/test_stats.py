import numpy as np

from mushroom.evaluation.stats import bootstrap_ci, paired_test


def test_bootstrap_interval_contains_the_mean_and_is_reproducible():
    values = np.random.default_rng(0).random(100)
    low, high = bootstrap_ci(values)
    assert low < values.mean() < high
    assert (low, high) == bootstrap_ci(values)
    assert bootstrap_ci(np.ones(10)) == (1.0, 1.0)


def test_paired_test_separates_real_differences_from_noise():
    rng = np.random.default_rng(1)
    a = rng.random(150)
    better = paired_test(a + 0.1, a)
    assert better.mean_diff > 0 and better.p_value < 0.001 and better.ci_low > 0
    same = paired_test(a, a[rng.permutation(150)])
    assert same.p_value > 0.05
