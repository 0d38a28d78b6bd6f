import subprocess
import sys
import textwrap

import pytest
from conftest import install_fake_distribution
from pydantic import BaseModel, Field, ValidationError

from mushroom.backends import (
    Backend,
    BackendConfig,
    BackendSettings,
    OpenAIConfig,
    ReplayConfig,
    TransformersConfig,
    backend_names,
    build_backend,
    parse_backend_config,
    register_backend,
)
from mushroom.backends.base import Generation
from mushroom.backends.registry import _clear_entry_point_cache
from mushroom.detectors import build
from mushroom.errors import DataError, MushroomError


class Holder(BaseModel):
    backend: BackendConfig = Field(default_factory=lambda: BackendConfig(kind="replay"))
    models: list[BackendConfig] = Field(default_factory=list)


def test_each_kind_validates_to_its_own_model_and_dumps_all_its_fields():
    h = Holder(
        backend={"kind": "openai", "model": "m", "base_url": "http://x/v1", "concurrency": 2},
        models=[{"kind": "transformers", "model": "t", "batch_size": 4}],
    )
    assert isinstance(h.backend, OpenAIConfig) and h.backend.concurrency == 2
    assert isinstance(h.models[0], TransformersConfig) and h.models[0].batch_size == 4
    dumped = h.model_dump()
    assert dumped["backend"]["base_url"] == "http://x/v1" and dumped["models"][0]["batch_size"] == 4
    assert Holder.model_validate(dumped) == h
    assert isinstance(Holder().backend, ReplayConfig)


def test_a_setting_of_another_kind_is_an_error_naming_the_valid_keys():
    with pytest.raises(ValidationError) as err:
        Holder(backend={"kind": "openai", "batch_size": 4})
    text = str(err.value)
    assert (
        "'openai' backend has no setting 'batch_size'" in text
        and "concurrency" in text
        and "base_url" in text
    )
    with pytest.raises(DataError, match="has no setting .base_url."):
        build("llm", {"backend": {"kind": "transformers", "model": "x", "base_url": "http://x"}})
    with pytest.raises(MushroomError, match="has no setting 'responses'"):
        build_backend({"kind": "vllm", "model": "x", "responses": "f"})


def test_unknown_kind_lists_the_known_ones():
    with pytest.raises(
        ValidationError, match=r"unknown backend 'nope'; did you mean 'openai'\? valid: openai, replay"
    ):
        Holder(backend={"kind": "nope"})
    with pytest.raises(MushroomError, match="unknown backend 'nope'"):
        build_backend({"kind": "nope"})


def test_calling_backend_config_builds_the_model_of_its_kind():
    cfg = BackendConfig(kind="transformers", model="tiny", device="cpu", batch_size=2)
    assert type(cfg) is TransformersConfig and cfg.batch_size == 2
    assert type(BackendConfig(kind="unregistered", model="a")) is BackendSettings  # test doubles
    assert type(BackendSettings.model_validate({"kind": "openai", "concurrency": 2})) is OpenAIConfig
    with pytest.raises(ValidationError, match="no setting 'batch_size'"):
        BackendConfig(kind="openai", batch_size=3)
    assert parse_backend_config(BackendSettings.model_construct(kind="replay", model="")).kind == "replay"


def test_the_old_boolean_structured_output_still_reads():
    assert parse_backend_config({"kind": "openai", "structured_output": False}).structured_output == "none"
    assert parse_backend_config({"kind": "openai", "structured_output": True}).structured_output == "auto"
    with pytest.raises(ValidationError):
        parse_backend_config({"kind": "openai", "structured_output": "xml"})
    with pytest.raises(ValidationError, match="concurrency must be"):
        parse_backend_config({"kind": "openai", "concurrency": 0})


class EchoConfig(BackendSettings):
    kind: str = "echo-test"
    prefix: str = ">"


@pytest.fixture
def echo_backend():
    from mushroom.backends import registry

    @register_backend("echo-test", config=EchoConfig)
    class EchoBackend(Backend):
        def generate(self, requests, on_result=None):
            return [Generation(texts=[self.config.prefix + r.messages[-1].content]) for r in requests]

    yield EchoBackend
    registry._REGISTERED.pop("echo-test")


def test_register_backend_decorator_makes_a_kind_buildable(echo_backend):
    from mushroom.backends.base import GenerationRequest, Message

    assert "echo-test" in backend_names()
    backend = build_backend({"kind": "echo-test", "prefix": "$"})
    assert backend.kind == "echo-test" and isinstance(backend.config, EchoConfig)
    req = GenerationRequest(key="k", messages=[Message(role="user", content="hi")])
    assert backend.generate([req])[0].texts == ["$hi"]
    with pytest.raises(ValidationError, match="'echo-test' backend has no setting 'colour'"):
        Holder(backend={"kind": "echo-test", "colour": "red"})


