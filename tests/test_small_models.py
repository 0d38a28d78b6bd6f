"""nli and pyes with tiny random models built here (nothing downloaded, ~0.1 s each).

Recipe: a word-level `tokenizers` vocabulary wrapped in PreTrainedTokenizerFast; for nli a
BertForSequenceClassification (2 layers, hidden 32) whose id2label is deliberately not in
MNLI order, for pyes a LlamaForCausalLM (2 layers, hidden 32) over a 16-word vocabulary so
that "Yes" and "No" are always among the top-20 first tokens.
"""

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[transformers]'")
transformers = pytest.importorskip("transformers", reason="transformers not installed")

from tiny_models import length_p_yes, tiny_bert_classifier, tiny_llama, word_tokenizer  # noqa: E402

from mushroom.backends.base import Backend, BackendConfig, Generation, Loglikelihood  # noqa: E402
from mushroom.backends.hf import TransformersBackend  # noqa: E402
from mushroom.data.records import Context, Item  # noqa: E402
from mushroom.detectors import build  # noqa: E402
from mushroom.detectors.nli import NLIDetector, NLIOptions, label_indices  # noqa: E402
from mushroom.detectors.pyes import PYesDetector, PYesOptions, harmonic_mean, p_yes  # noqa: E402
from mushroom.errors import MushroomError  # noqa: E402

WORDS = [
    "[PAD]",
    "[UNK]",
    "</s>",
    "Yes",
    "No",
    "the",
    "cat",
    "sat",
    "is",
    "red",
    ".",
    "Paris",
    "user",
    "assistant",
    ":",
    "?",
]


def tiny_tokenizer(max_length=64):
    return word_tokenizer(WORDS, pre_tokenizer="whitespace", model_max_length=max_length)


def item(answer, item_id="x"):
    return Item(id=item_id, lang="en", model_input="is the cat red ?", model_output_text=answer)


def test_label_mapping_is_read_from_the_config():
    assert label_indices({0: "CONTRADICTION", 1: "neutral", 2: "ENTAILMENT"}) == {
        "entailment": 2,
        "neutral": 1,
        "contradiction": 0,
    }
    with pytest.raises(MushroomError, match="no label for"):
        label_indices({0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})


def test_nli_scores_pieces_chunks_long_contexts_and_keeps_the_best_chunk():
    model = tiny_bert_classifier(len(WORDS), {0: "contradiction", 1: "entailment", 2: "neutral"})
    det = NLIDetector(
        NLIOptions(model="tiny", device="cpu", max_length=24, neutral_weight=0.5), model, tiny_tokenizer()
    )
    context = " ".join(["the cat sat ."] * 20)  # 80 tokens: more than one 24-token window
    chunks = det.chunks(context, "the cat is red .")
    assert len(chunks) > 1 and all(len(det._tokenizer(c)["input_ids"]) <= 24 for c in chunks)
    answer = "the cat is red. Paris is red."
    pieces, scores = det.piece_scores(item(answer), [Context(source="s", text=context)])
    assert [p.text for p in pieces] == ["the cat is red.", "Paris is red."]
    # recompute the first piece by hand: best entailment chunk, strongest contradiction
    probs = det._probs([(c, pieces[0].text) for c in chunks])
    best = probs[np.argmax(probs[:, 1])]
    expected = min(probs[:, 0].max() + 0.5 * best[2], 1.0)
    assert scores[0] == pytest.approx(expected, abs=1e-6)
    preds = det.detect([item(answer)], {"x": [Context(source="s", text=context)]})
    vec = det.channels["x"]["piece"]
    assert vec[0] == pytest.approx(scores[0]) and vec[answer.index("Paris")] == pytest.approx(scores[1])
    assert vec[answer.index(" Paris")] == 0.0  # the gap between pieces
    assert preds[0].id == "x"
    # no context: nothing to contradict, nothing predicted
    assert det.detect([item(answer)], {})[0].soft_labels == []


