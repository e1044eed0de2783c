from calc import mean


def test_mean():
    assert mean([1, 2, 3]) == 2


def test_mean_of_one():
    assert mean([5]) == 5