def test_entry_point_backend_is_listed_without_import_and_built_on_demand(tmp_path, monkeypatch):
    pkg = tmp_path / "thirdparty_backend_pkg.py"
    pkg.write_text(
        textwrap.dedent("""
        from typing import Literal
        from mushroom.backends import Backend, BackendSettings
        from mushroom.backends.base import Generation

        class ThirdConfig(BackendSettings):
            kind: Literal["third"] = "third"
            greeting: str = "hello"

        class ThirdBackend(Backend):
            kind = "third"
            config_class = ThirdConfig

            def generate(self, requests, on_result=None):
                return [Generation(texts=[self.config.greeting]) for _ in requests]
    """)
    )
    install_fake_distribution(
        tmp_path,
        monkeypatch,
        "thirdparty-backend",
        "1.0",
        "mushroom.backends",
        "third = thirdparty_backend_pkg:ThirdBackend",
    )
    _clear_entry_point_cache()
    try:
        assert "third" in backend_names() and "thirdparty_backend_pkg" not in sys.modules
        h = Holder(backend={"kind": "third", "greeting": "hi"})
        assert h.backend.greeting == "hi"
        assert build_backend(h.backend).generate([None])[0].texts == ["hi"]
    finally:
        sys.modules.pop("thirdparty_backend_pkg", None)
        _clear_entry_point_cache()