class FixedBackend(Backend):
    """Answers every request with the same first-token distribution."""

    kind = "fixed"

    def __init__(self, yes, no, other=None):
        super().__init__(BackendConfig(kind="fixed", model=f"fixed-{yes}"))
        self.dist = {" Yes": math.log(yes), "no": math.log(no)} if yes else {"maybe": math.log(0.9)}
        if other:
            self.dist.update(other)
        self.requests = []

    def generate(self, requests, on_result=None):
        self.requests.extend(requests)
        return [Generation(texts=["Yes"], logprobs=[[self.dist]]) for _ in requests]

    def loglikelihood(self, requests, on_result=None):
        self.requests.extend(r for r in requests if r.continuation == "Yes")
        word = {"Yes": " Yes", "No": "no"}
        return [Loglikelihood(logprob=self.dist.get(word[r.continuation])) for r in requests]


def test_p_yes_reads_first_token_and_sums_variants():
    gen = Generation(
        texts=["Yes"], logprobs=[[{" Yes": math.log(0.3), "yes": math.log(0.3), "No": math.log(0.2)}]]
    )
    assert p_yes(gen, ["yes"], ["no"]) == pytest.approx(0.75)
    assert p_yes(Generation(texts=["x"], logprobs=[[{"x": 0.0}]]), ["yes"], ["no"]) is None
    assert p_yes(Generation(error="boom"), ["yes"], ["no"]) is None
    assert harmonic_mean([0.5, 0.5]) == pytest.approx(0.5)
    assert harmonic_mean([1.0, 0.1]) == pytest.approx(2 / 11)


@pytest.mark.parametrize("scoring", ["loglikelihood", "top_logprobs"])
def test_pyes_normalises_each_model_and_averages(tmp_path, scoring):
    models = [BackendConfig(kind="fixed", model="a"), BackendConfig(kind="fixed", model="b")]
    opts = PYesOptions(models=models, cache=False, scoring=scoring)
    answer = "the cat is red. Paris is red."
    backends = [FixedBackend(0.9, 0.1), FixedBackend(0.3, 0.7)]
    det = PYesDetector(opts, backends)
    det.workdir = tmp_path
    calib_items = [item("the cat sat.", "c1")]
    # calibration: model a averages 0.8 (sd 0.1), model b 0.3 (sd 0.1)
    from mushroom.detectors.pyes import ModelStats, PYesCalibration

    det.calibration = PYesCalibration(
        models={
            "0:fixed:a": ModelStats(mean=0.8, std=0.1, n=5),
            "1:fixed:b": ModelStats(mean=0.3, std=0.1, n=5),
        }
    )
    pred = det.detect([item(answer)], {"x": [Context(source="s", text="the cat is red .")]})[0]
    z = np.mean([(0.9 - 0.8) / 0.1, (0.3 - 0.3) / 0.1])  # 0.5
    expected = 1 - 1 / (1 + math.exp(-z))
    assert pred.soft_labels[0].prob == pytest.approx(expected, abs=1e-6)
    assert pred.hard_labels == []  # 0.38 < 0.5
    assert (
        len(backends[0].requests) == 2
        and "Statement: Paris is red." in backends[0].requests[1].messages[-1].content
    )
    results = []
    det.run([item(answer)], {}, results.append)
    assert results[0].detail["pieces"][1]["p_yes"] == [pytest.approx(0.9), pytest.approx(0.3)]
    assert results[0].stats["pyes.pieces"] == 2 and results[0].stats["pyes.unusable"] == 0
    # asked with no context: counted apart, as the detectors that need one count it
    assert results[0].stats["context.none"] == 1
    results = []
    det.run([item(answer)], {"x": [Context(source="s", text="the cat is red .")]}, results.append)
    assert "context.none" not in results[0].stats
    # without a calibration file, statistics come from the items themselves and are recorded
    det2 = PYesDetector(opts, [FixedBackend(0.9, 0.1), FixedBackend(None, None)])
    with pytest.raises(MushroomError, match="no usable"):
        det2.detect([item(answer)], {})
    assert det2.unusable == 2
    det3 = PYesDetector(opts, backends)
    det3.workdir = tmp_path
    calib = det3.calibrate(calib_items, {})
    assert calib.models["0:fixed:a"].mean == pytest.approx(0.9) and calib.models["0:fixed:a"].std == 1e-3
    # one piece only: every model's std is at the floor, and the run says so
    assert len(det3.warnings) == 2 and "collapsed" in det3.warnings[0]
    det4 = PYesDetector(opts, backends)
    det4.workdir = tmp_path
    det4.detect([item(answer)], {})
    assert (tmp_path / "pyes_calibration.en.json").is_file()  # transductive statistics kept for a resume


