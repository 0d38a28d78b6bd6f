"""Detectors and backends by name: built-in, registered in code, or from an installed package."""

import sys

import numpy as np
import pytest
from conftest import install_fake_distribution

import mushroom
from mushroom.detectors import VectorDetector, available, detector_class, register_detector
from mushroom.detectors.base import DetectorOptions
from mushroom.errors import MushroomError


class ShoutOptions(DetectorOptions):
    threshold: float = 0.5


def test_a_detector_registered_in_code_runs_through_the_library_api(monkeypatch):
    import mushroom.detectors as registry

    # registered for this test only: other tests list the registered detectors
    monkeypatch.setattr(registry.DETECTORS, "registered", dict(registry.DETECTORS.registered))

    @register_detector("shout-test")
    class Shout(VectorDetector):
        """Marks every upper-case character (a toy for the registry test)."""

        Options = ShoutOptions

        def item_vector(self, item, contexts):
            return np.array([1.0 if c.isupper() else 0.0 for c in item.model_output_text])

    assert "shout-test" in available() and detector_class("shout-test") is Shout
    pred = mushroom.detect("ab CD ef", method="shout-test")
    assert pred.hard_labels == [(3, 5)] and pred.probs[3] == 1.0 and pred.spans == [(3, 5, "CD")]
    with pytest.raises(TypeError):
        register_detector("bad")(object)


def test_an_entry_point_detector_is_found_and_loaded_only_when_asked(tmp_path, monkeypatch):
    pkg = tmp_path / "mushroom_plugin_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import numpy as np\n"
        "from mushroom.detectors.base import VectorDetector, DetectorOptions\n"
        "class O(DetectorOptions):\n    threshold: float = 0.5\n"
        "class Digits(VectorDetector):\n"
        "    '''Marks digits.'''\n"
        "    name = 'digits-demo'\n    Options = O\n"
        "    def item_vector(self, item, contexts):\n"
        "        return np.array([1.0 if c.isdigit() else 0.0 for c in item.model_output_text])\n"
    )
    install_fake_distribution(
        tmp_path,
        monkeypatch,
        "mushroom-plugin-demo",
        "0.1",
        "mushroom.detectors",
        "digits-demo = mushroom_plugin_demo:Digits",
    )
    assert "digits-demo" in available() and "mushroom_plugin_demo" not in sys.modules
    assert mushroom.detect("born in 1867", method="digits-demo").hard_labels == [(8, 12)]


def test_an_unknown_name_suggests_the_close_one():
    with pytest.raises(MushroomError, match="did you mean 'lexical'"):
        detector_class("lexcal")