def test_listing_and_validating_import_no_backend_library():
    code = (
        "import sys; from mushroom.backends import backend_names, parse_backend_config;"
        "backend_names(); parse_backend_config({'kind': 'transformers', 'model': 'x'});"
        "parse_backend_config({'kind': 'openai'}); parse_backend_config({'kind': 'vllm', 'model': 'x'});"
        "print([m for m in ('torch', 'vllm', 'transformers', 'httpx', 'mushroom.backends.hf') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_llm_detector_options_take_a_backend_table():
    det = build(
        "llm", {"backend": {"kind": "openai", "model": "m", "base_url": "http://x/v1", "concurrency": 1}}
    )
    assert isinstance(det.options.backend, OpenAIConfig) and det.options.backend.concurrency == 1


def test_json_schema_shows_the_kinds_as_a_tagged_union():
    schema = Holder.model_json_schema()
    backend = schema["properties"]["backend"]
    assert backend["discriminator"]["propertyName"] == "kind"
    assert set(backend["discriminator"]["mapping"]) == {"replay", "openai", "transformers", "vllm"}
    assert "batch_size" not in schema["$defs"]["OpenAIConfig"]["properties"]
    assert "concurrency" in schema["$defs"]["OpenAIConfig"]["properties"]


def test_a_kind_alone_as_a_string_is_that_kind_with_its_defaults(tmp_path):
    # `backend = "replay"` in a run config, as `-o backend=replay` on the command line
    from mushroom.runs.config import load_run_config

    path = tmp_path / "run.toml"
    path.write_text(
        textwrap.dedent(
            """
            name = "x"
            [detector]
            name = "llm"
            [detector.options]
            backend = "replay"
            """
        ),
        encoding="utf-8",
    )
    config = load_run_config(path)
    assert build(config.detector.name, config.detector.options).options.backend.kind == "replay"
    assert isinstance(build("llm", {"backend": "openai"}).options.backend, OpenAIConfig)
    with pytest.raises(DataError, match="unknown backend 'opnai'; did you mean 'openai'"):
        build("llm", {"backend": "opnai"})


@pytest.mark.parametrize("name", ["..", ".", "a/b", ".hidden"])
def test_a_variant_name_that_is_not_a_folder_name_is_refused(tmp_path, name):
    """ ".." was accepted: that variant wrote its val/ and test/ beside the run folder."""
    from mushroom.runs.config import load_run_config

    path = tmp_path / "run.toml"
    path.write_text(
        f'name = "x"\n[detector]\nname = "lexical"\n[[variants]]\nname = "{name}"\n', encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"variants\.0\.name.*cannot name a file"):
        load_run_config(path)


def test_a_run_configs_unknown_language_or_split_names_the_file_and_field(tmp_path):
    """They stopped the run with a message that named neither, as a main-job config names them."""
    from mushroom.runs.config import load_run_config

    path = tmp_path / "run.toml"
    path.write_text('name = "x"\nlangs = ["EN", "xx"]\nsplits = ["vall"]\n[detector]\nname = "lexical"\n')
    with pytest.raises(DataError) as err:
        load_run_config(path)
    said = str(err.value)
    assert f"{path}:2: field 'langs.1': unknown language 'xx'" in said
    assert f"{path}:3: field 'splits.0': unknown split 'vall'; did you mean 'val'?" in said
    # a config has no --split: the data folder's name is told the split to write
    path.write_text('name = "x"\nlangs = ["en"]\nsplits = ["test-unlabeled"]\n[detector]\nname = "lexical"\n')
    with pytest.raises(DataError, match="test-unlabeled/ is the folder of the 'test' split; give 'test'"):
        load_run_config(path)
    path.write_text('name = "x"\nlangs = ["EN"]\n[detector]\nname = "lexical"\n')
    assert load_run_config(path).langs == ["en"]


def test_a_value_no_branch_of_a_union_takes_is_one_problem_at_the_field_the_user_wrote():
    """`-o backend.concurrency=abc` named `backend.concurrency.int` and `...literal['auto']`."""
    options = {"backend": {"kind": "openai", "base_url": "http://x/v1", "model": "m", "concurrency": "abc"}}
    with pytest.raises(DataError) as err:
        build("llm", options)
    (problem,) = err.value.problems
    assert problem.field == "backend.concurrency"
    assert "a valid integer" in problem.message and "or input should be 'auto'" in problem.message


def test_union_branches_are_merged_only_where_a_union_has_them():
    from typing import Annotated, Literal

    from pydantic import BaseModel, Field, ValidationError

    from mushroom.util.options import field_errors

    class Settings(BaseModel):
        workers: Annotated[int, Field(ge=1)] | Literal["auto"]
        weights: dict[str, float] = {}

    with pytest.raises(ValidationError) as err:
        Settings(workers=0, weights={"int": "x"})
    found = {".".join(map(str, e["loc"])): e["msg"] for e in field_errors(err.value.errors())}
    # a constrained branch merges too; a dict key that looks like a branch's tag stays a key
    assert set(found) == {"workers", "weights.int"}
    assert (
        "greater than or equal to 1" in found["workers"] and "or input should be 'auto'" in found["workers"]
    )


def test_an_api_key_variable_that_is_not_set_stops_the_command_before_a_folder(tmp_path, monkeypatch, capsys):
    """`-o backend.api_key_env=MY_KEY` with MY_KEY unset sent every request without a key."""
    from cli_helpers import cli

    monkeypatch.delenv("MUSHROOM_TEST_NO_KEY", raising=False)
    out = tmp_path / "run"
    code, _, err = cli(
        capsys,
        "detect", "--detector", "llm", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
        "--model", "m", "-o", "backend.api_key_env=MUSHROOM_TEST_NO_KEY", "--out", out,
    )  # fmt: skip
    assert code == 2 and "api_key_env MUSHROOM_TEST_NO_KEY: that environment variable is not set" in err, err
    assert not out.exists()
    # a run's saved options name the default variable, set or not: they build again
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    det = build("llm", {"backend": {"kind": "openai", "base_url": "http://h/v1", "model": "m"}})
    assert build("llm", det.describe()["options"]).backend is not None  # built, not refused


def test_a_misspelt_kind_does_not_hide_the_other_settings_mistakes():
    """pydantic stops at an unknown kind: `kind=opnai` hid a bad number beside it, found on
    the next try only."""
    with pytest.raises(ValueError) as caught:
        parse_backend_config({"kind": "opnai", "concurrency": "abc", "timeout_s": -3})
    told = str(caught.value)
    assert "unknown backend 'opnai'; did you mean 'openai'?" in told
    assert "read as 'openai', also: field 'concurrency':" in told and "field 'timeout_s':" in told
    with pytest.raises(ValueError) as caught:  # no mistake beside it: nothing more to say
        parse_backend_config({"kind": "opnai", "concurrency": 2})
    assert "also" not in str(caught.value)


def test_an_unknown_setting_does_not_hide_a_bad_value_beside_it():
    """pydantic stops at the unknown key: `concurrency=abc` beside `temprature=1` was found on
    the next try only (a new-user audit)."""
    with pytest.raises(ValidationError) as caught:
        parse_backend_config({"kind": "openai", "concurrency": "abc", "temprature": 1})
    told = str(caught.value)
    assert "the 'openai' backend has no setting 'temprature'" in told and "also: field 'concurrency':" in told
    with pytest.raises(ValidationError) as caught:  # nothing else wrong: nothing more said
        parse_backend_config({"kind": "openai", "concurrency": 2, "temprature": 1})
    assert "also" not in str(caught.value)