class PieceBackend(FixedBackend):
    """P(yes) that varies with the prompt's length, or an error for every request (a dead server)."""

    def __init__(self, dead=False):
        super().__init__(0.5, 0.5)
        self.dead = dead

    def generate(self, requests, on_result=None):
        if self.dead:
            return [Generation(error="connection refused") for _ in requests]
        return length_p_yes(requests)


def test_pyes_statistics_are_per_language_and_a_dead_model_fails_its_items(tmp_path):
    opts = PYesOptions(models=[BackendConfig(kind="fixed", model="a")], cache=False, scoring="top_logprobs")
    en = [item(f"The cat sat {'on the mat ' * k}. It was red {k}.", f"e{k}") for k in range(4)]
    es = [
        item(f"El gato {'muy ' * k}grande. Era rojo {k}.", f"s{k}").model_copy(update={"lang": "es"})
        for k in range(4)
    ]
    both = PYesDetector(opts, [PieceBackend()])
    both.workdir = tmp_path / "both"
    together = both.detect(en, {}) + both.detect(es, {})
    alone = PYesDetector(opts, [PieceBackend()])
    alone.workdir = tmp_path / "alone"
    assert together[4:] == alone.detect(es, {})  # Spanish does not depend on the English items
    assert sorted(p.name for p in both.workdir.iterdir()) == [
        "pyes_calibration.en.json",
        "pyes_calibration.es.json",
    ]
    dead = PYesDetector(opts, [PieceBackend(dead=True)])
    dead.workdir = tmp_path / "dead"
    results = []
    dead.run(en, {}, results.append)
    assert [r.status for r in results] == ["failed"] * 4 and results[0].error == "connection refused"
    assert not (tmp_path / "dead").exists()  # nothing estimated, nothing kept: a re-run estimates again
    # one detector, two splits (main-job runs test, then val): each split's own statistics
    val = PYesDetector(opts, [PieceBackend()])
    val.workdir = tmp_path / "test-split"
    val.detect(en, {})
    val.workdir = tmp_path / "val-split"
    val.detect(en[:2], {})
    assert json.loads((tmp_path / "val-split" / "pyes_calibration.en.json").read_text())[
        "fitted_on"
    ].startswith("transductive: 2 en items")
    # items of two languages in one call: each language is normalised on its own
    mixed = PYesDetector(opts, [PieceBackend()])
    mixed.workdir = tmp_path / "mixed"
    assert mixed.detect(en + es, {})[4:] == alone.detect(es, {})
    # a folder of the version that kept one file for all languages resumes with that file
    old = tmp_path / "old"
    old.mkdir()
    (old / "pyes_calibration.json").write_text((tmp_path / "alone" / "pyes_calibration.es.json").read_text())
    resumed = PYesDetector(opts, [PieceBackend()])
    resumed.workdir = old
    assert resumed.detect(es[2:], {}) == alone.detect(es, {})[2:]
    # a language whose model fails fails its own items only; one of empty answers asks nothing
    blank = [item("", "b0").model_copy(update={"lang": "fr"})]

    class HalfDead(PieceBackend):
        warnings = ["served-model warning"]

        def generate(self, requests, on_result=None):
            return [
                Generation(error="es is down") if "gato" in r.messages[-1].content else g
                for r, g in zip(requests, super().generate(requests))
            ]

    half = PYesDetector(opts, [HalfDead()])
    half.workdir = tmp_path / "half"
    results = []
    half.run(en + es + blank, {}, results.append)
    status = {r.id: r.status for r in results}
    assert len(results) == 9 and [status[it.id] for it in es] == ["failed"] * 4
    assert all(status[it.id] == "ok" for it in en + blank) and "served-model warning" in half.warnings


