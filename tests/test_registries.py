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


def _kinds():
    from mushroom.backends.registry import BACKENDS
    from mushroom.data.contexts import LAYOUTS
    from mushroom.detectors import DETECTORS
    from mushroom.models.zoo import ENCODERS
    from mushroom.retrieval.generate import GRADINGS

    return [DETECTORS, BACKENDS, ENCODERS, GRADINGS, LAYOUTS]


def test_every_part_names_an_extra_that_installs_what_it_needs():
    """A part's extra must really bring its packages, or the message sends users to the wrong install."""
    import importlib.util
    import re
    import tomllib

    from conftest import ROOT

    from mushroom.util.registry import OPTIONAL_PACKAGES, Registry

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

    def dists(extra):
        return {re.split(r"[<>=\[ ]", req)[0].lower() for req in extras[extra]}

    for package, (dist, extra) in OPTIONAL_PACKAGES.items():
        assert dist in dists(extra), f"{package}: mushroom[{extra}] does not install {dist}"
    for registry in _kinds():
        assert isinstance(registry, Registry)
        for part in registry.builtins.values():
            module = part.target.partition(":")[0]
            assert importlib.util.find_spec(module) is not None or module in OPTIONAL_PACKAGES, part
            for package in part.requires:
                dist = OPTIONAL_PACKAGES[package][0]
                assert part.extra and dist in dists(part.extra), f"{registry.kind} {part.name}: {package}"


def test_a_context_layout_of_ones_own_is_found_by_name(tmp_path, monkeypatch):
    from mushroom.data.contexts import LAYOUTS, available_sources, load_contexts

    monkeypatch.setattr(LAYOUTS, "registered", dict(LAYOUTS.registered))

    @LAYOUTS.register("dump")
    class Dump:
        """A retrieval dump: `dump/<lang>/<source>.<split>.jsonl`."""

        @staticmethod
        def find(root, split, lang, source):
            path = root / "dump" / lang / f"{source}.{split}.jsonl"
            return path if path.is_file() else None

        @staticmethod
        def sources(root, split, lang):
            return {
                p.name.split(".")[0] for p in (root / "dump").glob(f"{lang or '*'}/*.{split or '*'}.jsonl")
            }

    (tmp_path / "dump" / "en").mkdir(parents=True)
    (tmp_path / "dump" / "en" / "wiki.val.jsonl").write_text(
        '{"id": "a", "context": "Paris is in France."}\n'
    )
    assert LAYOUTS.ordered() == ["own", "ucsc", "dump"]
    assert available_sources("val", "en", tmp_path) == ["wiki"]
    ctx = load_contexts("val", "en", ("wiki",), context_dir=tmp_path)
    assert [c.text for c in ctx.by_id["a"]] == ["Paris is in France."]
    with pytest.raises(
        MushroomError, match=r"no context file for source 'wik' \(val, en\) in .*; did you mean 'wiki'"
    ):
        load_contexts("val", "en", ("wik",), context_dir=tmp_path)
    # a folder with nothing for the split says where it looked and what to do instead
    with pytest.raises(MushroomError, match=r"\(train, en\) in .*; it has none for train en: give your own"):
        load_contexts("train", "en", ("wiki",), context_dir=tmp_path)


def test_a_detect_call_with_a_built_in_method_scans_no_installed_package(monkeypatch):
    """Each `mushroom.detect` read every package's entry points: 4.9 ms a call instead of 1 ms."""
    import mushroom.util.registry as registry

    mushroom.detect("Paris is in Italy.", ["Paris is in France."], method="lexical")
    scans = []
    real = registry.metadata.entry_points
    monkeypatch.setattr(registry.metadata, "entry_points", lambda **kw: scans.append(kw) or real(**kw))
    pred = mushroom.detect("Berlin is in Spain.", ["Berlin is in Germany."], method="lexical")
    assert pred.spans and scans == []
    with pytest.raises(MushroomError, match="unknown detector 'lexicall'"):
        mushroom.detect("Berlin is in Spain.", ["Berlin is in Germany."], method="lexicall")
    assert scans  # a name not built in is looked for among the installed packages' too