def test_pyes_with_a_tiny_transformers_model_reads_real_logprobs():
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny", device="cpu"),
        tiny_llama(len(WORDS), 512),
        tiny_tokenizer(512),
    )
    opts = PYesOptions(
        models=[BackendConfig(kind="transformers", model="tiny")],
        cache=False,
        unit="clause",
        scoring="top_logprobs",
    )
    det = PYesDetector(opts, [backend])
    answer = "the cat is red. Paris is red."
    items = [item(answer, "a"), item("the cat sat.", "b")]
    calib = det.calibrate(items, {})
    assert calib.models["0:transformers:tiny"].n == 3
    preds = det.detect(items, {})
    probs = [s.prob for s in preds[0].soft_labels]
    assert all(0.0 < p < 1.0 for p in probs) and det.unusable == 0


def test_registry_builds_nli_and_pyes_without_loading_models():
    assert build("nli", {"model": "some/checkpoint"}).options.unit == "sentence"
    assert (
        build(
            "pyes", {"models": [{"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9"}]}
        ).options.top_logprobs
        == 20
    )


def test_loglikelihoods_are_cached_so_a_rerun_scores_nothing_again(tmp_path):
    from mushroom.backends.base import LoglikelihoodRequest, Message
    from mushroom.backends.cache import CachedBackend, ResponseCache

    inner = FixedBackend(0.9, 0.1)
    msgs = [Message(role="user", content="q")]
    reqs = [LoglikelihoodRequest(key=f"k{c}", messages=msgs, continuation=c) for c in ("Yes", "No")]
    first = CachedBackend(inner, ResponseCache(tmp_path / "c.jsonl")).loglikelihood(reqs)
    assert [round(math.exp(r.logprob), 6) for r in first] == [0.9, 0.1] and len(inner.requests) == 1
    again = CachedBackend(inner, ResponseCache(tmp_path / "c.jsonl"))  # a new run reads the file
    second = again.loglikelihood(reqs)
    assert [r.logprob for r in second] == [r.logprob for r in first] and all(r.cached for r in second)
    assert len(inner.requests) == 1 and again.hits == 2


def test_a_model_that_fails_to_load_stops_the_run_once_without_retrying(monkeypatch):
    # a mistyped hub name: each item tried to load again, each try costing the hub client's
    # retries; now the first failure stops the run, and a caller going on is not retried
    import transformers

    import mushroom.models.embedding as embedding

    tries = []

    def refuse(name, *args, **kwargs):
        tries.append(name)
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(embedding, "_quiet_load", refuse)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    encoder = embedding.Encoder("foo/bar", device="cpu", cache=False)
    nli = NLIDetector(NLIOptions(model="foo/bar", device="cpu"))
    for load in (lambda: encoder.model, lambda: encoder.tokenizer, nli._load, nli._load):
        with pytest.raises(
            MushroomError, match="'foo/bar' could not be loaded .OSError: We couldn't connect"
        ):
            load()
    assert tries == ["foo/bar", "foo/bar"]  # one try by each
    # a name that is no folder here was looked up on the hub: "run it again" alone sent a
    # mistyped name round the hub client's retries once more
    with pytest.raises(MushroomError, match="check the name .a local model is given by its folder's path"):
        _ = encoder.model


def test_the_one_call_api_builds_a_detector_afresh_after_it_failed(monkeypatch):
    # the API keeps built detectors; one whose model could not be loaded stayed broken for the
    # life of the process (a notebook), every later call failing without a new try
    import transformers

    import mushroom

    tries = []

    def refuse(name, *args, **kwargs):
        tries.append(name)
        raise OSError("no network")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", refuse)
    for _ in range(2):
        with pytest.raises(MushroomError, match="could not be loaded"):
            mushroom.detect(
                "Paris is in Italy.", "Paris is in France.", method="nli", model="x/y", device="cpu"
            )
    assert tries == ["x/y", "x/y"]


def test_nli_keeps_neutral_apart_in_channels_counters_and_records():
    model = tiny_bert_classifier(len(WORDS), {0: "contradiction", 1: "entailment", 2: "neutral"})
    det = NLIDetector(NLIOptions(model="tiny", device="cpu", neutral_weight=0.5), model, tiny_tokenizer())
    answer = "the cat is red. Paris is red."
    ctx = {"x": [Context(source="s", text="the cat sat .")]}
    results = []
    det.run([item(answer)], ctx, results.append)
    (res,) = results
    pieces, evidence = det.piece_evidence(item(answer), ctx["x"])
    verdicts = [("supported", "unverifiable", "contradicted")[int(np.argmax(row))] for row in evidence]
    assert res.stats["nli.pieces"] == 2 and sum(res.stats.get(f"nli.{v}", 0) for v in set(verdicts)) == 2
    for v in set(verdicts):
        assert res.stats[f"nli.{v}"] == verdicts.count(v)
    channels = det.channels["x"]
    for k, piece in enumerate(pieces):
        assert channels["neutral"][piece.start] == pytest.approx(evidence[k][1])
        assert channels["contradiction"][piece.start] == pytest.approx(evidence[k][2])
        # the piece score is still the two mixed, as before
        assert channels["piece"][piece.start] == pytest.approx(
            min(evidence[k][2] + 0.5 * evidence[k][1], 1.0)
        )
    listed = [(u["start"], u["end"]) for u in res.detail["unverifiable"]]
    assert listed == [(p.start, p.end) for p, v in zip(pieces, verdicts) if v == "unverifiable"]
    assert all("P(neutral)" in u["reason"] for u in res.detail["unverifiable"])
    # no usable context: nothing scored, and the item says so
    results.clear()
    det.run([item(answer)], {"x": [Context(source="s", text=" ")]}, results.append)
    assert results[0].stats["context.none"] == 1 and results[0].prediction.soft_labels == []
    # its pieces add up too: each is supported, contradicted or unverifiable
    assert results[0].stats["nli.unverifiable"] == results[0].stats["nli.pieces"] == len(pieces)


def test_an_nli_model_folder_is_checked_before_a_run_folder_is_made(tmp_path, capsys):
    """A folder of no NLI model failed at its first item, after the run folder was made; a
    max_length past the model's positions failed every item with a tensor-size error."""
    from cli_helpers import cli

    nli = {0: "contradiction", 1: "entailment", 2: "neutral"}
    cases = {
        "empty": (None, "has no config.json, so it is no transformers model folder"),
        "causal": ({"id2label": {0: "LABEL_0"}}, "has no label for ['entail', 'neutral', 'contradict']"),
        "short": ({"id2label": nli, "max_position_embeddings": 128}, "is more than the 128 tokens"),
        # RoBERTa's positions start after its padding id: 514 positions read 512 tokens
        "roberta": (
            {"id2label": nli, "max_position_embeddings": 514, "model_type": "roberta", "pad_token_id": 1},
            "is more than the 512 tokens",
        ),
        "listed": ({"id2label": ["entailment", "neutral", "contradiction"]}, "is no mapping of output index"),
        "named": (
            {"id2label": {"a": "entailment", "b": "neutral", "c": "contradiction"}},
            "has 'a' for an output",
        ),
    }
    for name, (config, said) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        if config is not None:
            (folder / "config.json").write_text(json.dumps(config))
        out = tmp_path / f"run-{name}"
        args = ["detect", "--lang", "en", "--limit", "2", "--detector", "nli", "--out", out]
        code, _, err = cli(
            capsys, *args, "-o", f"model={folder}", "-o", f"max_length={513 if name == 'roberta' else 1000}"
        )
        assert code == 2 and said in " ".join(err.split()) and not out.exists(), err
    det = NLIDetector(NLIOptions(model=str(tmp_path / "short"), max_length=128))
    det.check_ready()  # within its positions: taken


def test_a_hub_nli_model_that_fails_its_check_fails_every_later_call_too(monkeypatch):
    """The model stayed loaded after its check failed, so the next call used it unchecked."""
    sentiment = tiny_bert_classifier(len(WORDS), {0: "negative", 1: "positive"})
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda name, **kw: tiny_tokenizer())
    monkeypatch.setattr(
        transformers.AutoModelForSequenceClassification, "from_pretrained", lambda name, **kw: sentiment
    )
    det = NLIDetector(NLIOptions(model="some/sentiment-model", device="cpu"))
    for _ in range(2):
        with pytest.raises(MushroomError, match="has no label for"):
            det._load()
